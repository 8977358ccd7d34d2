import itertools

import pytest

from bot.engine.ids import ALPHABET, new_run_id, parse_run_id
from bot.engine.state import (
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    RunStatus,
    StepStatus,
    advance_run,
    advance_step,
)
from bot.errors import IllegalTransition


@pytest.mark.parametrize(("a", "b"), list(itertools.product(RunStatus, RunStatus)))
def test_every_run_move_is_allowed_exactly_when_the_table_lists_it(a, b):
    if b in RUN_TRANSITIONS[a]:
        assert advance_run(a, b) is b
    else:
        with pytest.raises(IllegalTransition):
            advance_run(a, b)


@pytest.mark.parametrize(("a", "b"), list(itertools.product(StepStatus, StepStatus)))
def test_every_step_move_is_allowed_exactly_when_the_table_lists_it(a, b):
    if b in STEP_TRANSITIONS[a]:
        assert advance_step(a, b) is b
    else:
        with pytest.raises(IllegalTransition):
            advance_step(a, b)


def test_the_statuses_are_exactly_those_the_issue_lists():
    assert [s.value for s in RunStatus] == ["pending", "running", "waiting", "awaiting_approval",
                                             "succeeded", "failed", "aborted"]
    assert [s.value for s in StepStatus] == ["pending", "skipped", "planning", "awaiting_approval",
                                              "applying", "waiting", "succeeded", "failed",
                                              "rejected", "expired", "aborted"]


@pytest.mark.parametrize("status", [StepStatus.REJECTED, StepStatus.EXPIRED, StepStatus.ABORTED])
def test_a_rejected_expired_or_aborted_step_can_never_be_applied(status):
    with pytest.raises(IllegalTransition):
        advance_step(status, StepStatus.APPLYING)


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
