"""Schema migrations: a fresh database, a database from before migrations, a newer database, and
replicas starting together, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from bot.engine.runstate import AuditDraft, RunState, StepState
from bot.errors import ConfigError
from bot.frontends.slack.persistence import SLACK, SlackStore
from bot.store.audit import verify_events
from bot.store.db import STORE, Database, make_engine
from bot.store.migrate import heads

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("schema_v0")  # the DDL that create_all made before migrations
T0 = datetime(2026, 1, 1, tzinfo=UTC)
OLD_COLUMNS = {  # the columns of the store's tables in that snapshot
    "runs": ["id", "runbook", "status", "requester", "channel", "dry_run", "created_at", "header",
             "runbook_text", "version", "next_check_at", "lease_owner", "lease_until", "audit_seq",
             "audit_hash"],
    "steps": ["run_id", "key", "position", "state"],
    "events": ["run_id", "seq", "ts", "actor", "type", "payload", "prev_hash", "hash"],
}


def _everything() -> sa.MetaData:
    combined = sa.MetaData()
    for component in (STORE, SLACK):
        for table in component.metadata.tables.values():
            table.to_metadata(combined)
    return combined


def _diffs(engine: sa.Engine, metadata: sa.MetaData) -> list[object]:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(ctx, metadata)
                if not (d[0] == "remove_table" and str(d[1].name).startswith("alembic_version"))]


def test_a_fresh_database_gets_exactly_the_tables_the_code_defines(db_url):
    db = Database(db_url)
    SlackStore(db.engine)
    assert _diffs(db.engine, sa.MetaData()) != []  # the comparison sees tables at all
    assert _diffs(db.engine, _everything()) == []
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all() \
            == sorted(heads(STORE))
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version_slack")).scalars().all() \
            == sorted(heads(SLACK))
    db.close()


def _fill(source: Database, runs: int) -> None:
    """Runs with chains of different lengths, written the way the store writes them."""
    for i in range(runs):
        rid = f"rb-up{i:03d}"
        st = RunState(run_id=rid, runbook="r", runbook_text="x", runbook_file="r.yaml", title="R",
                      params={"i": i}, requester="alice", created_at=(T0 + timedelta(minutes=i)).isoformat(),
                      origin={"channel": "C1"} if i % 2 else {})
        st.steps["a"] = StepState(key="a", step_id="a", position=0)
        source.create(st, [AuditDraft(type="run.created", actor="alice", ts=T0.isoformat(),
                                      payload={"runbook": "r"})])
        assert source.claim(rid, owner="w", now=T0, ttl=60)
        for n in range(i):
            source.save(st, owner="w", steps=["a"], next_check_at=None, lease_until=T0,
                        events=[AuditDraft(type="step.planned", actor="bot", ts=T0.isoformat(),
                                           payload={"n": n, "token": "xoxb-123456789012-abc"})])
        source.release(rid, owner="w")


def _old_database(url: str, dialect: str, *, slack: bool, tmp_path: Path, runs: int) -> None:
    """The database as the release before migrations left it, with runs and audit chains."""
    ddl = (SNAPSHOT / f"{dialect}.sql").read_text().split(";")
    engine = make_engine(url)
    with engine.begin() as conn:
        for statement in filter(str.strip, ddl):
            if slack or "slack_" not in statement:
                conn.execute(sa.text(statement))
    # written without a key: the release before migrations had no signed heads to carry over
    source = Database(f"sqlite:///{tmp_path / 'source.db'}", audit_key=None)
    _fill(source, runs)
    with source.engine.connect() as src, engine.begin() as dst:
        for name, columns in OLD_COLUMNS.items():
            typed = STORE.metadata.tables[name].c
            rows = [dict(r._mapping) for r in src.execute(sa.select(*[typed[c] for c in columns]))]
            dst.execute(sa.table(name, *[sa.column(c, typed[c].type) for c in columns]).insert(), rows)
    source.close()
    engine.dispose()


@pytest.mark.parametrize("slack", [True, False], ids=["with-slack-tables", "store-only"])
def test_an_upgrade_from_the_release_before_migrations_keeps_every_run_and_audit_event(
        db_url, tmp_path, slack):
    dialect = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    _old_database(db_url, dialect, slack=slack, tmp_path=tmp_path, runs=12)
    db = Database(db_url, audit_key=None)
    slack_store = SlackStore(db.engine)
    listed = db.runs(active=None, limit=100)
    assert len(listed) == 12
    events = 0
    for header in listed:
        state = db.load(header.run_id)
        assert state.steps["a"].step_id == "a"
        chain = db.events(header.run_id)
        seq, head = db.head(header.run_id)
        verdict = verify_events(run_id=header.run_id, events=chain, head_seq=seq, head_hash=head,
                                key=db.key)
        assert verdict.ok, verdict
        assert len(chain) == int(header.run_id[-3:]) + 1
        assert "xoxb" not in str([e.payload for e in chain])
        events += len(chain)
    assert events == sum(i + 1 for i in range(12))
    assert _diffs(db.engine, _everything()) == []
    if not slack:  # the new cursor table counts the runs already there as drawn
        assert slack_store.lagging(now=T0.timestamp() + 3600, thorough=True) == []
    db.close()


def test_a_database_migrated_by_a_newer_version_is_refused_with_a_clear_message(db_url):
    Database(db_url).close()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'store_9999'"))
    engine.dispose()
    with pytest.raises(ConfigError, match=r"store schema revision store_9999.*newer version"):
        Database(db_url)


_STARTER = """
import sys, time
from pathlib import Path
from bot.store.db import Database
from bot.frontends.slack.persistence import SlackStore
go = Path(sys.argv[2])
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
db = Database(sys.argv[1])
SlackStore(db.engine)
print("up")
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.parametrize("database", ["fresh", "older"])
def test_replicas_starting_together_all_come_up(backend, database, tmp_path, request):
    url = (f"sqlite:///{tmp_path / 'state.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))
    if database == "older":  # from the release before migrations, with runs in it
        _old_database(url, "sqlite" if backend == "sqlite" else "postgresql", slack=False,
                      tmp_path=tmp_path, runs=3)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _STARTER, url, str(go)], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    time.sleep(1.5)  # let every interpreter import before they race (not a timing assertion)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and out.strip() == "up", err
    db = Database(url)
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM alembic_version")).scalar() == 1
    assert len(db.runs(active=None)) == (3 if database == "older" else 0)
    db.close()
