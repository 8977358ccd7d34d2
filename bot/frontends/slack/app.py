"""The Slack app: a bolt App on a WebClient that retries rate limits, served over HTTP or a socket.

``SlackParts`` are what the runner needs before it exists (the outbox that shows runs, and the
resolver of Slack user groups for approval policy); ``build_app`` then wires the runner into a
bolt App whose listeners only acknowledge and hand work to a small pool (``Work``). Requests are
verified by bolt against the signing secret (bad or stale signatures get 401 before any
listener), and every delivery is recorded so a retried or repeated one changes nothing.

The Web API base URL comes from the config (``RUNBOOK_BOT_SLACK_API_URL``: GovSlack, an egress
proxy, the tests' fake), with its trailing ``/``. Answers to people retry 429s after
``Retry-After`` and connection errors (slack_sdk's retry handlers); the outbox, which draws runs,
retries connection errors only and reschedules a rate-limited run itself (``outbox.py``). What
still fails is logged, never raised into a run.

``wsgi_app`` routes ``/slack/events`` to bolt and answers ``GET /healthz`` (the load balancer's
health check: "ok", nothing read) and 404 for anything else, behind the body limits of
``BODY_LIMITS`` (``bot.frontends.http``: a body over its endpoint's limit gets 413 before it is
read); ``http_server`` serves it on the one HTTP edge (``bot.frontends.http``), capped at the largest limit.
This port is the one the Ingress exposes: the ops endpoints and the Alertmanager webhook are served
on ports of their own (``bot.frontends.ops``, ``bot.frontends.alerts.listener``), never here.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from slack_bolt import App, BoltResponse
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_bolt.request.internals import parse_body
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)

from bot.config import SLACK_PORT, PolicyConfig, Settings, SlackConfig
from bot.engine import commands as c
from bot.engine.approvals import Membership, membership_from
from bot.engine.ports import Clock, RefusalLog, SystemClock
from bot.engine.runstate import RunState
from bot.errors import ConfigError, ExternalError
from bot.frontends.alerts import AlertIntake, Diagnoser, webhook_app
from bot.frontends.http import (
    HEALTH_PATH,
    HttpServer,
    WSGIApp,
    healthy,
    limit_bodies,
    not_found,
    server_cap,
)
from bot.frontends.metrics import Metrics
from bot.frontends.notices import NoticeAutoRuns, auto_runs_for
from bot.frontends.pagerduty import pagerduty_routes
from bot.frontends.pagerduty_notes import PagerDutyNotes, notes_for
from bot.frontends.slack.acks import TimedApp, Timer
from bot.frontends.slack.alert_cards import SlackCards
from bot.frontends.slack.dedupe import Deliveries
from bot.frontends.slack.drawing import RunDrawer, RunFacts
from bot.frontends.slack.identity import UserGroups
from bot.frontends.slack.notice_cards import SlackNoticeCards
from bot.frontends.slack.outbox import Outbox
from bot.frontends.slack.persistence import SlackStore
from bot.frontends.slack.service import GROUP_PREFIX, Exporter, SlackService
from bot.runtime.facade import Origin, Runtime
from bot.runtime.runner import Runner
from bot.store.alerts import AlertLog

log = logging.getLogger(__name__)
DEFAULT_API_URL = "https://slack.com/api/"
EVENTS_PATH = "/slack/events"  # slash commands, interactivity and events: the app's one URL
# bytes per endpoint (docs/slack.md): Slack's requests are a few KB, a large modal's some 100 KB;
# the health check takes none
BODY_LIMITS = {EVENTS_PATH: 1024 * 1024, HEALTH_PATH: 0}


def background_thread() -> None:
    """Lower the calling thread's scheduling priority, so acks win the CPU when it is scarce.

    Linux schedules threads one by one, so the threads that start and drive runs can yield to the
    ones answering Slack. Elsewhere, or where it is not permitted, nothing changes.
    """
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


BACKGROUND_NICE = 10


def collect_garbage_for_latency() -> None:
    """Keep the cyclic garbage collector from pausing acknowledgements; call once, before serving.

    A full collection walks every tracked object with the interpreter lock held, and a process
    carrying hundreds of runs has enough of them for tens of milliseconds of pause, during which
    no request is answered (the tail of ``bench/slack.py``). What is alive once the app is built
    (modules, the app, SQLAlchemy's metadata) lives as long as the process, so it is frozen out of
    collection; young collections run every 50,000 allocations instead of every 700, so fewer
    collections happen at all. Memory held by short-lived cycles is freed a little later.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


class Work:
    """Two small pools for what follows an ack: quick jobs, and driving runs.

    Quick jobs (answers, forms, starting a run) never queue behind a run that takes a while to
    drive, so a form still opens inside its trigger's 3 s when every driver is busy. A decision
    is a driving job: it loads the run once and drives it on under the same lease
    (``Runtime.decide``). ``idle`` waits for both to drain (shutdown, tests).
    """

    def __init__(self, workers: int = 4) -> None:
        self._quick = ThreadPoolExecutor(max_workers=max(1, workers // 2),
                                         thread_name_prefix="slack-work", initializer=background_thread)
        self._drive = ThreadPoolExecutor(max_workers=max(1, workers - workers // 2),
                                         thread_name_prefix="slack-drive", initializer=background_thread)
        self._pending = 0
        self._cond = threading.Condition()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        return self._queue(self._quick, fn, *args, **kwargs)

    def drive(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        return self._queue(self._drive, fn, *args, **kwargs)

    def _queue(self, pool: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any,
               **kwargs: Any) -> Future[Any]:
        with self._cond:
            self._pending += 1
        return pool.submit(self._run, fn, *args, **kwargs)

    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            log.exception("Slack work %s failed", getattr(fn, "__name__", fn))
            return None
        finally:
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    def idle(self, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout=timeout)

    def shutdown(self) -> None:
        self._quick.shutdown(wait=True)
        self._drive.shutdown(wait=True)


def check_config(config: SlackConfig, *, socket_mode: bool) -> None:
    """One ConfigError naming everything missing or malformed, before anything starts."""
    problems = []
    if not config.bot_token:
        problems.append("SLACK_BOT_TOKEN (the bot token, xoxb-...) is not set")
    elif not config.bot_token.startswith("xoxb-"):
        problems.append("SLACK_BOT_TOKEN must be a bot token starting with xoxb-")
    if socket_mode:
        if not config.app_token:
            problems.append("SLACK_APP_TOKEN (an app-level token, xapp-..., with "
                            "connections:write) is not set; Socket Mode needs it")
        elif not config.app_token.startswith("xapp-"):
            problems.append("SLACK_APP_TOKEN must be an app-level token starting with xapp-")
    elif not config.signing_secret:
        problems.append("SLACK_SIGNING_SECRET (Basic Information -> App Credentials) is not set; "
                        "HTTP mode needs it to verify requests")
    if config.api_url and not (config.api_url.startswith(("http://", "https://"))
                               and config.api_url.endswith("/")):
        problems.append(f"RUNBOOK_BOT_SLACK_API_URL {config.api_url!r} must be an http(s) URL "
                        "ending in / (like https://slack.com/api/)")
    if problems:
        raise ConfigError("Slack is not configured: " + "; ".join(problems) + " (see docs/slack.md)")


def make_client(config: SlackConfig, *, wait_out_rate_limits: bool = True) -> WebClient:
    """A Web API client that retries broken connections and, unless told not to, waits out 429s.

    The outbox's client does not wait: it reschedules the run at Slack's ``Retry-After`` and
    draws other runs meanwhile, instead of putting its thread to sleep.
    """
    handlers: list[Any] = [ConnectionErrorRetryHandler(max_retry_count=2)]
    if wait_out_rate_limits:
        handlers.append(RateLimitErrorRetryHandler(max_retry_count=3))
    return WebClient(token=config.bot_token, base_url=config.api_url or DEFAULT_API_URL,
                     timeout=10, retry_handlers=handlers)


class SlackParts:
    """The client, the message store, the user-group cache and the outbox, for one workspace.

    ``start`` sets the outbox drawing (after a scan for runs Slack has not caught up with);
    ``close`` finishes what is in hand and stops.
    """

    def __init__(self, settings: Settings, *, store: Any, clock: Clock | None = None,
                 client: WebClient | None = None, workers: int = 4,
                 card_interval: float = 1.0, metrics: Metrics | None = None,
                 ack_timer: Timer = time.perf_counter) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.ack_timer = ack_timer  # what the ack histogram is timed with (``acks.TimedApp``)
        self.clock = clock or SystemClock()
        self.client = client or make_client(settings.slack)
        self.slack_store = SlackStore(store.engine)
        self.deliveries = Deliveries(self.slack_store)
        self.usergroups = UserGroups(api=self.client, clock=self.clock,
                                     ttl=settings.slack.usergroup_ttl)
        # a client given (tests) is used as it is, for drawing too
        drawing_client = client or make_client(settings.slack, wait_out_rate_limits=False)
        self.drawer = RunDrawer(client=drawing_client, slack_store=self.slack_store, clock=self.clock,
                                card_interval=card_interval)
        self.drawer.on_failure = lambda what, transient: self.metrics.slack_failed(
            what, transient=transient)
        self.outbox = Outbox(drawer=self.drawer, slack_store=self.slack_store, store=store, clock=self.clock,
                             on_thread_start=background_thread)
        self.metrics.track_backlog(lambda: len(self.outbox.pending()))
        self.work = Work(workers)
        self.alert_log = AlertLog(store.engine)
        self.refusals: RefusalLog = store.refusals  # refused starts (``Runtime.record_refusal``)
        self.webhook: WSGIApp | None = None  # POST /alertmanager, once build_app made it
        # other alert sources on the alerts port (``/pagerduty``), and PagerDuty's notes
        self.alert_routes: dict[str, tuple[WSGIApp, int]] = {}
        self.pagerduty_notes: PagerDutyNotes | None = None
        # the node watcher's notices as cards (docs/watcher.md), once build_app made them
        self.notice_cards: SlackNoticeCards | None = None

    def start(self) -> None:
        self.outbox.start()
        if self.pagerduty_notes is not None:
            self.pagerduty_notes.start()

    def close(self) -> None:
        self.work.shutdown()
        self.outbox.stop()
        if self.pagerduty_notes is not None:
            self.pagerduty_notes.stop()

    def in_group(self, identity: str, member: str) -> bool:
        """Resolver of ``slack-group:S…`` members of policy groups, from the TTL cache."""
        if not member.startswith(GROUP_PREFIX):
            return False
        try:
            return self.usergroups.is_member(identity, member[len(GROUP_PREFIX):])
        except ExternalError as e:
            log.warning("%s", e)
            return False

    def membership(self, policy: PolicyConfig) -> Membership:
        return membership_from(policy, {"slack-group": self.in_group})


def build_app(settings: Settings, runner: Runner, *, parts: SlackParts,
              names: Callable[[], list[str]] | None = None,
              exporter: Exporter | None = None,
              diagnoser: Diagnoser | None = None) -> tuple[App, SlackService, SlackParts]:
    """The bolt App for ``runner``, reached only through the runtime facade (``Runtime``); the
    outbox is registered with the runner if it was not.

    ``exporter`` defaults to transcripts with the run's Slack thread merged in, where installed.
    With webhook credentials configured (``alerts:``), ``parts.webhook`` is the Alertmanager
    endpoint, whose cards go to ``alerts.channel``; ``diagnoser`` scans a cluster for the cards
    and for ``/runbook diagnose``.
    """
    from bot.frontends.slack.listeners import register
    from bot.frontends.slack.transcripts import slack_exporter

    runtime = Runtime(runner, names=names, history=parts.outbox.store, refusals=parts.refusals)
    runtime.watch(parts.outbox)
    facts = runtime.facts
    parts.drawer.facts = RunFacts(runbook=facts.runbook, destructive=facts.step_destructive)
    if exporter is None:
        exporter = slack_exporter(parts.client, parts.slack_store, parts.outbox.store)
    service = SlackService(runtime=runtime, client=parts.client, slack_store=parts.slack_store,
                           usergroups=parts.usergroups, clock=parts.clock, exporter=exporter,
                           drive=lambda run_id: parts.work.drive(runtime.drive, run_id),
                           show=parts.outbox.draw, diagnoser=diagnoser, driving=parts.work.drive)
    # every dispatch timed into the ack histogram (``acks.TimedApp``: a middleware cannot time it)
    app = TimedApp(metrics=parts.metrics, timer=parts.ack_timer,
                   client=parts.client, signing_secret=settings.slack.signing_secret or "",
                   token_verification_enabled=True, request_verification_enabled=True,
                   process_before_response=True,
                   logger=logging.getLogger("bot.frontends.slack.bolt"),
                   listener_executor=ThreadPoolExecutor(max_workers=16,
                                                        thread_name_prefix="slack-listener"))
    if (settings.alerts.enabled or settings.pagerduty.enabled) and runtime.lists_runbooks:
        intake = alert_intake(settings, runtime, parts, diagnoser)
        if settings.alerts.enabled:
            parts.webhook = webhook_app(intake, metrics=parts.metrics)
        parts.alert_routes = pagerduty_routes(settings.pagerduty, intake, metrics=parts.metrics)
    parts.pagerduty_notes = notes_for(settings.pagerduty, notifiers=runner.notifiers,
                                      engine=parts.alert_log.engine, clock=parts.clock)
    parts.notice_cards = SlackNoticeCards(
        client=parts.client, alert_log=parts.alert_log, channel=notice_channel(settings),
        clock_now=lambda: parts.clock.now().timestamp(),
        runs=lambda: runtime.runs(active=True, limit=200),
        auto_runs=notice_auto_runs(settings, runtime, parts))
    app.middleware(_once(parts))
    register(app, service=service, work=parts.work, deliveries=parts.deliveries,
             config=settings.slack)
    return app, service, parts


def notice_channel(settings: Settings) -> str | None:
    """Where the watcher's cards go: ``watcher.channel`` where configured, else ``alerts.channel``."""
    own = getattr(settings.watcher, "channel", None)
    return str(own) if own else settings.alerts.channel


def notice_auto_runs(settings: Settings, runtime: Runtime, parts: SlackParts) -> NoticeAutoRuns:
    """The watcher's read-only auto-runs, drawn in the notices' channel and driven by the pool,
    within the alerts' per-runbook limit (``alerts.auto_run_limit`` per ``auto_run_window``)."""
    channel = notice_channel(settings)

    def start(cmd: c.StartRun) -> RunState:  # the bot's system actor: only read-only auto-runs
        state = runtime.start(cmd, origin=Origin(frontend="alerts"))
        parts.work.drive(runtime.drive, state.run_id)
        return state

    return auto_runs_for(settings.alerts, parts.alert_log.engine, runbook=runtime.runbook,
                         start=start, origin={"frontend": "slack", "channel": channel or ""})


def alert_intake(settings: Settings, runtime: Runtime, parts: SlackParts,
                 diagnoser: Diagnoser | None) -> AlertIntake:
    """Alerts in Slack: cards in ``alerts.channel``; auto-runs drawn there, driven by the pool."""
    channel = settings.alerts.channel

    def start(cmd: Any) -> Any:  # the bot's system actor: only read-only auto-runs pass
        state = runtime.start(cmd, origin=Origin(frontend="alerts"))
        parts.work.drive(runtime.drive, state.run_id)
        return state

    cards = SlackCards(client=parts.client, alert_log=parts.alert_log, channel=channel,
                       clock_now=lambda: parts.clock.now().timestamp())
    return AlertIntake(config=settings.alerts, clusters=list(settings.clusters),
                       runbooks=runtime.runbook_source, names=runtime.runbook_names,
                       alert_log=parts.alert_log,
                       clock=parts.clock, cards=cards, start=start,
                       origin={"frontend": "slack", "channel": channel},
                       submit=parts.work.submit, diagnoser=diagnoser, metrics=parts.metrics)


def _once(parts: SlackParts) -> Callable[..., Any]:
    """Global middleware: a delivery this process saw before (a retry) is acked and dropped.

    The key goes on in the context; the job that does the work records it durably first.
    """
    def once(req: Any, resp: Any, next: Callable[[], None]) -> Any:
        raw = req.raw_body if isinstance(getattr(req, "raw_body", None), str) else ""
        if not raw and isinstance(getattr(req, "body", None), dict) and req.body:
            raw = json.dumps(req.body, sort_keys=True)  # Socket Mode: the payload, parsed
        if raw:
            key = "body:" + hashlib.sha256(raw.encode()).hexdigest()
            if not parts.deliveries.fresh(key):
                log.info("dropped a repeated Slack delivery (retry %s)",
                         req.headers.get("x-slack-retry-num", ["-"])[0])
                return BoltResponse(status=200, body="")
            req.context["delivery"] = key
        next()
        return None

    return once


def wsgi_app(app: App) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The Slack port: ``/slack/events`` to bolt, ``GET /healthz`` for the load balancer, 404 for
    anything else (``/metrics``, ``/readyz`` and ``/alertmanager`` included: they have ports of
    their own); every body over its endpoint's limit is refused unread."""
    handler = SlackRequestHandler(app, path=EVENTS_PATH)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == HEALTH_PATH and environ.get("REQUEST_METHOD", "GET") in ("GET", "HEAD"):
            return healthy(start_response)
        if path != EVENTS_PATH:
            return not_found(start_response)
        if environ.get("REQUEST_METHOD") == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)  # checked by the body limit
            body = environ["wsgi.input"].read(length) if length else b""
            problem = _unparsable(body, environ.get("CONTENT_TYPE"))
            if problem:
                log.warning("refused a malformed Slack request: %s", problem)
                start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"malformed request\n"]
            environ = {**environ, "wsgi.input": io.BytesIO(body)}
        return handler(environ, start_response)

    return limit_bodies(application, limits=BODY_LIMITS)


def _unparsable(body: bytes, content_type: str | None) -> str | None:
    """Why bolt could not read ``body`` as a Slack payload (it would raise before verifying the
    signature), or None."""
    try:
        parsed = parse_body(body.decode("utf-8"), content_type)
    except (UnicodeDecodeError, ValueError) as e:
        return f"the body is not valid JSON or form data ({str(e)[:80]})"
    return payload_problem(parsed)


def payload_problem(parsed: Any) -> str | None:
    """Why bolt could not route ``parsed``, a Slack payload (over HTTP once parsed, or as Socket
    Mode delivers it), or None: what it reads before any listener must have its documented shape."""
    if not isinstance(parsed, dict):
        return f"the payload is a JSON {type(parsed).__name__}, not an object"
    for key in _OBJECTS:
        if parsed.get(key) is not None and not isinstance(parsed[key], dict):
            return f"{key} is a {type(parsed[key]).__name__}, not an object"
    actions = parsed.get("actions")
    if actions is not None and not (isinstance(actions, list)
                                    and all(isinstance(a, dict) for a in actions)):
        return "actions is not a list of objects"
    return None


_OBJECTS = ("user", "team", "channel", "view", "container", "enterprise", "message", "event")


def http_server(app: App, *, host: str = "0.0.0.0", port: int = SLACK_PORT,
                threads: int = 8) -> HttpServer:
    """The app's listener on the Slack port (``bot.frontends.http``; not yet serving)."""
    return HttpServer(wsgi_app(app), name="slack", host=host, port=port, threads=threads,
                      max_body=server_cap(BODY_LIMITS))


def verify_token(client: WebClient) -> dict[str, Any]:
    """``auth.test``: the team and bot the token belongs to; ConfigError when Slack refuses it."""
    from slack_sdk.errors import SlackApiError

    try:
        r = client.auth_test()
    except SlackApiError as e:
        code = e.response.get("error") if e.response is not None else str(e)
        raise ConfigError(f"Slack refused SLACK_BOT_TOKEN: {code} (check the token, and "
                          "RUNBOOK_BOT_SLACK_API_URL if you set one)") from e
    return dict(r.data) if isinstance(r.data, dict) else {}
