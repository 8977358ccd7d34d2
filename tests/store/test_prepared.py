"""The store's hot writes on the DB-API cursor (``bot.store.prepared``): they store what
SQLAlchemy's own execution stores, fail as it fails, and give way to it wherever someone watches
the statements or a column default must be computed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from bot.errors import ConfigError, LeaseHeld, RunIdTaken
from bot.store import prepared
from bot.store import statements as sql
from bot.store.db import Database, runs
from tests.conftest import PG as PG_ADMIN
from tests.conftest import pg_schema
from tests.store.test_statements import LATER, T0, _created, _play, _rows, _state, _tick

# the writes of a played run (``_play``) besides its claim: its ticks' saves, step rows and
# events, its release
HOT = (sql.SAVE_KNOWN, sql.SAVE_KNOWN_WITH_HEAD, sql.RELEASE, sql.INSERT_EVENT, sql.INSERT_STEP,
       sql.UPDATE_STEP, sql.DELETE_STEP)


def _watch(db: Database) -> list[str]:
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)
    event.listen(db.engine, "before_cursor_execute", count)
    return seen


@pytest.fixture
def other_url(db_url: str, tmp_path: Any) -> Iterator[str]:
    """A second empty database of the same kind as ``db_url``."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'other.db'}"
        return
    with pg_schema() as url:
        yield url


def test_a_run_played_on_the_cursor_path_is_stored_as_sqlalchemy_stores_it(db_url, other_url):
    fast = Database(db_url, audit_key="k")
    full = Database(other_url, audit_key="k")
    try:
        seen = _watch(full)
        _play(fast)
        _play(full)
        assert seen  # the watched one ran every statement through Connection.execute
        assert _rows(fast, "rb-stmts") == _rows(full, "rb-stmts")
        # and the fast one did take the cursor path for each hot write of the play
        dialect = fast.engine.dialect
        taken = {id(stmt) for stmt, d, p in prepared._prepared.values()
                 if d is dialect and p.plain}
        claims = (sql.CLAIM_FREE_ROW,) if fast._returning else (sql.CLAIM_FREE,)
        assert {id(s) for s in (*HOT, *claims)} <= taken
        with fast.engine.connect() as conn:  # and nothing on it sends them the full way
            assert not prepared._watched(conn)
    finally:
        fast.close()
        full.close()


def test_statements_a_listener_watches_all_reach_it(db):
    st = _state()
    db.create(st, [_created()])
    assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
    seen = _watch(db)
    _tick(db, db.load(st.run_id), "w", 1)
    assert db.renew(st.run_id, owner="w", now=T0, ttl=60)
    db.release(st.run_id, owner="w")
    said = " | ".join(seen)
    for fragment in ("UPDATE runs SET status", "INSERT INTO steps", "INSERT INTO events",
                     "UPDATE runs SET lease_until", "UPDATE runs SET lease_owner"):
        assert fragment in said, (fragment, seen)


def test_a_write_the_database_refuses_on_the_cursor_path_is_raised_as_sqlalchemy_raises_it(db):
    st = _state()
    db.create(st, [_created()])
    row = {"run_id": st.run_id, "seq": 1, "ts": "t", "actor": "a", "type": "x", "payload": "{}",
           "prev_hash": "", "hash": "h"}
    with pytest.raises(IntegrityError), db.engine.begin() as conn:  # seq 1 is the creation's
        prepared.execute(conn, sql.INSERT_EVENT, [row])
    with pytest.raises(IntegrityError), db.engine.begin() as conn:
        prepared.execute(conn, sql.INSERT_EVENT, row)


def test_a_read_only_sqlite_database_refuses_a_tick_with_a_clear_error_and_writes_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    db = Database(url, audit_key="k")
    st = _state()
    db.create(st, [_created()])
    assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
    before = _rows(db, st.run_id)
    db.close()  # its connections closed: the next ones are read-only

    @event.listens_for(db.engine, "connect")
    def _read_only(dbapi: Any, _record: Any) -> None:
        dbapi.execute("PRAGMA query_only=ON")

    try:
        st = db.load(st.run_id)
        with pytest.raises(ConfigError, match=r"cannot write the state database .*state\.db"):
            _tick(db, st, "w", 1)
        assert _rows(db, st.run_id) == before
    finally:
        db.close()


def test_an_insert_that_leaves_out_a_column_with_a_python_default_gets_the_default(db):
    values = {"id": "rb-dflt", "runbook": "r", "status": "running", "requester": "alice",
              "created_at": T0.isoformat(), "header": "{}", "runbook_text": "steps: []"}
    with db.engine.begin() as conn:  # dry_run, version and audit_seq are left to defaults
        prepared.execute(conn, insert(runs), values)
    with db.engine.connect() as conn:
        row = conn.execute(select(runs.c.dry_run, runs.c.version, runs.c.audit_seq)
                           .where(runs.c.id == "rb-dflt")).one()
    assert tuple(row) == (False, 0, 0)
    with db.engine.begin() as conn:
        assert prepared.execute(conn, sql.RELEASE, {"rid": "rb-dflt", "owner": "nobody"}) == 0
        assert prepared.execute(conn, sql.RENEW, {"rid": "rb-nope", "owner": "w",
                                                  "until": LATER.timestamp()}) == 0


