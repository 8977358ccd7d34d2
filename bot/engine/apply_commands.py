"""People's commands applied to a run: approve, reject, confirm, break-glass, retry, abort, handover.

Like the conductor, this is pure: it changes the run's state through the transition table, checks
policy (``approvals.py``), and appends audit events to the tick. Every command is audited with its
actor, including the ones that are refused (a click by someone not in the approver group), so the
record shows who tried what. A refusal is returned as an ``Outcome`` with the reason, never raised,
so the refused attempt is stored like any other event.

It reaches the conductor only through ``Commandable``: the run, the policy, the approval rule of a
step, and the conductor's moves (audit an event, change a status, finish the run). What a person
can do is decided here alone, never by reaching into how the conductor plans and applies.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from bot.config import PolicyConfig
from bot.engine import events as ev
from bot.engine.agents import is_agent
from bot.engine.approvals import (
    BREAK_GLASS_QUORUM,
    ApprovalRule,
    Membership,
    canonical,
    check_approver,
    check_reason,
    is_system,
)
from bot.engine.commands import (
    Abort,
    Approve,
    BreakGlass,
    Command,
    Confirm,
    Handover,
    Outcome,
    Reject,
    Retry,
)
from bot.engine.decisions import Finished, Tick, iso
from bot.engine.provenance import check_identity
from bot.engine.runstate import RunState, StepState, Vote
from bot.engine.state import RUN_TERMINAL, STEP_FINAL, RunStatus, StepStatus
from bot.errors import ParamError, PolicyError

S = StepStatus
R = RunStatus
_NAMES = {Approve: "approve", Reject: "reject", Confirm: "confirm", BreakGlass: "break_glass",
          Retry: "retry", Abort: "abort", Handover: "handover"}


class Commandable(Protocol):
    """The conductor's API for commands (``conductor.Conductor`` implements it)."""

    @property
    def state(self) -> RunState: ...
    @property
    def policy(self) -> PolicyConfig: ...
    @property
    def membership(self) -> Membership: ...

    def rule_for(self, s: StepState) -> ApprovalRule:
        """The approval rule that applies to step instance ``s``."""
        ...

    def event(self, tick: Tick, data: ev.EventData, now: datetime, *, actor: str = ...) -> None: ...
    def set_step(self, tick: Tick, s: StepState, status: StepStatus) -> None: ...
    def set_run(self, tick: Tick, status: RunStatus) -> None: ...
    def finish(self, now: datetime, tick: Tick, status: RunStatus, outcome: str) -> Finished: ...

    def passed_over(self, s: StepState, tick: Tick) -> bool:
        """Whether the run goes on past ``s``, rejected (its ``on_failure`` is ``continue``)."""
        ...


def apply_command(c: Commandable, cmd: Command, now: datetime, tick: Tick) -> Outcome:
    """Apply one command; the outcome says what happened, or why nothing did."""
    name = _NAMES[type(cmd)]
    args = {k: v for k, v in vars(cmd).items() if k not in ("run_id", "actor") and v not in (None, "")}
    c.event(tick, ev.command_given(name, args), now, actor=cmd.actor)
    target: str | None = getattr(cmd, "step", None)
    try:
        if c.state.status in RUN_TERMINAL:
            raise PolicyError(f"run {c.state.run_id} has already finished ({c.state.status})")
        if isinstance(cmd, Abort):
            return _abort(c, cmd, now, tick)
        if isinstance(cmd, Handover):
            return _handover(c, cmd, now, tick)
        s = _target(c, cmd.step)
        target = s.key
        if isinstance(cmd, Approve):
            if s.needs_confirmation and not s.needs_approval:
                return _confirm(c, s, Confirm(cmd.run_id, cmd.actor, cmd.step), now, tick)
            return _approve(c, s, cmd, now, tick)
        if isinstance(cmd, Confirm):
            return _confirm(c, s, cmd, now, tick)
        if isinstance(cmd, Reject):
            return _reject(c, s, cmd, now, tick)
        if isinstance(cmd, BreakGlass):
            return _break_glass(c, s, cmd, now, tick)
        return _retry(c, s, cmd, now, tick)
    except (PolicyError, ParamError) as e:
        c.event(tick, ev.command_refused(command=name, reason=str(e), step=target), now,
                actor=cmd.actor)
        return Outcome(False, str(e), c.state.run_id, getattr(cmd, "step", None))


