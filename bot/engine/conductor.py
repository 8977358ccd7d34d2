"""The conductor: given a run's state and what just happened, decide what happens next.

It is pure: no I/O, no clock of its own (``now`` is passed in), no SDK. The runner asks it for a
``Decision`` (plan this step, apply that plan, sleep until, wait for a person, done), performs the
I/O, and hands the outcome back (``planned``, ``applied``). Every status change goes through the
transition table, and every change worth auditing is appended to the ``Tick`` as an audit event
(built by ``events.py``) that the runner stores atomically with the new state.

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

from bot.config import PolicyConfig
from bot.engine import events as ev
from bot.engine import outcome as run_outcome
from bot.engine.approvals import (
    SYSTEM_ACTOR,
    ApprovalRule,
    Membership,
    bind_break_glass,
    effective_rule,
    raised,
)
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
from bot.engine.plan import ApiCall, Plan, Result, narrowed
from bot.engine.ports import ActionSpecLike
from bot.engine.runstate import RunState, StepState
from bot.engine.scope import Scope
from bot.engine.state import RUN_TERMINAL, STEP_FINAL, RunStatus, StepStatus, advance_run, advance_step
from bot.errors import ExpressionError, InterlockBlocked, RetryableError, RunbookBotError
from bot.runbook.model import MAX_BATCH, Retries, Runbook, Step
from bot.runbook.params import written_params
from bot.runbook.templating import evaluate, render, render_known, render_value

# A step that declares no retries still outlives a burst of transient errors (a 429 or 5xx from
# the API server, a conflict, a timeout): every apply re-reads before it writes, so trying again
# is safe, and failing a recovery half-way for one throttled request is not what anyone expects.
TRANSIENT_RETRIES = Retries(count=3, backoff=10.0, factor=2.0, max_backoff=60.0)

S = StepStatus
R = RunStatus
MAX_GOTOS = 25
_UNRENDERED = re.compile(r"\{\{.*?\}\}")


# how the approval text of a plan that raised its approvers is marked (``approvals.raised``)
RAISED_MARK = "MORE APPROVERS ("


def _plain_title(step: Step) -> str:
    """A step's title with its expressions elided, for a step whose values never existed."""
    return _UNRENDERED.sub("…", step.title)
ENGINE = SYSTEM_ACTOR  # the actor of events the engine itself causes


def _batches(items: list[Any], size: Any) -> list[Any]:
    """``items`` cut into lists of at most ``size`` (a step's ``batch``), in order."""
    if isinstance(size, bool) or not isinstance(size, int | float) or int(size) != size \
            or not 1 <= size <= MAX_BATCH:
        raise ExpressionError(f"batch must give a whole number from 1 to {MAX_BATCH}, got {size!r}")
    n = int(size)
    return [items[i:i + n] for i in range(0, len(items), n)]


