"""Builds the product from settings: store, action catalog, runbook source, runner.

Every command that touches runs (the terminal commands, ``slack serve``, ``demo``) gets its parts
here, so they all share one store and one policy, and tests can build the same thing with their own
clock or clients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from bot.config import Settings
from bot.errors import NotFound

if TYPE_CHECKING:  # the parts are imported when built, so a command loads only what it uses
    from bot.actions.catalog import ClientsFactory
    from bot.actions.env import ClusterClients
    from bot.diagnose import Report, Scope
    from bot.engine.approvals import Membership
    from bot.engine.plan import ApiCall
    from bot.engine.ports import Clock, Notifier, RunStore
    from bot.frontends.metrics import Metrics
    from bot.frontends.notices import Notice
    from bot.frontends.ops import OpsEndpoints
    from bot.frontends.workers import WorkerRecord
    from bot.runtime.runner import Runner
    from bot.store.db import Database


_opened: list[Database] = []  # the stores this command opened, closed when it ends


def open_store(settings: Settings) -> Database:
    """The state database, closed when the command ends (``close_stores``)."""
    from bot.store.db import Database

    store = Database(settings.database_url, audit_key=settings.audit_key,
                     previous_keys=settings.audit_previous_keys,
                     redact_patterns=settings.redact_patterns)
    _opened.append(store)
    return store


@contextmanager
def stores_closed() -> Iterator[None]:
    """Close the stores opened inside the block when it ends: a command's connections are not
    left for the process's end (a command run in-process, as tests run it, would leave them open).
    Stores opened before the block are not its to close."""
    start = len(_opened)
    try:
        yield
    finally:
        while len(_opened) > start:
            _opened.pop().close()


def build_runner(settings: Settings, *, store: RunStore | None = None,
                 notifiers: Sequence[Notifier] = (), clock: Clock | None = None,
                 clients_factory: ClientsFactory | None = None,
                 membership: Membership | None = None, metrics: Metrics | None = None) -> Runner:
    """The runner; every run's events are logged (``RunLog``), and counted where ``metrics``."""
    from bot.actions.catalog import build_catalog
    from bot.engine.ports import ActionCatalog, SystemClock
    from bot.engine.redaction import Redactor
    from bot.frontends.runlog import RunLog
    from bot.runbook.source import DirectorySource
    from bot.runtime.runner import Runner

    catalog = build_catalog(settings, clients_factory=clients_factory)
    observed: ActionCatalog = catalog
    every: list[Notifier] = [RunLog(), *notifiers]
    from bot.store.db import Database

    store = store or open_store(settings)
    if settings.pagerduty.posts_notes and isinstance(store, Database):
        # a linked run's outcome, noted on its PagerDuty incident (kept in the state database)
        from bot.frontends.pagerduty_notes import notes_for

        notes = notes_for(settings.pagerduty, notifiers=every, engine=store.engine,
                          clock=clock or SystemClock())
        if notes is not None:
            notes.start()
    if metrics is not None:
        from bot.frontends.observed import ObservedCatalog

        observed = ObservedCatalog(catalog, metrics)
        every.insert(0, metrics)  # counted before the run log says it happened
    runner = Runner(store=store, catalog=observed,
                    runbooks=DirectorySource(settings.runbooks_dir, catalog=catalog.actions),
                    policy=settings.policy, clock=clock or SystemClock(), membership=membership,
                    notifiers=every, lease_seconds=settings.lease_seconds,
                    clusters=tuple(settings.clusters),
                    redact=Redactor(settings.redact_patterns))  # the store's patterns, at entry
    if metrics is not None:
        runner.leases.takeover_listeners.append(metrics.lease_taken_over)
        runner.heartbeat.listeners.append(metrics.worker_looped)
    return runner


