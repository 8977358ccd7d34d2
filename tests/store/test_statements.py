"""How many statements a tick and a load cost, and that what the store keeps of a run to save them
(``bot.store.known``) never changes what is stored nor hides another writer's rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, select

from bot.engine.runstate import AuditDraft, RunState, StepState
from bot.engine.state import RunStatus, StepStatus
from bot.errors import LeaseHeld
from bot.store.db import Database, events_t, runs, steps_t
from bot.store.integrity import verify_run
from bot.store.known import KnownRuns

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(seconds=60)

# what one tick (header, a changed step, a new step, its events) and one load cost now: 4 and 1;
# before the store kept what it wrote, 7 and 2. Tight enough that creeping back fails.
TICK_MAX = 5
LOAD_MAX = 1
COLD_LOAD_MAX = 2
# a claim answers with the run's row, so the load that follows it reads nothing (was 3: 1 + 2)
CLAIM_AND_LOAD_MAX = 1


def _state(run_id: str = "rb-stmts") -> RunState:
    st = RunState(run_id=run_id, runbook="r", runbook_text="steps: [a, b]", runbook_file="r.yaml",
                  title="R", params={"node": "n1"}, requester="alice", created_at=T0.isoformat(),
                  origin={"channel": "C1"})
    st.steps["a"] = StepState(key="a", step_id="a", position=0)
    return st


def _draft(type_: str, **payload: object) -> AuditDraft:
    return AuditDraft(type=type_, actor="alice", ts=T0.isoformat(), payload=dict(payload))


@contextmanager
def _counted(db: Database) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


def _created() -> AuditDraft:
    return _draft("run.created", runbook="r", file="r.yaml", params={"node": "n1"}, dry_run=False,
                  origin={"channel": "C1"}, title="R")


def _tick(db: Database, st: RunState, owner: str, n: int, *, until: datetime = LATER) -> None:
    """One tick as the runner saves it: the header, step ``a`` changed, a new step, two events."""
    st.status = RunStatus.RUNNING
    st.steps["a"].status = StepStatus.PLANNING if n % 2 else StepStatus.WAITING
    st.steps[f"b{n}"] = StepState(key=f"b{n}", step_id="b", position=n)
    db.save(st, owner=owner, steps=["a", f"b{n}"],
            events=[_draft("step.planned", n=n), _draft("guard.passed", n=n)],
            next_check_at=LATER, lease_until=until)


def test_a_tick_and_a_load_take_few_statements(db: Database, db_url: str) -> None:
    st = _state()
    db.create(st, [_created()])
    assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
    for n in range(1, 4):
        with _counted(db) as loaded:
            st = db.load(st.run_id)
        with _counted(db) as ticked:
            _tick(db, st, "w", n)
        assert len(loaded) <= LOAD_MAX, loaded
        assert len(ticked) <= TICK_MAX, ticked
    db.release(st.run_id, owner="w")
    with _counted(db) as claimed:
        assert db.claim(st.run_id, owner="w2", now=T0, ttl=60)
        st = db.load(st.run_id)
    assert len(claimed) <= CLAIM_AND_LOAD_MAX, claimed
    assert st.steps.keys() == {"a", "b1", "b2", "b3"} and st.version == 4
    cold = Database(db_url, audit_key="k")  # another worker: it has read nothing of the run yet
    try:
        with _counted(cold) as loaded:
            back = cold.load(st.run_id)
        assert len(loaded) <= COLD_LOAD_MAX, loaded
        assert back.steps.keys() == {"a", "b1", "b2", "b3"} and back.runbook_text == "steps: [a, b]"
    finally:
        cold.close()
    assert verify_run(db, st.run_id, key=db.key).ok


def _rows(db: Database, run_id: str) -> list[tuple[object, ...]]:
    with db.engine.connect() as conn:
        run = [tuple(r) for r in conn.execute(select(runs).where(runs.c.id == run_id))]
        steps = [tuple(r) for r in conn.execute(select(steps_t).where(steps_t.c.run_id == run_id)
                                                .order_by(steps_t.c.key))]
        events = [tuple(r) for r in conn.execute(select(events_t).where(events_t.c.run_id == run_id)
                                                 .order_by(events_t.c.seq))]
    return run + steps + events


def _play(db: Database) -> None:
    st = _state()
    db.create(st, [_created()])
    assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
    for n in range(1, 4):
        st = db.load(st.run_id)
        _tick(db, st, "w", n)
    st = db.load(st.run_id)
    del st.steps["b2"]  # a step instance that is gone
    db.save(st, owner="w", steps=["b2", "a"], events=[], next_check_at=None, lease_until=LATER)
    db.release(st.run_id, owner="w")


def test_what_is_stored_is_the_same_as_without_what_the_store_keeps(tmp_path) -> None:
    kept = Database(f"sqlite:///{tmp_path / 'kept.db'}", audit_key="k")
    read = Database(f"sqlite:///{tmp_path / 'read.db'}", audit_key="k")
    read._known = KnownRuns(size=0)  # keeps nothing: every save reads the head, as before
    try:
        _play(kept)
        _play(read)
        assert _rows(kept, "rb-stmts") == _rows(read, "rb-stmts")
        assert "b2" not in kept.load("rb-stmts").steps
    finally:
        kept.close()
        read.close()


def test_another_workers_writes_are_read_and_chained_onto(db: Database, db_url: str) -> None:
    st = _state()
    db.create(st, [_created()])
    assert db.claim(st.run_id, owner="w1", now=T0, ttl=10)
    mine = db.load(st.run_id)
    _tick(db, mine, "w1", 1, until=T0 + timedelta(seconds=10))
    other = Database(db_url, audit_key="k")
    try:
        # the lease ends; another worker takes the run over and writes a tick of its own
        assert other.claim(st.run_id, owner="w2", now=T0 + timedelta(seconds=11), ttl=10)
        theirs = other.load(st.run_id)
        _tick(other, theirs, "w2", 2, until=T0 + timedelta(seconds=21))
        # the first worker, still holding the state it had, writes nothing (its lease is gone)
        with pytest.raises(LeaseHeld):
            _tick(db, mine, "w1", 3)
        other.release(st.run_id, owner="w2")
        # it gets the run back: its load sees the other's rows, its save chains onto their head
        assert db.claim(st.run_id, owner="w3", now=T0 + timedelta(seconds=30), ttl=10)
        back = db.load(st.run_id)
        assert back.steps.keys() == {"a", "b1", "b2"}
        _tick(db, back, "w3", 4)
        # and a save from a state read before the other's tick still chains onto the real head
        _tick(db, mine, "w3", 5)
    finally:
        other.close()
    assert [e.seq for e in db.events(st.run_id)] == list(range(1, 10))
    assert verify_run(db, st.run_id, key=db.key).ok
    assert db.load(st.run_id).steps.keys() >= {"a", "b1", "b2", "b4", "b5"}
