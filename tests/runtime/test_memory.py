"""What a long-lived runner keeps in memory is bounded by count, and bounding it changes nothing.

A worker serves runs for weeks: a lock or a parsed runbook kept for every run it ever touched would
grow without end. These drive real runs (fake actions, SQLite store) and count what is left.
"""

from __future__ import annotations

import pytest

from bot.engine.commands import Approve, StartRun
from bot.errors import LeaseHeld
from bot.runbook.source import ParseCache
from bot.runtime.leases import RunLocks
from tests.fakes.engine_harness import Engine, runbook

READ = runbook("read", """
- id: read
  title: Read it
  action: fake.read
  with: {name: x}
""")
SET = runbook("set", """
- id: change
  title: Set it
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="""
groups: [sre]
""")


# parsed runbooks the source keeps in these tests (bot.runbook.source.PARSED_RUNBOOKS in service)
KEPT = 4


@pytest.fixture
def engine(tmp_path):
    texts = {"set": SET, "read": READ}
    # as many runbooks as the source keeps parsed, and two more: the oldest are dropped
    texts |= {f"read-{i}": READ.replace("name: read", f"name: read-{i}") for i in range(KEPT + 2)}
    e = Engine(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, texts)
    source = e.runner.runbooks
    source.parsed = ParseCache(source.catalog, size=KEPT)
    yield e
    e.db.close()


def test_a_runner_keeps_no_lock_for_runs_it_is_not_working_on(engine):
    runs = [engine.start("read") for _ in range(20)]
    assert all(engine.state(r).status == "succeeded" for r in runs)
    assert len(engine.runner.leases.locks) == 0
    with engine.runner.leases.claimed(runs[0]):
        assert len(engine.runner.leases.locks) == 1
    assert len(engine.runner.leases.locks) == 0


def test_the_lock_of_a_run_in_use_still_keeps_other_threads_out(engine):
    run = engine.start("set")
    with engine.runner.leases.claimed(run):
        with pytest.raises(LeaseHeld, match="busy in this process"):
            engine.runner.submit(Approve(run_id=run, actor="bob"))
        assert engine.runner.drive(run).status == "awaiting_approval"
        assert len(engine.runner.leases.locks) == 1  # the refused attempts left nothing behind
    assert engine.approve(run, "bob").ok
    assert engine.state(run).status == "succeeded"
    assert engine.world.get("x") == "on"
    assert len(engine.runner.leases.locks) == 0


def test_parsed_runbooks_are_bounded_and_a_dropped_one_is_parsed_again(engine):
    waiting = engine.start("set")  # its parsed runbook is the oldest, dropped below
    for i in range(KEPT + 2):
        engine.runner.start(StartRun(runbook=f"read-{i}", params={}, requester="alice"))
    assert len(engine.runner.runbooks.parsed) == KEPT  # the one cache, shared with front-ends
    assert engine.approve(waiting, "bob").ok
    assert engine.state(waiting).status == "succeeded"
    assert engine.world.get("x") == "on"


def test_a_run_lock_is_dropped_when_its_last_user_leaves():
    locks = RunLocks()
    with locks.held("r1", timeout=0) as first:
        assert first
        with locks.held("r1", timeout=0) as second:
            assert not second
            assert len(locks) == 1
        assert len(locks) == 1
    assert len(locks) == 0