def scanner(settings: Settings, *, clients_factory: ClientsFactory | None = None,
            clock: Clock | None = None) -> Callable[[Scope], Report]:
    """Diagnoses for the front-ends (alert cards, ``/runbook diagnose``): each configured
    cluster's clients are built on its first scan and kept; ``scope.cluster`` "" is the only one."""
    import threading
    from dataclasses import replace

    from bot.actions.builtin import builtin_actions
    from bot.actions.env import ClusterClients
    from bot.diagnose import catalogue_of, diagnose
    from bot.engine.ports import SystemClock
    from bot.runbook.source import DirectorySource

    make = clients_factory or ClusterClients.from_config
    runbooks = catalogue_of(DirectorySource(settings.runbooks_dir, catalog=builtin_actions()))
    kept: dict[str, ClusterClients] = {}
    lock = threading.Lock()
    now = (clock or SystemClock()).now

    def scan(scope: Scope) -> Report:
        cfg = settings.cluster(scope.cluster or None)
        with lock:
            clients = kept.get(cfg.name) or kept.setdefault(cfg.name, make(cfg))
        return diagnose(cfg, clients, replace(scope, cluster=cfg.name), now=now(),
                        runbooks=runbooks, grace=settings.policy.node_monitor_grace_period)

    return scan


def ops_endpoints(runner: Runner, store: Database, metrics: Metrics, *,
                  interval: float = 1.0) -> OpsEndpoints:
    """``/healthz``, ``/readyz`` (the database answers, the worker loop goes round) and ``/metrics``."""
    from bot.frontends.ops import DEFAULT_STALL_AFTER, OpsEndpoints, database_check, worker_check

    stall_after = max(DEFAULT_STALL_AFTER, 20 * interval)
    return OpsEndpoints(metrics=metrics, checks={
        "database": database_check(store.engine),
        "worker": worker_check(runner.heartbeat, stall_after=stall_after)})


def record_worker(runner: Runner, store: Database) -> WorkerRecord:
    """Keep this process's row in the store's ``workers`` table while its loop goes round, so
    terminals know a worker carries runs on; ``close()`` it when the loop stops."""
    from bot.frontends.workers import WorkerRecord

    record = WorkerRecord(store)
    runner.heartbeat.listeners.append(record)
    return record


def identity(settings: Settings, as_user: str | None) -> str:
    """The person at the keyboard: the real uid's account, or ``--as`` where the config allows it."""
    from bot.frontends.term.identity import terminal_identity

    return terminal_identity(settings.policy, as_user)


def run_id_arg(text: str) -> str:
    """A run id as typed on the command line (case, spaces, no prefix), or NotFound saying why."""
    from bot.engine.ids import parse_run_id

    try:
        return parse_run_id(text)
    except ValueError as e:
        raise NotFound(str(e)) from None


