"""One timeline, played: stage the scenario, start the run, and between the run's ticks apply
the timeline's world events and take people's decisions as they say; then check every invariant.

The run is driven exactly as a rehearsal drives it (the product wired as in production, time
simulated); people approve with the next eligible approver unless an event says otherwise, and
never break glass: a step an interlock blocks is aborted, which is an end a person can act on.
A crash replaces the runner with a fresh one over the same database after the dead worker's
lease has expired, as another replica would take the run over.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bot.actions.builtin import builtin_actions
from bot.diagnose import Scope, catalogue_of, diagnose
from bot.engine.commands import Abort, Approve, BreakGlass, Command, Reject
from bot.engine.moves import held_until
from bot.engine.runstate import RunState, StepState
from bot.engine.state import RUN_TERMINAL
from bot.runbook.source import DirectorySource
from bot.sim.controllers.context import instance_id
from bot.sim.explore import catalogue
from bot.sim.explore.checks import Evidence, Found, check_all, is_write
from bot.sim.explore.timeline import Timeline, draw
from bot.sim.rehearsal import APPROVERS, CLUSTER, GROUP, REQUESTER, Rehearsal, shipped_parse_cache
from bot.sim.store import ts
from bot.store.integrity import verify_run

ROUNDS = 16  # world events fall in the first this many rounds of a run (most end in 10 to 30)
MAX_ROUNDS = 300
MAX_HOURS = 12.0  # simulated: a run still going after this long is hung
# While people are away (an approval late or left to expire) the bot plays no tick: the world
# moves in steps this long, not the sandbox's 5 s; the controllers' timers fire in the same order,
# within a step (docs/explore.md, "People away, the world in longer steps")
AWAY_STEP = 30.0
OUTSIDER = "mallory"  # a person who is not in the approvers' group


class Crash(BaseException):
    """The worker dies here (a SIGKILL): nothing after this point of the tick happens."""


@dataclass
class Coverage:
    """What a timeline reached: each step's outcomes, the interlocks that refused or were
    overridden, and the run's end."""

    steps: dict[str, set[str]] = field(default_factory=dict)
    interlocks: set[str] = field(default_factory=set)
    ends: set[str] = field(default_factory=set)

    def add(self, other: Coverage) -> None:
        for k, v in other.steps.items():
            self.steps.setdefault(k, set()).update(v)
        self.interlocks |= other.interlocks
        self.ends |= other.ends


@dataclass
class Played:
    timeline: Timeline
    status: str
    found: list[Found]
    coverage: Coverage
    trace: list[str]
    rounds: int

    @property
    def ok(self) -> bool:
        return not self.found

    def differences(self, other: Played) -> list[str]:
        """How ``other``, a play of the same timeline, ended otherwise (none: the same result):
        the run's status, the invariant findings, each step's outcomes and the interlocks met,
        the rounds, and the trace of events and decisions, line by line."""
        out = []
        for what, mine, theirs in (
                ("timeline", self.timeline, other.timeline), ("status", self.status, other.status),
                ("findings", [(f.invariant, f.details) for f in self.found],
                 [(f.invariant, f.details) for f in other.found]),
                ("step outcomes", self.coverage.steps, other.coverage.steps),
                ("interlocks", self.coverage.interlocks, other.coverage.interlocks),
                ("rounds", self.rounds, other.rounds)):
            if mine != theirs:
                out.append(f"{what}: {mine} != {theirs}")
        for i, (mine, theirs) in enumerate(zip(self.trace, other.trace, strict=False)):
            if mine != theirs:
                out.append(f"trace line {i + 1}: {mine!r} != {theirs!r}")
                break
        else:
            if len(self.trace) != len(other.trace):
                out.append(f"trace: {len(self.trace)} lines != {len(other.trace)}")
        return out


def _coverage(events: list[Any], status: str) -> Coverage:
    cov = Coverage(ends={status})
    ends = {"step.succeeded": "succeeded", "step.skipped": "skipped", "step.failed": "failed"}
    for e in events:
        step = str(e.payload.get("step") or "").split("[")[0]
        if e.type in ends and step:
            cov.steps.setdefault(step, set()).add(ends[e.type])
        elif e.type in ("interlock.blocked", "interlock.overridden"):
            cov.interlocks.add(f"{e.payload.get('rule')}:{e.type.split('.')[1]}")
    return cov


