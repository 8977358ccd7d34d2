"""The conductor: given a run's state and what just happened, decide what happens next.

It is pure: no I/O, no clock of its own (``now`` is passed in), no SDK. The runner asks it for a
``Decision`` (plan this step, apply that plan, sleep until, wait for a person, done), performs the
I/O, and hands the outcome back (``planned``, ``applied``). Those classify what happened into a
named outcome and carry out the move the decision table (``decision_table.py``) gives for the
step's status and that outcome; the moves, their audit events and the end of a run are in
``moves.py``. Every status change goes through the transition table, and every change worth
auditing is appended to the ``Tick`` as an audit event (built by ``events.py``) that the runner
stores atomically with the new state.

The order for one step (docs/runbook-language.md): ``when``; ``foreach``; plan (read-only) and
guards; approval if needed, bound to the plan's hash; just before apply, plan again and re-check
the guards (a changed hash voids the approvals); mark *applying* durably; apply; poll while the
action reports not done or ``wait_until`` is false; outputs. Interlocks are raised by the actions
themselves, at plan and at apply time; a refusal blocks the step until break-glass or abort.

Commands from people (approve, reject, confirm, break-glass, retry, abort) are applied by
``apply_commands``, through the small API it declares (``Commandable``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from bot.engine import events as ev
from bot.engine.approvals import bind_break_glass
from bot.engine.decision_table import ApplyOutcome, Outcome, PlanOutcome, move_for
from bot.engine.decisions import (
    ApplyStep,
    AwaitPeople,
    Decision,
    Finished,
    PlanStep,
    Sleep,
    Tick,
    iso,
    parse_iso,
)
from bot.engine.events import EventData
from bot.engine.moves import Moves, held_until
from bot.engine.plan import ApiCall, Plan, Result, narrowed
from bot.engine.runstate import StepState
from bot.engine.state import RUN_TERMINAL, RunStatus, StepStatus
from bot.errors import ExpressionError, InterlockBlocked, RetryableError, RunbookBotError
from bot.runbook.model import MAX_BATCH, Retries, Step
from bot.runbook.params import written_params
from bot.runbook.templating import evaluate, render, render_known, render_value

# A step that declares no retries still outlives a burst of transient errors (a 429 or 5xx from
# the API server, a conflict, a timeout): every apply re-reads before it writes, so trying again
# is safe, and failing a recovery half-way for one throttled request is not what anyone expects.
TRANSIENT_RETRIES = Retries(count=3, backoff=10.0, factor=2.0, max_backoff=60.0)

S = StepStatus
R = RunStatus
P = PlanOutcome
A = ApplyOutcome
_UNRENDERED = re.compile(r"\{\{.*?\}\}")


def _plain_title(step: Step) -> str:
    """A step's title with its expressions elided, for a step whose values never existed."""
    return _UNRENDERED.sub("…", step.title)


def _batches(items: list[Any], size: Any) -> list[Any]:
    """``items`` cut into lists of at most ``size`` (a step's ``batch``), in order."""
    if isinstance(size, bool) or not isinstance(size, int | float) or int(size) != size \
            or not 1 <= size <= MAX_BATCH:
        raise ExpressionError(f"batch must give a whole number from 1 to {MAX_BATCH}, got {size!r}")
    n = int(size)
    return [items[i:i + n] for i in range(0, len(items), n)]


