"""A short search of every shipped runbook on its incident, with a fixed seed: no invariant
breaks, and the search says what it reached. Shrinking keeps the invariant it was given."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.sim.explore.catalogue import Event
from bot.sim.explore.checks import Found
from bot.sim.explore.driver import Coverage, Played
from bot.sim.explore.search import OPTIONS_FOR, SCENARIO_FOR, explore, shrink
from bot.sim.explore.timeline import Timeline

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("runbook", sorted(SCENARIO_FOR))
def test_a_short_search_of_a_shipped_runbook_breaks_no_invariant(runbook: str) -> None:
    base = Timeline(runbook, SCENARIO_FOR[runbook], {}, options=OPTIONS_FOR.get(runbook, {}))
    report = explore(base, count=1, seed=2026)
    assert report.played == 1
    assert not report.failures, "\n".join(
        [f.timeline.words() + "\n" + "\n".join(f.trace) for f in report.failures])
    assert report.coverage.steps, "the search reached no step"
    assert "steps run:" in report.words(sorted(report.coverage.steps))


def test_shrinking_drops_every_event_the_failure_does_not_need(monkeypatch) -> None:
    from bot.sim.explore import search

    needed = Event(1, "crash")
    tl = Timeline("r", "s", {"p": "1"}, events=(Event(0, "abort"), needed, Event(2, "reject"),
                                                 Event(3, "kubelet-sick", "n", "cni")))

    def fake_play(t: Timeline, **_: object) -> Played:
        broke = [Found("hung", "x")] if needed in t.events else [Found("other", "y")]
        return Played(t, "failed", broke, Coverage(), [], rounds=10)

    monkeypatch.setattr(search, "play", fake_play)
    first = fake_play(tl)
    small = shrink(first)
    assert small.timeline.events == (needed,)
    assert small.timeline.invariant == "hung"
    assert replace(small.timeline, invariant="", note="").events == (needed,)
