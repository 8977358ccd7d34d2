"""How a step moves: the conductor's bookkeeping, kept apart from its deciding.

Every decision the conductor takes (``conductor.py``) ends in a ``Move`` of the decision table
(``decision_table.py``): the step's new status, changed through the transition table
(``state.py``); the audit event that records it; and what comes next (apply, wait for people,
sleep, move on, or the step's ``on_failure``). This module carries moves out and holds what they
need: the run, the runbook, the approval rules, the cursor and the end of the run. ``Conductor``
extends ``Moves``, so that the deciding, which reads like the runbook language, is not buried in
the bookkeeping. Pure, like the conductor: no I/O, ``now`` is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from bot.config import PolicyConfig
from bot.engine import events as ev
from bot.engine import outcome as run_outcome
from bot.engine.approvals import SYSTEM_ACTOR, ApprovalRule, Membership, effective_rule, raised
from bot.engine.decision_table import FAIL, SKIP, SUCCEED, ApplyOutcome, Move, Then
from bot.engine.decisions import Finished, Tick, iso, parse_iso
from bot.engine.events import EventData
from bot.engine.plan import Result
from bot.engine.ports import ActionSpecLike
from bot.engine.runstate import RunState, StepState
from bot.engine.scope import Scope
from bot.engine.stages import reached
from bot.engine.state import RUN_TERMINAL, STEP_FINAL, RunStatus, StepStatus, advance_run, advance_step
from bot.errors import RunbookBotError
from bot.runbook.model import Runbook, Step
from bot.runbook.templating import evaluate, render

S = StepStatus
R = RunStatus
MAX_GOTOS = 25
# how the approval text of a plan that raised its approvers is marked (``approvals.raised``)
RAISED_MARK = "MORE APPROVERS ("
ENGINE = SYSTEM_ACTOR  # the actor of events the engine itself causes


def held_until(s: StepState) -> str | None:
    """When a step a timed interlock holds is planned again by itself (None: it is not held)."""
    return s.next_check_at if s.blocked and s.blocked.get("recheck") else None


class Moves:
    """The run a conductor decides, and the moves its decisions end in."""

    def __init__(self, *, runbook: Runbook, specs: Mapping[str, ActionSpecLike],
                 policy: PolicyConfig, membership: Membership, state: RunState) -> None:
        self.runbook = runbook
        self.specs = specs
        self.policy = policy
        self.membership = membership
        self.state = state
        self._index = {s.id: i for i, s in enumerate(runbook.spec.steps)}
        self.scope = Scope(state, frozenset(s.id for s in runbook.spec.steps if s.foreach))
        self._began: set[str] = set()  # steps this conductor moved to applying

    # -- helpers ------------------------------------------------------------------------------

    def event(self, tick: Tick, data: EventData, now: datetime, *, actor: str = ENGINE) -> None:
        """Record an event (built by ``bot.engine.events``) on the tick."""
        tick.events.append(data.draft(actor=actor, ts=iso(now)))

    def set_step(self, tick: Tick, s: StepState, status: StepStatus) -> None:
        s.status = advance_step(s.status, status)
        tick.dirty.add(s.key)
        self.scope.touch(s.step_id)

    def set_run(self, tick: Tick, status: RunStatus) -> None:
        if self.state.status != status:
            self.state.status = advance_run(self.state.status, status)
            tick.header_dirty = True

    def step_of(self, s: StepState) -> Step:
        return self.runbook.spec.steps[self._index[s.step_id]]

    def spec_of(self, step: Step) -> ActionSpecLike | None:
        return self.specs[step.action] if step.action else None

    def _local(self, s: StepState) -> dict[str, Any]:
        return {"item": s.item} if s.index is not None else {}

    def rule_of(self, step: Step) -> ApprovalRule:
        """The approval rule of a step: runbook defaults, its own block, the destructive floor."""
        spec = self.spec_of(step)
        return effective_rule(runbook=self.runbook.spec.approvals, step=step.approval,
                              destructive=bool(spec and spec.destructive), policy=self.policy)

    def rule_for(self, s: StepState) -> ApprovalRule:
        """The approval rule of a step instance (for commands: who may approve, reject, abort):
        the step's rule, with the approvers its current plan adds (``approvals.raised``)."""
        return raised(self.rule_of(self.step_of(s)), s.plan)

    def current(self) -> StepState | None:
        """The first instance of the cursor's step that is not final; None when all are."""
        if self.state.cursor >= len(self.runbook.spec.steps):
            return None
        for s in self.state.instances(self.runbook.spec.steps[self.state.cursor].id):
            if s.status not in STEP_FINAL:
                return s
        return None

    def _advance_cursor(self, s: StepState) -> None:
        if all(i.status in STEP_FINAL for i in self.state.instances(s.step_id)):
            self.state.cursor = self._index[s.step_id] + 1

    # -- moves --------------------------------------------------------------------------------

    def _move(self, s: StepState, move: Move, record: EventData | None, now: datetime,
              tick: Tick) -> None:
        """Carry out ``move``: the new status, ``record`` (the event of the type the move names,
        its fields already set on ``s``), then what comes next."""
        if (record.type if record is not None else None) is not move.event:  # pragma: no cover
            raise AssertionError(f"{s.key}: {move} is not recorded by {record}")
        if s.status != move.status:
            self.set_step(tick, s, move.status)
        tick.dirty.add(s.key)
        if record is not None:
            self.event(tick, record, now)
            if record.type is ev.EventType.STEP_SUCCEEDED and not self.state.dry_run:
                for seen in reached(self.step_of(s).action, record.payload["result"], step=s.key,
                                    at=iso(now)):  # the stages of the recovery it shows
                    self.event(tick, seen, now)
        self._then(s, move.then, now, tick)

    def _then(self, s: StepState, then: Then, now: datetime, tick: Tick) -> None:
        if then is Then.ADVANCE:
            self._advance_cursor(s)
        elif then is Then.ON_FAILURE:
            self._after_failure(s, now, tick, f"step {s.key} failed: {s.error}")
        elif then is Then.APPLY:
            self.set_run(tick, R.RUNNING)
        elif then is Then.SLEEP:
            self.set_run(tick, R.WAITING)
        elif then in (Then.AWAIT_BREAK_GLASS, Then.AWAIT_RECHECK):
            s.approved = False  # approvals of this plan stand, but only break-glass lets it apply
            self.set_run(tick, R.AWAITING_APPROVAL)
        elif self._approved_already(s):  # Then.AWAIT_PEOPLE
            s.approved = True
        else:
            # an approval of an earlier plan (given before a retry re-planned the step) is
            # no approval of this one: nothing may carry it to the re-plan before apply
            s.approved = False
            self.set_run(tick, R.AWAITING_APPROVAL)

    def _approved_already(self, s: StepState) -> bool:
        rule = self.rule_for(s)
        valid = {v.by for v in s.approvals() if v.plan_hash == s.plan_hash}
        return rule.required and len(valid) >= rule.min_approvers

    # -- what each move records (and sets on the step) ------------------------------------------

    def _skipping(self, s: StepState, now: datetime, reason: str) -> EventData:
        s.message, s.finished_at = reason, iso(now)
        return ev.step_skipped(s.key, reason=reason)

    def _failing(self, s: StepState, now: datetime, error: str, *,
                 calls: list[dict[str, Any]] | None = None) -> EventData:
        s.error, s.finished_at, s.next_check_at = error, iso(now), None
        return ev.step_failed(s.key, error=error, calls=calls)

    def _applying(self, s: StepState, now: datetime) -> EventData:
        self._began.add(s.key)
        s.applying_since = s.applying_since or iso(now)
        return ev.step_applying(
            s.key, attempt=s.attempt + 1, plan_hash=s.plan_hash, overrides=s.overrides,
            approvers=[v.by for v in s.approvals() if v.plan_hash == s.plan_hash])

    def _hold_again(self, s: StepState, now: datetime, seconds: float) -> None:
        """When a step held by a timed interlock is planned again: never sooner than
        ``policy.hold_recheck_seconds``."""
        self._check_again(s, now, max(seconds, self.policy.hold_recheck_seconds))

    def _check_again(self, s: StepState, now: datetime, seconds: float) -> None:
        """When a step that waits is looked at again."""
        s.next_check_at = iso(now + timedelta(seconds=max(0.0, seconds)))

    def _asking(self, s: StepState, step: Step, now: datetime, *,
                confirm: bool = False, keep_expiry: bool = False) -> EventData:
        """Ask people for the step's plan: its approvers, or a confirmation (``confirm``);
        ``keep_expiry``: a hold that changed while held still expires when it first would."""
        rule = raised(self.rule_of(step), s.plan)
        s.needs_approval = rule.required
        s.needs_confirmation = confirm and not rule.required
        s.approval_reason = rule.reason or "a person confirms this checklist item"
        s.min_approvers, s.groups, s.allow_self = rule.min_approvers, list(rule.groups), rule.allow_self
        s.requested_at = iso(now)
        if not (keep_expiry and s.expires_at):
            s.expires_at = iso(now + timedelta(seconds=rule.expires_after)) if rule.required else None
        desc = step.approval.description if step.approval else None
        if desc:
            try:
                s.approval_text = " ".join(render(desc, self.scope.context(**self._local(s))).split())
            except RunbookBotError:
                s.approval_text = " ".join(desc.split())
        s.approval_text = s.approval_text.split(RAISED_MARK)[0].strip()  # a previous plan's raise
        if rule.raised_by:  # every front-end shows the text: the people asked read why they are more
            s.approval_text = (f"{s.approval_text} {RAISED_MARK}{rule.min_approvers} in all, "
                               f"{rule.raised_by} more than this step otherwise needs): "
                               f"{rule.raised_why}").strip()
        valid = [v for v in s.approvals() if v.plan_hash == s.plan_hash]
        return ev.approval_requested(
            s.key, confirmation=s.needs_confirmation, plan_hash=s.plan_hash,
            min_approvers=rule.min_approvers, groups=list(rule.groups), expires_at=s.expires_at,
            reason=s.approval_reason, already=[v.by for v in valid],
            raised_by=rule.raised_by, raised_why=rule.raised_why)

    def _judge_done(self, s: StepState, step: Step, result: Result, now: datetime,
                    tick: Tick) -> tuple[ApplyOutcome, EventData]:
        """A step that is done succeeds, unless its outputs cannot be evaluated."""
        data = dict(result.data)
        outputs: dict[str, Any] = {}
        try:
            ctx = self.scope.context(result=data, **self._local(s))
            for name, expr in step.outputs.items():
                outputs[name] = evaluate(expr, ctx)
        except RunbookBotError as e:
            return ApplyOutcome.OUTPUTS_FAILED, self._failing(
                s, now, f"outputs could not be evaluated: {e}")
        s.result, s.outputs, s.message = data, outputs, result.message
        s.finished_at, s.next_check_at, s.error = iso(now), None, ""
        if step.action == "notify" and result.message:
            tick.messages.append(("[dry run] " if self.state.dry_run else "") + result.message)
        compensation = data.get("compensation")
        if isinstance(compensation, str) and compensation not in self.state.compensations:
            self.state.compensations.append(compensation)
            tick.header_dirty = True
        return ApplyOutcome.DONE, ev.step_succeeded(s.key, result=data, outputs=outputs,
                                                    message=result.message)

    # -- the common moves ---------------------------------------------------------------------

    def _skip(self, s: StepState, now: datetime, tick: Tick, reason: str) -> None:
        self._move(s, SKIP, self._skipping(s, now, reason), now, tick)

    def _fail(self, s: StepState, now: datetime, tick: Tick, error: str) -> None:
        self._move(s, FAIL, self._failing(s, now, error), now, tick)

    def _succeed(self, s: StepState, step: Step, now: datetime, tick: Tick, result: Result) -> None:
        outcome, record = self._judge_done(s, step, result, now, tick)
        self._move(s, SUCCEED if outcome is ApplyOutcome.DONE else FAIL, record, now, tick)

    def _expire(self, s: StepState, now: datetime, tick: Tick) -> None:
        s.finished_at = iso(now)
        self.set_step(tick, s, S.EXPIRED)
        self.event(tick, ev.approval_expired(s.key, expires_at=s.expires_at), now)
        self.finish(now, tick, R.FAILED, f"approval for {s.key} expired at {s.expires_at}; "
                                         f"{self.state.nothing_applied(s.key)}")

    def passed_over(self, s: StepState, tick: Tick) -> bool:
        """Whether the run goes on past ``s``, rejected: only under ``on_failure: continue`` (the
        runbook can do without the step), as after its failure; the cursor then moves on."""
        if self.step_of(s).on_failure != "continue":
            return False
        self._advance_cursor(s)
        self.set_run(tick, R.RUNNING)
        return True

    def _after_failure(self, s: StepState, now: datetime, tick: Tick, outcome: str) -> None:
        step = self.step_of(s)
        policy = step.on_failure
        if policy == "continue":
            self._advance_cursor(s)
            return
        if policy == "abort" or self.state.gotos >= MAX_GOTOS:
            if policy != "abort":
                outcome += f" (goto limit of {MAX_GOTOS} reached)"
            self.finish(now, tick, R.FAILED, outcome)
            return
        assert not isinstance(policy, str)
        target = policy.goto
        self.state.gotos += 1
        start = self._index[target]
        for key in [k for k, v in self.state.steps.items() if self._index[v.step_id] >= start]:
            del self.state.steps[key]
            tick.dirty.add(key)
        self.state.cursor = start
        self.scope.reset()
        self.event(tick, ev.step_goto(s.key, target=target), now)

    # -- the end of the run ---------------------------------------------------------------------

    def _finish_last(self, now: datetime, tick: Tick) -> Finished:
        """Every step is done: the runbook's outcome rules say how the run ends (a dry run
        applied nothing, so it has nothing for them to judge)."""
        rules = () if self.state.dry_run else self.runbook.spec.outcome
        v = run_outcome.decide(rules, self.scope.context())
        return self.finish(now, tick, v.status, v.reason, rule=v.rule, when=v.when)

    def finish(self, now: datetime, tick: Tick, status: RunStatus, outcome: str, *,
               rule: int | None = None, when: str = "") -> Finished:
        st = self.state
        self.set_run(tick, status)
        st.finished_at, st.next_check_at, st.outcome = iso(now), None, outcome
        started = parse_iso(st.started_at or st.created_at)
        self.event(tick, ev.run_finished(status=str(status), outcome=outcome,
                                         compensations=list(st.compensations),
                                         duration_seconds=round((now - started).total_seconds(), 3),
                                         rule=rule, when=when),
                   now)
        return Finished(status)

    def next_check(self) -> datetime | None:
        """When the run needs attention without anyone acting: a wait, or an approval expiry."""
        s = self.current()
        if s is None or self.state.status in RUN_TERMINAL:
            return None
        if s.status == S.WAITING and s.next_check_at:
            return parse_iso(s.next_check_at)
        if s.status == S.AWAITING_APPROVAL:
            times = [parse_iso(t) for t in (s.expires_at, held_until(s)) if t]
            return min(times) if times and not s.approved else None
        return None
