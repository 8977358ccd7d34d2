"""The search: many timelines from one seed, each failure shrunk to the fewest world events that
still break the same invariant, and the coverage of what the search reached.

Shrinking is delta debugging over the timeline's events (halves, then single events), replaying
each candidate from scratch; a candidate counts only if it breaks the *same* invariant, so a
shrink never trades the bug it was given for another.

Where the platform forks, the scenario is staged once and each timeline is played in a fork of it
over the in-process transport (``fork``, ``bot.sim.inprocess``). One timeline in ``check_every``
is played again over HTTP, in a fork that serves the staged world on sockets (moto as shipped, on
its own server); the first timeline, and every counterexample before it is reported, as a process
of its own would, on a world staged afresh over HTTP. A different result is an explorer error
(``Report.errors``), a fault of the sandbox's fast path that no runbook is blamed for.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bot.sim.explore.driver import Coverage, Played, play, staged, suggested_params
from bot.sim.explore.fork import CAN_FORK, Stage
from bot.sim.explore.timeline import Timeline

CHECK_EVERY = 20  # one explored timeline in this many is played over HTTP too, and compared

# the scenario each shipped runbook is explored on by default: the incident it is for
SCENARIO_FOR: dict[str, str] = {
    "node-dead-ngns": "node-hung",
    "zone-outage-ngns": "az-outage",
    "node-not-ready-triage": "node-not-ready",
    "volume-affinity-conflict": "az-capacity-deadlock",
    "stuck-terminating-volume": "stuck-terminating",
    "zombie-volumeattachments": "zombie-attachments",
    "multi-attach-triage": "node-deleted-running",
}
# and the options that keep a timeline short without changing what the runbook meets
OPTIONS_FOR: dict[str, dict[str, object]] = {
    "zone-outage-ngns": {"nodes": 4, "volumes_per_node": 2, "hung": 1},
}


def base_timeline(runbook: str, scenario: str, *, params: dict[str, str] | None = None,
                  options: dict[str, object] | None = None,
                  runbooks_dir: str | None = None) -> Timeline:
    """The event-free timeline with the suggested params (``params`` override them). When
    diagnose suggests another runbook on this world (a small zone outage reads as single dead
    nodes), the params given are the run's, as the error asking for them promises."""
    tl = Timeline(runbook=runbook, scenario=scenario, params={}, options=dict(options or {}))
    with staged(tl, runbooks_dir=runbooks_dir) as r:
        try:
            found = suggested_params(r, runbook)
        except ValueError:
            if not params:
                raise
            found = {}
    return replace(tl, params={**found, **(params or {})})


def shrink(failed: Played, *, runbooks_dir: str | None = None, budget: float = 120.0,
           player: Callable[[Timeline], Played] | None = None) -> Played:
    """The fewest events of ``failed``'s timeline that still break its first invariant, each
    candidate played by ``player`` (staged afresh over HTTP unless given)."""
    target = failed.found[0].invariant
    best = failed
    deadline = time.monotonic() + budget

    def still(tl: Timeline) -> Played | None:
        p = player(tl) if player is not None else play(tl, runbooks_dir=runbooks_dir)
        return p if any(f.invariant == target for f in p.found) else None

    # events after the run ended never happened: drop them first
    events = best.timeline.events
    live = tuple(e for e in events if e.round < best.rounds)
    if len(live) < len(events) and (p := still(replace(best.timeline, events=live))):
        best = p
    chunk = max(1, len(best.timeline.events) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        i, shrunk = 0, False
        while i < len(best.timeline.events) and time.monotonic() < deadline:
            drop = set(range(i, min(i + chunk, len(best.timeline.events))))
            p = still(best.timeline.without(drop))
            if p is not None:
                best, shrunk = p, True
            else:
                i += chunk
        if not shrunk:
            chunk //= 2
    return replace(best, timeline=replace(best.timeline, invariant=target,
                                          note=best.found[0].details))


@dataclass
class Report:
    runbook: str
    scenario: str
    played: int = 0
    seconds: float = 0.0
    failures: list[Played] = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)
    ends: dict[str, int] = field(default_factory=dict)
    checked: int = 0  # timelines played both ways (a fork in-process, and staged over HTTP)
    errors: list[str] = field(default_factory=list)  # where the two ways disagreed

    def compare(self, fast: Played, http: Played) -> None:
        """Note a timeline played both ways; a difference is an explorer error."""
        self.checked += 1
        diff = fast.differences(http)
        if diff:
            self.errors.append(f"seed {fast.timeline.seed}: in a fork over the in-process "
                               "transport the timeline ended otherwise than over HTTP: "
                               + "; ".join(diff))

    def words(self, steps: list[str] | None = None) -> str:
        rate = self.played / self.seconds if self.seconds else 0.0
        lines = [f"{self.runbook} on {self.scenario}: {self.played} timeline(s) in "
                 f"{self.seconds:.1f} s ({rate:.2f}/s), {len(self.failures)} violation(s)",
                 "  run ends: " + ", ".join(f"{k} {v}" for k, v in sorted(self.ends.items()))]
        if self.checked:
            lines.append(f"  played over HTTP too: {self.checked} timeline(s), "
                         + (f"{len(self.errors)} ended otherwise" if self.errors else
                            "each with the same result"))
        lines += [f"  EXPLORER ERROR: {e}" for e in self.errors]
        if steps:
            ran = [s for s in steps if self.coverage.steps.get(s, set()) - {"skipped"}]
            lines.append(f"  steps run: {len(ran)} of {len(steps)} (the others only skipped "
                         "or never reached)")
            for s in steps:
                outcomes = ", ".join(sorted(self.coverage.steps.get(s, ()))) or "never reached"
                lines.append(f"    {s}: {outcomes}")
        lines.append("  interlocks: " + (", ".join(sorted(self.coverage.interlocks)) or "none hit"))
        return "\n".join(lines)


