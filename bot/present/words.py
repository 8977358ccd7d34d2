"""The words a person reads for a step's conditions, instead of the runbook's expressions.

A runbook gives its ``when``, guards and waits a short sentence each (``when.because``,
``guards[].checks``, ``wait_until.waiting_for``; docs/runbook-language.md#words). This module
renders them, templated like titles with what the run knows, into ``StepWords``; the views put
them where the expressions used to be and keep the expressions as ``details`` for whoever asks
(the Slack thread, ``status --verbose``, a transcript's step details). A condition the runbook
gives no words reads as a plain generic sentence, never as code.

``wait_text`` is the one sentence of a wait in every view ("2 of 3 volumes attached, next check in
15s, gives up at 16:45 UTC"); each view only says how it writes a time. ``collapse`` groups
consecutive skipped steps, which the terminal and the Slack card show as one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from bot.engine.events import EventType
from bot.engine.runstate import RunState, StepState
from bot.engine.scope import Scope
from bot.present import times
from bot.runbook.model import Runbook, Step
from bot.runbook.params import written_params
from bot.runbook.templating import render_known

NOT_NEEDED = "its condition did not hold"  # a skipped step whose runbook gives no words
WAITING = "its condition to hold"  # a wait whose runbook gives no words
RAW_PREFIXES = ("when is false: ", "waiting until ")  # the engine's own texts, which quote code


@dataclass(frozen=True)
class StepWords:
    """What a step's conditions say, rendered; ``details`` holds the expressions behind them."""

    skipped: str = ""  # why a skipped step was not needed
    waiting_for: str = ""  # what a waiting step waits for, with its progress
    gives_up_at: str | None = None  # ISO-8601: when the wait times out
    guards: tuple[str, ...] = ()  # per guard, what it makes sure of
    details: tuple[str, ...] = ()  # "when: <expr>", "waits until: <expr>", "guard: <expr>"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def context_of(state: RunState, runbook: Runbook) -> dict[str, Any]:
    """What the words of a run's steps are rendered with: its params as written, its steps."""
    scope = Scope(state, frozenset(s.id for s in runbook.spec.steps if s.foreach))
    return {**scope.context(), "params": written_params(runbook, dict(state.params))}


def _gives_up_at(step: Step, s: StepState) -> str | None:
    wait = step.wait_until
    start = times.instant(s.poll_started_at) if wait is not None else None
    if wait is not None and start is not None:
        return (start + timedelta(seconds=wait.timeout)).isoformat()
    started = times.instant(s.applying_since)
    if step.timeout is not None and started is not None:
        return (started + timedelta(seconds=step.timeout)).isoformat()
    return None


def step_words(step: Step, s: StepState, ctx: Mapping[str, Any]) -> StepWords:
    """The words of one step instance's conditions, rendered with ``ctx`` (the run's context)."""
    local = {**ctx, "item": s.item, "result": s.result or {}, "plan": s.plan or {}}
    details: list[str] = []
    skipped = ""
    if step.when_expr is not None:
        details.append(f"when: {_one_line(step.when_expr)}")
        if str(s.status) == "skipped":
            because = step.when_because
            skipped = _one_line(render_known(because, ctx)) if because else NOT_NEEDED
    guards = []
    for g in step.guards:
        details.append(f"guard: {_one_line(g.expr)}")
        guards.append(_one_line(render_known(g.checks, local)) if g.checks else "")
    waiting_for = ""
    if step.wait_until is not None:
        details.append(f"waits until: {_one_line(step.wait_until.expr)}")
        said = step.wait_until.waiting_for
        waiting_for = _one_line(render_known(said, local)) if said else ""
    if not waiting_for and s.progress and not s.progress.startswith(RAW_PREFIXES):
        waiting_for = s.progress  # the action's own words ("0 of 1 detached")
    if not waiting_for and step.wait_until is not None:
        waiting_for = WAITING
    return StepWords(skipped=skipped, waiting_for=waiting_for, gives_up_at=_gives_up_at(step, s),
                     guards=tuple(guards), details=tuple(details))


def words_by_key(state: RunState, runbook: Runbook | None) -> dict[str, StepWords]:
    """The words of every step instance of a run, by key; none without its runbook."""
    if runbook is None:
        return {}
    steps = {s.id: s for s in runbook.spec.steps}
    ctx = context_of(state, runbook)
    return {s.key: step_words(steps[s.step_id], s, ctx) for s in state.steps.values()
            if s.step_id in steps}


def words_for(state: RunState, runbook: Runbook | None, key: str) -> StepWords | None:
    """The words of one step instance (``words_by_key`` for one key)."""
    s = state.steps.get(key)
    step = next((x for x in runbook.spec.steps if x.id == s.step_id), None) if (
        runbook is not None and s is not None) else None
    if runbook is None or s is None or step is None:
        return None
    return step_words(step, s, context_of(state, runbook))


def plain_message(s: StepState) -> str:
    """A step's message without the engine's quoted code, for a view that has no runbook."""
    return NOT_NEEDED if s.message.startswith(RAW_PREFIXES[0]) else s.message


def plain_progress(s: StepState) -> str:
    return WAITING if s.progress.startswith(RAW_PREFIXES[1]) else s.progress


class Waiting(Protocol):
    @property
    def progress(self) -> str: ...
    @property
    def next_check_at(self) -> str | None: ...
    @property
    def gives_up_at(self) -> str | None: ...