class Conductor(Moves):
    """Decides one run. Holds the parsed runbook and the policy; keeps no state between calls."""

    # -- deciding -----------------------------------------------------------------------------

    def decide(self, now: datetime, tick: Tick) -> Decision:
        """The next thing to do. Pure transitions (skips, manual steps) are made on the way."""
        st = self.state
        while True:
            if st.status in RUN_TERMINAL:
                return Finished(st.status)
            if st.status == R.PENDING:
                st.started_at = iso(now)
                self.scope.run["started_at"] = st.started_at
                self.set_run(tick, R.RUNNING)
            s = self.current()
            if s is None:
                if st.cursor >= len(self.runbook.spec.steps):
                    return self._finish_last(now, tick)
                self._enter(st.cursor, now, tick)
                continue
            decision = self._decide_step(s, now, tick)
            if decision is not None:
                return decision

    def _enter(self, index: int, now: datetime, tick: Tick) -> None:
        """Create the instances of the step at ``index``, skipping it if ``when`` is false."""
        step = self.runbook.spec.steps[index]
        position = index * 10_000
        spec = self.spec_of(step)
        destructive = bool(spec and spec.destructive)
        base = StepState(key=step.id, step_id=step.id, position=position, action=step.action,
                         destructive=destructive)
        self.state.steps[base.key] = base
        tick.dirty.add(base.key)
        self.scope.touch(step.id)
        try:
            ctx = self.scope.context()
            if step.when_expr is not None and not evaluate(step.when_expr, ctx):
                base.title = self._title(step, ctx)
                self._skip(base, now, tick, f"when is false: {step.when_expr}")
                return
            items: list[Any] | None = None
            if step.foreach is not None:
                value = evaluate(step.foreach, ctx)
                if value is None:
                    value = []
                if not isinstance(value, list | tuple):
                    raise ExpressionError(f"foreach must give a list, got {type(value).__name__}: "
                                          f"{step.foreach}")
                items = list(value)
                if step.batch is not None:
                    size = step.batch if isinstance(step.batch, int) else evaluate(step.batch, ctx)
                    items = _batches(items, size)
        except RunbookBotError as e:
            base.title = _plain_title(step)
            self._fail(base, now, tick, f"step {step.id!r}: {e}")
            return
        if items is None:
            base.title = self._title(step, ctx)
            return
        if not items:
            base.title = _plain_title(step)
            self._skip(base, now, tick, "foreach gave an empty list: nothing to do")
            return
        del self.state.steps[base.key]
        for i, item in enumerate(items):
            s = StepState(key=f"{step.id}[{i}]", step_id=step.id, position=position + 1 + i,
                          action=step.action, destructive=destructive, index=i, item=item)
            s.title = self._title(step, self.scope.context(item=item))
            self.state.steps[s.key] = s
            tick.dirty.add(s.key)
        tick.dirty.add(base.key)  # the placeholder row is removed

    def _title(self, step: Step, ctx: Mapping[str, Any]) -> str:
        """The title with params as written (``6m``, not ``360.0``); what cannot be known yet
        (``{{ item }}`` of a foreach step that did not run) reads ``…``."""
        written = {**ctx, "params": written_params(self.runbook, ctx.get("params") or {})}
        return render_known(step.title, written)[:150]

    def _decide_step(self, s: StepState, now: datetime, tick: Tick) -> Decision | None:
        step = self.step_of(s)
        if s.status == S.PENDING:
            if s.started_at is None:
                s.started_at = iso(now)
            if step.manual is not None:
                return self._manual(s, step, now, tick)
            return self._plan_decision(s, step, now, tick, recheck=False)
        if s.status == S.PLANNING:  # after break-glass or a retry: plan again
            return self._plan_decision(s, step, now, tick, recheck=False)
        if self._timed_out(s, step, now, tick):
            return None
        if s.status == S.AWAITING_APPROVAL:
            if s.approved:
                if s.needs_confirmation and step.manual is not None:
                    self._succeed(s, step, now, tick, Result(data={"confirmed": True,
                                                                   "by": self._confirmer(s)}))
                    return None
                return self._plan_decision(s, step, now, tick, recheck=True)
            until = parse_iso(s.expires_at) if s.expires_at else None
            if until is not None and now >= until:
                self._expire(s, now, tick)
                return None
            held = held_until(s)
            if held is not None and now >= parse_iso(held):  # a timed hold: plan it again
                s.next_check_at = None
                self.set_step(tick, s, S.PLANNING)
                return self._plan_decision(s, step, now, tick, recheck=False)
            self.set_run(tick, R.AWAITING_APPROVAL)
            return AwaitPeople(s.key, until)
        if s.status == S.APPLYING and s.key not in self._began:
            # interrupted mid-apply (a worker died between its write and its record): apply
            # again, idempotently, and say so: an already-done answer is the dead worker's write
            self._began.add(s.key)
            self.event(tick, ev.step_applying(
                s.key, attempt=s.attempt + 1, plan_hash=s.plan_hash, resumed=True,
                overrides=s.overrides,
                approvers=[v.by for v in s.approvals() if v.plan_hash == s.plan_hash]), now)
            return self._apply_decision(s, step, poll=False)
        if s.status == S.APPLYING:
            return self._apply_decision(s, step, poll=False)
        if s.status == S.WAITING:
            due = parse_iso(s.next_check_at) if s.next_check_at else now
            if now < due:
                self.set_run(tick, R.WAITING)
                return Sleep(due)
            self.set_run(tick, R.RUNNING)
            if s.plan is None:  # a retry of a failed plan
                self.set_step(tick, s, S.PLANNING)
                return self._plan_decision(s, step, now, tick, recheck=False)
            self.set_step(tick, s, S.APPLYING)
            return self._apply_decision(s, step, poll=True)
        raise AssertionError(f"no decision for step {s.key} in {s.status}")  # pragma: no cover

    def _timed_out(self, s: StepState, step: Step, now: datetime, tick: Tick) -> bool:
        since = s.applying_since
        if step.timeout is None or since is None or s.status == S.AWAITING_APPROVAL:
            return False
        if now - parse_iso(since) < timedelta(seconds=step.timeout):
            return False
        self._fail(s, now, tick, f"timed out after {step.timeout:.0f}s (the step's timeout)")
        return True

    def _confirmer(self, s: StepState) -> str:
        return next((v.by for v in reversed(s.votes) if v.kind == "confirm"), self.state.requester)

    def _manual(self, s: StepState, step: Step, now: datetime, tick: Tick) -> Decision | None:
        try:
            text = render(step.manual or "", self.scope.context(**self._local(s)))
        except RunbookBotError as e:
            self._fail(s, now, tick, f"step {s.step_id!r}: {e}")
            return None
        self.set_step(tick, s, S.PLANNING)
        s.message = text
        if self.state.dry_run:
            self._skip(s, now, tick, "dry run: a person would be asked to do this and confirm")
            return None
        s.needs_confirmation = True
        s.requested_at = iso(now)
        self.set_step(tick, s, S.AWAITING_APPROVAL)
        self.event(tick, ev.manual_confirmation_requested(s.key, text=text), now)
        self.set_run(tick, R.AWAITING_APPROVAL)
        return AwaitPeople(s.key, None)

    def _plan_decision(self, s: StepState, step: Step, now: datetime, tick: Tick, *,
                       recheck: bool) -> Decision | None:
        assert step.action is not None
        try:
            params = render_value(step.with_, self.scope.context(**self._local(s)))
        except RunbookBotError as e:
            self._fail(s, now, tick, f"step {s.step_id!r}: cannot render 'with': {e}")
            return None
        if s.status == S.PENDING:
            self.set_step(tick, s, S.PLANNING)
        self.set_run(tick, R.RUNNING)
        return PlanStep(key=s.key, action=step.action, params=params,
                        overrides=frozenset(s.overrides), recheck=recheck)

    def _apply_decision(self, s: StepState, step: Step, *, poll: bool) -> Decision:
        assert step.action is not None and s.plan is not None
        confirmed = self._confirmer(s) if s.needs_confirmation else None
        return ApplyStep(key=s.key, action=step.action, plan=Plan.from_dict(s.plan),
                         overrides=frozenset(s.overrides), confirmed_by=confirmed, poll=poll)

    # -- outcomes of I/O ----------------------------------------------------------------------

    def context_resolved(self, found: Mapping[str, Any], now: datetime, tick: Tick, *,
                         calls: Sequence[ApiCall] = ()) -> None:
        """Put on record what the run acts on and as whom (the catalog's ``resolve_context``),
        once per cluster, with the digest of the runbook text the run follows."""
        cluster = str(found.get("cluster", ""))
        if cluster in self.state.contexts:
            return
        self.state.contexts.append(cluster)
        tick.header_dirty = True
        self.event(tick, ev.run_context(
            cluster=cluster, region=str(found.get("region", "")),
            kube_context=str(found.get("kube_context", "")),
            api_server=str(found.get("api_server", "")), account=str(found.get("account", "")),
            caller_arn=str(found.get("caller_arn", "")), writes_as=found.get("writes_as") or {},
            bot_version=str(found.get("bot_version", "")),
            runbook_digest="sha256:" + hashlib.sha256(self.state.runbook_text.encode()).hexdigest(),
            problems=[str(p) for p in found.get("problems") or ()],
            calls=[asdict(c) for c in calls]), now)

    def planned(self, key: str, outcome: Plan | BaseException, now: datetime, tick: Tick, *,
                recheck: bool, calls: Sequence[ApiCall] = ()) -> None:
        """Fold the result of ``plan()`` into the step: guards, approval, or ready to apply.

        The result is classified into a ``PlanOutcome``; the decision table says what follows.
        ``calls`` are the API calls the plan made; they are audited with a failure or refusal.
        """
        s = self.state.steps[key]
        step = self.step_of(s)
        verdict: Outcome
        record: EventData | None
        if isinstance(outcome, BaseException):
            verdict, record = self._refused(s, step, now, tick, outcome, phase="plan", calls=calls)
        else:
            s.blocked = None  # a hold re-planned by itself has cleared
            verdict, record = self._judge_plan(s, step, outcome, now, tick, recheck=recheck)
        self._move(s, move_for(s.status, verdict), record, now, tick)

    def _judge_plan(self, s: StepState, step: Step, plan: Plan, now: datetime, tick: Tick, *,
                    recheck: bool) -> tuple[PlanOutcome, EventData]:
        new_hash = plan.hash()
        old_hash = s.plan_hash
        old_plan = s.plan
        s.plan, s.plan_hash = plan.to_dict(), new_hash
        tick.dirty.add(s.key)
        # a batch that only lost items whose facts changed: what remains was approved as is
        dropped = narrowed(old_plan, plan) if recheck and new_hash != old_hash and s.approved \
            else None
        if not recheck or new_hash != old_hash:
            self.event(tick, ev.step_planned(
                s.key, plan=s.plan, plan_hash=new_hash, summary=plan.summary,
                narrowed_from=old_hash if dropped is not None else None, dropped=dropped), now)
        failed = self._guards(s, step, plan, now, tick)
        if failed is not None and self.state.dry_run:
            return P.GUARD_FAILED_DRY_RUN, self._skipping(
                s, now, f"dry run: a guard would block this step: {failed}")
        if failed is not None:
            return P.GUARD_FAILED, self._failing(s, now, f"guard failed: {failed}")
        if self.state.dry_run:
            return self._judge_dry_plan(s, step, plan, now)
        if recheck:
            return self._judge_recheck(s, step, now, tick, old_hash=old_hash,
                                       narrowed_only=dropped is not None)
        return self._judge_first_plan(s, step, now, tick, old_plan=old_plan, old_hash=old_hash)

    def _judge_dry_plan(self, s: StepState, step: Step, plan: Plan,
                        now: datetime) -> tuple[PlanOutcome, EventData]:
        spec = self.spec_of(step)
        assert spec is not None
        if spec.destructive or not plan.is_noop:
            rule = self.rule_for(s)
            who = (f"; applying would need {rule.min_approvers} approver(s) from "
                   f"{', '.join(rule.groups) or 'any group'}" if rule.required else "")
            return P.DRY_RUN_PLANNED, self._skipping(s, now, f"dry run: planned only{who}")
        if step.action == "manual.confirm":
            return P.DRY_RUN_CONFIRM, self._skipping(
                s, now, "dry run: a person would be asked to confirm this")
        return P.DRY_RUN_READ, self._applying(s, now)  # a read: later steps plan on what it finds

    def _judge_recheck(self, s: StepState, step: Step, now: datetime, tick: Tick, *,
                       old_hash: str | None, narrowed_only: bool) -> tuple[PlanOutcome, EventData]:
        """The re-plan just before apply: the approved plan holds, lost only items, or changed."""
        if narrowed_only:
            for v in s.votes:
                if v.plan_hash == old_hash and v.kind in ("approve", "break_glass"):
                    v.plan_hash = s.plan_hash
            return P.NARROWED, self._applying(s, now)
        # the approved plan holds, and so do its approvals (a stale mark never carries a plan)
        if s.plan_hash == old_hash and (self._approved_already(s)
                                        or not self.rule_for(s).required):
            return P.UNCHANGED, self._applying(s, now)
        voided = [v.by for v in s.approvals() if v.plan_hash == old_hash]
        s.approved = False
        self.event(tick, ev.approval_invalidated(
            s.key, old_hash=old_hash, new_hash=s.plan_hash or "", voided=voided,
            reason="the plan changed between approval and apply"), now)
        return P.CHANGED, self._asking(s, step, now)

    def _judge_first_plan(self, s: StepState, step: Step, now: datetime, tick: Tick, *,
                          old_plan: dict[str, Any] | None,
                          old_hash: str | None) -> tuple[PlanOutcome, EventData]:
        rule = self.rule_for(s)  # the plan may have raised the approvers the step needs
        confirm = step.action == "manual.confirm"
        if not (rule.required or confirm):
            return P.READY, self._applying(s, now)
        # break-glass votes approve this plan if it is the one their people were shown
        if voided := bind_break_glass(s, shown=old_plan, shown_hash=old_hash):
            self.event(tick, ev.approval_invalidated(
                s.key, old_hash=old_hash, new_hash=s.plan_hash or "", voided=voided,
                reason="the plan made after break-glass is not the one its people were shown: "
                       "the override stands, their approval does not"), now)
        record = self._asking(s, step, now, confirm=confirm)
        return (P.NEEDS_CONFIRMATION if s.needs_confirmation else P.NEEDS_APPROVAL), record

    def _guards(self, s: StepState, step: Step, plan: Plan, now: datetime,
                tick: Tick) -> str | None:
        """Check the step's guards in order: the message of the first that fails, else None."""
        if not step.guards:
            return None
        ctx = self.scope.context(plan=plan.to_dict(), **self._local(s))
        s.guards = []
        for guard in step.guards:
            try:
                ok = bool(evaluate(guard.expr, ctx))
                message = "" if ok else " ".join(render(guard.message, ctx).split())
            except RunbookBotError as e:
                ok, message = False, f"the guard could not be evaluated: {e}"
            s.guards.append({"expr": guard.expr, "ok": ok, "message": message})
            self.event(tick, ev.guard_checked(s.key, expr=guard.expr, ok=ok, message=message), now)
            if not ok:
                return message
        return None

    def applied(self, key: str, outcome: Result | BaseException, now: datetime, tick: Tick, *,
                overridden: list[str], poll: bool, calls: Sequence[ApiCall] = ()) -> None:
        """Fold the result of ``apply()``: done, not done yet, wait_until false, or an error.

        The result is classified into an ``ApplyOutcome``; the decision table says what follows.
        """
        s = self.state.steps[key]
        step = self.step_of(s)
        tick.dirty.add(key)
        for rule in overridden:
            self.event(tick, ev.interlock_overridden(
                s.key, rule=rule, approvers=[v.by for v in s.votes if v.kind == "break_glass"],
                reasons=[v.reason for v in s.votes if v.kind == "break_glass"]), now)
        verdict: Outcome
        record: EventData | None
        if isinstance(outcome, BaseException):
            verdict, record = self._refused(s, step, now, tick, outcome, phase="apply", calls=calls)
        else:
            self._record_result(s, outcome, now, tick, poll=poll)
            verdict, record = self._judge_result(s, step, outcome, now, tick)
        self._move(s, move_for(s.status, verdict), record, now, tick)

    def _record_result(self, s: StepState, result: Result, now: datetime, tick: Tick, *,
                       poll: bool) -> None:
        done_calls = [asdict(c) for c in result.calls]
        s.polls += 1 if poll else 0
        s.progress = result.progress or s.progress
        if poll:
            self.event(tick, ev.step_polled(s.key, calls=done_calls, progress=result.progress,
                                            done=result.done), now)
        else:
            self.event(tick, ev.step_applied(s.key, calls=done_calls, message=result.message,
                                             already_done=result.already_done, done=result.done),
                       now)

    def _judge_result(self, s: StepState, step: Step, result: Result, now: datetime,
                      tick: Tick) -> tuple[ApplyOutcome, EventData | None]:
        if not result.done:
            if self.state.dry_run:
                return A.NOT_DONE_DRY_RUN, self._skipping(s, now, "dry run: the step would wait here")
            if result.data:  # where a long apply stands; its next poll is handed it back
                s.result = dict(result.data)
            self._check_again(s, now, result.retry_after)
            return A.NOT_DONE, None
        held = self._judge_wait_until(s, step, result, now)
        if held is not None:
            return held
        return self._judge_done(s, step, result, now, tick)

    def _judge_wait_until(self, s: StepState, step: Step, result: Result,
                          now: datetime) -> tuple[ApplyOutcome, EventData | None] | None:
        """None when the step has no ``wait_until`` or it holds; else why the step is held."""
        wait = step.wait_until
        if wait is None:
            return None
        try:
            ok = bool(evaluate(wait.expr, self.scope.context(result=dict(result.data),
                                                             **self._local(s))))
        except RunbookBotError as e:
            return A.WAIT_UNTIL_ERROR, self._failing(s, now, f"wait_until could not be evaluated: {e}")
        if ok:
            return None
        if self.state.dry_run:
            return A.WAIT_UNTIL_DRY_RUN, self._skipping(
                s, now, "dry run: the step would wait until its condition holds")
        s.poll_started_at = s.poll_started_at or iso(now)
        waited = (now - parse_iso(s.poll_started_at)).total_seconds()
        if waited >= wait.timeout:
            return A.WAIT_UNTIL_TIMED_OUT, self._failing(
                s, now, f"timed out after {wait.timeout:.0f}s waiting until {wait.expr}")
        s.result = dict(result.data)
        s.progress = result.progress or (f"waiting until {wait.expr} "
                                         f"({waited:.0f}s of {wait.timeout:.0f}s)")
        self._check_again(s, now, wait.interval)
        return A.WAIT_UNTIL_FALSE, None

    def _refused(self, s: StepState, step: Step, now: datetime, tick: Tick, e: BaseException, *,
                 phase: str, calls: Sequence[ApiCall]) -> tuple[Outcome, EventData | None]:
        """``plan()`` or ``apply()`` raised: an interlock blocks the step, anything else is an error."""
        kind: type[PlanOutcome] | type[ApplyOutcome] = P if phase == "plan" else A
        made = [asdict(c) for c in calls]
        if not isinstance(e, InterlockBlocked):
            s.blocked = None
            return self._error(s, step, now, e, kind=kind, phase=phase, calls=made)
        timed = e.recheck_after is not None and phase == "plan" and not self.state.dry_run
        if timed and self._same_hold(s, e):
            # the same hold found again: its first refusal is on record (interlock.blocked,
            # approval.requested) and its request's expiry stands; only the next check moves
            s.blocked = {**(s.blocked or {}), "checked_at": iso(now)}
            self._hold_again(s, now, e.recheck_after or 0.0)
            return P.STILL_HELD, None
        was_held = bool(s.blocked and s.blocked.get("recheck")) and s.status == S.PLANNING
        self._blocked(s, now, tick, e, phase=phase, calls=made)
        if timed and s.blocked is not None:
            s.blocked.update(recheck=max(e.recheck_after or 0.0, self.policy.hold_recheck_seconds),
                             until=e.until, checked_at=iso(now))
            self._hold_again(s, now, e.recheck_after or 0.0)
            # a hold whose facts changed while held is recorded anew, but expires as it would
            return P.HELD, self._asking(s, self.step_of(s), now, keep_expiry=was_held)
        if self.state.dry_run:
            return kind.BLOCKED_DRY_RUN, self._skipping(
                s, now, f"dry run: interlock {e.rule} would refuse: {e.message}")
        # a hold that hardened into a refusal (the node came back, the silence ran past the
        # ambiguity window) waits for a person until the hold's own expiry, not a fresh one
        return kind.BLOCKED, self._asking(s, self.step_of(s), now, keep_expiry=was_held)

    def _same_hold(self, s: StepState, e: InterlockBlocked) -> bool:
        """Whether ``e`` is the hold ``s`` is already held by: the same rule, re-planned by
        itself, refusing the same plan (the same facts, hash for hash; none shown both times)."""
        held = s.blocked
        if held is None or not held.get("recheck") or held.get("rule") != e.rule \
                or s.status != S.PLANNING:
            return False
        shown = Plan.from_dict(dict(e.plan)).hash() if e.plan is not None else None
        return shown == (s.plan_hash if held.get("shown") else None)

    def _blocked(self, s: StepState, now: datetime, tick: Tick, e: InterlockBlocked, *,
                 phase: str, calls: list[dict[str, Any]]) -> None:
        shown = dict(e.plan) if e.plan is not None and phase == "plan" and not self.state.dry_run \
            else None
        if shown is not None:  # the refused plan is what the people asked read, raise and all
            s.plan, s.plan_hash = shown, Plan.from_dict(shown).hash()
            tick.dirty.add(s.key)
        self.event(tick, ev.interlock_blocked(s.key, rule=e.rule, message=e.message, phase=phase,
                                              calls=calls, plan=shown,
                                              plan_hash=s.plan_hash if shown else None), now)
        if self.state.dry_run:
            return
        s.blocked = {"rule": e.rule, "message": e.message}
        if shown is not None and e.recheck_after is not None:
            s.blocked["shown"] = True  # the refused plan is the step's: a recheck compares it
        if e.count is not None:
            s.blocked["count"] = e.count
        s.votes = [v for v in s.votes if v.kind != "break_glass"]

    def _error(self, s: StepState, step: Step, now: datetime, e: BaseException, *,
               kind: type[PlanOutcome] | type[ApplyOutcome], phase: str,
               calls: list[dict[str, Any]]) -> tuple[Outcome, EventData]:
        text = str(e) if isinstance(e, RunbookBotError) else f"{type(e).__name__}: {e}"
        retries = step.retries if step.retries is not None else TRANSIENT_RETRIES
        s.attempt += 1  # failed tries so far
        if isinstance(e, RetryableError) and retries is not None and s.attempt <= retries.count \
                and not self.state.dry_run:
            delay = min(retries.backoff * retries.factor ** (s.attempt - 1), retries.max_backoff)
            if e.retry_after:
                delay = max(delay, e.retry_after)
            s.error = text
            if phase == "plan":
                s.plan = None
            self._check_again(s, now, delay)
            return kind.RETRYING, ev.step_retrying(s.key, phase=phase, error=text,
                                                   attempt=s.attempt, delay=delay, calls=calls)
        return kind.ERROR, self._failing(s, now, f"{phase} failed: {text}", calls=calls)
