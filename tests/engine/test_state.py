"""The status table as a whole; what each move means for a run is tested in ``test_lifecycle.py``."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TypeVar

import pytest

from bot.engine.ids import ALPHABET, new_run_id, parse_run_id
from bot.engine.state import (
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    STEP_FINAL,
    STEP_TRANSITIONS,
    RunStatus,
    StepStatus,
    advance_run,
    advance_step,
)
from bot.errors import IllegalTransition

T = TypeVar("T")


def _reachable(table: Mapping[T, frozenset[T]], start: T) -> set[T]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in table[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_transition_tables_are_closed_and_consistent():
    for table, statuses in ((RUN_TRANSITIONS, set(RunStatus)), (STEP_TRANSITIONS, set(StepStatus))):
        assert set(table) == statuses, "every status has a row"
        assert set().union(*table.values()) <= statuses
    # every status can be reached from where runs and steps start, and every run can end
    assert _reachable(RUN_TRANSITIONS, RunStatus.PENDING) == set(RunStatus)
    assert _reachable(STEP_TRANSITIONS, StepStatus.PENDING) == set(StepStatus)
    assert {RunStatus.SUCCEEDED, RunStatus.PARTIAL, RunStatus.FAILED, RunStatus.ABORTED} == RUN_TERMINAL
    for status in RunStatus:
        assert _reachable(RUN_TRANSITIONS, status) & RUN_TERMINAL, f"a {status} run can never end"
    # a refused, lapsed or aborted step is over for good: nothing leads from it to applying
    for status in (StepStatus.REJECTED, StepStatus.EXPIRED, StepStatus.ABORTED):
        assert STEP_TRANSITIONS[status] == frozenset()
    # a finished step only ever starts again from the beginning (a goto re-entering it)
    for status in STEP_FINAL:
        assert STEP_TRANSITIONS[status] <= {StepStatus.PENDING}
    # a step is never finished by skipping straight from pending to success or to applying
    assert StepStatus.APPLYING not in STEP_TRANSITIONS[StepStatus.PENDING]
    assert StepStatus.SUCCEEDED not in STEP_TRANSITIONS[StepStatus.PENDING]
    # advance_* allow exactly the listed moves and raise on every other one
    for advance, table in ((advance_run, RUN_TRANSITIONS), (advance_step, STEP_TRANSITIONS)):
        for a, b in itertools.product(table, table):
            if b in table[a]:
                assert advance(a, b) is b
            else:
                with pytest.raises(IllegalTransition, match=f"from {a} to {b}"):
                    advance(a, b)


def test_the_statuses_are_exactly_those_the_issue_lists():
    assert [s.value for s in RunStatus] == ["pending", "running", "waiting", "awaiting_approval",
                                             "succeeded", "partial", "failed", "aborted"]
    assert [s.value for s in StepStatus] == ["pending", "skipped", "planning", "awaiting_approval",
                                              "applying", "waiting", "succeeded", "failed",
                                              "rejected", "expired", "aborted"]


def test_run_ids_are_short_and_use_only_the_unambiguous_alphabet():
    ids = {new_run_id() for _ in range(200)}
    for rid in ids:
        assert rid.startswith("rb-") and len(rid) == 8
        assert set(rid[3:]) <= set(ALPHABET)
    assert not set("0o1li5s2zuv") & set(ALPHABET)


@pytest.mark.parametrize(("typed", "expected"), [("rb-7k3q9", "rb-7k3q9"), (" RB-7K3Q9 ", "rb-7k3q9"),
                                                 ("7k3q9", "rb-7k3q9")])
def test_a_typed_run_id_is_normalised(typed, expected):
    assert parse_run_id(typed) == expected


@pytest.mark.parametrize("typed", ["rb-7k3q", "rb-0o1l5", "hello"])
def test_a_malformed_run_id_is_refused(typed):
    with pytest.raises(ValueError):
        parse_run_id(typed)
