"""A rehearsal's verdict on its run: the sandbox's invariant violations, each either overridden
(explained by a recorded two-person break-glass of the interlock that guards it) or not.

Decided once for every rehearsal, explorer and benchmark: a write made under a recorded override
is reported as ``overridden``, with the two people and their reasons, not as an unexplained
violation; and it never counts as a clean pass for the runbook that asked for it (``clean`` is
False). Every other violation stays absolute, whatever overrides the run holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.sim.invariants import Violation

# the invariant a break-glass of each interlock may knowingly break
GUARDED_BY = {"fence-of-live": "fence-live", "oos-taint-on-running": "oos-taint"}
SAME_PASS = 1.0  # seconds: the violation and the override are of one pass of the run


@dataclass(frozen=True)
class Overridden:
    violation: Violation
    step: str
    rule: str
    approvers: tuple[str, ...]
    reasons: tuple[str, ...]

    def words(self) -> str:
        return (f"{self.violation.kind} ({self.violation.details}) overridden at step {self.step} "
                f"by {' and '.join(self.approvers)}: " + "; ".join(self.reasons))


@dataclass(frozen=True)
class Verdict:
    violations: tuple[Violation, ...]  # unexplained: always a failure
    overridden: tuple[Overridden, ...]

    @property
    def clean(self) -> bool:
        """No violation at all: an override may have been right, but it is not a pass."""
        return not self.violations and not self.overridden


def at(value: str) -> datetime:
    """An audit event's or a violation's time (``Z`` or ``+00:00``)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _under(e: Any, rule: str) -> bool:
    """An apply begun under a break-glass of ``rule``: its mark, on record before it wrote, names
    the override (the worker may have died before the apply recorded it used)."""
    return e.type == "step.applying" and any(
        o == rule or str(o).startswith(f"{rule}<=") for o in e.payload.get("overrides") or ())


def _granted(v: Violation, events: Sequence[Any], step: str, rule: str,
             before: datetime) -> Overridden | None:
    """``v`` explained by the break-glass of ``rule`` on ``step`` in force at ``before``."""
    grants = [e for e in events if e.type == "interlock.override_granted"
              and e.payload.get("step") == step and e.payload.get("rule") == rule
              and at(e.ts) <= before]
    if not grants:
        return None
    reasons = tuple(str(e.payload.get("reason")) for e in events
                    if e.type == "interlock.override_requested" and e.payload.get("step") == step
                    and e.payload.get("rule") == rule and at(e.ts) <= at(grants[-1].ts))
    return Overridden(v, step, rule,
                      tuple(grants[-1].payload.get("approvers") or ()), reasons)


def judge(violations: Sequence[Violation], events: Iterable[Any]) -> Verdict:
    """``events``: the run's audit events (``type``, ``ts``, ``payload``)."""
    events = list(events)
    overrides = [e for e in events if e.type == "interlock.overridden"]
    plain: list[Violation] = []
    explained: list[Overridden] = []
    for v in violations:
        rule = GUARDED_BY.get(v.kind)
        near = [e for e in events if abs((at(e.ts) - at(v.time)).total_seconds()) <= SAME_PASS]
        hit = next((e for e in overrides if rule and e.payload.get("rule") == rule
                    and e in near), None)
        if hit is not None:
            explained.append(Overridden(v, str(hit.payload.get("step")), str(rule),
                                        tuple(hit.payload.get("approvers") or ()),
                                        tuple(hit.payload.get("reasons") or ())))
            continue
        begun = next((e for e in near if rule and _under(e, rule)), None)
        grant = (_granted(v, events, str(begun.payload.get("step")), str(rule), at(begun.ts))
                 if begun is not None and rule else None)
        if grant is None:
            plain.append(v)
            continue
        explained.append(grant)
    return Verdict(tuple(plain), tuple(explained))
