"""Every counterexample the explorer ever found replays, and the invariant it broke holds now."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.sim.explore.driver import play
from bot.sim.explore.timeline import load

CASES = sorted((Path(__file__).parent / "cases").glob("*.yaml"))


def test_there_are_saved_cases() -> None:
    assert CASES


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_a_saved_counterexample_no_longer_breaks_its_invariant(case: Path) -> None:
    tl = load(case)
    p = play(tl)
    assert not [f for f in p.found if f.invariant == tl.invariant], "\n".join(
        [tl.words(), *p.trace, *(f"{f.invariant}: {f.details}" for f in p.found)])
    assert not p.found, [f"{f.invariant}: {f.details}" for f in p.found]