def explore(base: Timeline, *, count: int, seed: int = 0, budget: float | None = None,
            runbooks_dir: str | None = None, shrink_budget: float = 120.0,
            on_played: Callable[[Played], None] | None = None, fork: bool | None = None,
            check_every: int = CHECK_EVERY) -> Report:
    """Play up to ``count`` timelines (or until ``budget`` seconds), shrinking each failure.

    ``fork`` (the default where the platform has it): in forks of one staged world over the
    in-process transport, one timeline in ``check_every`` (0: none) checked against a play over
    HTTP of the same staged world, and the first and every counterexample against a play staged
    afresh over HTTP. Otherwise each is staged afresh over HTTP."""
    report = Report(base.runbook, base.scenario)
    start = time.monotonic()
    seen: set[str] = set()
    rng = random.Random(seed)
    forking = CAN_FORK if fork is None else fork
    stage: Stage | None = None
    try:
        for i in range(count):
            if budget is not None and time.monotonic() - start > budget:
                break
            tl = replace(base, seed=rng.randrange(2**31))
            if not forking:
                p = play(tl, runbooks_dir=runbooks_dir, draw_events=True)
            elif stage is None:
                # the first is played here, in-process on a world staged for it: that warms
                # what the forks will share (loaded models, parsed runbooks), then the world
                # they fork from is staged
                p = play(tl, runbooks_dir=runbooks_dir, draw_events=True, transport="inprocess")
                if check_every:
                    report.compare(p, play(tl, runbooks_dir=runbooks_dir, draw_events=True))
                if i + 1 < count:
                    stage = Stage(replace(base, params=p.timeline.params),
                                  runbooks_dir=runbooks_dir, warm=False)
            else:
                p = stage.play(tl, draw_events=True)
                if check_every and i % check_every == 0:
                    report.compare(p, stage.play(tl, draw_events=True, transport="http"))
            base = replace(base, params=p.timeline.params)  # diagnose once
            report.played += 1
            report.coverage.add(p.coverage)
            report.ends[p.status] = report.ends.get(p.status, 0) + 1
            if on_played:
                on_played(p)
            if p.found and p.found[0].invariant not in seen:
                seen.add(p.found[0].invariant)
                if forking and stage is None:
                    stage = Stage(replace(base, params=p.timeline.params),
                                  runbooks_dir=runbooks_dir, warm=False)
                small = shrink(p, runbooks_dir=runbooks_dir, budget=shrink_budget,
                               player=None if stage is None else stage.play)
                if stage is not None:  # what is reported is what a replay over HTTP shows
                    report.compare(stage.play(small.timeline),
                                   stage.play(small.timeline, transport="http", afresh=True))
                report.failures.append(small)
    finally:
        if stage is not None:
            stage.close()
    report.seconds = time.monotonic() - start
    return report


def save_case(p: Played, directory: Path) -> Path:
    tl = p.timeline
    path = directory / f"{tl.runbook}--{tl.invariant}--{tl.seed}.yaml"
    tl.save(path)
    return path
