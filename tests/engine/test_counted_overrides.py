"""A break-glass override of a rule that counts nodes allows the number it names, never one more."""

from __future__ import annotations

import pytest

from bot.engine.ports import ManualClock, StepContext
from bot.errors import InterlockBlocked


def _ctx(*overrides: str) -> StepContext:
    return StepContext(run_id="rb-x", step_id="s", requester="alice", clock=ManualClock(),
                       overrides=frozenset(overrides))


def test_an_override_for_n_allows_n_and_refuses_n_plus_one():
    ctx = _ctx("blast-radius<=12")
    ctx.interlock(rule="blast-radius", ok=False, message="over the cap", count=12)
    assert ctx.overridden == ["blast-radius"]
    with pytest.raises(InterlockBlocked) as e:
        ctx.interlock(rule="blast-radius", ok=False, message="over the cap", count=13)
    assert e.value.count == 13 and "allows 12, this would make 13" in e.value.message


def test_an_override_without_a_number_does_not_open_a_counted_rule():
    with pytest.raises(InterlockBlocked):
        _ctx("blast-radius").interlock(rule="blast-radius", ok=False, message="cap", count=4)
    ctx = _ctx("fence-live")  # a rule that does not count is overridden as before
    ctx.interlock(rule="fence-live", ok=False, message="recent")
    assert ctx.overridden == ["fence-live"]
