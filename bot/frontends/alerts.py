"""The Alertmanager webhook: ``POST /alertmanager`` turns alerts into suggested runbooks.

Alertmanager posts a group of alerts (webhook payload version 4) as its ``http_config`` says:
``Authorization: Bearer <token>`` or HTTP basic auth. Anything else is 401 (credentials are
compared in constant time); a body over the limit is 413 before it is read
(``bot.frontends.http``); a body that is not a version 4 payload is 400 naming the first field
that is wrong, and so is JSON nested too deeply to parse (one log line, not a traceback). Nothing
is done for a refused request.

For each alert: its cluster is the value of the configured label (``cluster`` by default), which
must name a configured cluster; with one configured cluster an alert without the label is that
cluster's. Runbooks whose ``spec.triggers`` match it (``bot.runbook.triggers``) are what is
suggested, with the params its labels fill. An alert no runbook answers, or of an unknown cluster,
is ignored and counted (``runbook_bot_alerts``). The rest are recorded by fingerprint in the
shared store (``bot.store.alerts``), where a repeat, or a delivery another replica already
handled, changes nothing, and labels that differ from those recorded under the same fingerprint
are refused and logged (``conflict``). What did change is handed on, off the request thread: a scan of the
alert's subject (``diagnose``), whose findings then decide what the card offers (``vetted``: the
runbooks the scan names, so a node whose kubelet is alive is offered its triage, never a fence),
and the group's card
(``Cards``: a Slack card with Dry run / Run buttons, or a log line without Slack) is posted or
updated, and a runbook that opted into ``auto_run`` (only one whose every step reads: any write
needs a person, ``bot.runbook.autorun``) is started
with the bot's system actor as its requester, which can never approve anything. Nothing else is
started by an alert: people start runs from the card.

A flood is bounded: a delivery's first ``MAX_TAKEN`` alerts (the oldest) are recorded and the rest
counted, with those Alertmanager left out (``truncatedAlerts``), in metrics and on the card; the
follow-ups wait in a bounded queue (``bot.frontends.alert_queue``: a delivery it has no room for is
a 503, recorded nowhere) that scans each cluster once for every alert waiting
(``bot.frontends.alert_scans``); a runbook auto-runs at most ``alerts.auto_run_limit`` times per
``alerts.auto_run_window`` across replicas (``bot.store.auto_runs``), and the card says which
auto-runs were held.

Every suggestion carries its provenance, ``alert:<cluster>/<fingerprint>``: the button values
hold it, and the run it starts records it as the run's provenance (``suggested_by``, audited in
``run.linked``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.config import AlertsConfig
from bot.engine import commands as c
from bot.engine.approvals import SYSTEM_PREFIX
from bot.engine.ports import Clock, RunbookSource
from bot.engine.provenance import Provenance
from bot.errors import RunbookBotError
from bot.frontends.alert_queue import AlertQueue, FollowUp
from bot.frontends.alert_scans import Diagnoser as Diagnoser  # the front-ends name it from here
from bot.frontends.alert_scans import diagnose_groups
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
from bot.runbook.model import Runbook
from bot.runbook.triggers import Suggestion, suggestions
from bot.store.alerts import AlertLog, StoredAlert
from bot.store.auto_runs import AutoRunLimit

log = logging.getLogger(__name__)

ALERTS_PATH = "/alertmanager"
# a group of a few hundred alerts with their labels and annotations; Alertmanager sends no more
# than its max_alerts setting
BODY_LIMIT = 2 * 1024 * 1024
BODY_LIMITS = {ALERTS_PATH: BODY_LIMIT}
PROVENANCE = "alert:"
# alerts of one delivery recorded, scanned and shown, the oldest first; the rest are counted
# (docs/alerts.md asks Alertmanager for max_alerts: 50)
MAX_TAKEN = 100
RETRY_AFTER = 10  # seconds, in a 503's Retry-After (Alertmanager retries 5xx on its own backoff)


# -- the payload --------------------------------------------------------------------------------


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class WebhookAlert(_Shape):
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: str = Field(alias="startsAt")
    ends_at: str = Field(default="", alias="endsAt")
    generator_url: str = Field(default="", alias="generatorURL")
    fingerprint: str = Field(min_length=1, max_length=64)


class WebhookPayload(_Shape):
    """Alertmanager's webhook body, version 4 (prometheus.io: configuration, webhook_config)."""

    version: Literal["4"]
    group_key: str = Field(alias="groupKey", min_length=1)
    status: Literal["firing", "resolved"]
    receiver: str = ""
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str = Field(default="", alias="externalURL")
    truncated_alerts: int = Field(default=0, alias="truncatedAlerts")
    alerts: list[WebhookAlert]


