"""The audit event vocabulary: every event type the engine records, and the payload of each.

An audit event's type string is hashed into the run's stored chain, so it never changes once
released: a run recorded years ago must still verify. ``EventType`` names every type in one place
(the values are those strings, byte for byte); the constructors below are the only way the engine
builds an event's payload, so each type has one shape, typed, and a reader (``bot.present.events``
for the text, the transcript, the front-ends) can rely on it. A new event type is a new member
here, a constructor, and its text in ``bot.present.events``; the tests check that every member has
a text and that the engine records nothing outside the enum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.engine.runstate import AuditDraft


class EventType(StrEnum):
    """Every audit event type (the value is the type string stored and hashed)."""

    RUN_CREATED = "run.created"
    RUN_ABORTED = "run.aborted"
    RUN_FINISHED = "run.finished"
    RUN_LINKED = "run.linked"
    RUN_HANDED_OVER = "run.handed_over"
    RUN_CONTEXT = "run.context"
    STEP_PLANNED = "step.planned"
    GUARD_PASSED = "guard.passed"
    GUARD_FAILED = "guard.failed"
    APPROVAL_REQUESTED = "approval.requested"
    CONFIRMATION_REQUESTED = "confirmation.requested"
    APPROVAL_GRANTED = "approval.granted"
    APPROVAL_REJECTED = "approval.rejected"
    APPROVAL_EXPIRED = "approval.expired"
    APPROVAL_INVALIDATED = "approval.invalidated"
    STEP_CONFIRMED = "step.confirmed"
    INTERLOCK_BLOCKED = "interlock.blocked"
    INTERLOCK_OVERRIDE_REQUESTED = "interlock.override_requested"
    INTERLOCK_OVERRIDE_GRANTED = "interlock.override_granted"
    INTERLOCK_OVERRIDDEN = "interlock.overridden"
    STEP_APPLYING = "step.applying"
    STEP_APPLIED = "step.applied"
    STEP_POLLED = "step.polled"
    STEP_RETRYING = "step.retrying"
    STEP_SUCCEEDED = "step.succeeded"
    STEP_FAILED = "step.failed"
    STEP_SKIPPED = "step.skipped"
    STEP_GOTO = "step.goto"
    COMMAND_APPROVE = "command.approve"
    COMMAND_REJECT = "command.reject"
    COMMAND_CONFIRM = "command.confirm"
    COMMAND_BREAK_GLASS = "command.break_glass"
    COMMAND_RETRY = "command.retry"
    COMMAND_ABORT = "command.abort"
    COMMAND_HANDOVER = "command.handover"
    COMMAND_REFUSED = "command.refused"
    AUDIT_KEY_ROTATED = "audit.key_rotated"
    STAGE_REACHED = "stage.reached"


COMMANDS = frozenset(t for t in EventType if t.startswith("command.") and t != "command.refused")


@dataclass(frozen=True)
class EventData:
    """An event's type and payload, before it has an actor, a time and a place in the chain."""

    type: EventType
    payload: dict[str, Any]

    def draft(self, *, actor: str, ts: str) -> AuditDraft:
        return AuditDraft(type=self.type.value, actor=actor, ts=ts, payload=self.payload)


Calls = Sequence[Mapping[str, Any]]  # API calls as recorded (``asdict`` of ``ApiCall``)


def _e(t: EventType, **payload: Any) -> EventData:
    return EventData(t, payload)


# -- the audit chain itself -------------------------------------------------------------------------

def audit_key_rotated(*, previous: Mapping[str, Any], chain: Mapping[str, Any]) -> EventData:
    """The audit key changed while the run was open: ``previous`` is how its chain was written up
    to this event (mode and key id, as its first event records them), ``chain`` how it is written
    from the next event on. The store writes it, signed with the previous key, before the first
    event it signs with the new one (``bot.store.db``)."""
    return _e(EventType.AUDIT_KEY_ROTATED, previous=dict(previous), chain=dict(chain))


# -- the run ----------------------------------------------------------------------------------------