def wait_text(step: Waiting, *, now: datetime | None, at: Callable[[str | None], str]) -> str:
    """A wait in words: what it waits for, when it checks next, when it gives up; ``at`` writes a
    time the way the view does (its zone, or Slack's date token)."""
    parts = [step.progress or "waiting"]
    if step.next_check_at:
        left = times.until(step.next_check_at, now)
        parts.append(f"next check {left}" if left else f"next check at {at(step.next_check_at)}")
    if step.gives_up_at:
        parts.append(f"gives up at {at(step.gives_up_at)}")
    return ", ".join(parts)


class Skippable(Protocol):
    @property
    def not_needed(self) -> bool: ...
    @property
    def message(self) -> str: ...


V = TypeVar("V", bound=Skippable)


@dataclass(frozen=True)
class Skipped:
    """Consecutive skipped steps, shown as one line."""

    steps: tuple[Any, ...]

    def line(self) -> str:
        """``6 steps not needed: <why>, <why>`` (each different reason once)."""
        reasons = list(dict.fromkeys(s.message for s in self.steps if s.message))
        n = len(self.steps)
        head = f"{n} step{'s' if n != 1 else ''} not needed"
        return head + (": " + ", ".join(reasons) if reasons else "")


def collapse(steps: Sequence[V], *, least: int = 2) -> list[V | Skipped]:
    """The steps in order, each run of at least ``least`` consecutive steps skipped as not needed
    (their ``when`` did not hold) as one ``Skipped``."""
    out: list[V | Skipped] = []
    run: list[V] = []

    def flush() -> None:
        if len(run) >= least:
            out.append(Skipped(tuple(run)))
        else:
            out.extend(run)
        run.clear()

    for s in steps:
        if s.not_needed:
            run.append(s)
            continue
        flush()
        out.append(s)
    flush()
    return out


# -- a transcript's timeline: the recorded texts that quote an expression, in words ---------------

_ELAPSED = re.compile(r"\((\d+)s of (\d+)s\)$")


def guard_said(step: Step | None, words: StepWords | None, expr: str) -> str:
    """The words of the guard of ``step`` whose expression is ``expr`` ("" when none)."""
    if step is None or words is None:
        return ""
    return next((w for g, w in zip(step.guards, words.guards, strict=False) if g.expr == expr), "")


def timeline_words(type_: str, payload: Mapping[str, Any], *, step: Step | None,
                   words: StepWords | None) -> tuple[str, str] | None:
    """(words, expression) for a recorded event whose text quotes an expression (a skip, a guard,
    a poll of a wait); None for any other, which reads as recorded."""
    if type_ == EventType.STEP_SKIPPED:
        reason = str(payload.get("reason", ""))
        if not reason.startswith(RAW_PREFIXES[0]):
            return None
        return (f"not needed: {words.skipped if words and words.skipped else NOT_NEEDED}",
                reason.removeprefix(RAW_PREFIXES[0]))
    if type_ in (EventType.GUARD_PASSED, EventType.GUARD_FAILED):
        expr = str(payload.get("expr", ""))
        if type_ == EventType.GUARD_FAILED:  # its message says what is wrong, in words
            return f"guard failed: {payload.get('message', '')}", expr
        said = guard_said(step, words, expr)
        return "guard passed" + (f": {said}" if said else ""), expr
    progress = str(payload.get("progress") or "")
    if type_ == EventType.STEP_POLLED and progress.startswith(RAW_PREFIXES[1]):
        m = _ELAPSED.search(progress)
        elapsed = (f" ({times.duration(float(m.group(1)))} of {times.duration(float(m.group(2)))})"
                   if m else "")
        expr = _ELAPSED.sub("", progress.removeprefix(RAW_PREFIXES[1])).strip()
        return (f"polled: {len(payload.get('calls') or [])} API call(s), still waiting"
                f"{elapsed}", expr)
    return None


R = TypeVar("R")


class Worded:
    """A transcript's records in the words of the run's runbook (``bot.present.transcript``): the
    expressions move to ``details`` and ``code``, the words take their place."""

    def __init__(self, state: RunState, runbook: Runbook | None) -> None:
        self.state = state
        self.words = words_by_key(state, runbook)
        self.steps = {s.id: s for s in runbook.spec.steps} if runbook is not None else {}

    def _of(self, key: str) -> tuple[Step | None, StepWords | None]:
        s = self.state.steps.get(key)
        return self.steps.get(s.step_id if s else key.split("[")[0]), self.words.get(key)

    def record(self, r: R) -> R:
        """A ``StepRecord`` with its guards, skip and message in words, expressions in details."""
        step, w = self._of(getattr(r, "key", ""))
        skipped = NOT_NEEDED if not w or not w.skipped else w.skipped

        def plain(text: str) -> str:
            return skipped if text.startswith(RAW_PREFIXES[0]) else text

        guards = [replace(g, words=guard_said(step, w, g.expr)) for g in getattr(r, "guards", ())]
        return replace(r, guards=guards,  # type: ignore[type-var]
                       skipped_because=plain(getattr(r, "skipped_because", "")),
                       message=plain(getattr(r, "message", "")),
                       details=list(w.details) if w else [])

    def timeline(self, type_: str, payload: Mapping[str, Any]) -> tuple[str, str] | None:
        key = str(payload.get("step", ""))
        step, w = self._of(key)
        return timeline_words(type_, payload, step=step, words=w)
