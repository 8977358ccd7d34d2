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
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.config import AlertsConfig
from bot.diagnose import Report, Scope
from bot.engine import commands as c
from bot.engine.approvals import SYSTEM_PREFIX
from bot.engine.ports import Clock, RunbookSource
from bot.engine.provenance import Provenance
from bot.errors import RunbookBotError
from bot.frontends.http import WSGIApp, limit_bodies, server_cap
from bot.frontends.metrics import Metrics
from bot.runbook.model import Runbook
from bot.runbook.triggers import Suggestion, suggestions
from bot.store.alerts import AlertLog, StoredAlert

log = logging.getLogger(__name__)

ALERTS_PATH = "/alertmanager"
# a group of a few hundred alerts with their labels and annotations; Alertmanager sends no more
# than its max_alerts setting
BODY_LIMIT = 2 * 1024 * 1024
BODY_LIMITS = {ALERTS_PATH: BODY_LIMIT}
PROVENANCE = "alert:"


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

    @property
    def firing(self) -> int:
        return sum(a.status == "firing" for a in self.alerts)


class Cards(Protocol):
    """Shows an alert group to people: posts its card, or updates the one posted."""

    def show(self, group: AlertGroup) -> None: ...


Diagnoser = Callable[[Scope], Report]  # one read-only scan of a cluster (``bot.diagnose``)


def scope_of(cluster: str, params: Mapping[str, str]) -> Scope:
    """What to diagnose for a suggestion: its node, or its pod (and namespace), or namespace."""
    node, pod, namespace = params.get("node"), params.get("pod"), params.get("namespace")
    if pod:
        return Scope(cluster=cluster, pod=pod, namespace=namespace)
    return Scope(cluster=cluster, node=node or None, namespace=namespace or None)


def finding_lines(report: Report, *, limit: int = 3) -> list[str]:
    """The worst findings of a scan, one line each: severity, summary and the runbook for it."""
    lines = []
    for f in report.findings[:limit]:
        line = f"{f.severity.value}: {f.summary}"
        if f.runbook:
            line += f" (runbook {f.runbook})"
        lines.append(line)
    if len(report.findings) > limit:
        lines.append(f"{len(report.findings) - limit} more: /runbook diagnose shows them all")
    if not report.findings:
        lines.append("the diagnosis found nothing wrong here")
    return lines