class Malformed(ValueError):
    """A body that is not an Alertmanager version 4 payload; the message says what is wrong."""


def parse_payload(body: bytes) -> WebhookPayload:
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Malformed(f"the body is not JSON: {str(e)[:100]}") from None
    except RecursionError:
        # the decoder stops at the interpreter's recursion limit; a webhook payload nests 4 deep
        raise Malformed("the body nests too deeply to be an Alertmanager webhook payload") from None
    if not isinstance(data, dict):
        raise Malformed(f"the body is a JSON {type(data).__name__}, not an object")
    try:
        return WebhookPayload.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        extra = f" (got {first['input']!r})" if first["type"] == "literal_error" else ""
        raise Malformed(f"not an Alertmanager webhook payload (version 4): {where}: "
                        f"{first['msg']}{extra}") from None


# -- who may post -------------------------------------------------------------------------------


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def authorized(header: str | None, config: AlertsConfig) -> bool:
    """``Authorization`` is a configured bearer token, or a configured user and password."""
    if not header or not config.enabled:
        return False
    scheme, _, credentials = header.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer" and credentials:
        # every token is compared, so the time taken does not say which one nearly matched
        return sum(_same(credentials, t) for t in config.bearer_tokens) > 0
    if scheme.lower() == "basic" and credentials:
        try:
            user, sep, password = base64.b64decode(credentials, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        hits = 0
        for name, secret in config.basic_auth.items():
            hits += _same(user, name) & _same(password, secret)
        return hits > 0
    return False


# -- what a card shows --------------------------------------------------------------------------


@dataclass(frozen=True)
class AlertGroup:
    """One Alertmanager group as the store holds it: what a card shows."""

    key: str  # sha256 of Alertmanager's groupKey
    label: str  # the groupKey as sent
    alerts: Sequence[StoredAlert]
    # alerts of the last delivery not looked at: truncated (by Alertmanager), over_limit (MAX_TAKEN)
    dropped: Mapping[str, int] = field(default_factory=dict)

    @property
    def firing(self) -> int:
        return sum(a.status == "firing" for a in self.alerts)


class Cards(Protocol):
    """Shows an alert group to people: posts its card, or updates the one posted."""

    def show(self, group: AlertGroup) -> None: ...


def provenance(key: str) -> str:
    """The reference a suggestion and the run it starts carry: ``alert:<cluster>/<fingerprint>``."""
    return PROVENANCE + key


def system_requester(labels: Mapping[str, str], fingerprint: str) -> str:
    """The bot's system actor, naming the alert: ``system:alert:<alertname>/<fingerprint>``."""
    return f"{SYSTEM_PREFIX}alert:{labels.get('alertname', 'unnamed')}/{fingerprint}"


@dataclass
class Receipt:
    """What one delivery did, by outcome (the counts also go to metrics)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)  # groups whose card is to change
    busy: bool = False  # refused unrecorded: the queue of follow-ups had no room (503)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class AlertIntake:
    """Matches, deduplicates and records a delivery; hands what changed to ``submit``."""

    def __init__(self, *, config: AlertsConfig, clusters: Iterable[str], runbooks: RunbookSource,
                 names: Callable[[], list[str]], alert_log: AlertLog, clock: Clock,
                 cards: Cards | None = None, start: Callable[[c.StartRun], Any] | None = None,
                 origin: Mapping[str, Any] | None = None,
                 submit: Callable[..., Any] | None = None, diagnoser: Diagnoser | None = None,
                 metrics: Metrics | None = None, queue_capacity: int | None = None) -> None:
        self.config = config
        self.clusters = tuple(clusters)
        self.runbooks = runbooks
        self.names = names
        self.log = alert_log
        self.clock = clock
        self.cards = cards
        self.start = start
        self.origin = dict(origin or {"frontend": "alertmanager"})
        self.submit = submit or (lambda fn, *a, **k: fn(*a, **k))
        self.diagnoser = diagnoser
        self.metrics = metrics
        # shared by every replica through the store
        self.auto_runs = AutoRunLimit(alert_log.engine, limit=config.auto_run_limit,
                                      window=config.auto_run_window)
        self.limit_text = per_window(config.auto_run_limit, config.auto_run_window)
        self.queue = AlertQueue(self.follow_up, submit=self.submit, capacity=queue_capacity)
        if metrics is not None:
            metrics.track_alert_queue(lambda: len(self.queue))

    def cluster_of(self, labels: Mapping[str, str]) -> str | None:
        """The configured cluster an alert is about; None when it names none configured."""
        named = labels.get(self.config.cluster_label)
        if not self.clusters:
            return named or "default"
        if named is None:
            return self.clusters[0] if len(self.clusters) == 1 else None
        return named if named in self.clusters else None

    def _runbooks(self) -> list[Runbook]:
        out = []
        for name in self.names():
            try:
                out.append(self.runbooks.get(name)[0])
            except RunbookBotError as e:  # a broken runbook answers nothing; validate names it
                log.warning("runbook %s is not usable for alerts: %s", name, e)
        return out

    def _count(self, receipt: Receipt, outcome: str) -> None:
        receipt.count(outcome)
        if self.metrics is not None:
            self.metrics.alert(outcome)

    def receive(self, payload: WebhookPayload, *, incident: Mapping[str, str] | None = None) -> Receipt:
        """Record a delivery's alerts, at most ``MAX_TAKEN`` of them (the oldest first), and
        queue what changed; nothing at all when the queue has no room for them (``busy``).
        ``incident`` (id, url, ref: a PagerDuty incident, ``bot.frontends.pagerduty``) is recorded
        with each alert, and runs started from them are linked to it."""
        receipt = Receipt()
        now = self.clock.now().timestamp()
        group_key = hashlib.sha256(payload.group_key.encode()).hexdigest()
        runbooks = [r for r in self._runbooks() if r.spec.triggers]
        ignored: list[str] = []
        answered: list[tuple[WebhookAlert, str, list[Suggestion]]] = []
        for alert in payload.alerts:
            found = suggestions(runbooks, alert.labels, alert.annotations)
            cluster = self.cluster_of(alert.labels) if found else None
            if found and cluster is None:
                log.info("ignored alert %s: cluster %r is not configured",
                         alert.labels.get("alertname"), alert.labels.get(self.config.cluster_label))
            if cluster is None:
                ignored.append("unmatched" if not found else "unknown_cluster")
                continue
            answered.append((alert, cluster, [self._with_cluster(s, cluster, runbooks)
                                              for s in found]))
        # the oldest first: the same alerts from one delivery of a group to the next
        answered.sort(key=lambda x: (_started(x[0].starts_at), x[0].fingerprint))
        taken = answered[:MAX_TAKEN]
        if not self.queue.admit(len(taken)):
            receipt.busy = True
            return receipt
        for outcome in ignored:
            self._count(receipt, outcome)
        follow = FollowUp(group_key, payload.group_key, dropped={
            "truncated": max(0, payload.truncated_alerts), "over_limit": len(answered) - len(taken)},
            incident=(incident or {}).get("ref"))
        if self.metrics is not None:
            for reason, n in follow.dropped.items():
                self.metrics.alerts_not_looked_at(reason, n)
        if any(follow.dropped.values()):
            log.warning("alert group %s: took %d alerts; not looked at: %d left out by "
                        "Alertmanager, %d over the %d a delivery", payload.group_key, len(taken),
                        follow.dropped["truncated"], follow.dropped["over_limit"], MAX_TAKEN)
        full: set[str] = set()  # runbooks whose auto-run limit this delivery found reached
        for alert, cluster, found in taken:
            key = f"{cluster}/{alert.fingerprint}"
            data = {"cluster": cluster, "labels": alert.labels, "annotations": alert.annotations,
                    "ends_at": alert.ends_at, "generator_url": alert.generator_url,
                    "suggestions": [{"runbook": s.runbook, "params": dict(s.params),
                                     "auto_run": s.auto_run, "problem": s.problem}
                                    for s in found]}
            if incident:
                data["incident"] = dict(incident)
            change = self.log.note(key=key, group_key=group_key, status=alert.status,
                                   starts_at=alert.starts_at, data=data, now=now)
            if change == "conflict":
                # Alertmanager derives the fingerprint from the labels: these are not its alert's
                log.warning("refused alert %s on %s: its labels %r differ from those recorded under "
                            "its fingerprint; a forged or broken delivery, nothing was changed",
                            alert.fingerprint, cluster, dict(alert.labels))
                self._count(receipt, "conflict")
                continue
            if change == "same":
                self._count(receipt, "duplicate")
                continue
            follow.alerts += 1
            self._count(receipt, "suggested" if change == "new" else "resolved")
            if change == "new":
                self._auto_runs(alert, key, found, follow, full, receipt, now=now)
        self.log.prune(now=now)
        if follow.alerts:
            receipt.groups.append(group_key)
            self.queue.put(follow)
        return receipt

    def _auto_runs(self, alert: WebhookAlert, key: str, found: Sequence[Suggestion],
                   follow: FollowUp, full: set[str], receipt: Receipt, *, now: float) -> None:
        """The auto-runs a new alert asks for, each started only within its runbook's limit
        (``AutoRunLimit``, in the store); the others are held, counted and said on the card."""
        for s in found:
            if not (s.auto_run and s.problem is None and self.start is not None):
                continue
            if s.runbook in full or not self.auto_runs.take(s.runbook, now=now):
                full.add(s.runbook)
                follow.held.setdefault(key, {})[s.runbook] = self.limit_text
                self._count(receipt, "auto_run_limited")
                continue
            follow.starts.append(c.StartRun(
                runbook=s.runbook, params=dict(s.params),
                requester=system_requester(alert.labels, alert.fingerprint),
                origin=dict(self.origin), provenance=Provenance(
                    suggested_by=provenance(key), detected_at=_detected(alert.starts_at),
                    incident=follow.incident)))
            self._count(receipt, "auto_run")

    def _with_cluster(self, s: Suggestion, cluster: str, runbooks: Sequence[Runbook]) -> Suggestion:
        """A runbook with a ``cluster`` param gets the alert's cluster unless a trigger set it."""
        if not self.clusters or "cluster" in s.params:
            return s
        book = next(r for r in runbooks if r.name == s.runbook)
        if "cluster" not in book.spec.params:
            return s
        return Suggestion(s.runbook, {**s.params, "cluster": cluster}, s.auto_run, s.problem)

    def follow_up(self, batch: Sequence[FollowUp]) -> None:
        """Off the request thread, for the groups waiting together (the smallest first): one
        scan per cluster for all their alerts, then each group's card, then its auto-runs."""
        if self.diagnoser is not None:
            diagnose_groups(self.log, self.diagnoser, [f.group_key for f in batch],
                            metrics=self.metrics)
        for f in batch:
            try:
                self.log.annotate_many({key: {"auto_run_held": runbooks}
                                        for key, runbooks in f.held.items()})
                if self.cards is not None:
                    self.cards.show(AlertGroup(key=f.group_key, label=f.label,
                                               alerts=self.log.group(f.group_key),
                                               dropped=f.dropped))
            except Exception:  # one group's card failing leaves the others theirs
                log.exception("could not show alert group %s", f.label)
            for cmd in f.starts:
                try:
                    state = self.start(cmd) if self.start is not None else None
                    log.info("alert started %s as %s (%s)", cmd.runbook,
                             getattr(state, "run_id", "?"), cmd.requester)
                except RunbookBotError as e:
                    log.warning("alert could not start %s: %s", cmd.runbook, e)


def per_window(limit: int, window: float) -> str:
    """``10 in 10 minutes``: an auto-run limit as the card and the logs say it."""
    minutes, seconds = divmod(round(window), 60)
    hours, rest = divmod(minutes, 60)
    if not seconds and not rest and hours:
        span = f"{hours} hour{'s' if hours != 1 else ''}"
    elif not seconds and minutes:
        span = f"{minutes} minute{'s' if minutes != 1 else ''}"
    else:
        span = f"{round(window)} seconds"
    return f"{limit} in {span}"


def _started(starts_at: str) -> float:
    """``startsAt`` in epoch seconds, to order alerts; an unreadable one goes last."""
    try:
        return datetime.fromisoformat(starts_at).timestamp()
    except ValueError:
        return float("inf")


def _detected(starts_at: str) -> str | None:
    """``startsAt`` as the run's ``detected_at`` (its time to recovery starts there); None when
    unreadable, or Alertmanager's zero time."""
    started = _started(starts_at)
    if started == float("inf") or started <= 0:
        return None
    return datetime.fromtimestamp(started, tz=UTC).isoformat()


class LogCards:
    """Without Slack: each change of a group is one log line naming what to run."""

    def show(self, group: AlertGroup) -> None:
        for a in group.alerts:
            for s in a.data.get("suggestions", []):
                params = " ".join(f"-p {k}={v}" for k, v in s["params"].items())
                held = a.data.get("auto_run_held", {}).get(s["runbook"])
                linked = (a.data.get("incident") or {}).get("ref")
                if linked:
                    params += f" --incident '{linked}'"
                log.info("alert %s %s on %s: runbook-bot run %s %s (suggested by %s)%s%s",
                         a.data["labels"].get("alertname"), a.status, a.data["cluster"],
                         s["runbook"], params, provenance(a.key),
                         "".join(f"; {line}" for line in a.data.get("findings", [])),
                         f"; not auto-run: its limit of {held} was reached" if held else "")


# -- the endpoint -------------------------------------------------------------------------------


def _answer(start_response: Callable[..., Any], status: str, text: str,
            headers: Sequence[tuple[str, str]] = ()) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body))), *headers])
    return [body]


