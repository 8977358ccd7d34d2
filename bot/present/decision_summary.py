"""The one-screen decision summary that opens a transcript: who decided what, and what changed.

A postmortem reader first wants the decisions, not the step detail: what happened, who asked for
the run, who approved or rejected which plan and why, which interlocks refused, which break-glass
overrides were used, what changed in the cluster and in EC2, what the run left in place, and how
long each wait took (for an approval, for the world). This module derives that from the same audit
events and step records the rest of the transcript shows, so every line of the summary is backed
by an event the chain verifies; the detail and the timeline follow it in the document.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from bot.engine.events import EventType
from bot.present.events import describe
from bot.store.audit import Event

# Change target kinds that are EC2 resources; every other kind is a Kubernetes object.
EC2_KINDS = frozenset({"Instance", "Volume", "Snapshot"})

_OPENS: dict[str, str] = {EventType.APPROVAL_REQUESTED: "approval",
                          EventType.CONFIRMATION_REQUESTED: "confirmation"}
_DECIDED: dict[str, str] = {EventType.APPROVAL_GRANTED: "approved", EventType.APPROVAL_REJECTED: "rejected",
            EventType.APPROVAL_EXPIRED: "expired", EventType.APPROVAL_INVALIDATED: "invalidated",
            EventType.STEP_CONFIRMED: "confirmed", EventType.RUN_ABORTED: "aborted"}
_ENDS: dict[str, str] = {EventType.STEP_SUCCEEDED: "done", EventType.STEP_FAILED: "failed",
         EventType.RUN_ABORTED: "aborted"}


class _Step(Protocol):
    """What the summary reads of a transcript's step record."""

    @property
    def key(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def plan(self) -> Any: ...


@dataclass(frozen=True)
class Line:
    """One decision or refusal: when, who, on which step, and the sentence the audit gives it."""

    at: str
    by: str
    step: str
    kind: str
    text: str
    seq: int


@dataclass(frozen=True)
class ChangeLine:
    step: str
    system: str  # "cluster" or "EC2"
    text: str


@dataclass(frozen=True)
class Wait:
    """A span the run spent waiting: for people (approval, confirmation) or for the world."""

    step: str
    kind: str  # approval, confirmation, world
    started: str
    ended: str | None
    seconds: float | None
    outcome: str  # approved, rejected, expired, done, failed, still waiting, ...


@dataclass(frozen=True)
class DecisionSummary:
    happened: str
    requester: str
    decisions: list[Line]
    interlocks: list[Line]
    break_glass: list[Line]
    changes: list[ChangeLine]
    in_place: list[str]
    waits: list[Wait]

    @property
    def cluster_changes(self) -> list[ChangeLine]:
        return [c for c in self.changes if c.system == "cluster"]

    @property
    def ec2_changes(self) -> list[ChangeLine]:
        return [c for c in self.changes if c.system == "EC2"]


def _seconds(start: str, end: str | None) -> float | None:
    if end is None:
        return None
    try:
        return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)
    except ValueError:
        return None


def _change_text(c: Mapping[str, Any]) -> str:
    before, after = c.get("before", ""), c.get("after", "")
    arrow = f": {before} → {after}" if before or after else ""
    return f"{c.get('operation', '')} {c.get('target_kind', '')} {c.get('target', '')}{arrow}"


def _changes(steps: Iterable[_Step], dry_run: bool) -> list[ChangeLine]:
    """What the run changed: the planned changes of every step that applied successfully."""
    if dry_run:
        return []
    out = []
    for s in steps:
        if s.status != "succeeded" or s.plan is None:
            continue
        for c in s.plan.changes:
            system = "EC2" if c.get("target_kind") in EC2_KINDS else "cluster"
            out.append(ChangeLine(s.key, system, _change_text(c)))
    return out


