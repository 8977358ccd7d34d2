"""A timeline: one staged scenario, one runbook with its params, and the world events that
happen while it runs, drawn from a seed. Saved as YAML (``tests/explore/cases/*.yaml``) so that
every counterexample the explorer finds replays as a regression test, and printed as a readable
list for the person who has to understand it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from bot.sim.explore.catalogue import KINDS, Event
from bot.sim.sandbox import Sandbox

MAX_EVENTS = 8
GLASS_SHARE = 0.2  # the share of timelines in which people break glass when refused


@dataclass(frozen=True)
class Timeline:
    runbook: str
    scenario: str
    params: dict[str, str]
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    # for a saved counterexample: the invariant it broke, and what was said about it
    invariant: str = ""
    note: str = ""

    def without(self, drop: set[int]) -> Timeline:
        return replace(self, events=tuple(e for i, e in enumerate(self.events) if i not in drop))

    def words(self) -> str:
        head = (f"runbook {self.runbook} on scenario {self.scenario} (seed {self.seed}), params "
                + ", ".join(f"{k}={v}" for k, v in sorted(self.params.items())))
        lines = [head] + [f"  round {e.round:>3}: {e.words()}" for e in self.events]
        if not self.events:
            lines.append("  (no world event)")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runbook": self.runbook, "scenario": self.scenario,
                               "params": dict(self.params), "seed": self.seed}
        if self.options:
            out["options"] = dict(self.options)
        if self.invariant:
            out["invariant"] = self.invariant
        if self.note:
            out["note"] = self.note
        out["events"] = [e.as_dict() for e in self.events]
        return out

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.as_dict(), sort_keys=False, width=100))


def load(path: Path) -> Timeline:
    """A saved timeline; an unknown event kind is named with the file and the known kinds."""
    data = yaml.safe_load(path.read_text())
    events = []
    for i, raw in enumerate(data.get("events") or ()):
        if raw.get("kind") not in KINDS:
            raise ValueError(f"{path}: events[{i}].kind {raw.get('kind')!r} is not a world event; "
                             f"known: {', '.join(KINDS)}")
        events.append(Event(round=int(raw["round"]), kind=str(raw["kind"]),
                            target=str(raw.get("target") or ""), arg=str(raw.get("arg") or "")))
    return Timeline(runbook=str(data["runbook"]), scenario=str(data["scenario"]),
                    params={str(k): str(v) for k, v in (data.get("params") or {}).items()},
                    seed=int(data.get("seed") or 0), options=dict(data.get("options") or {}),
                    events=tuple(events), invariant=str(data.get("invariant") or ""),
                    note=str(data.get("note") or ""))


def _focus(sb: Sandbox) -> list[str]:
    """The nodes the incident is about (the scenario's facts), drawn more often than others."""
    f = sb.facts
    named = [f.get("node"), f.get("dead_node"), *(f.get("dead_nodes") or ())]
    return sorted({n for n in named if isinstance(n, str) and sb.find("Node", None, n)})


def draw(sb: Sandbox, *, seed: int, rounds: int, families: frozenset[str] | None = None,
         max_events: int = MAX_EVENTS) -> tuple[Event, ...]:
    """Up to ``max_events`` world events over ``rounds`` rounds, from ``seed`` and the staged
    world (the targets that exist in it)."""
    rng = random.Random(seed)
    kinds = [k for k, v in KINDS.items() if v.weight and (families is None or v.family in families)]
    weights = [KINDS[k].weight for k in kinds]
    focus = _focus(sb)
    out: list[Event] = []
    for _ in range(rng.randint(1, max_events)):
        name = rng.choices(kinds, weights)[0]
        kind = KINDS[name]
        target = ""
        if kind.targets is not None:
            pool = kind.targets(sb)
            if kind.targets.__name__ == "_nodes" and focus and rng.random() < 0.7:
                pool = focus
            if not pool:
                continue
            target = rng.choice(pool)
        arg = rng.choice(kind.args) if kind.args else ""
        # early rounds weigh more: the interleavings with plans and approvals come first
        at = min(rounds - 1, int(rng.expovariate(4.0 / rounds)))
        out.append(Event(round=at, kind=name, target=target, arg=arg))
    # people who break glass, in one timeline in GLASS_SHARE, drawn apart from the rest
    glass = random.Random(f"{seed}/break-glass")
    if (families is None or "people" in families) and glass.random() < GLASS_SHARE:
        out.append(Event(round=min(rounds - 1, int(glass.expovariate(4.0 / rounds))),
                         kind="break-glass"))
    return tuple(sorted(out, key=lambda e: e.round))
