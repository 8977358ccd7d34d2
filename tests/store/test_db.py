"""The durable store on SQLite and PostgreSQL: leases, atomic saves, the audit head, resume."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from bot.engine.runstate import AuditDraft, RunState, StepState
from bot.engine.state import RunStatus, StepStatus
from bot.errors import LeaseHeld, NotFound, RunIdTaken
from bot.store.db import Database
from bot.store.integrity import verify_run
from tests.fakes.engine_harness import Engine, runbook

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _state(run_id: str = "rb-abcde") -> RunState:
    st = RunState(run_id=run_id, runbook="r", runbook_text="x", runbook_file="r.yaml", title="R",
                  params={"node": "n1"}, requester="alice", created_at=T0.isoformat(),
                  origin={"channel": "C1"})
    st.steps["a"] = StepState(key="a", step_id="a", position=0)
    return st


def _draft(type_: str, **payload) -> AuditDraft:
    return AuditDraft(type=type_, actor="alice", ts=T0.isoformat(), payload=payload)


def test_a_run_round_trips_with_its_steps_and_first_event(db):
    db.create(_state(), [_draft("run.created", runbook="r")])
    back = db.load("rb-abcde")
    assert back.params == {"node": "n1"} and back.steps["a"].status == StepStatus.PENDING
    assert db.head("rb-abcde")[0] == 1
    with pytest.raises(RunIdTaken):
        db.create(_state(), [])
    with pytest.raises(NotFound, match="runbook-bot runs"):
        db.load("rb-xxxxx")


def test_only_one_of_several_concurrent_claimers_gets_the_lease(db):
    db.create(_state(), [])
    wins: list[str] = []
    barrier = threading.Barrier(4)

    def claim(i: int) -> None:
        barrier.wait()
        if db.claim("rb-abcde", owner=f"w{i}", now=T0, ttl=60):
            wins.append(f"w{i}")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert not db.claim("rb-abcde", owner="late", now=T0 + timedelta(seconds=59), ttl=60)
    assert db.claim("rb-abcde", owner="late", now=T0 + timedelta(seconds=61), ttl=60)  # expired


def test_a_worker_that_lost_its_lease_writes_nothing(db):
    st = _state()
    db.create(st, [])
    assert db.claim(st.run_id, owner="w1", now=T0, ttl=10)
    assert db.claim(st.run_id, owner="w2", now=T0 + timedelta(seconds=11), ttl=10)
    st.status = RunStatus.RUNNING
    st.steps["a"].status = StepStatus.PLANNING
    with pytest.raises(LeaseHeld):
        db.save(st, owner="w1", steps=["a"], events=[_draft("step.planned")], next_check_at=None,
                lease_until=T0 + timedelta(seconds=20))
    back = db.load(st.run_id)
    assert back.status == RunStatus.PENDING and back.steps["a"].status == StepStatus.PENDING
    assert db.events(st.run_id) == []


def _created() -> AuditDraft:
    return _draft("run.created", runbook="r", file="r.yaml", params={"node": "n1"}, dry_run=False,
                  origin={"channel": "C1"}, title="R")


def test_saves_chain_events_onto_the_stored_head_and_verify(db):
    st = _state()
    db.create(st, [_created()])
    db.claim(st.run_id, owner="w", now=T0, ttl=60)
    for i in range(3):
        db.save(st, owner="w", steps=[], events=[_draft("step.planned", i=i), _draft("guard.passed")],
                next_check_at=None, lease_until=T0 + timedelta(seconds=60))
    evs = db.events(st.run_id)
    assert [e.seq for e in evs] == list(range(1, 8))
    seq, head = db.head(st.run_id)
    assert seq == 7 and head == evs[-1].hash
    assert verify_run(db, st.run_id, key=db.key).ok
    other = verify_run(db, st.run_id, key=b"other")
    assert not other.ok and other.kind == "key" and "you gave another" in other.reason


def test_due_lists_unleased_active_runs_whose_check_is_due(db):
    st = _state()
    db.create(st, [])
    db.claim(st.run_id, owner="w", now=T0, ttl=60)
    st.status = RunStatus.WAITING
    db.save(st, owner="w", steps=[], events=[], next_check_at=T0 + timedelta(seconds=30),
            lease_until=T0 + timedelta(seconds=60))
    db.release(st.run_id, owner="w")
    assert db.due(now=T0 + timedelta(seconds=29)) == []
    assert db.due(now=T0 + timedelta(seconds=31)) == [st.run_id]
    assert [r.run_id for r in db.runs(active=True, channel="C1")] == [st.run_id]
    assert db.runs(active=False) == []


def test_a_whole_run_with_an_approval_on_this_backend(db_url, tmp_path):
    text = runbook("b", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\n")
    e = Engine(db_url, tmp_path, {"b": text})
    run = e.start("b", by="alice")
    assert e.state(run).status == "awaiting_approval"
    assert e.approve(run, "bob").ok
    assert e.state(run).status == "succeeded" and e.world.get("x") == "on"
    assert e.verified(run)
    e.db.close()


def test_two_replicas_on_one_store_never_apply_the_same_step_twice(db_url, tmp_path):
    from bot.runbook.source import TextSource
    from bot.runtime.runner import Runner
    from tests.fakes.engine_world import POLICY, make_catalog, make_registry

    text = runbook("b", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\n")
    first = Engine(db_url, tmp_path, {"b": text})
    run = first.start("b", by="alice")
    inside, release = threading.Event(), threading.Event()
    catalog = make_catalog(first.world)
    real_apply = catalog.apply

    def slow_apply(name, plan, ctx):
        inside.set()
        assert release.wait(10)
        return real_apply(name, plan, ctx)

    catalog.apply = slow_apply  # replica A is in the middle of applying
    replica_a = Runner(store=first.db, catalog=catalog,
                       runbooks=TextSource({"b": text}, catalog=make_registry(first.world)),
                       policy=POLICY, clock=first.clock, lease_wait=0.0)
    second = Database(db_url, audit_key="test-key")
    replica_b = Runner(store=second, catalog=make_catalog(first.world),
                       runbooks=TextSource({"b": text}, catalog=make_registry(first.world)),
                       policy=POLICY, clock=first.clock, lease_wait=0.0)
    from bot.engine.commands import Approve

    assert replica_a.submit(Approve(run_id=run, actor="bob")).ok
    worker = threading.Thread(target=replica_a.drive, args=(run,))
    worker.start()
    assert inside.wait(10)
    state_b = replica_b.drive(run)  # the lease is held: B does nothing
    assert state_b.status != "succeeded"
    assert first.world.effects == []
    release.set()
    worker.join(10)
    assert replica_b.drive(run).status == "succeeded"
    assert len(first.world.effects) == 1
    assert first.verified(run)
    second.close()
    first.db.close()
