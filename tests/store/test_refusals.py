"""The refusals chain (``bot.store.refusals``), on SQLite and PostgreSQL: append-only, hashed over
the row before, redacted before it is stored; an edited, deleted or re-signed row is named."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from bot.store.audit import Keyring
from bot.store.db import Database, make_engine
from bot.store.refusals import Refusals, verify_refusals
from bot.store.schema import refusals_t

TOKEN = "xoxb-123456789012-abcdefghijklmnopqrstuvwx"


def record(db: Database, n: int, **via: str) -> None:
    db.refusals.record(ts=f"2026-01-01T00:00:{n:02d}Z", actor="slack:U0MALLORY",
                       what=f"start node-dead-ngns #{n}",
                       reason="starting node-dead-ngns needs a member of oncall-sre", via=via)


def test_refusals_chain_verifies_is_redacted_and_names_an_edited_row(db_url: str) -> None:
    db = Database(db_url, audit_key="k")
    for n in range(1, 4):
        record(db, n, frontend="slack", channel="C0INC")
    db.refusals.record(ts="2026-01-01T00:01:00Z", actor="anonymous",
                       what="api GET /api/v1/runs: unauthenticated",
                       reason=f"bad token: Bearer {TOKEN}",
                       via={"frontend": "api", "authorization": f"Bearer {TOKEN}"})
    rows = db.refusals.rows()
    assert [r.seq for r in rows] == [1, 2, 3, 4] and db.refusals.verify().ok
    assert TOKEN not in repr(rows) and "[REDACTED]" in rows[3].reason
    with db.engine.begin() as conn:
        stored = " ".join(map(str, conn.execute(sa.select(refusals_t)).all()))
    assert TOKEN not in stored
    assert [r.seq for r in db.refusals.rows(limit=2)] == [3, 4]
    with db.engine.begin() as conn:  # someone with the database edits who was refused
        conn.execute(sa.update(refusals_t).where(refusals_t.c.seq == 2)
                     .values(actor="slack:U0SOMEONE"))
    verdict = db.refusals.verify()
    assert (verdict.ok, verdict.first_bad_seq, verdict.kind) == (False, 2, "tampered")
    assert "changed" in verdict.reason
    # without the key it was signed with: cannot verify, which is not tampering
    assert verify_refusals(rows, Keyring()).kind == "key"
    db.close()


def test_a_deleted_middle_row_breaks_the_chain(db_url: str) -> None:
    db = Database(db_url)
    for n in range(1, 4):
        record(db, n)
    with db.engine.begin() as conn:
        conn.execute(sa.delete(refusals_t).where(refusals_t.c.seq == 2))
    verdict = db.refusals.verify()
    assert (verdict.ok, verdict.first_bad_seq) == (False, 2)
    db.close()


def test_replicas_appending_at_once_never_fork_the_chain(db_url: str) -> None:
    db = Database(db_url, audit_key="k")
    other = make_engine(db_url)
    logs = [db.refusals, Refusals(other, keyring=db.keyring, redact=db.redact)]
    go = threading.Barrier(8)

    def append(i: int) -> None:
        go.wait(timeout=30)
        logs[i % 2].record(ts="2026-01-01T00:00:00Z", actor=f"u{i}", what="start x",
                           reason="no", via={})

    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    rows = db.refusals.rows()
    assert sorted(r.actor for r in rows) == sorted(f"u{i}" for i in range(8))
    assert db.refusals.verify().ok
    other.dispose()
    db.close()
