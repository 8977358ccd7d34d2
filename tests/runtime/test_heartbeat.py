"""Short leases with a heartbeat: a dead replica's run is taken over within one lease length, a
live worker keeps its run however long a tick takes, and a worker that lost its lease applies
nothing. The clock is a ManualClock: lease times are the clock's, and no test waits."""

from __future__ import annotations

from typing import Any

import pytest

from bot.engine.commands import Approve, StartRun
from bot.runtime.leases import Leases
from tests.fakes.engine_harness import Engine

RUNBOOK = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: setter, title: Set a}
spec:
  approvals: {groups: [sre]}
  steps:
    - {id: read, title: Read a, action: fake.read, with: {name: a}}
    - {id: set_a, title: Set a, action: fake.set, with: {name: a, value: "1"}}
"""
ELSEWHERE = "replica-b.example:4242:0badf00d"  # a worker on another host: its PID means nothing here


@pytest.fixture
def eng(db_url, tmp_path) -> Engine:
    e = Engine(db_url, tmp_path, {"setter": RUNBOOK})
    yield e
    e.db.close()


def _start(eng: Engine) -> str:
    return eng.runner.start(StartRun(runbook="setter", params={}, requester="alice")).run_id


def test_a_run_held_by_a_dead_replica_on_another_host_is_taken_over_after_one_lease(eng):
    run_id = _start(eng)
    ttl = eng.runner.lease_seconds
    assert ttl <= 6
    assert eng.db.claim(run_id, owner=ELSEWHERE, now=eng.clock.now(), ttl=ttl)  # then it died
    eng.clock.advance(ttl - 0.5)
    assert eng.runner.run_due() == 0
    assert eng.runner.drive(run_id).status == "pending"  # still its lease: nothing happens
    eng.clock.advance(1.0)
    assert eng.runner.run_due() == 1
    assert eng.state(run_id).status == "awaiting_approval"
    assert eng.db.lease_of(run_id) == (None, None)  # driven and released


def test_the_heartbeat_keeps_a_lease_past_its_length_and_others_off_the_run(eng):
    run_id = _start(eng)
    leases = Leases(store=eng.db, clock=eng.clock, seconds=6.0, wait=0.0)
    with leases.claimed(run_id) as owner:
        for _ in range(5):  # 20 s in all, more than three lease lengths
            eng.clock.advance(4.0)
            assert leases.beat() == []
            assert run_id not in eng.db.due(now=eng.clock.now())
            assert not eng.db.claim(run_id, owner=ELSEWHERE, now=eng.clock.now(), ttl=6.0)
        assert eng.db.lease_of(run_id)[0] == owner
        eng.clock.advance(6.5)  # this worker stops beating (it hangs, or lost the database)
        assert run_id in eng.db.due(now=eng.clock.now())
        assert eng.db.claim(run_id, owner=ELSEWHERE, now=eng.clock.now(), ttl=6.0)
        assert leases.beat() == [run_id]  # it learns its lease is gone, and never gets it back
        assert eng.db.lease_of(run_id)[0] == ELSEWHERE
    assert eng.db.lease_of(run_id)[0] == ELSEWHERE  # its release leaves the new owner's lease
    assert leases.held == {}


class _TakenOverBeforeApply:
    """Another replica takes the run over between the "applying" mark and the apply: this worker
    stalled for longer than its lease (a long GC pause, a network partition)."""

    def __init__(self, eng: Engine) -> None:
        self.eng, self.fired = eng, False

    def run_changed(self, state: Any, *, events: Any, messages: Any) -> None:
        if self.fired or not any(e.type == "step.applying" and e.payload.get("step") == "set_a"
                                 for e in events):
            return
        self.fired = True
        self.eng.clock.advance(self.eng.runner.lease_seconds + 1)
        assert self.eng.db.claim(state.run_id, owner=ELSEWHERE, now=self.eng.clock.now(), ttl=6.0)


def test_a_worker_that_lost_its_lease_before_an_apply_applies_nothing(eng):
    run_id = _start(eng)
    eng.runner.drive(run_id)
    eng.runner.notifiers.append(_TakenOverBeforeApply(eng))
    assert eng.runner.submit(Approve(run_id=run_id, actor="bob")).ok
    eng.runner.drive(run_id)
    assert eng.world.effects == []  # the apply was refused: the lease was gone
    assert eng.db.lease_of(run_id)[0] == ELSEWHERE
    # the replica that took it over (here: its lease ends, and this worker resumes the run)
    eng.clock.advance(7.0)
    eng.runner.run_due()
    assert eng.state(run_id).status == "succeeded"
    assert [(e["step"], e["name"]) for e in eng.world.effects] == [("set_a", "a")]
    assert [e["step"] for e in eng.event(run_id, "step.applied")] == ["read", "set_a"]
    assert eng.verified(run_id)