def test_a_claim_on_the_cursor_path_answers_with_the_row_sqlalchemy_returns(db):
    if not db._returning:
        pytest.skip("this SQLite has no UPDATE ... RETURNING")
    st = _state()
    db.create(st, [_created()])
    t = T0.timestamp()
    values = {"rid": st.run_id, "owner": "w", "t": t, "until": t + 60, "replace": None}
    with db.engine.begin() as conn:
        got = prepared.first(conn, sql.CLAIM_FREE_ROW, values)
    with db.engine.connect() as conn:
        row = conn.execute(select(runs.c.header, runs.c.version, runs.c.audit_seq,
                                  runs.c.audit_hash).where(runs.c.id == st.run_id)).one()
    assert got == tuple(row) and got[1] == 1
    with db.engine.begin() as conn:  # held by w now: another owner gets nothing
        assert prepared.first(conn, sql.CLAIM_FREE_ROW, {**values, "owner": "w2"}) is None
    with pytest.raises(ValueError, match="RETURNING"), db.engine.begin() as conn:
        prepared.execute(conn, sql.CLAIM_FREE_ROW, values)


def test_a_write_that_failed_leaves_no_broken_connection_behind_for_the_next(tmp_path):
    # SQLite's writes go through one connection kept between them: one a write failed on is
    # dropped, and the next write opens another
    db = Database(f"sqlite:///{tmp_path / 'state.db'}", audit_key="k")
    try:
        st = _state()
        db.create(st, [_created()])
        assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
        with db.engine.connect() as probe:
            assert probe.exec_driver_sql("PRAGMA query_only").scalar() == 0
        writer = db._writer
        assert writer is not None
        writer.exec_driver_sql("PRAGMA query_only=ON")  # this one connection refuses writes now
        writer.commit()
        st = db.load(st.run_id)
        with pytest.raises(ConfigError, match="cannot write the state database"):
            _tick(db, st, "w", 1)
        st = db.load(st.run_id)
        _tick(db, st, "w", 2)  # on a fresh connection
        assert "b2" in db.load(st.run_id).steps
    finally:
        db.close()


def test_a_closed_store_writes_to_the_file_that_is_there_when_it_writes_again(tmp_path):
    # what the explorer does between plays: close the store, put another database file in its
    # place, and write on: nothing goes to the file that was replaced
    path = tmp_path / "state.db"
    db = Database(f"sqlite:///{path}", audit_key="k")
    try:
        st = _state()
        db.create(st, [_created()])
        assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
        db.close()
        shutil.copyfile(path, tmp_path / "copy.db")
        os.replace(tmp_path / "copy.db", path)
        _tick(db, db.load(st.run_id), "w", 1)
        db.close()
        again = Database(f"sqlite:///{path}", audit_key="k")
        try:
            assert "b1" in again.load(st.run_id).steps
        finally:
            again.close()
    finally:
        db.close()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_store_keeps_its_runs_after_a_write_it_refused(url):
    # its one connection is its database: a refused write must not close it
    db = Database(url, audit_key="k")
    try:
        st = _state()
        db.create(st, [_created()])
        with pytest.raises(RunIdTaken):
            db.create(_state(), [_created()])
        other = _state("rb-other")
        db.create(other, [_created()])
        assert db.claim(other.run_id, owner="w", now=T0, ttl=60)
        with pytest.raises(LeaseHeld):  # w2 does not hold the lease: it writes nothing
            db.save(db.load(other.run_id), owner="w2", steps=[], events=[_created()],
                    next_check_at=None, lease_until=LATER)
        assert db.load(st.run_id).run_id == st.run_id
        assert db.load(other.run_id).run_id == other.run_id
    finally:
        db.close()


def test_a_listener_on_the_dialect_sees_the_hot_writes(db):
    st = _state()
    db.create(st, [_created()])
    seen: list[str] = []

    def do_execute(_cursor: object, statement: str, *_args: object) -> bool:
        seen.append(statement)
        return False  # SQLAlchemy executes it as usual
    event.listen(db.engine, "do_execute", do_execute)
    assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
    assert db.renew(st.run_id, owner="w", now=T0, ttl=60)
    db.release(st.run_id, owner="w")
    assert len(seen) == 3, seen


@pytest.mark.postgres
def test_a_connection_lost_in_a_hot_write_is_invalidated_and_the_next_write_succeeds(pg_url):
    import sqlalchemy as sa

    db = Database(pg_url, audit_key="k")
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        st = _state()
        db.create(st, [_created()])
        assert db.claim(st.run_id, owner="w", now=T0, ttl=60)
        with pytest.raises(DBAPIError) as lost, db.engine.begin() as conn:
            pid = conn.exec_driver_sql("select pg_backend_pid()").scalar()
            with admin.connect() as a:
                a.execute(sa.text(f"select pg_terminate_backend({pid}, 10000)"))  # and gone
            prepared.execute(conn, sql.RENEW, {"rid": st.run_id, "owner": "w",
                                               "until": LATER.timestamp()})
        assert lost.value.connection_invalidated and "terminating connection" in str(lost.value)
        assert db.renew(st.run_id, owner="w", now=T0, ttl=60)
    finally:
        admin.dispose()
        db.close()
