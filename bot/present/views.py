"""View models of a run, free of any platform: what every front-end and transcript shows.

The terminal, Slack's Block Kit and the transcripts render these same objects, so a step reads the
same everywhere: its title, state, who approved it, the plan it applied, and what is pending.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from typing import Any

from bot.engine.agents import AgentRequest, agent_request
from bot.engine.runstate import RunState, StepState
from bot.engine.scope import Scope
from bot.engine.state import StepStatus
from bot.errors import RunbookBotError
from bot.present import times
from bot.present.words import (
    RAW_PREFIXES,
    StepWords,
    plain_message,
    plain_progress,
    wait_text,
    words_by_key,
)
from bot.runbook.loader import load_text
from bot.runbook.model import Runbook
from bot.runbook.params import written_params
from bot.runbook.templating import render_known

S = StepStatus
ICONS = {
    "pending": "·", "skipped": "⤼", "planning": "…", "awaiting_approval": "?", "applying": "▶",
    "waiting": "⏳", "succeeded": "✓", "failed": "✗", "rejected": "⊘", "expired": "⌛",
    "aborted": "■",
}


@dataclass(frozen=True)
class FactView:
    subject: str
    name: str
    value: Any
    read_at: str


@dataclass(frozen=True)
class StepView:
    key: str
    title: str
    status: str
    icon: str
    approvers: tuple[str, ...]
    summary: str  # the plan's one line
    changes: tuple[str, ...]  # one line per intended change
    facts: tuple[FactView, ...]
    guards: tuple[dict[str, Any], ...]
    progress: str
    message: str
    error: str
    pending: str  # what this step waits for, in words ("" when nothing)
    plan_hash: str | None
    blocked: dict[str, str] | None
    approval_text: str
    needs_approval: bool
    needs_confirmation: bool
    min_approvers: int
    groups: tuple[str, ...]
    expires_at: str | None
    result: dict[str, Any] | None
    votes: tuple[dict[str, Any], ...] = ()
    action: str | None = None
    destructive: bool = False
    next_check_at: str | None = None
    gives_up_at: str | None = None  # when a wait gives up
    guard_words: tuple[str, ...] = ()  # what each guard makes sure of, in words ("" for none)
    details: tuple[str, ...] = ()  # the expressions behind the words, for whoever asks
    not_needed: bool = False  # skipped because its ``when`` did not hold (not a dry run's skip)


@dataclass(frozen=True)
class ChildView:
    """A run that follows on from another, as its parent lists it."""

    run_id: str
    runbook: str
    status: str
    dry_run: bool


@dataclass(frozen=True)
class RunView:
    run_id: str
    runbook: str
    title: str
    status: str
    requester: str
    params: dict[str, Any]
    dry_run: bool
    created_at: str
    started_at: str | None
    finished_at: str | None
    outcome: str
    compensations: tuple[str, ...]
    steps: tuple[StepView, ...]
    # (id, title) of the steps not reached yet, titles rendered as far as known values allow
    not_reached: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # provenance (``engine/provenance.py``)
    owner: str = ""  # the incident commander now; the requester until handed over
    parent: str | None = None
    incident: str | None = None
    suggested_by: str | None = None  # alert:<ref> or diagnosis:<ref>
    children: tuple[ChildView, ...] = ()  # runs that follow on from this one
    agent_request: AgentRequest | None = None  # an AI agent asked for it (engine/agents.py)

    @property
    def handed_over(self) -> bool:
        return bool(self.owner) and self.owner != self.requester

    @property
    def pending_steps(self) -> tuple[str, ...]:
        """The titles of the steps not reached yet."""
        return tuple(title for _, title in self.not_reached)

    @property
    def waiting_on(self) -> StepView | None:
        return next((s for s in self.steps if s.pending), None)


def held_text(blocked: Mapping[str, Any] | None) -> str:
    """How a step a timed interlock holds reads ("" for any other): it plans itself again."""
    if not blocked or not blocked.get("recheck"):
        return ""
    until = f" until {blocked['until']}" if blocked.get("until") else ""
    return f"held: re-checked every {float(blocked['recheck']):.0f} s{until}"


def _pending(s: StepState) -> str:
    if s.status == S.AWAITING_APPROVAL:
        if held := held_text(s.blocked):
            b = s.blocked or {}
            return (f"{held}. Held by interlock {b.get('rule')}: {b.get('message')} (break "
                    "glass, retry or abort at any time)")
        if s.blocked:
            return (f"blocked by interlock {s.blocked['rule']}: {s.blocked['message']} "
                    "(fix and retry, abort, or break glass: two people with reasons)")
        if s.needs_confirmation and not s.needs_approval:
            return "a person to confirm it is done"
        if s.approved:
            return "approved; applies next"
        got = len({v.by for v in s.approvals() if v.plan_hash == s.plan_hash})
        groups = ", ".join(s.groups) or "any approver group"
        return f"approval {got} of {s.min_approvers} from {groups}, until {s.expires_at}"
    return ""


def step_view(s: StepState, words: StepWords | None = None) -> StepView:
    """The view of one step instance; with its ``words`` (``bot.present.words``), its conditions
    read as the runbook's sentences, without them as generic ones, never as expressions."""
    plan = s.plan or {}
    words = words or StepWords()
    message = words.skipped or plain_message(s) if s.status == S.SKIPPED else s.message
    progress = plain_progress(s)
    if words.waiting_for and (progress or s.status == S.WAITING):
        progress = words.waiting_for
    pending = _pending(s)
    if s.status == S.WAITING:
        pending = wait_text(_Wait(progress, s.next_check_at, words.gives_up_at), now=None,
                            at=times.clock)
    return StepView(
        key=s.key, title=s.title, status=str(s.status), icon=ICONS.get(str(s.status), "?"),
        approvers=tuple(dict.fromkeys(v.by for v in s.approvals() if v.plan_hash == s.plan_hash)),
        summary=str(plan.get("summary") or ""),
        changes=tuple(_change_line(c) for c in plan.get("changes") or ()),
        facts=tuple(FactView(f.get("subject", ""), f.get("name", ""), f.get("value"),
                             f.get("read_at", "")) for f in plan.get("facts") or ()),
        guards=tuple(s.guards), progress=progress, message=message, error=s.error,
        pending=pending, plan_hash=s.plan_hash, blocked=s.blocked,
        approval_text=s.approval_text, needs_approval=s.needs_approval,
        needs_confirmation=s.needs_confirmation, min_approvers=s.min_approvers,
        groups=tuple(s.groups), expires_at=s.expires_at, result=s.result,
        votes=tuple(v.__dict__ for v in s.votes), action=s.action, destructive=s.destructive,
        next_check_at=s.next_check_at, gives_up_at=words.gives_up_at, guard_words=words.guards,
        details=words.details,
        not_needed=s.status == S.SKIPPED and s.message.startswith(RAW_PREFIXES[0]))


