"""Builds the product from settings: store, action catalog, runbook source, runner.

Every command that touches runs (the terminal commands, ``slack serve``, ``demo``) gets its parts
here, so they all share one store and one policy, and tests can build the same thing with their own
clock or clients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bot.config import Settings
from bot.errors import NotFound

if TYPE_CHECKING:  # the parts are imported when built, so a command loads only what it uses
    from bot.actions.catalog import ClientsFactory
    from bot.diagnose import Report, Scope
    from bot.engine.approvals import Membership
    from bot.engine.ports import Clock, Notifier, RunStore
    from bot.frontends.metrics import Metrics
    from bot.frontends.ops import OpsEndpoints
    from bot.frontends.workers import WorkerRecord
    from bot.runtime.runner import Runner
    from bot.store.db import Database


def open_store(settings: Settings) -> Database:
    from bot.store.db import Database

    return Database(settings.database_url, audit_key=settings.audit_key,
                    previous_keys=settings.audit_previous_keys,
                    redact_patterns=settings.redact_patterns)


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
    if metrics is not None:
        from bot.frontends.observed import ObservedCatalog

        observed = ObservedCatalog(catalog, metrics)
        every.insert(0, metrics)  # counted before the run log says it happened
    runner = Runner(store=store or open_store(settings), catalog=observed,
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
