"""Ports: the Protocols through which the engine reaches everything outside it.

The engine imports no SDK, no database driver and no front-end. It is handed implementations of
these at wiring time (``bot/cli.py``), and tests hand it in-memory ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel

from bot.engine.plan import ApiCall, Plan, Result
from bot.errors import InterlockBlocked


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to: tests and the sandbox run hours of waits instantly."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)

    def set(self, when: datetime) -> None:
        self._now = when


@dataclass
class StepContext:
    """What an action may know about the step it runs in. Built fresh for every plan and apply."""

    run_id: str
    step_id: str
    requester: str
    clock: Clock
    dry_run: bool = False
    params: Mapping[str, Any] = field(default_factory=dict)  # the run's params (e.g. cluster)
    overrides: frozenset[str] = frozenset()  # interlock rules broken-glass for this step
    calls: list[ApiCall] = field(default_factory=list)  # every API call made, in order
    overridden: list[str] = field(default_factory=list)  # interlocks that failed but were overridden
    progress: str = ""  # set by long-running actions while they wait

    def interlock(self, *, rule: str, ok: bool, message: str) -> None:
        """Enforce a safety rule: raise InterlockBlocked unless it holds or was broken-glass."""
        if ok:
            return
        if rule in self.overrides:
            self.overridden.append(rule)
            return
        raise InterlockBlocked(rule, message)


class ActionSpecLike(Protocol):
    """The static facts about an action that validation and policy need."""

    @property
    def name(self) -> str: ...
    @property
    def params_model(self) -> type[BaseModel]: ...
    @property
    def destructive(self) -> bool: ...
    @property
    def summary(self) -> str: ...


class ActionCatalog(Protocol):
    """Looks up actions by name and runs their plan/apply."""

    def spec(self, name: str) -> ActionSpecLike: ...
    def plan(self, name: str, params: BaseModel, ctx: StepContext) -> Plan: ...
    def apply(self, name: str, plan: Plan, ctx: StepContext) -> Result: ...
