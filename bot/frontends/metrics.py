"""Prometheus metrics: what the bot did, counted from what already passes through it.

This is the one module that imports ``prometheus_client`` (an import-linter contract says so); the
engine and the runner know nothing of it. The counters are fed from three seams that exist anyway:

- the runner's notifiers (``run_changed``): every audit event of every saved tick passes here once,
  so runs, steps, refusals and approval times are counted from the events and the run's state;
- the action catalog (``ObservedCatalog`` in ``bot.frontends.observed``): after each plan and
  apply, the API calls the clients recorded for the audit are counted by service and operation;
- the front-ends and the runtime's hooks: Slack failures, the outbox backlog, lease takeovers and
  the time each Slack request took to acknowledge.

Each ``Metrics`` has its own registry, so tests (and two bots in one process) never share counts.
Counters are per process: sum them across replicas (``sum by (...)``) in queries and alerts.
``docs/observability.md`` lists every metric and the alerts worth setting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Metric
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from bot.engine.events import EventType as T
from bot.engine.plan import ApiCall
from bot.engine.runstate import AuditDraft, RunState
from bot.present.recovery import SOURCES as STAGE_SOURCES
from bot.present.recovery import first_times, stage_times

CONTENT_TYPE = CONTENT_TYPE_LATEST
# people answer in minutes to hours; applies follow approvals within seconds
APPROVAL_BUCKETS = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400)
APPLY_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600)
# a recovery's stages come seconds to hours after the trouble was detected
STAGE_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400)
OPEN_RUNS = 1000  # runs whose stage events are kept until they finish (the oldest dropped first)
# Slack gives up on an ack after 3 s
ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)
# the node watcher: from a node's Lease going stale to its notice (the goal is under a minute)
NOTICE_BUCKETS = (5, 10, 20, 30, 45, 60, 90, 120, 300, 900)


def _seconds(start: str | None, end: str) -> float | None:
    if not start:
        return None
    try:
        return max(0.0, (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())
    except ValueError:
        return None


class _WatcherReads(Collector):
    """The node watchers' own counts (``bot.runtime.node_watcher.WatchStats``), read at scrape."""

    def __init__(self, reads: Callable[[], Mapping[str, float]]) -> None:
        self.reads = reads

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily("runbook_bot_watcher_reads", "Reads the node watchers made: "
                                     "Node and Lease lists, relists after 410 Gone, bounded "
                                     "watches, EC2 triage calls", labels=["kind"])
        for kind, count in sorted(self.reads().items()):
            family.add_metric([kind], count)
        yield family


