"""Decisions as data: what follows each outcome of a step's plan or apply.

The conductor used to decide in branches which status, which audit event and which next move
follow a plan or an apply. Here that is a table, beside the step status table of ``state.py``:
the conductor classifies what happened into a named outcome (``PlanOutcome``, ``ApplyOutcome``),
looks up ``(step status, outcome)`` and carries out the ``Move`` it finds: the new status (through
the transition table), the event type that records the move (a ``bot.engine.events.EventType``;
``None`` where the event that records the outcome, ``step.applied`` or ``step.polled``, was already
recorded) and what comes next (``Then``). Being data, it is checked as data
(``tests/engine/test_decision_table.py``): every row agrees with the status table, every outcome
has a row for every status it can arrive in, and every event it names is in the vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from bot.engine.events import EventType
from bot.engine.state import StepStatus

S = StepStatus
E = EventType


class Then(Enum):
    """What the conductor does once the step has moved."""

    APPLY = "apply"  # the run goes on: the next decision applies the plan
    AWAIT_PEOPLE = "await_people"  # the run waits for approvers, unless the plan's already suffice
    AWAIT_BREAK_GLASS = "await_break_glass"  # approvals stand, but only break-glass lets it apply
    # a timed hold: as AWAIT_BREAK_GLASS for people, and the step is planned again by itself at
    # its next check (policy.hold_recheck_seconds) until the hold clears or hardens
    AWAIT_RECHECK = "await_recheck"
    SLEEP = "sleep"  # the run waits until the step's next check
    ADVANCE = "advance"  # the step is done: the cursor moves on once every instance is
    ON_FAILURE = "on_failure"  # the step failed: its on_failure says continue, abort or goto


class PlanOutcome(Enum):
    """What ``plan()`` gave, as the conductor classifies it."""

    BLOCKED = "blocked"  # an interlock refused: people may break glass
    HELD = "held"  # an interlock refused for a timed condition: planned again by itself
    STILL_HELD = "still_held"  # the re-plan of a held step found the same hold: nothing new
    BLOCKED_DRY_RUN = "blocked_dry_run"
    RETRYING = "retrying"  # a transient error, tries left
    ERROR = "error"
    GUARD_FAILED = "guard_failed"
    GUARD_FAILED_DRY_RUN = "guard_failed_dry_run"
    DRY_RUN_PLANNED = "dry_run_planned"  # a write (or destructive): a dry run stops at its plan
    DRY_RUN_CONFIRM = "dry_run_confirm"  # a checklist item a person would confirm
    DRY_RUN_READ = "dry_run_read"  # a read: later steps plan on what it finds
    NARROWED = "narrowed"  # re-plan before apply: a batch only lost items, the approval stands
    CHANGED = "changed"  # re-plan before apply: the plan changed, its approvals are void
    UNCHANGED = "unchanged"  # re-plan before apply: the approved plan still holds
    NEEDS_APPROVAL = "needs_approval"
    NEEDS_CONFIRMATION = "needs_confirmation"
    READY = "ready"  # nobody needs to approve: apply


class ApplyOutcome(Enum):
    """What ``apply()`` (or a poll) gave, as the conductor classifies it."""

    BLOCKED = "blocked"  # an interlock refused at apply time
    BLOCKED_DRY_RUN = "blocked_dry_run"
    RETRYING = "retrying"
    ERROR = "error"
    NOT_DONE = "not_done"  # the action says it is not done yet: poll again
    NOT_DONE_DRY_RUN = "not_done_dry_run"
    WAIT_UNTIL_ERROR = "wait_until_error"  # the step's wait_until could not be evaluated
    WAIT_UNTIL_FALSE = "wait_until_false"  # not yet: check again after its interval
    WAIT_UNTIL_DRY_RUN = "wait_until_dry_run"
    WAIT_UNTIL_TIMED_OUT = "wait_until_timed_out"
    OUTPUTS_FAILED = "outputs_failed"
    DONE = "done"


Outcome = PlanOutcome | ApplyOutcome


@dataclass(frozen=True)
class Move:
    """The new status, the event type that records the move, and what comes next."""

    status: StepStatus
    event: EventType | None
    then: Then


# the moves every outcome ends in (and that the conductor makes outside plan and apply)
SKIP = Move(S.SKIPPED, E.STEP_SKIPPED, Then.ADVANCE)
FAIL = Move(S.FAILED, E.STEP_FAILED, Then.ON_FAILURE)
SUCCEED = Move(S.SUCCEEDED, E.STEP_SUCCEEDED, Then.ADVANCE)
TO_APPLY = Move(S.APPLYING, E.STEP_APPLYING, Then.APPLY)
ASK_APPROVAL = Move(S.AWAITING_APPROVAL, E.APPROVAL_REQUESTED, Then.AWAIT_PEOPLE)
ASK_CONFIRMATION = Move(S.AWAITING_APPROVAL, E.CONFIRMATION_REQUESTED, Then.AWAIT_PEOPLE)
ASK_BREAK_GLASS = Move(S.AWAITING_APPROVAL, E.APPROVAL_REQUESTED, Then.AWAIT_BREAK_GLASS)
RETRY = Move(S.WAITING, E.STEP_RETRYING, Then.SLEEP)
POLL_LATER = Move(S.WAITING, None, Then.SLEEP)
HOLD = Move(S.AWAITING_APPROVAL, E.APPROVAL_REQUESTED, Then.AWAIT_RECHECK)
# the same hold found again by a recheck: its first hold's interlock.blocked and
# approval.requested recorded it, so a recheck every few seconds floods nothing
HOLD_AGAIN = Move(S.AWAITING_APPROVAL, None, Then.AWAIT_RECHECK)

_P, _A = PlanOutcome, ApplyOutcome
_PLANNING, _RECHECK, _APPLYING = S.PLANNING, S.AWAITING_APPROVAL, S.APPLYING

# (step status, outcome) -> move: the table the conductor looks up after every plan and apply.
# A plan arrives in planning (the first plan, or one after a retry or break-glass) or, approved,
# in awaiting_approval (the re-plan just before apply; a dry run asks nobody, so never re-plans);
# apply() and every poll arrive with the step applying.
TABLE: Mapping[tuple[StepStatus, Outcome], Move] = {
    (_PLANNING, _P.BLOCKED): ASK_BREAK_GLASS,
    (_PLANNING, _P.HELD): HOLD,
    (_PLANNING, _P.STILL_HELD): HOLD_AGAIN,
    (_PLANNING, _P.BLOCKED_DRY_RUN): SKIP,
    (_PLANNING, _P.RETRYING): RETRY,
    (_PLANNING, _P.ERROR): FAIL,
    (_PLANNING, _P.GUARD_FAILED): FAIL,
    (_PLANNING, _P.GUARD_FAILED_DRY_RUN): SKIP,
    (_PLANNING, _P.DRY_RUN_PLANNED): SKIP,
    (_PLANNING, _P.DRY_RUN_CONFIRM): SKIP,
    (_PLANNING, _P.DRY_RUN_READ): TO_APPLY,
    (_PLANNING, _P.NEEDS_APPROVAL): ASK_APPROVAL,
    (_PLANNING, _P.NEEDS_CONFIRMATION): ASK_CONFIRMATION,
    (_PLANNING, _P.READY): TO_APPLY,
    (_RECHECK, _P.BLOCKED): ASK_BREAK_GLASS,
    (_RECHECK, _P.HELD): HOLD,
    (_RECHECK, _P.RETRYING): RETRY,
    (_RECHECK, _P.ERROR): FAIL,
    (_RECHECK, _P.GUARD_FAILED): FAIL,
    (_RECHECK, _P.NARROWED): TO_APPLY,
    (_RECHECK, _P.CHANGED): ASK_APPROVAL,
    (_RECHECK, _P.UNCHANGED): TO_APPLY,
    (_APPLYING, _A.BLOCKED): ASK_BREAK_GLASS,
    (_APPLYING, _A.BLOCKED_DRY_RUN): SKIP,
    (_APPLYING, _A.RETRYING): RETRY,
    (_APPLYING, _A.ERROR): FAIL,
    (_APPLYING, _A.NOT_DONE): POLL_LATER,
    (_APPLYING, _A.NOT_DONE_DRY_RUN): SKIP,
    (_APPLYING, _A.WAIT_UNTIL_ERROR): FAIL,
    (_APPLYING, _A.WAIT_UNTIL_FALSE): POLL_LATER,
    (_APPLYING, _A.WAIT_UNTIL_DRY_RUN): SKIP,
    (_APPLYING, _A.WAIT_UNTIL_TIMED_OUT): FAIL,
    (_APPLYING, _A.OUTPUTS_FAILED): FAIL,
    (_APPLYING, _A.DONE): SUCCEED,
}

# the statuses each outcome can arrive in: what the table must cover, and all it may cover
ARRIVES: Mapping[Outcome, frozenset[StepStatus]] = {
    **{o: frozenset({_PLANNING, _RECHECK}) for o in (
        _P.BLOCKED, _P.HELD, _P.RETRYING, _P.ERROR, _P.GUARD_FAILED)},
    **{o: frozenset({_PLANNING}) for o in (
        _P.BLOCKED_DRY_RUN, _P.GUARD_FAILED_DRY_RUN, _P.DRY_RUN_PLANNED, _P.DRY_RUN_CONFIRM,
        _P.DRY_RUN_READ, _P.NEEDS_APPROVAL, _P.NEEDS_CONFIRMATION, _P.READY,
        _P.STILL_HELD)},  # a held step is planned again from planning
    **{o: frozenset({_RECHECK}) for o in (_P.NARROWED, _P.CHANGED, _P.UNCHANGED)},
    **{o: frozenset({_APPLYING}) for o in ApplyOutcome},
}


def move_for(status: StepStatus, outcome: Outcome) -> Move:
    """The move that follows ``outcome`` for a step in ``status``; a pair the table does not
    name is a bug in the conductor, and fails loudly."""
    try:
        return TABLE[status, outcome]
    except KeyError:
        raise AssertionError(f"no move for a step in {status} after {outcome!r}") from None
