"""What the node watcher noticed, as the front-ends take it: one ``on_notice`` for every process.

The watcher (``bot.runtime.node_watcher``, docs/watcher.md) calls ``on_notice(notice)`` with a
``NodeNotice``: a node found dead, hung or sick from its Lease and Node, a node that recovered, or
a zone where many died at once. This module reads such a notice through ``Notice`` (the fields it
uses, read-only, so the front-ends never import the watcher) and holds what is the same with and
without Slack: the suggestion's runbook and params, the provenance a run started from it records
(``watcher:<cluster>/<node>``, or ``watcher:<cluster>/zone/<zone>``), the key its card is stored
under (the alert cards' table, ``bot.store.alerts``), the log line a process without Slack writes
(``LogNotices``), and ``notice_handler``, which counts each notice in the metrics and never lets a
failure to show one reach the watcher.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy.engine import Engine

from bot.config import AlertsConfig
from bot.engine import commands as c
from bot.engine.approvals import SYSTEM_PREFIX
from bot.engine.provenance import Provenance
from bot.errors import RunbookBotError
from bot.frontends.metrics import Metrics
from bot.runbook.autorun import may_auto_run
from bot.runbook.model import Runbook
from bot.store.auto_runs import AutoRunLimit
from bot.store.node_notices import NoticeLog

log = logging.getLogger(__name__)

PROVENANCE = "watcher:"
VERDICTS = ("dead", "hung", "sick", "recovered", "zone")
# runbooks that fence a machine: never offered for a node whose kubelet is alive (sick)
FENCES = frozenset({"node-dead-ngns", "zone-outage-ngns"})


class Notice(Protocol):
    """The fields of the watcher's ``NodeNotice`` the front-ends read."""

    @property
    def cluster(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def detected_at(self) -> object: ...  # when the Lease went stale (datetime, epoch or ISO)
    @property
    def noticed_at(self) -> object: ...
    @property
    def reason(self) -> str: ...
    @property
    def suggestion(self) -> object: ...  # runbook and params, or None
    @property
    def nodes(self) -> Sequence[str]: ...  # a zone notice's nodes
    @property
    def zone(self) -> str | None: ...


def instant(value: object) -> datetime | None:
    """A notice's time as an aware datetime (a datetime, Unix seconds or ISO-8601 text)."""
    when: datetime | None = None
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        when = datetime.fromtimestamp(float(value), tz=UTC)
    elif isinstance(value, str) and value:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if when is None:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _iso(value: object) -> str | None:
    """A notice's time as the ISO text a run's provenance records (its time to recovery starts)."""
    when = instant(value)
    return when.isoformat() if when is not None else None


def stale_seconds(n: Notice) -> float | None:
    """Seconds from the Lease going stale to the notice (the time-to-notice histogram)."""
    start, end = instant(n.detected_at), instant(n.noticed_at)
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def suggested(n: Notice) -> tuple[str, dict[str, str]] | None:
    """The runbook a notice suggests and its params, whatever shape the watcher gave them in
    (an object with ``runbook`` and ``params``, a mapping with those keys, or a pair)."""
    s = n.suggestion
    if s is None:
        return None
    if isinstance(s, Mapping):
        name, params = s.get("runbook"), s.get("params") or {}
    elif isinstance(s, tuple | list) and len(s) == 2:
        name, params = s[0], s[1] or {}
    else:
        name, params = getattr(s, "runbook", None), getattr(s, "params", None) or {}
    if not isinstance(name, str) or not name or not isinstance(params, Mapping):
        return None
    return name, {str(k): str(v) for k, v in params.items()}


def offered(n: Notice) -> tuple[str, dict[str, str]] | None:
    """What the card offers: the suggestion, except a fence for a node whose kubelet is alive."""
    s = suggested(n)
    if s is None or (n.verdict == "sick" and s[0] in FENCES):
        return None
    return s


def subject(n: Notice) -> str:
    """``<cluster>/<node>``, or ``<cluster>/zone/<zone>`` for a zone notice."""
    if n.verdict == "zone" or (not n.node and n.zone):  # a zone, or a zone that came back
        return f"{n.cluster}/zone/{n.zone or '?'}"
    return f"{n.cluster}/{n.node}"


def provenance(n: Notice) -> str:
    """The reference runs started from the notice's card record: ``watcher:<subject>@<detected
    at>``, so a run started by a click on the card starts its time to recovery when the watcher
    saw the node go (``bot.engine.provenance.detected_in``)."""
    when = _iso(n.detected_at)
    return PROVENANCE + subject(n) + (f"@{when}" if when else "")


def card_key(n: Notice) -> str:
    """The key of the notice's card in the alert cards' table: one card per node (per zone),
    whenever it was detected."""
    return hashlib.sha256((PROVENANCE + subject(n)).encode()).hexdigest()


def command(n: Notice) -> str | None:
    """``runbook-bot run <runbook> -p k=v ...``: what the notice suggests, for a terminal."""
    s = offered(n)
    if s is None:
        return None
    params = "".join(f" -p {k}={v}" for k, v in s[1].items())
    return f"runbook-bot run {s[0]}{params} --suggested-by {provenance(n)}"


class LogNotices:
    """Without Slack: each notice is one log line naming the command that answers it (and what
    became of its auto-run, with ``auto_runs``)."""

    def __init__(self, auto_runs: NoticeAutoRuns | None = None,
                 now: Callable[[], float] = time.time) -> None:
        self.auto_runs, self.now = auto_runs, now

    def on_notice(self, n: Notice) -> None:
        what = command(n)
        whom = f"zone {n.zone} ({len(n.nodes)} nodes)" if n.verdict == "zone" else f"node {n.node}"
        auto = self.auto_runs(n, now=self.now()) if self.auto_runs is not None else None
        log.info("watcher: %s on %s is %s: %s%s%s", whom, n.cluster, n.verdict, n.reason,
                 f"; {what}" if what else "", f" ({auto})" if auto else "")


def notice_handler(show: Callable[[Notice], None], *,
                   metrics: Metrics | None = None) -> Callable[[Notice], None]:
    """The watcher's ``on_notice``: count the notice, then ``show`` it; a failure is logged."""

    def on_notice(n: Notice) -> None:
        if metrics is not None:
            metrics.notice(n.verdict, stale_seconds(n) if n.verdict != "recovered" else None)
        try:
            show(n)
        except Exception:  # a card that cannot be shown never stops the watcher
            log.exception("could not show the watcher's notice about %s", subject(n))

    return on_notice


def notices_table(rows: Sequence[tuple[float, str]]) -> str:
    """``runbook-bot notices``: the claimed notices (claimed_at, ``NodeNotice.key``), one a line."""
    if not rows:
        return "no notices from the node watcher (is watcher.enabled set?)"
    lines = [f"{'NOTICED':<20}  {'CLUSTER':<12}  {'NODE OR ZONE':<44}  {'VERDICT':<9}  "
             "LEASE STALE SINCE"]
    for claimed, key in rows:
        head, verdict, detected = [*key.rsplit("/", 2), "", ""][:3]
        cluster, _, what = head.partition("/")
        when = datetime.fromtimestamp(claimed, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"{when:<20}  {cluster:<12}  {what:<44}  {verdict:<9}  {detected}")
    return "\n".join(lines)


class NoticeAutoRuns:
    """Starts the read-only runbook a notice suggests, where it opts into ``auto_run``
    (``may_auto_run``: the runtime refuses the bot's identity anything else), within the alerts'
    per-runbook limit (``AutoRunLimit``, shared with alerts and replicas).

    Coalesced per cluster and zone: in one ``window`` the first notice of a zone starts the
    runbook and takes a slot; the zone's next notices start nothing and take none (their card
    names the run already looking at the zone), so a storm in one zone spends one slot and never
    uses up the limit that the other zones' and clusters' notices need. The claim is the store's
    (``claim``: ``NoticeLog.claim``), so replicas coalesce together.
    """

    def __init__(self, *, runbook: Callable[[str], Runbook], start: Callable[[c.StartRun], object],
                 limit: AutoRunLimit, window: float, claim: Callable[[str, float], bool],
                 origin: Mapping[str, str]) -> None:
        self.runbook, self.start, self.limit = runbook, start, limit
        self.window, self.claim, self.origin = window, claim, dict(origin)
        self.started: dict[str, str] = {}  # coalescing key -> what started there, in words

    def __call__(self, n: Notice, *, now: float) -> str | None:
        """What was done, in words for the card; None when the notice asks for no auto-run."""
        s = offered(n)
        if s is None or n.verdict == "recovered":
            return None
        try:
            book = self.runbook(s[0])
        except RunbookBotError:
            return None
        if not may_auto_run(book):
            return None
        key = f"auto/{s[0]}/{n.cluster}/zone:{n.zone or '-'}/{int(now // self.window)}"
        if not self.claim(key, now):
            return (f"not started by the bot: {s[0]} already auto-ran for zone "
                    f"{n.zone or '-'} of {n.cluster} ({self.started.get(key, 'on a replica')}); "
                    "Dry run or Run starts one for this node")
        if not self.limit.take(s[0], now=now):
            return f"not started by the bot: over its limit of auto-runs ({self.limit.limit})"
        try:
            state = self.start(c.StartRun(
                runbook=s[0], params=s[1], requester=f"{SYSTEM_PREFIX}watcher:{subject(n)}",
                origin=self.origin, provenance=Provenance(
                    suggested_by=provenance(n), detected_at=_iso(n.detected_at))))
        except RunbookBotError as e:
            log.warning("watcher could not auto-run %s for %s: %s", s[0], subject(n), e)
            return f"not started by the bot: {e}"
        run_id = str(getattr(state, "run_id", "?"))
        self.started[key] = f"run {run_id}"
        return f"started by the bot as run {run_id} (it only reads)"


def auto_runs_for(config: AlertsConfig, engine: Engine, *, runbook: Callable[[str], Runbook],
                  start: Callable[[c.StartRun], object],
                  origin: Mapping[str, str]) -> NoticeAutoRuns:
    """``NoticeAutoRuns`` within the alerts' limit (``alerts.auto_run_limit`` per
    ``auto_run_window``, counted in the store with the alerts'), coalescing through the watcher's
    claims (``bot.store.node_notices``)."""
    claims = NoticeLog(engine)
    window = config.auto_run_window
    return NoticeAutoRuns(runbook=runbook, start=start,
                          limit=AutoRunLimit(engine, limit=config.auto_run_limit, window=window),
                          window=window, claim=lambda key, now: claims.claim(key, now=now),
                          origin=origin)