class Metrics:
    """The bot's metrics in a registry of their own; ``exposition()`` is what ``/metrics`` serves."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.runs = Counter("runbook_bot_runs", "Runs started and finished, by runbook and status "
                            "(started; how it ended: succeeded, partial, failed, aborted)",
                            ["runbook", "status"], registry=r)
        self.steps = Counter("runbook_bot_steps", "Step outcomes: applied (its apply went "
                             "through to the end), refused (an interlock blocked it), failed",
                             ["runbook", "action", "outcome"], registry=r)
        self.refusals = Counter("runbook_bot_commands_refused", "People's commands refused by policy",
                                ["command"], registry=r)
        self.interlocks = Counter("runbook_bot_interlocks_blocked", "Interlock refusals, by rule",
                                  ["rule"], registry=r)
        self.retries = Counter("runbook_bot_step_retries", "Steps tried again after a transient error",
                               ["runbook", "action"], registry=r)
        self.approval_wait = Histogram("runbook_bot_approval_wait_seconds", "From a plan's approval "
                                       "request to its last needed approval", ["runbook"],
                                       buckets=APPROVAL_BUCKETS, registry=r)
        self.approval_to_apply = Histogram("runbook_bot_approval_to_apply_seconds", "From a step's "
                                           "last approval to the start of its apply", ["runbook"],
                                           buckets=APPLY_BUCKETS, registry=r)
        self.api_calls = Counter("runbook_bot_api_calls", "Calls to Kubernetes and AWS APIs, each "
                                 "attempt counted", ["service", "operation"], registry=r)
        self.api_errors = Counter("runbook_bot_api_errors", "API calls that failed, by error code",
                                  ["service", "operation", "code"], registry=r)
        self.api_reads_shared = Counter("runbook_bot_api_reads_shared", "Reads answered from "
                                        "what the run's pass had already read, not sent",
                                        ["service", "operation"], registry=r)
        self.slack_failures = Counter("runbook_bot_slack_failures", "Slack Web API calls that failed "
                                      "(transient ones are tried again)", ["method", "transient"],
                                      registry=r)
        self.slack_backlog = Gauge("runbook_bot_slack_outbox_backlog", "Runs waiting to be drawn "
                                   "in Slack by this process", registry=r)
        self.lease_takeovers = Counter("runbook_bot_lease_takeovers", "Run leases taken over from "
                                       "a worker that died", registry=r)
        self.ack_seconds = Histogram("runbook_bot_slack_ack_seconds", "Time to acknowledge a Slack "
                                     "request", ["kind"], buckets=ACK_BUCKETS, registry=r)
        self.worker_last_loop = Gauge("runbook_bot_worker_last_loop_timestamp_seconds", "When the "
                                      "worker loop last went round (Unix time)", registry=r)
        self.alerts = Counter("runbook_bot_alerts", "Alerts received from Alertmanager, by "
                              "outcome: suggested (a runbook answers it), duplicate (heard "
                              "before), resolved, unmatched (no runbook answers it), "
                              "unknown_cluster, conflict (labels differing from those recorded "
                              "under its fingerprint: refused), auto_run (a read-only run started)"
                              ", auto_run_limited (not started: its runbook's auto-run limit)",
                              ["outcome"], registry=r)
        self.alert_requests = Counter("runbook_bot_alert_requests", "Alertmanager webhook "
                                      "requests, by answer: accepted, unauthorized, malformed, "
                                      "busy (503: the queue of alerts to follow up is full)",
                                      ["answer"], registry=r)
        self.alerts_dropped = Counter("runbook_bot_alerts_dropped", "Alerts of a delivery not "
                                      "looked at, by reason: truncated (left out by Alertmanager, "
                                      "truncatedAlerts), over_limit (past the alerts the bot takes "
                                      "from one delivery)", ["reason"], registry=r)
        self.alert_scans = Counter("runbook_bot_alert_scans", "Scans of a cluster made for "
                                   "alerts (one answers every alert of the cluster waiting)",
                                   registry=r)
        self.alerts_coalesced = Counter("runbook_bot_alerts_coalesced", "Alerts answered by a "
                                        "scan made for other alerts too: the scans not made",
                                        registry=r)
        self.alert_queue = Gauge("runbook_bot_alert_queue", "Alerts waiting for their scan, "
                                 "card and auto-runs in this process", registry=r)
        self.notices = Counter("runbook_bot_node_notices", "What the node watcher noticed, by "
                               "verdict: dead, hung, sick, recovered, zone", ["verdict"], registry=r)
        self.notice_seconds = Histogram("runbook_bot_notice_seconds", "From a node's Lease going "
                                        "stale to the watcher's notice", buckets=NOTICE_BUCKETS,
                                        registry=r)
        self.stage_seconds = Histogram("runbook_bot_recovery_stage_seconds", "When each stage "
                                       "of a recovery was reached, in seconds since the trouble "
                                       "was detected (else since the run started); observed "
                                       "when the run ends", ["runbook", "stage"],
                                       buckets=STAGE_BUCKETS, registry=r)
        self._stages: dict[str, list[AuditDraft]] = {}  # run -> its stage events seen so far
        self._stages_lock = threading.Lock()
        self._lock = threading.Lock()

    # -- the Notifier port ----------------------------------------------------------------------

    def run_changed(self, state: RunState, *, events: Sequence[AuditDraft],
                    messages: Sequence[str]) -> None:
        """Count what the tick's audit events say happened."""
        for e in events:
            self._event(state, e)
            if e.type in STAGE_SOURCES:
                self._stage_event(state, e)

    def _stage_event(self, state: RunState, e: AuditDraft) -> None:
        """Keep the events a run's stages are read from; when it ends, observe each stage's first
        time (only for a run this process saw start: a resumed one would count from mid-way)."""
        with self._stages_lock:  # runs tick in several threads
            if e.type == T.RUN_CREATED:
                if len(self._stages) >= OPEN_RUNS:
                    self._stages.pop(next(iter(self._stages)))
                self._stages[state.run_id] = []
            seen = self._stages.get(state.run_id)
            if seen is None:
                return
            seen.append(e)
            if e.type != T.RUN_FINISHED:
                return
            del self._stages[state.run_id]
        for stage, seconds in first_times(stage_times(seen)).items():
            self.stage_seconds.labels(state.runbook, stage).observe(seconds)

    def _event(self, state: RunState, e: AuditDraft) -> None:
        p = e.payload
        rb = state.runbook
        step = state.steps.get(str(p.get("step", "")))
        action = (step.action if step else None) or "manual"
        t = e.type
        if t == T.RUN_CREATED:
            self.runs.labels(rb, "started").inc()
        elif t == T.RUN_FINISHED:
            self.runs.labels(rb, str(p.get("status", "unknown"))).inc()
        elif t == T.STEP_SUCCEEDED:
            self.steps.labels(rb, action, "applied").inc()
        elif t == T.INTERLOCK_BLOCKED:
            self.steps.labels(rb, action, "refused").inc()
            self.interlocks.labels(str(p.get("rule", ""))).inc()
        elif t == T.STEP_FAILED:
            self.steps.labels(rb, action, "failed").inc()
        elif t == T.STEP_RETRYING:
            self.retries.labels(rb, action).inc()
        elif t == T.COMMAND_REFUSED:
            self.refusals.labels(str(p.get("command", ""))).inc()
        elif t == T.APPROVAL_GRANTED and step is not None and p.get("count", 0) >= p.get("needed", 1):
            waited = _seconds(step.requested_at, e.ts)
            if waited is not None:
                self.approval_wait.labels(rb).observe(waited)
        elif t == T.STEP_APPLYING and step is not None and p.get("approvers") and p.get("attempt") == 1:
            last = max((v.at for v in step.approvals() if v.plan_hash == p.get("plan_hash")),
                       default=None)
            took = _seconds(last, e.ts)
            if took is not None:
                self.approval_to_apply.labels(rb).observe(took)

    # -- the other seams ------------------------------------------------------------------------

    def calls_made(self, calls: Iterable[ApiCall]) -> None:
        for c in calls:
            if c.outcome == "cached":  # served from the pass's shared reads: no request was made
                self.api_reads_shared.labels(c.service, c.operation).inc()
                continue
            self.api_calls.labels(c.service, c.operation).inc()
            if c.outcome != "ok":
                self.api_errors.labels(c.service, c.operation, c.outcome).inc()

    def slack_failed(self, method: str, *, transient: bool) -> None:
        self.slack_failures.labels(method, "true" if transient else "false").inc()

    def lease_taken_over(self, run_id: str, previous: str) -> None:
        self.lease_takeovers.inc()

    def acked(self, kind: str, seconds: float) -> None:
        self.ack_seconds.labels(kind).observe(seconds)

    def track_backlog(self, count: Callable[[], float]) -> None:
        self.slack_backlog.set_function(count)

    def worker_looped(self, at: datetime) -> None:
        self.worker_last_loop.set(at.timestamp())

    def alert(self, outcome: str) -> None:
        self.alerts.labels(outcome).inc()

    def alert_request(self, answer: str) -> None:
        self.alert_requests.labels(answer).inc()

    def alerts_not_looked_at(self, reason: str, count: int) -> None:
        if count > 0:
            self.alerts_dropped.labels(reason).inc(count)

    def alert_scan(self, alerts: int) -> None:
        """One scan made, answering ``alerts`` alerts."""
        self.alert_scans.inc()
        self.alerts_coalesced.inc(max(0, alerts - 1))

    def track_alert_queue(self, count: Callable[[], float]) -> None:
        self.alert_queue.set_function(count)

    def notice(self, verdict: str, stale_seconds: float | None = None) -> None:
        """One notice of the node watcher; ``stale_seconds`` from the Lease going stale to it."""
        self.notices.labels(verdict).inc()
        if stale_seconds is not None:
            self.notice_seconds.observe(stale_seconds)

    def track_watcher_reads(self, reads: Callable[[], Mapping[str, float]]) -> None:
        """The node watchers' reads so far, by kind (``list``, ``relist``, ``watch``, ``ec2``),
        as the counter ``runbook_bot_watcher_reads_total``; ``reads`` is asked at each scrape."""
        self.registry.register(_WatcherReads(reads))

    def exposition(self) -> bytes:
        """The registry in Prometheus's text format."""
        with self._lock:
            return generate_latest(self.registry)
