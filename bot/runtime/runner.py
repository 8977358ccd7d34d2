"""The runner: drives runs in durable ticks, and applies people's commands to them.

One tick: claim the run's lease, ask the conductor what is next, do that one piece of I/O (plan a
step, apply it, or poll it), hand the outcome back, and save the new state and audit events in one
transaction before anything else happens. A step is recorded as *applying* before ``apply()`` is
called, so a process killed mid-apply resumes by applying again (actions are idempotent: already
done is success) and never re-applies a step recorded as done. A read-only step skips that
extra save (re-reading after a crash is harmless), which halves the writes of a long run of
checks. Waiting is a stored ``next_check_at`` that any worker picks up (``run_due``), never a
sleeping thread.

Several workers (threads, processes, replicas on a shared PostgreSQL) can serve the same store: the
lease makes sure one of them at a time touches a run, and a heartbeat keeps it short, so a dead
replica's runs are taken over within seconds (``leases.py``).

What the runner keeps in memory is bounded by count: per-run locks (only while a thread holds or
waits for one). It keeps no parsed runbooks of its own: it reads them through the runbook source's
parse cache (``bot.runbook.source.ParseCache``, least recently used dropped first), the one the
front-ends read through too.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from bot.config import PolicyConfig
from bot.engine.apply_commands import apply_command, eligibility
from bot.engine.approvals import Membership, config_membership
from bot.engine.commands import Command, Outcome, StartRun
from bot.engine.conductor import Conductor
from bot.engine.decisions import (
    ApplyStep,
    AwaitPeople,
    Finished,
    PlanStep,
    Sleep,
    Tick,
    iso,
    parse_iso,
)
from bot.engine.events import run_created, run_linked
from bot.engine.ids import new_run_id
from bot.engine.plan import ApiCall, Plan
from bot.engine.ports import (
    ActionCatalog,
    ActionSpecLike,
    Clock,
    Notifier,
    RunbookSource,
    RunStore,
    SharedReads,
    StepContext,
)
from bot.engine.provenance import (
    Provenance,
    check_detected_at,
    check_incident,
    check_suggested_by,
    detected_in,
    lifted_hold,
)
from bot.engine.redaction import Redactor
from bot.engine.runstate import AuditDraft, RunState
from bot.engine.state import RUN_TERMINAL, StepStatus
from bot.errors import LeaseHeld, RunbookBotError, RunIdTaken
from bot.runbook.model import Runbook
from bot.runbook.params import coerce_params
from bot.runtime.leases import Leases
from bot.runtime.liveness import Heartbeat

log = logging.getLogger(__name__)


class Runner:
    def __init__(self, *, store: RunStore, catalog: ActionCatalog, runbooks: RunbookSource,
                 policy: PolicyConfig, clock: Clock, membership: Membership | None = None,
                 notifiers: Sequence[Notifier] = (), lease_seconds: float = 6.0,
                 lease_wait: float = 15.0, redact: Redactor | None = None,
                 clusters: Sequence[str] = ()) -> None:
        self.store = store
        self.catalog = catalog
        self.runbooks = runbooks
        self.policy = policy
        self.clock = clock
        self.membership = membership or config_membership(policy)
        self.notifiers = list(notifiers)
        self.clusters = tuple(clusters)  # the configured cluster names a run's params may name
        self.lease_seconds = lease_seconds
        self.leases = Leases(store=store, clock=clock, seconds=lease_seconds, wait=lease_wait)
        # what people type is redacted here, once, before it is stored, run, shown or exported:
        # a port the wiring hands in, with the config's redact_patterns (the store's too)
        self.redact = redact or Redactor()
        self.heartbeat = Heartbeat(clock)  # the worker loop's, for readiness checks
        self._stop = threading.Event()

    # -- starting -------------------------------------------------------------------------------

    def start(self, cmd: StartRun) -> RunState:
        """Create a run (params checked first: a bad param starts nothing) and return it."""
        runbook, text, file = self.runbooks.get(cmd.runbook)
        params = coerce_params(runbook, self.redact(dict(cmd.params)), clusters=self.clusters)
        prov = self._provenance(runbook.name, params, cmd.provenance)
        now = self.clock.now()
        for _ in range(20):
            state = RunState(run_id=new_run_id(), runbook=runbook.name, runbook_text=text,
                             runbook_file=file, title=runbook.metadata.title, params=params,
                             requester=cmd.requester, created_at=iso(now), dry_run=cmd.dry_run,
                             origin=dict(cmd.origin), owner=cmd.requester, parent=prov.parent,
                             incident=prov.incident, suggested_by=prov.suggested_by)
            created = [run_created(
                runbook=runbook.name, file=file, params=params, dry_run=cmd.dry_run,
                origin=cmd.origin, title=runbook.metadata.title).draft(actor=cmd.requester, ts=iso(now))]
            if prov:
                created.append(run_linked(
                    parent=prov.parent, parent_why=prov.parent_why, incident=prov.incident,
                    suggested_by=prov.suggested_by,
                    detected_at=prov.detected_at,
                    shown_at=prov.shown_at).draft(actor=cmd.requester, ts=iso(now)))
            try:
                self.store.create(state, created)
            except RunIdTaken:
                continue
            self._notify(state, created, [])
            return state
        raise RunbookBotError("could not allocate a run id")  # pragma: no cover

    def _provenance(self, runbook: str, params: dict[str, Any], given: Provenance) -> Provenance:
        """The links checked (a bad incident or reference starts nothing), the parent found from
        the compensation this run lifts when none is named, the incident inherited from it."""
        incident = check_incident(given.incident)
        suggested = check_suggested_by(given.suggested_by)
        parent, why = given.parent, given.parent_why
        if parent:
            self.store.load(parent)  # NotFound names the run that does not exist
            why = why or "named when the run was started"
        else:
            hold = lifted_hold(runbook, params)
            parent = self.store.holding(hold, lifted_by=runbook) if hold else None
            why = f"it left this in place: {hold}" if parent else ""
        if parent and incident is None:
            incident = self.store.load(parent).incident
        return Provenance(parent=parent, parent_why=why, incident=incident,
                          suggested_by=suggested,
                          detected_at=(check_detected_at(given.detected_at)
                                       or detected_in(suggested, self.clock.now())),
                          shown_at=check_detected_at(given.shown_at, what="shown_at"))

    # -- people's commands ----------------------------------------------------------------------

    def submit(self, cmd: Command) -> Outcome:
        """Apply a command under the run's lease; the outcome says what happened or why not."""
        return self.decide(cmd, drive=False)

    def decide(self, cmd: Command, *, check: Callable[[RunState], None] | None = None,
               answer: Callable[[Outcome], None] | None = None, drive: bool = True) -> Outcome:
        """Apply a command and, when it took, drive the run on: one lease, one load.

        ``check`` sees the run as loaded, before the engine does, and may raise to refuse (nothing
        is recorded then); ``answer`` hears the outcome as soon as it is saved, before the run is
        driven on, so a person is answered without waiting for the step the decision released.
        """
        cmd = self._redacted(cmd)
        with self.leases.claimed(cmd.run_id) as owner:
            state = self.store.load(cmd.run_id)
            if check is not None:
                check(state)
            conductor = self._conductor(state)
            tick = Tick()
            outcome = apply_command(conductor, cmd, self.clock.now(), tick)
            self._save(conductor, tick, owner)
            if answer is not None:
                try:
                    answer(outcome)
                except Exception:  # answering a person never stops the run
                    log.exception("answering a decision on run %s failed", cmd.run_id,
                                  extra={"run_id": cmd.run_id})
            if outcome.ok and drive:
                try:
                    self._drive_held(state, owner)
                except LeaseHeld:
                    pass  # taken over while away: the worker that has it drives on
                except Exception:  # the decision stands; a broken drive is retried when due
                    log.exception("driving run %s failed", cmd.run_id, extra={"run_id": cmd.run_id})
        return outcome

    def _redacted(self, cmd: Command) -> Command:
        """The command with the reason or note a person typed redacted."""
        for name in ("reason", "note"):
            value = getattr(cmd, name, None)
            if isinstance(value, str):
                cmd = dataclasses.replace(cmd, **{name: self.redact(value)})
        return cmd

    def eligibility(self, state: RunState, key: str, actor: str) -> str | None:
        """Why ``actor`` could not approve step ``key`` now (None: they could), changing nothing."""
        return eligibility(self._conductor(state), state.steps[key], actor)

    # -- driving --------------------------------------------------------------------------------

    def drive(self, run_id: str, *, max_ticks: int | None = None) -> RunState:
        """Advance a run until it waits, needs a person, or finishes; return its state."""
        try:
            with self.leases.claimed(run_id, wait=False) as owner:
                return self._drive_held(self.store.load(run_id), owner, max_ticks=max_ticks)
        except LeaseHeld:
            return self.store.load(run_id)

    def _drive_held(self, state: RunState, owner: str, *, max_ticks: int | None = None) -> RunState:
        """``drive`` for a run loaded under the lease ``owner`` holds."""
        run_id = state.run_id
        conductor = self._conductor(state)
        ticks = 0
        tick = Tick()
        # one pass: it ends when the run waits for time or people, so no read shared
        # here is older than the last approval
        reads = SharedReads()
        while not self._stop.is_set() and (max_ticks is None or ticks < max_ticks):
            ticks += 1
            now = self.clock.now()
            decision = conductor.decide(now, tick)
            if isinstance(decision, PlanStep):
                self._resolve_context(conductor, decision, tick, reads)
                outcome, calls = self._plan(state, decision, reads)
                conductor.planned(decision.key, outcome, self.clock.now(), tick,
                                  recheck=decision.recheck, calls=calls)
                s = state.steps.get(decision.key)
                if (s is not None and s.status == StepStatus.APPLYING
                        and isinstance(outcome, Plan) and outcome.is_noop
                        and not self.catalog.spec(decision.action).destructive):
                    # a read-only step needs no durable "applying" mark: re-reading after
                    # a crash is harmless, so its plan is saved with its result; a step that
                    # writes (cordon too) has its attempt in the chain before the call
                    continue
            elif isinstance(decision, ApplyStep):
                if not self.leases.renew(run_id, owner):
                    # another worker took the run over while this one was away: it
                    # applies, this one writes nothing more
                    raise LeaseHeld(f"run {run_id}: the lease was lost before an apply")
                if (decision.poll or tick.events) and self.catalog.spec(decision.action).destructive:
                    # a poll of a step that writes may write again (a stop EC2 refused while
                    # the machine booted is sent at the next poll), and an apply resumed after
                    # a worker died writes again: each is marked durably first (a poll as
                    # applying, a resume with its "resumed" event), as the first apply is, so
                    # a worker that dies between that write and its record leaves the mark,
                    # and the next one says it resumed
                    self._save(conductor, tick, owner)
                    tick = Tick()
                outcome, overridden, calls = self._apply(state, decision, reads)
                conductor.applied(decision.key, outcome, self.clock.now(), tick,
                                  overridden=overridden, poll=decision.poll, calls=calls)
            idle = isinstance(decision, Sleep | AwaitPeople | Finished)
            if not idle or tick.events or tick.dirty or tick.header_dirty:
                self._save(conductor, tick, owner)
            tick = Tick()
            if idle:
                break
        if tick.events or tick.dirty or tick.header_dirty:
            self._save(conductor, tick, owner)
        return state

    def run_due(self, *, limit: int = 100) -> int:
        """Drive every run that is due (waits over, expiries, runs left by a dead worker)."""
        count = 0
        self.heartbeat.beat()  # each pass and each run driven: the loop is alive
        for run_id in self.store.due(now=self.clock.now(), limit=limit):
            if self._stop.is_set():  # draining: start nothing new
                break
            try:
                self.drive(run_id)
            except Exception:  # one broken run must not stop the others
                log.exception("driving run %s failed", run_id, extra={"run_id": run_id})
            self.heartbeat.beat()
            count += 1
        return count

    def serve(self, *, interval: float = 1.0) -> None:
        """Drive due runs until ``stop``: the worker loop of ``slack serve`` and ``worker``.

        A run is due again on another replica within ``lease_seconds`` of this one dying, so
        ``interval`` plus ``lease_seconds`` bounds how long a dead replica's runs wait.
        """
        while not self._stop.is_set():
            self.run_due()
            self._stop.wait(interval)

    def stop(self) -> None:
        """Drain: the tick in flight finishes and is saved, its lease is released, nothing new
        starts. Commands still submitted afterwards are applied as usual."""
        self._stop.set()

    # -- internals ------------------------------------------------------------------------------

    def _runbook(self, state: RunState) -> Runbook:
        """The run's runbook from the text it started with, through the source's parse cache."""
        return self.runbooks.parse(state.runbook_text, file=state.runbook_file)

    def _conductor(self, state: RunState) -> Conductor:
        runbook = self._runbook(state)
        specs: dict[str, ActionSpecLike] = {s.action: self.catalog.spec(s.action)
                                            for s in runbook.spec.steps if s.action}
        return Conductor(runbook=runbook, specs=specs, policy=self.policy,
                         membership=self.membership, state=state)

    def _ctx(self, state: RunState, key: str, overrides: frozenset[str], reads: SharedReads,
             confirmed_by: str | None = None, approvers: tuple[str, ...] = (),
             poll: bool = False) -> StepContext:
        step = state.steps.get(key)
        since = parse_iso(step.applying_since) if step is not None and step.applying_since else None
        return StepContext(run_id=state.run_id, step_id=key, requester=state.requester,
                           clock=self.clock, dry_run=state.dry_run, params=state.params,
                           overrides=overrides, confirmed_by=confirmed_by, approvers=approvers,
                           reads=reads, poll=poll, applying_since=since,
                           last_result=step.result if poll and step is not None else None)

    def _resolve_context(self, conductor: Conductor, d: PlanStep, tick: Tick,
                         reads: SharedReads) -> None:
        """Before a run first touches a cluster, put on record what it acts on and as whom."""
        state = conductor.state
        ctx = self._ctx(state, d.key, d.overrides, reads)
        cluster = self.catalog.cluster_of(d.action, d.params, ctx)
        if cluster is None or cluster in state.contexts:
            return
        found = self.catalog.resolve_context(cluster, ctx)
        conductor.context_resolved(found, self.clock.now(), tick, calls=ctx.calls)

    def _plan(self, state: RunState, d: PlanStep, reads: SharedReads) -> tuple[Any, list[ApiCall]]:
        ctx = self._ctx(state, d.key, d.overrides, reads)
        try:
            return self.catalog.plan(d.action, d.params, ctx), ctx.calls
        except Exception as e:
            return e, ctx.calls

    def _apply(self, state: RunState, d: ApplyStep,
               reads: SharedReads) -> tuple[Any, list[str], list[ApiCall]]:
        step = state.steps.get(d.key)
        approvers = tuple(sorted({v.by for v in step.approvals()
                                  if v.plan_hash in (None, step.plan_hash)})) if step else ()
        ctx = self._ctx(state, d.key, d.overrides, reads, d.confirmed_by, approvers, poll=d.poll)
        try:
            return self.catalog.apply(d.action, d.plan, ctx), ctx.overridden, ctx.calls
        except Exception as e:
            return e, ctx.overridden, ctx.calls

    def _save(self, conductor: Conductor, tick: Tick, owner: str) -> None:
        state = conductor.state
        nxt = conductor.next_check()
        state.next_check_at = iso(nxt) if nxt else None
        now = self.clock.now()
        self.store.save(state, owner=owner, steps=tick.dirty, events=tick.events,
                        next_check_at=nxt if state.status not in RUN_TERMINAL else None,
                        lease_until=now + timedelta(seconds=self.lease_seconds))
        if tick.events or tick.messages or tick.dirty:
            self._notify(state, tick.events, tick.messages)

    def _notify(self, state: RunState, events: Sequence[AuditDraft], messages: Sequence[str]) -> None:
        for n in self.notifiers:
            try:
                n.run_changed(state, events=events, messages=messages)
            except Exception:  # a front-end that cannot post never breaks the run
                log.exception("notifier %s failed for run %s", type(n).__name__, state.run_id,
                              extra={"run_id": state.run_id})
