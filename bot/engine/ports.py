"""Ports: the Protocols through which the engine reaches everything outside it.

The engine imports no SDK, no database driver and no front-end. It is handed implementations of
these at wiring time (``bot/cli/wiring.py``), and tests hand it in-memory ones. A front-end that
reads runs back from the store on its own (the Slack outbox) does so through ``RunHistory``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel

from bot.engine.plan import ApiCall, Plan, Result
from bot.engine.runstate import AuditDraft, RunState
from bot.errors import InterlockBlocked
from bot.runbook.model import Runbook


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
class SharedReads:
    """API reads shared by the plans and applies of one pass of a run.

    The runner makes one per pass: from the moment it takes a run up until the run waits (for
    time or for people) or ends. Within a pass, an object or a list read once is served again to
    every step (and every node of a step) that asks, instead of being read again; any write
    through a client clears all of it, since a write can make controllers change other objects
    too (the object written is then served as the write's answer returned it). A pass never
    spans an approval: a step waiting for people ends the pass, so what an apply's interlocks
    read was read after the approval. A ``StepContext`` built without one gets
    its own, shared only within that one plan or apply.

    The clients own the keys and values (``bot.clients``); what is served from here is recorded
    in the step's calls with the outcome ``cached``, never as a call made.
    """

    entries: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    served: int = 0  # reads answered from here rather than sent

    def get(self, key: tuple[Any, ...]) -> Any | None:
        return self.entries.get(key)

    def put(self, key: tuple[Any, ...], value: Any) -> None:
        self.entries[key] = value

    def items(self) -> list[tuple[tuple[Any, ...], Any]]:
        return list(self.entries.items())

    def clear(self) -> None:
        self.entries.clear()


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
    confirmed_by: str | None = None  # who confirmed a manual.confirm item
    approvers: tuple[str, ...] = ()  # whose approval (or break-glass) let this apply go ahead
    reads: SharedReads = field(default_factory=SharedReads)  # the pass's reads (see SharedReads)
    poll: bool = False  # this apply checks on a change an earlier apply of the step already made
    applying_since: datetime | None = None  # when the step's first apply began (its own deadlines)
    last_result: Mapping[str, Any] | None = None  # a poll: what the step's previous apply returned

    def interlock(self, *, rule: str, ok: bool, message: str, count: int | None = None) -> None:
        """Enforce a safety rule: raise InterlockBlocked unless it holds or was broken-glass.

        A rule that counts (``count``: how many nodes the step would leave out of service) is
        overridden only by a break-glass that named a number (``rule<=N`` in ``overrides``), and
        only up to that number: an override for N never allows N + 1."""
        if ok:
            return
        if count is None and rule in self.overrides:
            self.overridden.append(rule)
            return
        limit = override_limit(self.overrides, rule)
        if count is not None and limit is not None and count <= limit:
            self.overridden.append(rule)
            return
        if count is not None and limit is not None:
            message += f" (the break-glass override allows {limit}, this would make {count})"
        raise InterlockBlocked(rule, message, count=count)


def override_limit(overrides: frozenset[str] | set[str] | list[str], rule: str) -> int | None:
    """The number a break-glass override of ``rule`` allows (``rule<=N``), or None."""
    limits = [int(o.split("<=", 1)[1]) for o in overrides if o.startswith(f"{rule}<=")]
    return min(limits) if limits else None


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
    """Looks up actions by name and runs their plan/apply, and says what a run acts on and as
    whom: asked once per cluster a run touches (``cluster_of`` names the cluster a step's action
    would touch, None when it touches none or the name is not configured, which the plan itself
    reports; ``resolve_context`` never raises: what it could not find is listed in
    ``problems``). A catalog with nothing to say returns None from ``cluster_of``."""

    def spec(self, name: str) -> ActionSpecLike: ...
    def plan(self, name: str, params: BaseModel | Mapping[str, Any], ctx: StepContext) -> Plan: ...
    def apply(self, name: str, plan: Plan, ctx: StepContext) -> Result: ...
    def cluster_of(self, name: str, params: Mapping[str, Any], ctx: StepContext) -> str | None: ...
    def resolve_context(self, cluster: str, ctx: StepContext) -> dict[str, Any]: ...


class RunStore(Protocol):
    """Durable runs, their steps and their audit chains (``bot/store/db.py``).

    ``save`` is atomic: the header, the changed step rows and the new audit events (chained onto
    the run's stored head) are written in one transaction, and only while ``owner`` holds the
    lease; otherwise it raises LeaseHeld and writes nothing. ``claim`` takes the lease when it is
    free, expired, already ours, or held by ``replace`` (a dead owner the runner identified);
    ``renew`` extends a lease only while ``owner`` still holds it (the heartbeat).
    """

    def create(self, state: RunState, events: Sequence[AuditDraft]) -> None: ...
    def claim(self, run_id: str, *, owner: str, now: datetime, ttl: float,
              replace: str | None = None) -> bool: ...
    def lease_of(self, run_id: str) -> tuple[str | None, float | None]: ...
    def renew(self, run_id: str, *, owner: str, now: datetime, ttl: float) -> bool: ...
    def release(self, run_id: str, *, owner: str) -> None: ...
    def load(self, run_id: str) -> RunState: ...
    def save(self, state: RunState, *, owner: str, steps: Iterable[str],
             events: Sequence[AuditDraft], next_check_at: datetime | None,
             lease_until: datetime) -> None: ...
    def due(self, *, now: datetime, limit: int = 100) -> list[str]: ...
    def runs(self, *, active: bool | None = None, channel: str | None = None,
             limit: int = 50) -> list[RunState]: ...
    def children(self, run_id: str, *, limit: int = 50) -> list[RunState]: ...
    def holding(self, compensation: str, *, lifted_by: str) -> str | None: ...


class StoredEvent(Protocol):
    """An audit event as the store holds it, chained (``bot.store.audit.Event``)."""

    @property
    def seq(self) -> int: ...
    @property
    def ts(self) -> str: ...
    @property
    def actor(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def payload(self) -> Mapping[str, Any]: ...
    @property
    def hash(self) -> str: ...


class RunHistory(Protocol):
    """A run as the store holds it, read by a front-end that catches up on its own (the Slack
    outbox): the run's state and its audit events after ``after``, in order, at most ``limit``."""

    def load(self, run_id: str) -> RunState: ...
    def events(self, run_id: str, *, after: int = 0,
               limit: int | None = None) -> Sequence[StoredEvent]: ...


class RefusalLog(Protocol):
    """Requests refused before any run existed (a start, an unauthenticated API call), kept in an
    append-only hash chain of their own (``bot/store/refusals.py``). ``record`` redacts what it
    is given before it hashes or stores it."""

    def record(self, *, ts: str, actor: str, what: str, reason: str,
               via: Mapping[str, Any]) -> None: ...


class Notifier(Protocol):
    """A front-end that shows runs as they change. Failures here never break a run."""

    def run_changed(self, state: RunState, *, events: Sequence[AuditDraft],
                    messages: Sequence[str]) -> None: ...


class RunbookSource(Protocol):
    """Where runbooks come from: name -> (parsed runbook, its YAML text, its file).

    ``parse`` is the process's one cache of parsed runbooks (``bot.runbook.source.ParseCache``,
    bounded by count): the runner resumes runs through it and front-ends read runbooks through it,
    so none keeps a cache of its own.
    """

    def get(self, name: str) -> tuple[Runbook, str, str]: ...
    def parse(self, text: str, *, file: str) -> Runbook: ...