def _target(c: Commandable, key: str | None) -> StepState:
    waiting = [s for s in c.state.steps.values() if s.status == S.AWAITING_APPROVAL]
    if key is None:
        if not waiting:
            raise PolicyError(f"run {c.state.run_id} has no step waiting for a decision "
                              f"(it is {c.state.status})")
        return waiting[0]
    matches = [s for s in c.state.steps.values() if key in (s.key, s.step_id)]
    pending = [s for s in matches if s.status == S.AWAITING_APPROVAL]
    if pending:
        return pending[0]
    if not matches:
        known = ", ".join(dict.fromkeys(s.step_id for s in c.state.steps.values())) or "none yet"
        raise PolicyError(f"run {c.state.run_id} has no step {key!r} (steps so far: {known})")
    s = matches[0]
    raise PolicyError(f"step {s.key} is {s.status}, not waiting for a decision")


def _approve(c: Commandable, s: StepState, cmd: Approve, now: datetime, tick: Tick) -> Outcome:
    if s.blocked:
        raise PolicyError(
            f"step {s.key} is blocked by interlock {s.blocked['rule']}: {s.blocked['message']}. "
            "An approval cannot override it; fix the cause and retry the step, abort the run, or "
            "break glass (two people other than the requester, each with a written reason)")
    if s.approved:
        return Outcome(True, f"step {s.key} is already approved", c.state.run_id, s.key)
    if cmd.plan_hash is not None and cmd.plan_hash != s.plan_hash:
        raise PolicyError(f"the plan of step {s.key} changed since that message was shown; "
                          "review the new plan and approve that one")
    rule = c.rule_for(s)
    valid = [v for v in s.approvals() if v.plan_hash == s.plan_hash]
    check_approver(rule=rule, approver=cmd.actor, requester=c.state.requester,
                   prior=[v.by for v in valid], policy=c.policy, membership=c.membership,
                   owner=c.state.current_owner, on_behalf_of=_behalf(c))
    s.votes.append(Vote(by=cmd.actor, at=iso(now), kind="approve", plan_hash=s.plan_hash))
    count = len({canonical(v.by, c.policy) for v in valid}) + 1
    c.event(tick, ev.approval_granted(s.key, plan_hash=s.plan_hash, count=count,
                                      needed=rule.min_approvers), now, actor=cmd.actor)
    tick.dirty.add(s.key)
    if count >= rule.min_approvers:
        s.approved = True
        c.set_run(tick, R.RUNNING)
        return Outcome(True, f"approved step {s.key}; it applies next", c.state.run_id, s.key)
    return Outcome(True, f"approval {count} of {rule.min_approvers} for step {s.key} recorded",
                   c.state.run_id, s.key)


def _confirm(c: Commandable, s: StepState, cmd: Confirm, now: datetime, tick: Tick) -> Outcome:
    if not s.needs_confirmation:
        raise PolicyError(f"step {s.key} needs an approval, not a confirmation")
    if is_agent(cmd.actor) or is_agent(canonical(cmd.actor, c.policy)):
        raise PolicyError(f"{cmd.actor} is an AI agent: a person confirms what was done by hand")
    s.votes.append(Vote(by=cmd.actor, at=iso(now), kind="confirm", plan_hash=s.plan_hash,
                        reason=cmd.note))
    s.approved = True
    tick.dirty.add(s.key)
    c.event(tick, ev.step_confirmed(s.key, note=cmd.note), now, actor=cmd.actor)
    c.set_run(tick, R.RUNNING)
    return Outcome(True, f"{cmd.actor} confirmed step {s.key}", c.state.run_id, s.key)


def _behalf(c: Commandable) -> str | None:
    """The person an agent said it requested the run for (``engine/agents.py``), if any."""
    behalf = c.state.origin.get("on_behalf_of") if is_agent(c.state.requester) else None
    return str(behalf) if behalf else None


def _answers_for(c: Commandable, actor: str) -> bool:
    """Whether ``actor`` is the run's requester or its current owner."""
    person = canonical(actor, c.policy)
    return person in {canonical(c.state.requester, c.policy),
                      canonical(c.state.current_owner, c.policy)}


def _may_decide(c: Commandable, s: StepState, actor: str) -> None:
    """Rejecting or aborting: the requester, the owner, or anyone who could approve the step."""
    if _answers_for(c, actor):
        return
    rule = c.rule_for(s)
    try:
        check_approver(rule=rule, approver=actor, requester=c.state.requester, prior=(),
                       policy=c.policy, membership=c.membership, kind="decide")
    except PolicyError as e:
        raise PolicyError(f"only the requester or an eligible approver may do that: {e}") from None