def run_created(*, runbook: str, file: str, params: Mapping[str, Any], dry_run: bool,
                origin: Mapping[str, Any], title: str) -> EventData:
    return _e(EventType.RUN_CREATED, runbook=runbook, file=file, params=params, dry_run=dry_run,
              origin=dict(origin), title=title)


def run_aborted(*, reason: str) -> EventData:
    return _e(EventType.RUN_ABORTED, reason=reason)


def run_context(*, cluster: str, region: str, kube_context: str, api_server: str, account: str,
                caller_arn: str, writes_as: Mapping[str, Any], bot_version: str,
                runbook_digest: str, problems: list[str], calls: Calls) -> EventData:
    """What the run acts on and as whom, resolved when it first touches ``cluster``.

    ``writes_as``: the role, session name and SourceIdentity its EC2 writes are made with (empty
    without a ``role_arn``: the caller itself); ``problems``: what could not be resolved and why.
    """
    return _e(EventType.RUN_CONTEXT, cluster=cluster, region=region, kube_context=kube_context,
              api_server=api_server, account=account, caller_arn=caller_arn,
              writes_as=dict(writes_as), bot_version=bot_version, runbook_digest=runbook_digest,
              problems=problems, calls=list(calls))


def run_finished(*, status: str, outcome: str, compensations: list[str],
                 duration_seconds: float, rule: int | None = None, when: str = "") -> EventData:
    """How the run ended and why (``outcome``, in words).

    ``rule``: the runbook's outcome rule (``spec.outcome``, 1-based) that decided, and ``when``
    its expression; recorded only when a rule decided, so every other run's event reads as it
    always did."""
    decided: dict[str, object] = {"rule": rule, "when": when} if rule is not None else {}
    return _e(EventType.RUN_FINISHED, status=status, outcome=outcome, compensations=compensations,
              duration_seconds=duration_seconds, **decided)


def run_linked(*, parent: str | None, parent_why: str, incident: str | None,
               suggested_by: str | None, detected_at: str | None = None,
               shown_at: str | None = None) -> EventData:
    """What a run is linked to as it starts (``engine/provenance.py``); only the links it has.

    ``detected_at``: when what suggested it first saw the trouble (a Lease gone stale, an alert
    firing), the start of the run's time to recovery; ``shown_at``: when the card offering the
    run was posted; each recorded only when known."""
    links = {"parent": parent, "parent_why": parent_why, "incident": incident,
             "suggested_by": suggested_by, "detected_at": detected_at, "shown_at": shown_at}
    return EventData(EventType.RUN_LINKED, {k: v for k, v in links.items() if v})


def run_handed_over(*, from_owner: str, to: str, reason: str,
                    voided: list[dict[str, str]]) -> EventData:
    """The run's owner changed; ``voided``: approvals (step, by) the new owner may no longer give."""
    return _e(EventType.RUN_HANDED_OVER, **{"from": from_owner}, to=to, reason=reason,
              voided=voided)


# -- planning and guards ----------------------------------------------------------------------------

def step_planned(step: str, *, plan: Mapping[str, Any] | None, plan_hash: str,
                 summary: str, narrowed_from: str | None = None,
                 dropped: Mapping[str, str] | None = None) -> EventData:
    """``narrowed_from``/``dropped``: a batch plan re-read before apply lost these items (item ->
    why) and nothing else changed, so the approval of ``narrowed_from`` stands for the rest."""
    extra: dict[str, Any] = {}
    if narrowed_from is not None:
        extra = {"narrowed_from": narrowed_from, "dropped": dict(dropped or {})}
    return _e(EventType.STEP_PLANNED, step=step, plan=plan, plan_hash=plan_hash, summary=summary,
              **extra)


def guard_checked(step: str, *, expr: str, ok: bool, message: str) -> EventData:
    """``guard.passed``, or ``guard.failed`` with the guard's message."""
    if ok:
        return _e(EventType.GUARD_PASSED, step=step, expr=expr)
    return _e(EventType.GUARD_FAILED, step=step, expr=expr, message=message)