class _Player:
    def __init__(self, r: Rehearsal, tl: Timeline) -> None:
        self.r, self.tl = r, tl
        self.trace: list[str] = []
        self.queue: list[catalogue.Event] = []  # people events waiting for the next decision
        self.armed = False  # crash right after the next write
        self.away = False  # and nobody drives the run until the next round's events happened
        self.start_after_stop = False  # someone starts the next machine the bot stops
        self.down = ""  # why no worker drives the run now (the next drive resumes it first)
        self.glass = False  # two people break glass on the next refusal
        self.world_caused: list[Any] = []
        self.world_deleted: set[str] = set()  # Nodes a world event deleted
        self.world_started: list[tuple[str, datetime]] = []  # (instance, when) someone started it
        self.other: Any = None  # a second worker's runner, once one started
        self.actions: dict[str, str] = {}  # each step's action, read when the run begins
        self.audit_problem = ""
        self.run_id = ""
        self.began = r.clock.now()

    def note(self, text: str) -> None:
        self.trace.append(f"[{self.r.clock.now():%H:%M:%S}] {text}")

    # -- the bot ---------------------------------------------------------------------------

    def _trap(self) -> None:
        """Arm the runner's catalog so that the apply after which a write is on the wire dies."""
        catalog = self.r.catalog
        inner = type(catalog).apply

        def apply(name: str, plan: Any, ctx: Any) -> Any:
            result = inner(catalog, name, plan, ctx)
            stopped = [t for c in result.calls if c.service == "ec2"
                       and c.operation == "StopInstances" and c.outcome == "ok" for t in c.targets]
            if self.start_after_stop and stopped:
                self.start_after_stop = False
                for iid in stopped:
                    self._start_once_stopped(iid, tries=360)
            if self.armed and any(is_write(c.service, c.operation) for c in result.calls):
                self.armed = False
                raise Crash(f"after {name} wrote")
            return result
        catalog.apply = apply  # type: ignore[method-assign]

    def _start_once_stopped(self, iid: str, *, tries: int) -> None:
        """Someone starts ``iid`` as soon as it has stopped (looked at every 5 s, for 30 min)."""
        sb = self.r.sandbox
        if sb.ec2.instance_state(iid) == "stopped" and sb.ctx is not None:
            self.note(f"someone starts {iid} again, now that it has stopped")
            before = len(sb.invariants.violations)
            sb.ec2.repair(iid)
            # in a controller pass: what the start itself breaks (a taint the bot put on while
            # the machine was off) is recorded now, as the world's, not at the pass's end
            sb.invariants.record(sb.ctx, cause=(ts(self.r.clock.now()), f"someone starts {iid}"))
            self.world_caused.extend(sb.invariants.violations[before:])
            self.world_started.append((iid, self.r.clock.now()))
        elif tries > 0 and sb.ec2.instance_state(iid) in ("stopping", "running", "pending"):
            sb.at(5.0, lambda: self._start_once_stopped(iid, tries=tries - 1))

    def _second_worker(self) -> None:
        """Another replica over the same database; from now on it drives after each tick too,
        and the runs' leases decide which of the two acts."""
        if self.other is not None:
            return
        main = (self.r.store, self.r.runner)
        self.r._wire_runner(self.r.store.url)
        self.other = self.r.runner
        self.r.store, self.r.runner = main

    def resume(self, why: str) -> None:
        self.note(f"worker dies ({why}); another takes the run over")
        self.r.resume()
        self._trap()
        self.r.sandbox.advance(self.r.runner.lease_seconds + 1)
        self.verify()

    def verify(self) -> None:
        if not self.audit_problem and not self.r.verified(self.run_id):
            v = verify_run(self.r.store, self.run_id, key=self.r.store.key)
            self.audit_problem = f"after {self.trace[-1] if self.trace else 'start'}: {v.reason}"

    def drive(self) -> RunState:
        if self.down:
            why, self.down = self.down, ""
            self.resume(why)
        try:
            if self.other is not None:
                self.other.drive(self.run_id)
            return self.r.runner.drive(self.run_id)
        except Crash as e:
            if self._gone(str(e)):
                return self.r.store.load(self.run_id)
            self.resume(str(e))
            return self.r.runner.drive(self.run_id)

    def _gone(self, why: str) -> bool:
        """After a crash that leaves the run with no worker until the next round (``away``):
        True, and the next drive resumes it, once that round's world events have happened."""
        if not self.away:
            return False
        self.away = False
        self.down = f"{why}; no worker drove the run for a while"
        self.note(f"worker dies ({why}); no worker drives the run for now")
        return True

    # -- people ----------------------------------------------------------------------------

    def submit(self, cmd: Command) -> None:
        try:
            out = self.r.submit(cmd)
        except Crash as e:
            if not self._gone(str(e)):
                self.resume(str(e))
            return
        self.note(f"{type(cmd).__name__.lower()} by {getattr(cmd, 'actor', '?')}: "
                  f"{'accepted' if out.ok else 'refused: ' + str(out.message)[:160]}")

    def decide(self, state: RunState, s: StepState) -> None:
        if self.queue:
            ev = self.queue.pop(0)
            self.note(f"people: {ev.words()}")
            if ev.kind == "approve-late":
                self.r.sandbox.advance(float(ev.arg or 5) * 60, step=AWAY_STEP)
                return
            if ev.kind == "approval-expires":
                due = datetime.fromisoformat(s.expires_at) if s.expires_at else None
                wait = (due - self.r.clock.now()).total_seconds() + 60 if due else 3600.0
                self.r.sandbox.advance(max(60.0, wait), step=AWAY_STEP)
                return
            if ev.kind == "reject":
                self.submit(Reject(run_id=state.run_id, actor=APPROVERS[0],
                                   reason="not now: the explorer declines", step=s.key))
                return
            if ev.kind in ("wrong-approver", "self-approve"):
                who = OUTSIDER if ev.kind == "wrong-approver" else REQUESTER
                self.submit(Approve(run_id=state.run_id, actor=who, step=s.key,
                                    plan_hash=s.plan_hash))
                return
            if ev.kind == "abort":
                self.submit(Abort(run_id=state.run_id, actor=REQUESTER, reason="explorer"))
                return
        held = held_until(s)
        if held is not None:  # a timed hold plans itself again: people wait for its next check
            self.note(f"step {s.key} held by rule {(s.blocked or {}).get('rule')}: people wait "
                      "for its recheck")
            due = datetime.fromisoformat(held)
            self.r.sandbox.advance(max(0.0, (due - self.r.clock.now()).total_seconds()))
            return
        if s.blocked and self.glass:
            self.glass = False
            rule = s.blocked.get("rule")
            self.note(f"step {s.key} blocked by rule {rule}: {APPROVERS[0]} and {APPROVERS[1]} "
                      "break glass")
            for who in APPROVERS[:2]:
                self.submit(BreakGlass(run_id=state.run_id, actor=who, step=s.key,
                                       reason=f"explorer: {rule} overridden on purpose",
                                       nodes=_glass_nodes(s.blocked)))
            return
        if s.blocked:
            self.note(f"step {s.key} blocked by rule {s.blocked.get('rule')}: people abort "
                      "rather than break glass")
            self.submit(Abort(run_id=state.run_id, actor=REQUESTER,
                              reason=f"blocked by {s.blocked.get('rule')}"))
            return
        cmd = self.r.approve_all(state, s)
        if cmd is None:
            self.submit(Abort(run_id=state.run_id, actor=REQUESTER, reason="nobody left to ask"))
            return
        self.submit(cmd)

    # -- the loop --------------------------------------------------------------------------

    def world(self, rnd: int) -> None:
        events = [e for e in self.tl.events if e.round == rnd]
        sb = self.r.sandbox
        if any(catalogue.KINDS[e.kind].apply is not None for e in events) and sb.informer_lag:
            # the controllers catch up with the bot's last writes first, so that what those
            # writes broke is blamed on them and what the event breaks on the event
            sb.advance(sb.informer_lag)
        for ev in events:
            kind = catalogue.KINDS[ev.kind]
            if ev.kind == "crash":
                self.note(f"event: {ev.words()}")
                self.resume("killed between ticks")
            elif ev.kind == "second-worker":
                self.note(f"event: {ev.words()}")
                self._second_worker()
            elif ev.kind in ("crash-after-write", "crash-after-write-away"):
                self.note(f"event: {ev.words()}")
                self.armed = True
                self.away = ev.kind == "crash-after-write-away"
            elif ev.kind == "break-glass":
                self.note(f"event: {ev.words()}")
                self.glass = True
            elif ev.kind == "start-after-stop":
                self.note(f"event: {ev.words()}")
                self.start_after_stop = True
            elif kind.apply is None:
                self.queue.append(ev)
            else:
                self.note(f"event: {ev.words()}")
                before = len(self.r.sandbox.invariants.violations)
                catalogue.apply(self.r.sandbox, ev)
                if ev.kind == "node-deleted":
                    self.world_deleted.add(ev.target)
                if ev.kind == "instance-started" and (node := sb.find("Node", None, ev.target)):
                    self.world_started.append((instance_id(node) or "", self.r.clock.now()))
                # what the world itself broke (someone starts a tainted node's machine) is not
                # the run's doing; what the bot writes afterwards is judged as usual
                self.world_caused.extend(self.r.sandbox.invariants.violations[before:])

    def begin(self) -> RunState:
        """Start the run and play its first tick: what every timeline of a search shares, since
        its world events and decisions come from round 0 on."""
        self._trap()
        params: dict[str, Any] = dict(self.tl.params)
        runbook, _text, _file = self.r.runbooks.get(self.tl.runbook)
        self.actions = {s.id: str(s.action) for s in runbook.spec.steps if s.action}
        self.run_id = self.r.start_run(self.tl.runbook, **params)
        self.began = self.r.clock.now()
        return self.drive()

    def rounds(self, state: RunState) -> tuple[RunState, int, str]:
        """The rest of the run, round by round, with the timeline's events."""
        decided = False
        for rnd in range(MAX_ROUNDS):
            if state.status in RUN_TERMINAL:
                return state, rnd, ""
            if self.r.clock.now() - self.began > timedelta(hours=MAX_HOURS):
                break
            self.world(rnd)
            if self.down:
                pass  # no worker holds the run: the drive below resumes it, after these events
            elif decided:
                # a decision and the tick that acts on it are two moments: the world may move
                # in between (a worker picks the run up after the click, not with it)
                decided = False
            elif state.status == "awaiting_approval":
                s = next((x for x in state.steps.values() if x.status == "awaiting_approval"), None)
                if s is None:
                    return state, rnd, "awaiting approval with no step waiting for it"
                self.decide(state, s)
                decided = True
                state = self.r.store.load(self.run_id)
                continue
            elif state.next_check_at:
                due = datetime.fromisoformat(state.next_check_at)
                self.r.sandbox.advance(max(0.0, (due - self.r.clock.now()).total_seconds()))
            elif state.status not in RUN_TERMINAL:
                return state, rnd, f"{state.status} with no next check and nobody asked"
            state = self.drive()
        waiting = [f"{s.key} ({s.status}: {s.progress or s.message or ''})"
                   for s in state.steps.values() if s.status in ("waiting", "applying")]
        return state, MAX_ROUNDS, (f"still {state.status} after {MAX_HOURS:.0f} h or "
                                   f"{MAX_ROUNDS} rounds: " + "; ".join(waiting)[:300])


