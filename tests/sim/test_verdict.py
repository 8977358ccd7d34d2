"""The verdict on a run's invariant violations: a fence of a live machine is explained only by a
two-person break-glass of the interlock that guards it, on record for the apply that wrote."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.sim.invariants import Violation
from bot.sim.verdict import judge

STOP = Violation("2026-01-01T00:06:20Z", "fence-of-live", "StopInstances of i-1, whose guest still runs")


@dataclass
class Ev:
    type: str
    ts: str
    payload: dict[str, Any] = field(default_factory=dict)


GLASS = [Ev("interlock.override_requested", "2026-01-01T00:06:10+00:00",
            {"step": "fence", "rule": "fence-live", "reason": "console dead"}),
         Ev("interlock.override_requested", "2026-01-01T00:06:12+00:00",
            {"step": "fence", "rule": "fence-live", "reason": "partitioned, checked"}),
         Ev("interlock.override_granted", "2026-01-01T00:06:12+00:00",
            {"step": "fence", "rule": "fence-live", "approvers": ["bob", "carol"]})]


def test_an_apply_whose_mark_names_the_override_explains_its_write_though_it_died_after_it():
    mark = Ev("step.applying", "2026-01-01T00:06:20+00:00",
              {"step": "fence", "attempt": 1, "overrides": ["fence-live"]})
    v = judge([STOP], [*GLASS, mark])
    assert v.violations == () and len(v.overridden) == 1
    o = v.overridden[0]
    assert (o.step, o.rule, o.approvers) == ("fence", "fence-live", ("bob", "carol"))
    assert o.reasons == ("console dead", "partitioned, checked") and not v.clean


def test_a_mark_without_the_override_or_without_its_grant_explains_nothing():
    bare = Ev("step.applying", "2026-01-01T00:06:20+00:00", {"step": "fence", "attempt": 1})
    assert judge([STOP], [*GLASS, bare]).violations == (STOP,)
    claimed = Ev("step.applying", "2026-01-01T00:06:20+00:00",
                 {"step": "fence", "attempt": 1, "overrides": ["fence-live"]})
    assert judge([STOP], [claimed]).violations == (STOP,)  # no grant on record
    late = Ev("step.applying", "2026-01-01T00:09:00+00:00",
              {"step": "fence", "attempt": 2, "overrides": ["fence-live"]})
    assert judge([STOP], [*GLASS, late]).violations == (STOP,)  # another pass's apply