def vetted(suggested: Sequence[Mapping[str, Any]], report: Report) -> list[dict[str, Any]]:
    """An alert's suggestions once a scan of its subject is in. Where the scan names runbooks,
    the card offers those, with the scan's params, in its order of severity: a ``KubeNodeNotReady``
    for a node whose kubelet is alive offers the triage and never ``node-dead-ngns``, whatever the
    triggers say. Where it names none, the triggers' suggestions stand."""
    out: list[dict[str, Any]] = []
    for f in report.findings:
        if f.runbook and all(x["runbook"] != f.runbook for x in out):
            was = next((x for x in suggested if x.get("runbook") == f.runbook), {})
            out.append({"runbook": f.runbook, "params": dict(f.params),
                        "auto_run": bool(was.get("auto_run")), "problem": was.get("problem")})
    return out or [dict(x) for x in suggested]


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

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class AlertIntake:
    """Matches, deduplicates and records a delivery; hands what changed to ``submit``."""

    def __init__(self, *, config: AlertsConfig, clusters: Iterable[str], runbooks: RunbookSource,
                 names: Callable[[], list[str]], alert_log: AlertLog, clock: Clock,
                 cards: Cards | None = None, start: Callable[[c.StartRun], Any] | None = None,
                 origin: Mapping[str, Any] | None = None,
                 submit: Callable[..., Any] | None = None, diagnoser: Diagnoser | None = None,
                 metrics: Metrics | None = None) -> None:
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

    def receive(self, payload: WebhookPayload) -> Receipt:
        receipt = Receipt()
        now = self.clock.now().timestamp()
        group_key = hashlib.sha256(payload.group_key.encode()).hexdigest()
        runbooks = [r for r in self._runbooks() if r.spec.triggers]
        changed = False
        starts: list[c.StartRun] = []
        for alert in payload.alerts:
            found = suggestions(runbooks, alert.labels, alert.annotations)
            if not found:
                self._count(receipt, "unmatched")
                continue
            cluster = self.cluster_of(alert.labels)
            if cluster is None:
                log.info("ignored alert %s: cluster %r is not configured",
                         alert.labels.get("alertname"), alert.labels.get(self.config.cluster_label))
                self._count(receipt, "unknown_cluster")
                continue
            found = [self._with_cluster(s, cluster, runbooks) for s in found]
            key = f"{cluster}/{alert.fingerprint}"
            data = {"cluster": cluster, "labels": alert.labels, "annotations": alert.annotations,
                    "ends_at": alert.ends_at, "generator_url": alert.generator_url,
                    "suggestions": [{"runbook": s.runbook, "params": dict(s.params),
                                     "auto_run": s.auto_run, "problem": s.problem}
                                    for s in found]}
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
            changed = True
            self._count(receipt, "suggested" if change == "new" else "resolved")
            if change == "new":
                for s in found:
                    if s.auto_run and s.problem is None and self.start is not None:
                        starts.append(c.StartRun(
                            runbook=s.runbook, params=dict(s.params),
                            requester=system_requester(alert.labels, alert.fingerprint),
                            origin=dict(self.origin),
                            provenance=Provenance(suggested_by=provenance(key))))
                        self._count(receipt, "auto_run")
        self.log.prune(now=now)
        if changed:
            receipt.groups.append(group_key)
            self.submit(self.follow_up, group_key, payload.group_key, starts)
        return receipt

    def _with_cluster(self, s: Suggestion, cluster: str, runbooks: Sequence[Runbook]) -> Suggestion:
        """A runbook with a ``cluster`` param gets the alert's cluster unless a trigger set it."""
        if not self.clusters or "cluster" in s.params:
            return s
        book = next(r for r in runbooks if r.name == s.runbook)
        if "cluster" not in book.spec.params:
            return s
        return Suggestion(s.runbook, {**s.params, "cluster": cluster}, s.auto_run, s.problem)

    def follow_up(self, group_key: str, label: str, starts: Sequence[c.StartRun]) -> None:
        """Off the request thread: start the auto-runs, diagnose what is new, then show the
        group as stored."""
        if self.diagnoser is not None:
            self.diagnose(group_key)
        for cmd in starts:
            try:
                state = self.start(cmd) if self.start is not None else None
                log.info("alert started %s as %s (%s)", cmd.runbook,
                         getattr(state, "run_id", "?"), cmd.requester)
            except RunbookBotError as e:
                log.warning("alert could not start %s: %s", cmd.runbook, e)
        if self.cards is not None:
            self.cards.show(AlertGroup(key=group_key, label=label, alerts=self.log.group(group_key)))


    def diagnose(self, group_key: str) -> None:
        """What a scan finds for each firing alert not diagnosed yet, kept with the alert, and
        the alert's suggestions as the scan vets them (``vetted``)."""
        done: dict[Scope, tuple[list[str], Report | None]] = {}
        for a in self.log.group(group_key):
            if a.status != "firing" or "findings" in a.data or self.diagnoser is None:
                continue
            firsts = a.data.get("suggestions") or [{}]
            scope = scope_of(a.data.get("cluster", ""), firsts[0].get("params", {}))
            if scope not in done:
                try:
                    scanned = self.diagnoser(scope)
                    done[scope] = (finding_lines(scanned), scanned)
                except Exception as e:  # a broken scan is said, never "nothing"; the card still goes
                    log.warning("could not diagnose %s for an alert: %s", scope, e)
                    done[scope] = ([f"the diagnosis could not be made: {str(e)[:200]}"], None)
            lines, found = done[scope]
            extra = {} if found is None else {
                "suggestions": vetted(a.data.get("suggestions") or [], found)}
            self.log.annotate(a.key, findings=lines, **extra)


class LogCards:
    """Without Slack: each change of a group is one log line naming what to run."""

    def show(self, group: AlertGroup) -> None:
        for a in group.alerts:
            for s in a.data.get("suggestions", []):
                params = " ".join(f"-p {k}={v}" for k, v in s["params"].items())
                log.info("alert %s %s on %s: runbook-bot run %s %s (suggested by %s)%s",
                         a.data["labels"].get("alertname"), a.status, a.data["cluster"],
                         s["runbook"], params, provenance(a.key),
                         "".join(f"; {line}" for line in a.data.get("findings", [])))


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
        count("accepted")
        return _answer(start_response, "200 OK", json.dumps(receipt.outcomes, sort_keys=True) + "\n")

    return app


def standalone_app(webhook: WSGIApp, ops: Any) -> WSGIApp:
    """``alerts serve``: ``/alertmanager`` and the ops endpoints, 404 else, behind body limits."""
    from bot.frontends.ops import BODY_LIMITS as OPS_LIMITS

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        if path == ALERTS_PATH:
            return webhook(environ, start_response)
        if ops.handles(path):
            return ops(environ, start_response)
        return _answer(start_response, "404 Not Found", "not found\n")

    return limit_bodies(app, limits={**BODY_LIMITS, **OPS_LIMITS})


def standalone_server(webhook: WSGIApp, ops: Any, *, host: str, port: int, threads: int) -> Any:
    """A waitress server for ``standalone_app`` (not yet running: call ``.run()``)."""
    from waitress.server import create_server

    return create_server(standalone_app(webhook, ops), host=host, port=port, threads=threads,
                         # whole seconds: waitress reads the loop timeout as an int
                         asyncore_loop_timeout=1, ident="runbook-bot",
                         max_request_body_size=server_cap(BODY_LIMITS) + 1)