@contextmanager
def staged(tl: Timeline, *, runbooks_dir: str | None = None, workdir: Path | None = None,
           transport: str = "http") -> Iterator[Rehearsal]:
    with tempfile.TemporaryDirectory(prefix="runbook-bot-explore-") as tmp:
        r = Rehearsal(tl.scenario, options=dict(tl.options), workdir=workdir or Path(tmp),
                      audit_key="explore", runbooks_dir=runbooks_dir, transport=transport)
        r.start()
        try:
            yield r
        finally:
            r.stop()


def suggested_params(r: Rehearsal, runbook: str) -> dict[str, str]:
    """The params ``diagnose`` suggests for ``runbook`` on the staged world, as an alert card
    would offer them; an error naming what diagnose did suggest if it names another runbook."""
    settings = r.settings
    # on the shipped actions, through the runbooks this process already parsed for rehearsals
    source = DirectorySource(settings.runbooks_dir, catalog=builtin_actions()
                             if r.actions is None else r.actions,
                             parsed=shipped_parse_cache() if r.actions is None else None)
    report = diagnose(settings.cluster(CLUSTER), r.clients(), Scope(cluster=CLUSTER),
                      now=r.clock.now(), runbooks=catalogue_of(source),
                      grace=settings.policy.node_monitor_grace_period)
    for f in report.findings:
        if f.runbook == runbook:
            return {k: str(v) for k, v in f.params.items()}
    named = sorted({str(f.runbook) for f in report.findings if f.runbook})
    raise ValueError(f"diagnose suggests no params for {runbook} on scenario {r.scenario} "
                     f"(it suggests: {', '.join(named) or 'nothing'}); pass them with --param")