class Conductor:
    """Decides one run. Holds the parsed runbook and the policy; keeps no state between calls."""

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
            if step.when is not None and not evaluate(step.when, ctx):
                base.title = self._title(step, ctx)
                self._skip(base, now, tick, f"when is false: {step.when}")
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
            self.set_run(tick, R.AWAITING_APPROVAL)
            return AwaitPeople(s.key, until)
        if s.status == S.APPLYING and s.key not in self._began:
            # interrupted mid-apply (a worker died between its write and its record): apply
            # again, idempotently, and say so: an already-done answer is the dead worker's write
            self._began.add(s.key)
            self.event(tick, ev.step_applying(
                s.key, attempt=s.attempt + 1, plan_hash=s.plan_hash, resumed=True,
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
        """Put on record what the run acts on and as whom (``ContextResolver``), once per cluster,
        with the digest of the runbook text the run follows."""
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

        ``calls`` are the API calls the plan made; they are audited with a failure or refusal.
        """
        s = self.state.steps[key]
        step = self.step_of(s)
        spec = self.spec_of(step)
        assert spec is not None
        if isinstance(outcome, BaseException):
            self._refused(s, step, now, tick, outcome, phase="plan", calls=calls)
            return
        plan = outcome
        new_hash = plan.hash()
        old_hash = s.plan_hash
        old_plan = s.plan
        s.plan, s.plan_hash = plan.to_dict(), new_hash
        tick.dirty.add(key)
        # a batch that only lost items whose facts changed: what remains was approved as is
        dropped = narrowed(old_plan, plan) if recheck and new_hash != old_hash and s.approved \
            else None
        if not recheck or new_hash != old_hash:
            self.event(tick, ev.step_planned(
                s.key, plan=s.plan, plan_hash=new_hash, summary=plan.summary,
                narrowed_from=old_hash if dropped is not None else None, dropped=dropped), now)
        if not self._guards(s, step, plan, now, tick):
            return
        if self.state.dry_run:
            if spec.destructive or not plan.is_noop:
                rule = self.rule_for(s)
                who = (f"; applying would need {rule.min_approvers} approver(s) from "
                       f"{', '.join(rule.groups) or 'any group'}" if rule.required else "")
                self._skip(s, now, tick, f"dry run: planned only{who}")
                return
            if step.action == "manual.confirm":
                self._skip(s, now, tick, "dry run: a person would be asked to confirm this")
                return
            self._to_applying(s, now, tick)  # a read: later steps plan on what it finds
            return
        if recheck:
            if dropped is not None:
                for v in s.votes:
                    if v.plan_hash == old_hash and v.kind in ("approve", "break_glass"):
                        v.plan_hash = new_hash
                self._to_applying(s, now, tick)
                return
            if new_hash != old_hash:
                voided = [v.by for v in s.approvals() if v.plan_hash == old_hash]
                s.approved = False
                self.event(tick, ev.approval_invalidated(
                    s.key, old_hash=old_hash, new_hash=new_hash, voided=voided,
                    reason="the plan changed between approval and apply"), now)
                self._request_approval(s, step, now, tick)
                return
            self._to_applying(s, now, tick)
            return
        rule = self.rule_for(s)  # the plan may have raised the approvers the step needs
        confirm = step.action == "manual.confirm"
        if rule.required or confirm:
            # break-glass votes approve this plan if it is the one their people were shown
            if voided := bind_break_glass(s, shown=old_plan, shown_hash=old_hash):
                self.event(tick, ev.approval_invalidated(
                    s.key, old_hash=old_hash, new_hash=new_hash, voided=voided,
                    reason="the plan made after break-glass is not the one its people were shown: "
                           "the override stands, their approval does not"), now)
            self._request_approval(s, step, now, tick, confirm=confirm)
            return
        self._to_applying(s, now, tick)

    def rule_of(self, step: Step) -> ApprovalRule:
        """The approval rule of a step: runbook defaults, its own block, the destructive floor."""
        spec = self.spec_of(step)
        return effective_rule(runbook=self.runbook.spec.approvals, step=step.approval,
                              destructive=bool(spec and spec.destructive), policy=self.policy)

    def rule_for(self, s: StepState) -> ApprovalRule:
        """The approval rule of a step instance (for commands: who may approve, reject, abort):
        the step's rule, with the approvers its current plan adds (``approvals.raised``)."""
        return raised(self.rule_of(self.step_of(s)), s.plan)

    def _guards(self, s: StepState, step: Step, plan: Plan, now: datetime, tick: Tick) -> bool:
        if not step.guards:
            return True
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
                if self.state.dry_run:
                    self._skip(s, now, tick, f"dry run: a guard would block this step: {message}")
                else:
                    self._fail(s, now, tick, f"guard failed: {message}")
                return False
        return True

    def _request_approval(self, s: StepState, step: Step, now: datetime,
                          tick: Tick, *, confirm: bool = False) -> None:
        rule = raised(self.rule_of(step), s.plan)
        s.needs_approval = rule.required
        s.needs_confirmation = confirm and not rule.required
        s.approval_reason = rule.reason or "a person confirms this checklist item"
        s.min_approvers, s.groups, s.allow_self = rule.min_approvers, list(rule.groups), rule.allow_self
        s.requested_at = iso(now)
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
        if s.status != S.AWAITING_APPROVAL:
            self.set_step(tick, s, S.AWAITING_APPROVAL)
        tick.dirty.add(s.key)
        valid = [v for v in s.approvals() if v.plan_hash == s.plan_hash]
        self.event(tick, ev.approval_requested(
            s.key, confirmation=s.needs_confirmation, plan_hash=s.plan_hash,
            min_approvers=rule.min_approvers, groups=list(rule.groups), expires_at=s.expires_at,
            reason=s.approval_reason, already=[v.by for v in valid],
            raised_by=rule.raised_by, raised_why=rule.raised_why), now)
        if rule.required and len({v.by for v in valid}) >= rule.min_approvers:
            s.approved = True
            return
        self.set_run(tick, R.AWAITING_APPROVAL)

    def _to_applying(self, s: StepState, now: datetime, tick: Tick) -> None:
        self._began.add(s.key)
        s.applying_since = s.applying_since or iso(now)
        self.set_step(tick, s, S.APPLYING)
        self.set_run(tick, R.RUNNING)
        self.event(tick, ev.step_applying(
            s.key, attempt=s.attempt + 1, plan_hash=s.plan_hash,
            approvers=[v.by for v in s.approvals() if v.plan_hash == s.plan_hash]), now)

    def applied(self, key: str, outcome: Result | BaseException, now: datetime, tick: Tick, *,
                overridden: list[str], poll: bool, calls: Sequence[ApiCall] = ()) -> None:
        """Fold the result of ``apply()``: done, not done yet, wait_until false, or an error."""
        s = self.state.steps[key]
        step = self.step_of(s)
        tick.dirty.add(key)
        for rule in overridden:
            self.event(tick, ev.interlock_overridden(
                s.key, rule=rule, approvers=[v.by for v in s.votes if v.kind == "break_glass"],
                reasons=[v.reason for v in s.votes if v.kind == "break_glass"]), now)
        if isinstance(outcome, BaseException):
            self._refused(s, step, now, tick, outcome, phase="apply", calls=calls)
            return
        result = outcome
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
        if not result.done:
            if self.state.dry_run:
                self._skip(s, now, tick, "dry run: the step would wait here")
                return
            if result.data:  # where a long apply stands; its next poll is handed it back
                s.result = dict(result.data)
            self._wait(s, now, tick, result.retry_after)
            return
        if step.wait_until is not None:
            try:
                ok = bool(evaluate(step.wait_until.expr,
                                   self.scope.context(result=dict(result.data), **self._local(s))))
            except RunbookBotError as e:
                self._fail(s, now, tick, f"wait_until could not be evaluated: {e}")
                return
            if not ok:
                if self.state.dry_run:
                    self._skip(s, now, tick, "dry run: the step would wait until its condition holds")
                    return
                s.poll_started_at = s.poll_started_at or iso(now)
                waited = (now - parse_iso(s.poll_started_at)).total_seconds()
                if waited >= step.wait_until.timeout:
                    self._fail(s, now, tick, f"timed out after {step.wait_until.timeout:.0f}s "
                                             f"waiting until {step.wait_until.expr}")
                    return
                s.result = dict(result.data)
                s.progress = result.progress or (f"waiting until {step.wait_until.expr} "
                                                 f"({waited:.0f}s of {step.wait_until.timeout:.0f}s)")
                self._wait(s, now, tick, step.wait_until.interval)
                return
        self._succeed(s, step, now, tick, result)

    def _wait(self, s: StepState, now: datetime, tick: Tick, seconds: float) -> None:
        s.next_check_at = iso(now + timedelta(seconds=max(0.0, seconds)))
        self.set_step(tick, s, S.WAITING)
        self.set_run(tick, R.WAITING)

    def _succeed(self, s: StepState, step: Step, now: datetime, tick: Tick, result: Result) -> None:
        data = dict(result.data)
        outputs: dict[str, Any] = {}
        try:
            ctx = self.scope.context(result=data, **self._local(s))
            for name, expr in step.outputs.items():
                outputs[name] = evaluate(expr, ctx)
        except RunbookBotError as e:
            self._fail(s, now, tick, f"outputs could not be evaluated: {e}")
            return
        s.result, s.outputs, s.message = data, outputs, result.message
        s.finished_at, s.next_check_at, s.error = iso(now), None, ""
        if step.action == "notify" and result.message:
            tick.messages.append(("[dry run] " if self.state.dry_run else "") + result.message)
        compensation = data.get("compensation")
        if isinstance(compensation, str) and compensation not in self.state.compensations:
            self.state.compensations.append(compensation)
            tick.header_dirty = True
        self.set_step(tick, s, S.SUCCEEDED)
        self.event(tick, ev.step_succeeded(s.key, result=data, outputs=outputs,
                                           message=result.message), now)
        self._advance_cursor(s)

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

    def _skip(self, s: StepState, now: datetime, tick: Tick, reason: str) -> None:
        s.message, s.finished_at = reason, iso(now)
        self.set_step(tick, s, S.SKIPPED)
        self.event(tick, ev.step_skipped(s.key, reason=reason), now)
        self._advance_cursor(s)

    def _refused(self, s: StepState, step: Step, now: datetime, tick: Tick, e: BaseException, *,
                 phase: str, calls: Sequence[ApiCall]) -> None:
        """``plan()`` or ``apply()`` raised: an interlock blocks the step, anything else is an error."""
        made = [asdict(c) for c in calls]
        if isinstance(e, InterlockBlocked):
            self._blocked(s, now, tick, e, phase=phase, calls=made)
        else:
            self._error(s, step, now, tick, e, phase=phase, calls=made)

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
            self._skip(s, now, tick, f"dry run: interlock {e.rule} would refuse: {e.message}")
            return
        s.blocked = {"rule": e.rule, "message": e.message}
        if e.count is not None:
            s.blocked["count"] = e.count
        s.votes = [v for v in s.votes if v.kind != "break_glass"]
        self._request_approval(s, self.step_of(s), now, tick)
        s.approved = False  # approvals of this plan stand, but only break-glass lets it apply
        self.set_run(tick, R.AWAITING_APPROVAL)

    def _error(self, s: StepState, step: Step, now: datetime, tick: Tick, e: BaseException, *,
               phase: str, calls: list[dict[str, Any]]) -> None:
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
            self.event(tick, ev.step_retrying(s.key, phase=phase, error=text, attempt=s.attempt,
                                              delay=delay, calls=calls), now)
            self._wait(s, now, tick, delay)
            return
        self._fail(s, now, tick, f"{phase} failed: {text}", calls=calls)

    def _fail(self, s: StepState, now: datetime, tick: Tick, error: str, *,
              calls: list[dict[str, Any]] | None = None) -> None:
        s.error, s.finished_at, s.next_check_at = error, iso(now), None
        self.set_step(tick, s, S.FAILED)
        self.event(tick, ev.step_failed(s.key, error=error, calls=calls), now)
        self._after_failure(s, now, tick, f"step {s.key} failed: {error}")

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
            return parse_iso(s.expires_at) if s.expires_at and not s.approved else None
        return None