def webhook_app(intake: AlertIntake, *, metrics: Metrics | None = None) -> WSGIApp:
    """``POST /alertmanager`` (serve behind ``limit_bodies`` with ``BODY_LIMITS``)."""

    def count(answer: str) -> None:
        if metrics is not None:
            metrics.alert_request(answer)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, "405 Method Not Allowed", "POST an Alertmanager "
                           "webhook payload here\n", [("Allow", "POST")])
        if not authorized(environ.get("HTTP_AUTHORIZATION"), intake.config):
            count("unauthorized")
            log.info("refused an Alertmanager request without valid credentials")
            return _answer(start_response, "401 Unauthorized", "unauthorized\n",
                           [("WWW-Authenticate", 'Bearer realm="runbook-bot"')])
        length = int(environ.get("CONTENT_LENGTH") or 0)  # checked by the body limit
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            payload = parse_payload(body)
        except Malformed as e:
            count("malformed")
            log.warning("refused a malformed Alertmanager request: %s", e)
            return _answer(start_response, "400 Bad Request", f"{e}\n")
        receipt = intake.receive(payload)
        if receipt.busy:
            # nothing was recorded: Alertmanager delivers the group again, as after any 5xx
            count("busy")
            log.warning("refused an Alertmanager delivery of %d alerts: %d alerts already wait "
                        "for their follow-up", len(payload.alerts), len(intake.queue))
            return _answer(start_response, "503 Service Unavailable", "busy: too many alerts "
                           "wait to be followed up; deliver again later\n",
                           [("Retry-After", str(RETRY_AFTER))])
        count("accepted")
        return _answer(start_response, "200 OK", json.dumps(receipt.outcomes, sort_keys=True) + "\n")

    return app