def play(tl: Timeline, *, runbooks_dir: str | None = None, draw_events: bool = False,
         rounds: int = ROUNDS, transport: str = "http") -> Played:
    """Stage ``tl``'s scenario, play it, and check every invariant. ``draw_events``: the
    events are drawn from ``tl.seed`` over the staged world first; params missing from ``tl``
    are those diagnose suggests. Over HTTP unless told (``bot.sim.inprocess``)."""
    with staged(tl, runbooks_dir=runbooks_dir, transport=transport) as r:
        return play_staged(r, tl, draw_events=draw_events, rounds=rounds)


def play_staged(r: Rehearsal, tl: Timeline, *, draw_events: bool = False,
                rounds: int = ROUNDS) -> Played:
    """Play ``tl`` on ``r``, a rehearsal just staged for it (or a fork of one: ``fork``); the
    world is used up afterwards."""
    if draw_events:
        tl = replace(tl, events=draw(r.sandbox, seed=tl.seed, rounds=rounds))
    # botocore draws its retry backoff's jitter from the process's ``random``, and the backoff
    # passes on the sandbox clock: seeded where every way of playing a timeline seeds it (here,
    # and after the shared beginning), a throttled timeline replays to the second
    random.seed("explore-begin")
    if not tl.params:
        tl = replace(tl, params=suggested_params(r, tl.runbook))
    p = _Player(r, tl)
    return finish(p, p.begin(), tl)


