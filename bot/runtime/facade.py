"""The runtime facade: the one door every front-end goes through to runs and runbooks.

Slack, the terminal and the Alertmanager webhook (and later an HTTP API and an MCP server) start,
decide, show, list and follow runs through ``Runtime``, never through the runner's store, policy,
runbook source or catalog. Its verbs take and return engine values (``StartRun``, the commands of
``bot.engine.commands``, ``Outcome``, ``RunState``), so each front-end only renders.

A decision (``decide``) loads its run once, under one lease: the channel rule, a fresh read of the
approver groups (``fresh``), the engine's verdict, the save, the answer to the person and the drive
up to the run's next wait all work on that one load.

Who may start which runbook, and from where, is decided here too, once (``start``, over
``bot.engine.starting``), and what an AI agent may request (``bot.engine.agents``: the ``agents:``
policy, the triage port, and a cap on the runs an agent has not seen finish); a refused start,
like an API request refused for its credentials (``record_refusal``), is kept in the refusals
chain (``RefusalLog``), since no run holds it.

The channel rule lives here, once: a run started in a channel (its origin names one) is read and
decided only from that channel, when the request comes from the same front-end (``Origin``); a
request with no origin (the terminal on the bot's host) is not bound by it.

Errors are typed for a caller that maps them to statuses: ``NotFound`` (no such run or runbook),
``Refused`` with its ``reason`` (``Elsewhere`` names the run's channel), ``Conflict`` (another
worker holds the run; try again). A command the engine refuses is not an error: it is audited and
comes back as ``Outcome(ok=False, message=...)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from bot.config_agents import AgentsConfig
from bot.engine import commands as c
from bot.engine.agents import Triage, is_agent, request_refusal
from bot.engine.approvals import approver_groups, effective_rule
from bot.engine.decisions import iso
from bot.engine.facts import RunbookFacts
from bot.engine.ports import Clock, Notifier, RefusalLog, RunbookSource, RunHistory, StoredEvent
from bot.engine.runstate import RunState
from bot.engine.starting import start_refusal
from bot.errors import LeaseHeld, NotFound, PolicyError
from bot.runbook.model import Runbook
from bot.runbook.params import check_params
from bot.runtime.runner import Runner

log = logging.getLogger(__name__)

__all__ = ["Conflict", "Elsewhere", "NotFound", "Origin", "Refused", "RunDetail", "Runtime",
           "elsewhere"]


class Refused(PolicyError):
    """The runtime refused a request before the engine saw it; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Elsewhere(Refused):
    """A run started in a channel is read and decided there only; ``channel`` is the run's."""

    def __init__(self, run_id: str, channel: str) -> None:
        self.run_id = run_id
        self.channel = channel
        super().__init__(f"run {run_id} belongs to channel {channel}; it is read and decided there")


class Conflict(LeaseHeld):
    """Another worker holds the run right now; nothing was recorded, try again in a moment."""


@dataclass(frozen=True)
class Origin:
    """Where a request comes from: the front-end and, for a chat, the channel it was made in."""

    frontend: str
    channel: str | None = None


def elsewhere(run_origin: Mapping[str, Any], origin: Origin | None) -> str | None:
    """The channel a run belongs to when a request from ``origin`` may not read or decide it
    (None: it may). The rule, once: a run started in a channel is read and decided in that
    channel, where the incident is and everyone following it sees what is done."""
    channel = run_origin.get("channel")
    if origin is None or not channel or run_origin.get("frontend") != origin.frontend:
        return None
    return None if origin.channel == channel else str(channel)


@runtime_checkable
class RunbookNames(Protocol):
    """A runbook source that can list what it holds (a port: a source may not)."""

    def names(self) -> list[str]: ...


@dataclass(frozen=True)
class RunDetail:
    """A run as shown: its state and the runs started from it."""

    state: RunState
    children: list[RunState] = field(default_factory=list)


# refreshes the members (as policy names them, ``slack-group:S…``) of the groups that may decide
Fresh = Callable[[Sequence[str]], None]
_FRESH_FOR = (c.Approve, c.BreakGlass, c.Confirm)


