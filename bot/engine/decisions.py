"""What the conductor hands the runner: decisions, and the tick that collects a step's changes.

A ``Decision`` says what to do next (plan a step, apply a plan, sleep until, wait for people, or
nothing: the run is finished). A ``Tick`` gathers what one decision and its outcome produced, the
audit events, the changed step rows and the messages to post, which the runner saves in one
transaction. Times are ISO-8601 strings in state and events, datetimes in the code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.engine.plan import Plan
from bot.engine.runstate import AuditDraft
from bot.engine.state import RunStatus


def iso(when: datetime) -> str:
    return when.isoformat()


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


@dataclass
class Tick:
    """What one decision or outcome produced: audit events, changed steps, messages to post."""

    events: list[AuditDraft] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)
    header_dirty: bool = False
    messages: list[str] = field(default_factory=list)

    def merge(self, other: Tick) -> None:
        self.events += other.events
        self.dirty |= other.dirty
        self.header_dirty |= other.header_dirty
        self.messages += other.messages


@dataclass(frozen=True)
class PlanStep:
    key: str
    action: str
    params: Mapping[str, Any]
    overrides: frozenset[str]
    recheck: bool  # the re-plan just before apply


@dataclass(frozen=True)
class ApplyStep:
    key: str
    action: str
    plan: Plan
    overrides: frozenset[str]
    confirmed_by: str | None
    poll: bool  # another poll of a step that is waiting


@dataclass(frozen=True)
class Sleep:
    until: datetime


@dataclass(frozen=True)
class AwaitPeople:
    key: str
    until: datetime | None  # the approval expiry, when there is one


@dataclass(frozen=True)
class Finished:
    status: RunStatus


Decision = PlanStep | ApplyStep | Sleep | AwaitPeople | Finished