# -- asking people ----------------------------------------------------------------------------------

def approval_requested(step: str, *, confirmation: bool, plan_hash: str | None, min_approvers: int,
                       groups: list[str], expires_at: str | None, reason: str,
                       already: list[str], raised_by: int = 0, raised_why: str = "") -> EventData:
    """A plan waits for approvers (or, ``confirmation``, for a person to confirm a checklist item).

    ``raised_by``: approvers the plan added to the step's count, and ``raised_why`` why; recorded
    only when the plan raised it, so the events of every other request read as they always did."""
    t = EventType.CONFIRMATION_REQUESTED if confirmation else EventType.APPROVAL_REQUESTED
    extra: dict[str, object] = {"raised_by": raised_by, "raised_why": raised_why} if raised_by else {}
    return _e(t, step=step, plan_hash=plan_hash, min_approvers=min_approvers, groups=groups,
              expires_at=expires_at, reason=reason, already=already, **extra)


def manual_confirmation_requested(step: str, *, text: str) -> EventData:
    """A manual step asks a person to do ``text`` and confirm."""
    return _e(EventType.CONFIRMATION_REQUESTED, step=step, text=text)


def approval_granted(step: str, *, plan_hash: str | None, count: int, needed: int) -> EventData:
    return _e(EventType.APPROVAL_GRANTED, step=step, plan_hash=plan_hash, count=count, needed=needed)


def approval_rejected(step: str, *, plan_hash: str | None, reason: str) -> EventData:
    return _e(EventType.APPROVAL_REJECTED, step=step, plan_hash=plan_hash, reason=reason)


def approval_expired(step: str, *, expires_at: str | None) -> EventData:
    return _e(EventType.APPROVAL_EXPIRED, step=step, expires_at=expires_at)


def approval_invalidated(step: str, *, old_hash: str | None, new_hash: str, voided: list[str],
                         reason: str) -> EventData:
    return _e(EventType.APPROVAL_INVALIDATED, step=step, old_hash=old_hash, new_hash=new_hash,
              voided=voided, reason=reason)


def step_confirmed(step: str, *, note: str) -> EventData:
    return _e(EventType.STEP_CONFIRMED, step=step, note=note)


# -- interlocks -------------------------------------------------------------------------------------

def interlock_blocked(step: str, *, rule: str, message: str, phase: str, calls: Calls,
                      plan: dict[str, Any] | None = None, plan_hash: str | None = None) -> EventData:
    """``plan``/``plan_hash``: the plan the refused action would have made, shown to the people
    who may break glass (only when the action gave it: older chains have neither)."""
    extra = {"plan": plan, "plan_hash": plan_hash} if plan is not None else {}
    return _e(EventType.INTERLOCK_BLOCKED, step=step, rule=rule, message=message, phase=phase,
              calls=calls, **extra)


def override_requested(step: str, *, rule: str, reason: str, count: int, needed: int,
                       nodes: int | None = None) -> EventData:
    """``nodes``: how many nodes the override allows (blast-radius), when it names a number."""
    extra = {"nodes": nodes} if nodes is not None else {}
    return _e(EventType.INTERLOCK_OVERRIDE_REQUESTED, step=step, rule=rule, reason=reason,
              count=count, needed=needed, **extra)


def override_granted(step: str, *, rule: str, approvers: list[str],
                     nodes: int | None = None) -> EventData:
    extra = {"nodes": nodes} if nodes is not None else {}
    return _e(EventType.INTERLOCK_OVERRIDE_GRANTED, step=step, rule=rule, approvers=approvers,
              **extra)


def interlock_overridden(step: str, *, rule: str, approvers: list[str],
                         reasons: list[str]) -> EventData:
    return _e(EventType.INTERLOCK_OVERRIDDEN, step=step, rule=rule, approvers=approvers,
              reasons=reasons)


# -- applying ---------------------------------------------------------------------------------------