def begin(r: Rehearsal, tl: Timeline) -> tuple[_Player, RunState]:
    """The beginning every timeline of ``tl``'s runbook and params shares, played on ``r``
    (``fork`` plays it once and each timeline from there, with ``finish``)."""
    random.seed("explore-begin")
    p = _Player(r, replace(tl, events=()))
    return p, p.begin()


def finish(p: _Player, state: RunState, tl: Timeline) -> Played:
    """``tl`` played on from its beginning (``begin``), and every invariant checked."""
    assert (tl.runbook, tl.params) == (p.tl.runbook, p.tl.params), "another run's beginning"
    random.seed(f"explore-{tl.seed}")
    p.tl = tl
    r = p.r
    try:
        state, rounds, hung = p.rounds(state)
    finally:
        if p.other is not None:
            p.other.store.close()
    p.verify()
    events = r.events(p.run_id)
    ev = Evidence(sandbox=r.sandbox, status=str(state.status), events=events,
                  requester=REQUESTER, group=frozenset(r.settings.policy.groups[GROUP]),
                  hung=hung, audit_ok=not p.audit_problem, audit_problem=p.audit_problem,
                  actions=p.actions, world_caused=p.world_caused,
                  world_deleted=frozenset(p.world_deleted), world_started=p.world_started)
    found = check_all(ev)
    return Played(tl, str(state.status), found, _coverage(events, str(state.status)),
                  p.trace, rounds)


def _glass_nodes(blocked: dict[str, Any]) -> int | None:
    """What an override of a rule that counts nodes names: the count its refusal gave."""
    count = blocked.get("count")
    return int(count) if blocked.get("rule") == "blast-radius" and count else None