def listener_app(webhook: WSGIApp | None,
                 more: Mapping[str, tuple[WSGIApp, int]] | None = None) -> WSGIApp:
    """The alerts port: ``/alertmanager``, ``GET /healthz`` for a load balancer in front of it, 404
    for anything else (the ops endpoints have a port of their own), behind body limits. ``more``:
    other alert sources on the same port, path -> (app, body limit): ``/pagerduty``."""
    routes = dict(more or {})

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        if path == ALERTS_PATH and webhook is not None:
            return webhook(environ, start_response)
        if path in routes:
            return routes[path][0](environ, start_response)
        if path == HEALTH_PATH and environ.get("REQUEST_METHOD", "GET") in ("GET", "HEAD"):
            return healthy(start_response)
        return not_found(start_response)

    limits = {**BODY_LIMITS, **{p: limit for p, (_, limit) in routes.items()}, HEALTH_PATH: 0}
    return limit_bodies(app, limits=limits)


def listener(webhook: WSGIApp | None, *, host: str, port: int, threads: int,
             more: Mapping[str, tuple[WSGIApp, int]] | None = None) -> HttpServer:
    """``listener_app``'s listener on the alerts port (``bot.frontends.http``; not yet serving)."""
    return HttpServer(listener_app(webhook, more), name="alerts", host=host, port=port,
                      threads=threads, max_body=server_cap(BODY_LIMITS))