class NodeWatchers:
    """The node watcher of every configured cluster (docs/watcher.md), for a long-running process:
    ``start`` them beside the worker loop, ``stop`` them when it drains (each within its
    ``watch_timeout``). ``watcher.enabled`` and ``watcher.clusters`` (default: every configured
    cluster) say which run. Each notice goes to ``on_notice`` (Slack cards where
    Slack is configured, a log line otherwise: ``bot.frontends.notices``), counted in ``metrics``.
    """

    def __init__(self, settings: Settings, store: Database,
                 on_notice: Callable[[Notice], None], *, metrics: Metrics | None = None,
                 clients_factory: ClientsFactory | None = None, clock: Clock | None = None,
                 enabled: bool | None = None) -> None:
        from bot.actions.env import ClusterClients
        from bot.diagnose.node_watch import triage_with
        from bot.engine.node_watch import Thresholds
        from bot.engine.ports import SystemClock
        from bot.frontends.notices import notice_handler
        from bot.runtime.node_watcher import NodeWatcher
        from bot.store.node_notices import NoticeLog

        config = settings.watcher
        if enabled is None:
            enabled = config.enabled
        make = clients_factory or ClusterClients.from_config
        claims = NoticeLog(store.engine)
        grace = settings.policy.node_monitor_grace_period
        th = Thresholds(grace=grace, detect_after=config.detect_after,
                        max_out_of_service=settings.policy.max_out_of_service_nodes)
        handler = notice_handler(on_notice, metrics=metrics)
        self.ec2_reads = 0
        self.watchers: list[NodeWatcher] = []
        for name in (config.clusters or tuple(settings.clusters)) if enabled else ():
            clients = make(settings.cluster(name))
            self.watchers.append(NodeWatcher(
                name, nodes=lambda c=clients, **kw: c.kube.watch_nodes(**kw),
                leases=lambda c=clients, **kw: c.kube.watch_node_leases(**kw),
                triage=triage_with(_CountedEc2(clients, self), grace=grace), claims=claims,
                on_notice=handler, clock=clock or SystemClock(), thresholds=th,
                watch_timeout=config.watch_timeout, interval=config.interval))
        if metrics is not None and self.watchers:
            metrics.track_watcher_reads(self.reads)

    def reads(self) -> dict[str, float]:
        """Reads made so far by every watcher, by kind (``runbook_bot_watcher_reads_total``)."""
        stats = [w.stats for w in self.watchers]
        return {"list": sum(s.lists - s.relists for s in stats),
                "relist": sum(s.relists for s in stats),
                "watch": sum(s.watches for s in stats), "ec2": self.ec2_reads}

    def start(self) -> None:
        for w in self.watchers:
            w.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Tell every watcher to stop, then wait for each (the passes in flight end together)."""
        for w in self.watchers:
            w.stop(0)
        for w in self.watchers:
            w.stop(timeout)


class _CountedEc2:
    """A cluster's EC2 client bound read-only for each triage, its calls counted."""

    def __init__(self, clients: ClusterClients, owner: NodeWatchers) -> None:
        self.clients, self.owner = clients, owner

    def describe_instance_status(self, instance_ids: Sequence[str]) -> dict[str, dict[str, object]]:
        calls: list[ApiCall] = []
        try:
            return self.clients.ec2.bound(calls, read_only=True).describe_instance_status(
                instance_ids)
        finally:
            self.owner.ec2_reads += len(calls)


def notice_sink(settings: Settings, store: Database,
                runner: Runner | None = None) -> Callable[[Notice], None]:
    """Where a process without the Slack app sends the watcher's notices: cards in Slack where a
    bot token is configured (whichever replica claims a notice shows it, so every process that
    watches must be able to post), else a log line naming the command (``LogNotices``). With
    ``runner``, read-only runbooks that opt into ``auto_run`` are started as from Slack
    (``NoticeAutoRuns``); the process's worker loop carries them on."""
    from bot.frontends.notices import LogNotices, NoticeAutoRuns, auto_runs_for

    channel: str | None = None
    if settings.slack.bot_token:
        from bot.frontends.slack.app import notice_channel

        channel = notice_channel(settings)
    auto: NoticeAutoRuns | None = None
    if runner is not None:
        from bot.runtime.facade import Origin, Runtime

        runtime = Runtime(runner, refusals=store.refusals)
        auto = auto_runs_for(settings.alerts, store.engine, runbook=runtime.runbook,
                             start=lambda cmd: runtime.start(cmd, origin=Origin(frontend="alerts")),
                             origin={"frontend": "slack", "channel": channel} if channel
                             else {"frontend": "watcher"})
    if not settings.slack.bot_token:
        return LogNotices(auto).on_notice
    import time

    from bot.frontends.slack.app import make_client
    from bot.frontends.slack.notice_cards import SlackNoticeCards
    from bot.store.alerts import AlertLog

    return SlackNoticeCards(client=make_client(settings.slack), alert_log=AlertLog(store.engine),
                            channel=channel, clock_now=time.time, auto_runs=auto,
                            runs=lambda: store.runs(active=True, limit=200)).show
