"""An engine wired to fake actions, a ManualClock and a real SQLite (or PostgreSQL) store.

``Engine`` drives a real ``Runner`` the way a front-end does (start, commands, the clock moving on)
and reads back what a person would check: the run's state, its audit events, the fake world's
effects. The engine, store, runtime, present and Slack tests all build on it; ``make_engine`` is the
fixture their conftest files take from here.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.engine.commands import (
    Abort,
    Approve,
    BreakGlass,
    Confirm,
    Handover,
    Outcome,
    Reject,
    Retry,
    StartRun,
)
from bot.engine.ports import ManualClock
from bot.engine.provenance import Provenance
from bot.engine.runstate import AuditDraft, RunState
from bot.runbook.source import TextSource
from bot.runtime.runner import Runner
from bot.store.db import Database
from bot.store.integrity import verify_run
from tests.fakes.engine_world import POLICY, World, make_catalog, make_registry


@dataclass
class Recorder:
    """A notifier that keeps what it was told."""

    updates: list[tuple[str, list[str]]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    def run_changed(self, state: RunState, *, events: Any, messages: Any) -> None:
        self.updates.append((str(state.status), [e.type for e in events]))
        self.messages += list(messages)


def runbook(name: str, steps: str, *, params: str = "", approvals: str = "") -> str:
    return (f"apiVersion: runbook-bot/v1\nkind: Runbook\nmetadata:\n  name: {name}\n"
            f"  title: Test runbook {name}\nspec:\n"
            + (f"  params:\n{textwrap.indent(textwrap.dedent(params), '    ')}" if params else "")
            + (f"  approvals:\n{textwrap.indent(textwrap.dedent(approvals), '    ')}" if approvals else "")
            + f"  steps:\n{textwrap.indent(textwrap.dedent(steps), '    ')}")


class Engine:
    def __init__(self, db_url: str, tmp: Path, texts: dict[str, str], policy: Any = POLICY,
                 audit_key: str | None = "test-key", previous_keys: Sequence[str] = ()) -> None:
        self.world = World(tmp / "world.json")
        self.clock = ManualClock()
        self.db = Database(db_url, audit_key=audit_key, previous_keys=previous_keys)
        self.recorder = Recorder()
        self.catalog = make_catalog(self.world, policy)
        self.policy = policy
        self.runner = Runner(store=self.db, catalog=self.catalog,
                             runbooks=TextSource(texts, catalog=make_registry(self.world)),
                             policy=policy, clock=self.clock, notifiers=[self.recorder],
                             lease_wait=0.0)

    def start(self, runbook_name: str, /, *, by: str = "alice", dry_run: bool = False,
              provenance: Provenance | None = None, **params: Any) -> str:
        state = self.runner.start(StartRun(runbook=runbook_name, params=params, requester=by,
                                           dry_run=dry_run, provenance=provenance or Provenance()))
        self.runner.drive(state.run_id)
        return state.run_id

    def state(self, run_id: str) -> RunState:
        return self.db.load(run_id)

    def step(self, run_id: str, key: str) -> Any:
        return self.state(run_id).steps[key]

    def events(self, run_id: str) -> list[str]:
        return [e.type for e in self.db.events(run_id)]

    def event(self, run_id: str, type_: str) -> list[dict[str, Any]]:
        return [dict(e.payload) | {"actor": e.actor} for e in self.db.events(run_id) if e.type == type_]

    def _do(self, cmd: Any) -> Outcome:
        out = self.runner.submit(cmd)
        self.runner.drive(cmd.run_id)
        return out

    def approve(self, run_id: str, by: str, step: str | None = None, **kw: Any) -> Outcome:
        return self._do(Approve(run_id=run_id, actor=by, step=step, **kw))

    def reject(self, run_id: str, by: str, reason: str = "too risky right now") -> Outcome:
        return self._do(Reject(run_id=run_id, actor=by, reason=reason))

    def confirm(self, run_id: str, by: str) -> Outcome:
        return self._do(Confirm(run_id=run_id, actor=by))

    def break_glass(self, run_id: str, by: str, reason: str = "the lock is stale, checked") -> Outcome:
        return self._do(BreakGlass(run_id=run_id, actor=by, reason=reason))

    def retry(self, run_id: str, by: str) -> Outcome:
        return self._do(Retry(run_id=run_id, actor=by))

    def abort(self, run_id: str, by: str, reason: str = "wrong node, stopping") -> Outcome:
        return self._do(Abort(run_id=run_id, actor=by, reason=reason))

    def handover(self, run_id: str, by: str, to: str, reason: str = "") -> Outcome:
        return self._do(Handover(run_id=run_id, actor=by, to=to, reason=reason))

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.runner.run_due()

    def restart_store(self, *, audit_key: str | None, previous_keys: Sequence[str] = ()) -> None:
        """The bot restarted with other audit keys: a new store on the same database."""
        old, self.db = self.db, Database(self.db.url, audit_key=audit_key, previous_keys=previous_keys)
        self.runner.store = self.runner.leases.store = self.db
        old.close()

    def verified(self, run_id: str) -> bool:
        return verify_run(self.db, run_id, key=self.db.keyring).ok


@pytest.fixture
def make_engine(tmp_path):
    engines: list[Engine] = []

    def make(texts: dict[str, str], **kw: Any) -> Engine:
        e = Engine(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, texts, **kw)
        engines.append(e)
        return e

    yield make
    for e in engines:
        e.db.close()


__all__ = ["AuditDraft", "Engine", "make_engine", "runbook"]