def _reject(c: Commandable, s: StepState, cmd: Reject, now: datetime, tick: Tick) -> Outcome:
    reason = check_reason(cmd.reason, what="a rejection")
    _may_decide(c, s, cmd.actor)
    s.votes.append(Vote(by=cmd.actor, at=iso(now), kind="reject", plan_hash=s.plan_hash,
                        reason=reason))
    s.finished_at = iso(now)
    c.set_step(tick, s, S.REJECTED)
    c.event(tick, ev.approval_rejected(s.key, plan_hash=s.plan_hash, reason=reason), now,
            actor=cmd.actor)
    if c.passed_over(s, tick):  # on_failure: continue: declined, as if it failed; the run goes on
        s.error = f"rejected by {cmd.actor}: {reason}; nothing of it was applied"
        return Outcome(True, f"rejected step {s.key}; nothing of it was applied and the run goes "
                             "on (its on_failure is continue; abort the run to stop it)",
                       c.state.run_id, s.key)
    c.finish(now, tick, R.FAILED, f"step {s.key} was rejected by {cmd.actor}: {reason}; "
                                   f"{c.state.nothing_applied(s.key)}")
    return Outcome(True, f"rejected step {s.key}; the run has stopped", c.state.run_id, s.key)


def _break_glass(c: Commandable, s: StepState, cmd: BreakGlass, now: datetime, tick: Tick) -> Outcome:
    if not s.blocked:
        raise PolicyError(f"step {s.key} is not blocked by an interlock; break-glass only "
                          "overrides an interlock")
    reason = check_reason(cmd.reason, what="break-glass")
    counted = s.blocked.get("count")
    if counted is not None and cmd.nodes is None:
        raise PolicyError(
            f"interlock {s.blocked['rule']} counts nodes (this step would make {counted}): "
            "break-glass must name how many nodes it allows (--nodes N)")
    if cmd.nodes is not None and cmd.nodes < 1:
        raise PolicyError(f"--nodes {cmd.nodes}: the number of nodes must be at least 1")
    rule = c.rule_for(s)
    prior = [v.by for v in s.votes if v.kind == "break_glass"]
    check_approver(rule=rule, approver=cmd.actor, requester=c.state.requester, prior=prior,
                   policy=c.policy, membership=c.membership, kind="break_glass",
                   owner=c.state.current_owner, on_behalf_of=_behalf(c))
    interlock = s.blocked["rule"]
    # bound to the plan the person was shown (the refused one, raise and all; None: no plan):
    # it approves the plan made after the override only if that asks the same (conductor)
    s.votes.append(Vote(by=cmd.actor, at=iso(now), kind="break_glass", reason=reason,
                        rule=interlock, nodes=cmd.nodes, plan_hash=s.plan_hash))
    count = len(prior) + 1
    tick.dirty.add(s.key)
    c.event(tick, ev.override_requested(s.key, rule=interlock, reason=reason, count=count,
                                        needed=BREAK_GLASS_QUORUM, nodes=cmd.nodes),
            now, actor=cmd.actor)
    if count < BREAK_GLASS_QUORUM:
        return Outcome(True, f"break-glass {count} of {BREAK_GLASS_QUORUM} for interlock "
                             f"{interlock} on step {s.key} recorded", c.state.run_id, s.key)
    glass = [v for v in s.votes if v.kind == "break_glass"]
    named = [v.nodes for v in glass if v.nodes is not None]
    # the override allows the smallest number any of its people named, never more
    allowed = min(named) if named else None
    granted = interlock if allowed is None else f"{interlock}<={allowed}"
    s.overrides = sorted({*(o for o in s.overrides if not o.startswith(f"{interlock}<=")), granted})
    s.blocked = None
    _anew(s)
    c.set_step(tick, s, S.PLANNING)
    c.set_run(tick, R.RUNNING)
    c.event(tick, ev.override_granted(s.key, rule=interlock, approvers=[v.by for v in glass],
                                      nodes=allowed), now)
    upto = f" up to {allowed} nodes" if allowed is not None else ""
    return Outcome(True, f"break-glass granted: interlock {interlock} is overridden{upto} for "
                         f"step {s.key}, which is planned again", c.state.run_id, s.key)


def _anew(s: StepState) -> None:
    """A step people have planned again (a retry, a break-glass granted) begins a new attempt:
    its timeout, its ``wait_until`` and what its action counts from its start (a fence, the
    machine's boots since) begin at its next apply, not at an earlier attempt's, which would
    otherwise fail it again at once."""
    s.applying_since = s.poll_started_at = None