def step_applying(step: str, *, attempt: int, plan_hash: str | None,
                  approvers: list[str], resumed: bool = False,
                  overrides: Sequence[str] = ()) -> EventData:
    """``resumed``: a worker died between this step's write and its record; this attempt checks
    what the interrupted one did (an ``already_done`` after it is that attempt's own write).
    ``overrides``: the interlocks two people broke glass on that this apply runs under, on
    record before it writes (a worker that dies after its write leaves no other trace of them)."""
    extra: dict[str, Any] = {"resumed": True} if resumed else {}
    if overrides:
        extra["overrides"] = sorted(overrides)
    return _e(EventType.STEP_APPLYING, step=step, attempt=attempt, plan_hash=plan_hash,
              approvers=approvers, **extra)


def step_applied(step: str, *, calls: Calls, message: str, already_done: bool,
                 done: bool) -> EventData:
    return _e(EventType.STEP_APPLIED, step=step, calls=calls, message=message,
              already_done=already_done, done=done)


def step_polled(step: str, *, calls: Calls, progress: str, done: bool) -> EventData:
    return _e(EventType.STEP_POLLED, step=step, calls=calls, progress=progress, done=done)


def step_retrying(step: str, *, phase: str, error: str, attempt: int, delay: float,
                  calls: Calls) -> EventData:
    return _e(EventType.STEP_RETRYING, step=step, phase=phase, error=error, attempt=attempt,
              delay=delay, calls=calls)


def step_succeeded(step: str, *, result: Mapping[str, Any], outputs: Mapping[str, Any],
                   message: str) -> EventData:
    return _e(EventType.STEP_SUCCEEDED, step=step, result=result, outputs=outputs, message=message)


def step_failed(step: str, *, error: str, calls: Calls | None = None) -> EventData:
    """A step failed; ``calls`` (the API calls that failed) only when there were some."""
    if calls:
        return _e(EventType.STEP_FAILED, step=step, error=error, calls=calls)
    return _e(EventType.STEP_FAILED, step=step, error=error)


def step_skipped(step: str, *, reason: str) -> EventData:
    return _e(EventType.STEP_SKIPPED, step=step, reason=reason)


def step_goto(step: str, *, target: str) -> EventData:
    return _e(EventType.STEP_GOTO, step=step, target=target)


# -- time to recovery ------------------------------------------------------------------------------

# the stages a ``stage.reached`` event may name, in the order a recovery passes them; the others
# (detected, run started, approvals, the end) are read from the events that already record them
REACHED_STAGES = ("fenced", "tainted", "attachments_gone", "volume_attached", "pod_running")


def stage_reached(stage: str, *, at: str, source: str, node: str | None = None,
                  volume: str | None = None, pod: str | None = None) -> EventData:
    """A stage of the recovery was observed (``engine/stages.py``): ``at`` when (ISO time, which
    may be before the event's own), ``source`` what observed it (``step:<key>``); only the
    subjects it names."""
    if stage not in REACHED_STAGES:
        raise ValueError(f"{stage!r} is not a stage: expected one of {', '.join(REACHED_STAGES)}")
    subjects = {k: v for k, v in {"node": node, "volume": volume, "pod": pod}.items() if v}
    return _e(EventType.STAGE_REACHED, stage=stage, at=at, source=source, **subjects)


# -- people's commands ------------------------------------------------------------------------------

def command_given(name: str, args: Mapping[str, Any]) -> EventData:
    """A person's command as given (``name``: approve, reject, ... ; ``args``: what they passed)."""
    t = EventType(f"command.{name}")
    if t not in COMMANDS:
        raise ValueError(f"{name!r} is not a command: expected one of "
                         f"{', '.join(sorted(c.removeprefix('command.') for c in COMMANDS))}")
    return EventData(t, dict(args))


def command_refused(*, command: str, reason: str, step: str | None) -> EventData:
    """A command that was refused, and why (``step``: the step it was aimed at, if known)."""
    if step:
        return _e(EventType.COMMAND_REFUSED, command=command, reason=reason, step=step)
    return _e(EventType.COMMAND_REFUSED, command=command, reason=reason)
