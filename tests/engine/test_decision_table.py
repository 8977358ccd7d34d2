"""The decision table (``bot/engine/decision_table.py``) checked as data: no sandbox, no run.

Every row must be a move the step status table allows, from a status the step can be in when the
outcome arrives; every outcome must have a row for each status it can arrive in; every event a row
names must be in the audit vocabulary, and agree with the status it records.
"""

from __future__ import annotations

from collections import deque

import pytest

from bot.engine.decision_table import (
    ARRIVES,
    TABLE,
    ApplyOutcome,
    Move,
    Outcome,
    PlanOutcome,
    Then,
    move_for,
)
from bot.engine.events import EventType
from bot.engine.state import STEP_FINAL, STEP_TRANSITIONS, StepStatus

S = StepStatus
OUTCOMES = [*PlanOutcome, *ApplyOutcome]

# the event that records a step's arrival in each status a move can lead to
RECORDED_BY: dict[StepStatus, set[EventType | None]] = {
    S.SKIPPED: {EventType.STEP_SKIPPED},
    S.FAILED: {EventType.STEP_FAILED},
    S.SUCCEEDED: {EventType.STEP_SUCCEEDED},
    S.APPLYING: {EventType.STEP_APPLYING},
    # None: the same timed hold found again by a recheck, recorded by its first hold
    S.AWAITING_APPROVAL: {EventType.APPROVAL_REQUESTED, EventType.CONFIRMATION_REQUESTED, None},
    # a retry says so; a poll to come was recorded by step.applied or step.polled
    S.WAITING: {EventType.STEP_RETRYING, None},
}

# what may come next after a move to each status
THEN_OF: dict[StepStatus, set[Then]] = {
    S.SKIPPED: {Then.ADVANCE},
    S.SUCCEEDED: {Then.ADVANCE},
    S.FAILED: {Then.ON_FAILURE},
    S.APPLYING: {Then.APPLY},
    S.AWAITING_APPROVAL: {Then.AWAIT_PEOPLE, Then.AWAIT_BREAK_GLASS, Then.AWAIT_RECHECK},
    S.WAITING: {Then.SLEEP},
}


def _reachable_from_pending() -> set[StepStatus]:
    seen, todo = {S.PENDING}, deque([S.PENDING])
    while todo:
        for nxt in STEP_TRANSITIONS[todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_outcome_is_handled_in_every_status_it_can_arrive_in() -> None:
    assert set(ARRIVES) == set(OUTCOMES)
    for outcome in OUTCOMES:
        assert ARRIVES[outcome], outcome
        for status in ARRIVES[outcome]:
            assert (status, outcome) in TABLE, f"{outcome} arriving in {status} is unhandled"


def test_no_row_is_for_a_status_its_outcome_cannot_arrive_in() -> None:
    for status, outcome in TABLE:
        assert status in ARRIVES[outcome], (status, outcome)
    assert len(TABLE) == sum(len(arrives) for arrives in ARRIVES.values())


def test_plan_and_apply_outcomes_never_stand_for_each_other() -> None:
    # same names, different phases: as keys they must not collide
    plans: list[object] = list(PlanOutcome)
    assert not any(a in plans for a in ApplyOutcome)
    assert len({*PlanOutcome, *ApplyOutcome}) == len(OUTCOMES)


def test_outcomes_arrive_only_in_statuses_a_step_reaches_and_leaves() -> None:
    reachable = _reachable_from_pending()
    for status, _ in TABLE:
        assert status in reachable, status
        assert status not in STEP_FINAL, status
    plans = {status for status, o in TABLE if isinstance(o, PlanOutcome)}
    applies = {status for status, o in TABLE if isinstance(o, ApplyOutcome)}
    assert plans == {S.PLANNING, S.AWAITING_APPROVAL}
    assert applies == {S.APPLYING}


@pytest.mark.parametrize(("status", "outcome"), list(TABLE), ids=lambda x: str(getattr(x, "value", x)))
def test_every_row_is_a_move_the_status_table_allows(status: StepStatus, outcome: Outcome) -> None:
    move = TABLE[status, outcome]
    if move.status == status:  # asked again, for a changed plan or a refusal: it stays where it is
        assert status == S.AWAITING_APPROVAL, (status, outcome, move)
    else:
        assert move.status in STEP_TRANSITIONS[status], (status, outcome, move)


def test_every_event_the_table_names_is_a_known_event_type_and_records_its_status() -> None:
    known = {t.value for t in EventType}
    for (status, outcome), move in TABLE.items():
        if move.event is not None:
            assert isinstance(move.event, EventType)
            assert move.event.value in known
        assert move.event in RECORDED_BY[move.status], (status, outcome, move)


def test_what_comes_next_agrees_with_the_new_status() -> None:
    for (status, outcome), move in TABLE.items():
        assert move.then in THEN_OF[move.status], (status, outcome, move)
    assert {m.then for m in TABLE.values()} == set(Then), "a Then no row uses"


def test_a_refusal_only_goes_on_by_break_glass_and_a_dry_run_never_asks_anyone() -> None:
    for (_, outcome), move in TABLE.items():
        blocked = outcome in (PlanOutcome.BLOCKED, ApplyOutcome.BLOCKED)
        assert (move.then is Then.AWAIT_BREAK_GLASS) == blocked, (outcome, move)
        if "dry_run" in outcome.value:
            assert move.status in (S.SKIPPED, S.APPLYING), (outcome, move)


def test_a_timed_hold_waits_for_people_and_its_recheck_and_records_only_its_first_hold() -> None:
    held = {(st, o): m for (st, o), m in TABLE.items()
            if o in (PlanOutcome.HELD, PlanOutcome.STILL_HELD)}
    assert set(held) == {(S.PLANNING, PlanOutcome.HELD), (S.AWAITING_APPROVAL, PlanOutcome.HELD),
                         (S.PLANNING, PlanOutcome.STILL_HELD)}
    for (_, outcome), move in held.items():
        # blocked for people (break-glass, retry, abort) as a refusal is, and re-planned by itself
        assert move.status is S.AWAITING_APPROVAL and move.then is Then.AWAIT_RECHECK
        assert move.event is (None if outcome is PlanOutcome.STILL_HELD
                              else EventType.APPROVAL_REQUESTED)
    # only a held step's own re-plan (from planning) finds the same hold again
    assert ARRIVES[PlanOutcome.STILL_HELD] == {S.PLANNING}
    assert {o for (_, o), m in TABLE.items() if m.then is Then.AWAIT_RECHECK} == {
        PlanOutcome.HELD, PlanOutcome.STILL_HELD}


def test_move_for_fails_loudly_on_a_pair_the_table_does_not_name() -> None:
    assert move_for(S.APPLYING, ApplyOutcome.DONE) == Move(S.SUCCEEDED, EventType.STEP_SUCCEEDED,
                                                           Then.ADVANCE)
    with pytest.raises(AssertionError, match="no move"):
        move_for(S.APPLYING, PlanOutcome.READY)
    with pytest.raises(AssertionError, match="no move"):
        move_for(S.AWAITING_APPROVAL, PlanOutcome.DRY_RUN_READ)