def _retry(c: Commandable, s: StepState, cmd: Retry, now: datetime, tick: Tick) -> Outcome:
    _may_decide(c, s, cmd.actor)
    s.blocked = None
    s.approved = False
    _anew(s)
    c.set_step(tick, s, S.PLANNING)
    c.set_run(tick, R.RUNNING)
    return Outcome(True, f"step {s.key} is planned again", c.state.run_id, s.key)


def _abort(c: Commandable, cmd: Abort, now: datetime, tick: Tick) -> Outcome:
    reason = check_reason(cmd.reason, what="an abort")
    current = next((s for s in c.state.steps.values() if s.status not in STEP_FINAL), None)
    if current is not None:
        _may_decide(c, current, cmd.actor)
    elif not _answers_for(c, cmd.actor):
        raise PolicyError("only the requester or the owner may abort a run that has no step in "
                          "progress")
    for s in c.state.steps.values():
        if s.status not in STEP_FINAL:
            s.finished_at = iso(now)
            c.set_step(tick, s, S.ABORTED)
    c.event(tick, ev.run_aborted(reason=reason), now, actor=cmd.actor)
    c.finish(now, tick, R.ABORTED, f"aborted by {cmd.actor}: {reason}")
    return Outcome(True, f"run {c.state.run_id} aborted", c.state.run_id)


def _handover(c: Commandable, cmd: Handover, now: datetime, tick: Tick) -> Outcome:
    """Make ``cmd.to`` the owner. Only the current owner or the requester may hand a run over
    (there is no administrator override), but a run an AI agent owns may be taken over by any
    person; the new owner's approvals of steps not yet applied are void, since an owner never
    approves its run's steps."""
    st, policy = c.state, c.policy
    to = check_identity(cmd.to)
    reason = check_reason(cmd.reason, what="a handover") if cmd.reason else ""
    # an agent's run is owned by the agent, which decides nothing: any person may take it over
    taken = is_agent(st.current_owner) and not (is_agent(cmd.actor) or is_system(cmd.actor))
    if not (_answers_for(c, cmd.actor) or taken):
        raise PolicyError(f"only the run's owner ({st.current_owner}) or its requester "
                          f"({st.requester}) may hand it over")
    if is_system(to):
        raise PolicyError(f"{to} is the bot's own identity: a person owns a run")
    if is_agent(to):
        raise PolicyError(f"{to} is an AI agent, not a person: a person owns a run")
    if canonical(to, policy) == canonical(st.current_owner, policy):
        raise PolicyError(f"{to} already owns run {st.run_id}")
    person = canonical(to, policy)
    voided: list[dict[str, str]] = []
    for s in st.steps.values():
        if s.status in STEP_FINAL or s.status == S.APPLYING or s.status == S.WAITING:
            continue
        theirs = [v for v in s.approvals() if canonical(v.by, policy) == person]
        if not theirs:
            continue
        s.votes = [v for v in s.votes if v not in theirs]
        voided += [{"step": s.key, "by": v.by} for v in theirs]
        tick.dirty.add(s.key)
        c.event(tick, ev.approval_invalidated(
            s.key, old_hash=s.plan_hash, new_hash=s.plan_hash or "", voided=[v.by for v in theirs],
            reason=f"{to} now owns the run, and the owner never approves its steps"), now)
        valid = {canonical(v.by, policy) for v in s.approvals() if v.plan_hash == s.plan_hash}
        if s.approved and s.status == S.AWAITING_APPROVAL and len(valid) < s.min_approvers:
            s.approved = False
            c.set_run(tick, R.AWAITING_APPROVAL)
    previous = st.current_owner
    st.owner = to
    tick.header_dirty = True
    c.event(tick, ev.run_handed_over(from_owner=previous, to=to, reason=reason, voided=voided),
            now, actor=cmd.actor)
    return Outcome(True, f"run {st.run_id} is now owned by {to} (was {previous})"
                   + (f"; {len(voided)} approval(s) by {to} no longer count" if voided else ""),
                   st.run_id)


def eligibility(c: Commandable, s: StepState, actor: str) -> str | None:
    """Why ``actor`` could not approve (or confirm) ``s`` right now; None when they could."""
    if s.needs_confirmation and not s.needs_approval:
        return None
    valid = [v.by for v in s.approvals() if v.plan_hash == s.plan_hash]
    try:
        check_approver(rule=c.rule_for(s), approver=actor, requester=c.state.requester,
                       prior=valid, policy=c.policy, membership=c.membership,
                       owner=c.state.current_owner, on_behalf_of=_behalf(c))
    except PolicyError as e:
        return str(e)
    return None