@dataclass(frozen=True)
class _Wait:
    progress: str
    next_check_at: str | None
    gives_up_at: str | None


def _change_line(c: dict[str, Any]) -> str:
    arrow = f": {c.get('before')} -> {c.get('after')}" if (c.get("before") or c.get("after")) else ""
    return f"{c.get('operation')} {c.get('target_kind')} {c.get('target')}{arrow}"


def stored_runbook(state: RunState) -> Runbook | None:
    """The runbook a run started with, or None when this version no longer reads its text."""
    try:
        return load_text(state.runbook_text, file=state.runbook_file, catalog=None)
    except RunbookBotError:
        return None


def params_as_written(state: RunState, runbook: Runbook | None = None) -> dict[str, Any]:
    """The run's params as people write them: a duration is ``6m``, not the seconds it means."""
    runbook = runbook or stored_runbook(state)
    return dict(state.params) if runbook is None else written_params(runbook, dict(state.params))


def not_reached(state: RunState, runbook: Runbook) -> list[tuple[str, str]]:
    """(id, title) of each step the run has not reached, its title rendered with what is known
    (params as written, the results of steps that ran); unknown values read ``…``."""
    scope = Scope(state, frozenset(s.id for s in runbook.spec.steps if s.foreach))
    ctx = {**scope.context(), "params": params_as_written(state, runbook)}
    reached = {s.step_id for s in state.steps.values()}
    return [(step.id, render_known(step.title, ctx)[:150]) for step in runbook.spec.steps
            if step.id not in reached]


def run_view(state: RunState, runbook: Runbook | None = None, *,
             children: Sequence[RunState] = ()) -> RunView:
    """The view of a run; with its ``runbook``, params read as written and the steps not reached
    are listed; ``children`` are the runs that name it as their parent."""
    said = words_by_key(state, runbook)
    steps = tuple(step_view(s, said.get(s.key)) for s in state.steps.values())
    return RunView(
        run_id=state.run_id, runbook=state.runbook, title=state.title, status=str(state.status),
        requester=state.requester,
        params=params_as_written(state, runbook) if runbook else dict(state.params),
        dry_run=state.dry_run,
        created_at=state.created_at, started_at=state.started_at, finished_at=state.finished_at,
        outcome=state.outcome, compensations=tuple(state.compensations), steps=steps,
        not_reached=tuple(not_reached(state, runbook)) if runbook else (),
        owner=state.current_owner, parent=state.parent, incident=state.incident,
        suggested_by=state.suggested_by, agent_request=agent_request(state.origin),
        children=tuple(ChildView(c.run_id, c.runbook, str(c.status), c.dry_run) for c in children))


def relative(ts: str | None, now: datetime) -> str:
    """``3m ago`` / ``in 29m`` for an ISO timestamp, to the coarsest unit that says it."""
    if not ts:
        return "-"
    try:
        then = datetime.fromisoformat(ts)
    except ValueError:
        return ts
    seconds = (then - now).total_seconds()
    span = abs(seconds)
    if span < 60:
        text = f"{span:.0f}s"
    elif span < 3600:
        text = f"{span // 60:.0f}m"
    elif span < 86400:
        hours, minutes = int(span // 3600), int(span % 3600 // 60)
        text = f"{hours}h{minutes}m" if minutes else f"{hours}h"
    else:
        text = f"{span // 86400:.0f}d"
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _plain(value: Any) -> Any:
    """A view's value as JSON data: its dataclasses as objects, tuples as lists (shallow copies:
    ``dataclasses.asdict`` deep-copies every value, several times slower on a long run)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def run_json(view: RunView) -> dict[str, Any]:
    """A run's view as JSON (the API's runs): every field, and what it waits on, by step key."""
    out: dict[str, Any] = _plain(view)
    waiting = view.waiting_on
    out["waiting_on"] = waiting.key if waiting is not None else None
    out["handed_over"] = view.handed_over
    return out