class Runtime:
    """Start, decide, show, list and follow runs; what a front-end needs of runbooks.

    ``names`` lists the runbooks (a front-end without it cannot list them, ``NotFound``);
    ``history`` reads a run's audit events (``follow``); ``refusals`` keeps the requests refused
    before any run existed (``record_refusal``; without it they are only logged).
    """

    def __init__(self, runner: Runner, *, names: Callable[[], list[str]] | None = None,
                 history: RunHistory | None = None, refusals: RefusalLog | None = None,
                 agents: AgentsConfig | None = None, triage: Triage | None = None) -> None:
        self._runner = runner
        self._agents = agents or AgentsConfig()
        self._triage = triage
        if names is None and isinstance(runner.runbooks, RunbookNames):
            names = runner.runbooks.names
        self._names = names
        self._history = history
        self._refusals = refusals
        self.facts = RunbookFacts(runbooks=runner.runbooks, catalog=runner.catalog)

    @property
    def clock(self) -> Clock:
        return self._runner.clock

    @property
    def runbook_source(self) -> RunbookSource:
        """The runbook source, read-only (what reads runbooks on a front-end's behalf needs)."""
        return self._runner.runbooks

    @property
    def history(self) -> RunHistory | None:
        return self._history

    def watch(self, notifier: Notifier) -> None:
        """Have ``notifier`` told of every saved change of every run (once)."""
        if notifier not in self._runner.notifiers:
            self._runner.notifiers.append(notifier)

    def redact(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """What a person typed, redacted as the runtime stores it."""
        return dict(self._runner.redact(dict(raw)))

    def redact_text(self, text: str) -> str:
        return str(self._runner.redact(text))

    # -- runbooks -------------------------------------------------------------------------------

    @property
    def lists_runbooks(self) -> bool:
        return self._names is not None

    def runbook_names(self) -> list[str]:
        if self._names is None:
            raise NotFound("this bot cannot list its runbooks; ask for one by name")
        return list(self._names())

    def runbook(self, name: str) -> Runbook:
        """The runbook ``name`` (NotFound when there is none; RunbookError when it is invalid)."""
        runbook, _, _ = self._runner.runbooks.get(name)
        return runbook

    def runbook_text(self, name: str) -> str:
        """The runbook's YAML text, as the runner would start it."""
        _, text, _ = self._runner.runbooks.get(name)
        return text

    def step_needs(self, name: str) -> list[dict[str, Any]]:
        """Each step of runbook ``name``: whether it changes things, and whether it waits for
        people before it does, how many and why (the engine's rule, before any plan raises it)."""
        rb = self.runbook(name)
        out = []
        for step in rb.spec.steps:
            destructive = self.facts.action_destructive(str(step.action) if step.action else None)
            rule = effective_rule(runbook=rb.spec.approvals, step=step.approval,
                                  destructive=destructive, policy=self._runner.policy)
            out.append({"id": step.id, "title": step.title, "action": step.action,
                        "manual": step.manual is not None, "destructive": destructive,
                        "approval": {"required": rule.required, "why": rule.reason,
                                     "approvers": rule.min_approvers if rule.required else 0,
                                     "groups": list(rule.groups)}})
        return out

    def params_problems(self, name: str, raw: Mapping[str, Any]) -> dict[str, str]:
        """Each param of ``raw`` that would not start ``name``, with why ("" : the whole set)."""
        return dict(check_params(self.runbook(name), raw, clusters=self._runner.clusters).fields)

    # -- runs -----------------------------------------------------------------------------------

    def start(self, cmd: c.StartRun, *, origin: Origin | None = None) -> RunState:
        """Create a run (ParamError: started nothing); ``drive`` carries it on.

        Who may start which runbook from where is decided here, once (``engine.starting``:
        ``policy.start`` and the runbook's ``metadata.starters``), dry runs included: ``Refused``
        names what would be needed, and the refusal is recorded (``record_refusal``). ``origin``
        is where the request was made; None (the terminal on the bot's host) has no channel.
        NotFound: no such runbook.
        """
        why = self.may_start(cmd.runbook, cmd.requester, origin=origin)
        if why is None and is_agent(cmd.requester):
            why = self.agent_refusal(cmd)
        if why is not None:
            via = {**cmd.origin, **({"frontend": origin.frontend, "channel": origin.channel}
                                    if origin is not None else {})}
            self.record_refusal(cmd.requester, f"start {cmd.runbook}"
                                + (" (dry run)" if cmd.dry_run else ""), why,
                                {k: v for k, v in via.items() if v is not None})
            raise Refused(why)
        return self._runner.start(cmd)

    def may_start(self, name: str, requester: str, *, origin: Origin | None = None) -> str | None:
        """Why ``requester`` may not start runbook ``name`` from ``origin``, naming what would be
        needed (None: they may). Records nothing: a form asks before it opens; ``start`` decides.
        """
        return start_refusal(runbook=self.runbook(name), requester=requester,
                             channel=origin.channel if origin is not None else None,
                             policy=self._runner.policy, membership=self._runner.membership)

    def agent_refusal(self, cmd: c.StartRun) -> str | None:
        """Why an agent may not make this request (None: it may): the ``agents:`` policy, then
        the cap on the runs it requested that have not finished."""
        why = request_refusal(runbook=cmd.runbook, params=cmd.params, dry_run=cmd.dry_run,
                              config=self._agents, destructive=self._destructive,
                              triage=self._triage)
        if why is not None or cmd.dry_run:
            return why
        cap = self._agents.max_active_runs
        mine = [r for r in self._runner.store.runs(active=True, limit=500)
                if r.requester == cmd.requester and not r.dry_run]
        if len(mine) >= cap:
            return (f"{cmd.requester} already has {len(mine)} requested run(s) not finished "
                    f"({', '.join(r.run_id for r in mine[:5])}); agents.max_active_runs is {cap}: "
                    "wait for one to finish")
        return None

    def _destructive(self, name: str) -> bool:
        return any(self.facts.action_destructive(str(s.action) if s.action else None)
                   for s in self.runbook(name).spec.steps)

    def record_refusal(self, actor: str, what: str, reason: str, via: Mapping[str, Any]) -> None:
        """Record a request refused before any run existed (a start; the API's 401 and 403):
        who, what (``start node-dead-ngns``, ``api GET /api/v1/runs``), why, via what, now.
        Redacted before it is hashed or stored. Never raises: the refusal stands even when the
        record cannot be written (that is logged)."""
        if self._refusals is None:
            log.warning("refused %s to %s: %s (no refusal log here)", what, actor, reason)
            return
        try:
            self._refusals.record(ts=iso(self.clock.now()), actor=actor, what=what,
                                  reason=reason, via=via)
        except Exception:
            log.exception("could not record the refusal of %s to %s", what, actor)

    def drive(self, run_id: str) -> RunState:
        """Carry a run on until it waits, needs a person or ends."""
        return self._runner.drive(run_id)

    def decide(self, cmd: c.Command, *, origin: Origin | None = None, fresh: Fresh | None = None,
               answer: Callable[[c.Outcome], None] | None = None, drive: bool = True) -> c.Outcome:
        """Apply a person's command, and drive the run on when it took: one load, one lease.

        Raises NotFound, ``Elsewhere`` (the channel rule; nothing recorded), ``Conflict``, or
        what ``fresh`` raises (nothing recorded). ``answer`` hears the outcome once it is saved,
        before the run is driven on.
        """
        def check(state: RunState) -> None:
            self._check_origin(state, origin)
            if fresh is not None and isinstance(cmd, _FRESH_FOR):
                policy = self._runner.policy
                fresh([m for g in approver_groups(state, cmd.step, policy)
                       for m in policy.groups.get(g, ())])

        with self._conflict():
            return self._runner.decide(cmd, check=check, answer=answer, drive=drive)

    def show(self, run_id: str, *, origin: Origin | None = None,
             children: bool = False) -> RunDetail:
        """A run (NotFound; ``Elsewhere`` for a request from outside its channel)."""
        state = self._runner.store.load(run_id)
        self._check_origin(state, origin)
        kids = self._runner.store.children(run_id) if children else []
        return RunDetail(state=state, children=kids)

    def runs(self, *, active: bool | None = None, channel: str | None = None,
             limit: int = 20) -> list[RunState]:
        """The newest runs first (headers: no steps), of ``channel`` when given."""
        return self._runner.store.runs(active=active, channel=channel, limit=limit)

    def follow(self, run_id: str, *, after: int = 0,
               limit: int | None = None) -> Sequence[StoredEvent]:
        """A run's audit events after ``after``, in order: poll with the last ``seq`` seen."""
        if self._history is None:
            raise NotFound("this bot cannot read runs' audit events here")
        return self._history.events(run_id, after=after, limit=limit)

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _check_origin(state: RunState, origin: Origin | None) -> None:
        channel = elsewhere(state.origin, origin)
        if channel is not None:
            raise Elsewhere(state.run_id, channel)

    @staticmethod
    @contextmanager
    def _conflict() -> Iterator[None]:
        try:
            yield
        except Conflict:
            raise
        except LeaseHeld as e:
            raise Conflict(str(e)) from e