def _happened(status: str, outcome: str, dry_run: bool) -> str:
    if dry_run:  # the outcome of a finished dry run is what a real run would do
        return f"dry run: {outcome or status}; nothing was changed"
    return f"{status}: {outcome}" if outcome else status


def build_summary(*, events: Sequence[Event], steps: Sequence[_Step], at: Any,
                  status: str, outcome: str, dry_run: bool, requester: str,
                  compensations: Sequence[str], now: str | None) -> DecisionSummary:
    """The decision summary of a run (``at`` converts a stored time to the transcript's zone)."""
    decisions: list[Line] = []
    interlocks: list[Line] = []
    break_glass: list[Line] = []
    waits: list[Wait] = []
    open_waits: dict[str, tuple[str, str]] = {}  # step -> (kind, started) of a wait in progress
    first_poll: dict[str, str] = {}
    applied: dict[str, str] = {}  # step -> when its apply finished (a wait for the world follows)

    def close(step: str, when: str, outcome_: str) -> None:
        kind, started = open_waits.pop(step)
        waits.append(Wait(step, kind, started, when, _seconds(started, when), outcome_))

    for ev in events:
        t, p = ev.type, ev.payload
        raw_step = p.get("step")
        step = raw_step if isinstance(raw_step, str) else ""
        when = at(ev.ts)
        if t in _OPENS:
            if step in open_waits:  # asked again (a new plan): the earlier question is over
                close(step, when, "asked again")
            open_waits[step] = (_OPENS[t], when)
        elif t == EventType.STEP_APPLYING and step in open_waits:
            close(step, when, "approved")
        elif t == EventType.COMMAND_REFUSED:
            decisions.append(Line(when, ev.actor, step, "refused", describe(ev), ev.seq))
        elif t in _DECIDED:
            if t == EventType.RUN_ABORTED:
                for s in list(open_waits):
                    close(s, when, "aborted")
                decisions.append(Line(when, ev.actor, "", "aborted", describe(ev), ev.seq))
                continue
            if t == EventType.APPROVAL_GRANTED and p.get("count", 0) < p.get("needed", 1):
                decisions.append(Line(when, ev.actor, step, "approved", describe(ev), ev.seq))
                continue
            if step in open_waits:
                close(step, when, _DECIDED[t])
            decisions.append(Line(when, ev.actor, step, _DECIDED[t], describe(ev), ev.seq))
        elif t == EventType.INTERLOCK_BLOCKED:
            interlocks.append(Line(when, ev.actor, step, str(p.get("rule", "")), describe(ev), ev.seq))
        elif t in (EventType.INTERLOCK_OVERRIDE_REQUESTED, EventType.INTERLOCK_OVERRIDE_GRANTED,
                   EventType.INTERLOCK_OVERRIDDEN):
            break_glass.append(Line(when, ev.actor, step, str(p.get("rule", "")), describe(ev), ev.seq))
        elif t == EventType.STEP_APPLIED:
            applied[step] = when
        elif t == EventType.STEP_POLLED:
            first_poll.setdefault(step, applied.pop(step, when))
            if p.get("done") and step in first_poll:
                started = first_poll.pop(step)
                waits.append(Wait(step, "world", started, when, _seconds(started, when), "done"))
        elif t in _ENDS and step in first_poll:
            started = first_poll.pop(step)
            waits.append(Wait(step, "world", started, when, _seconds(started, when), _ENDS[t]))
    for step, (kind, started) in open_waits.items():
        waits.append(Wait(step, kind, started, None, _seconds(started, now), "still waiting"))
    for step, started in first_poll.items():
        waits.append(Wait(step, "world", started, None, _seconds(started, now), "still waiting"))
    waits.sort(key=lambda w: w.started)
    return DecisionSummary(
        happened=_happened(status, outcome, dry_run), requester=requester, decisions=decisions,
        interlocks=interlocks, break_glass=break_glass, changes=_changes(steps, dry_run),
        in_place=list(compensations), waits=waits)
