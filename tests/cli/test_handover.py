"""Owner, handover and provenance at the terminal, through ``bot.cli.main`` with a real config,
runbooks directory and SQLite store: the new owner approving, a bad incident refused before a run
exists, and what ``status``, ``runs`` and ``audit verify`` say afterwards."""

from __future__ import annotations

import sqlite3

import pytest

from tests.cli.test_terminal import _run_id, cli  # noqa: F401  (the fixture ``term`` uses)


@pytest.fixture
def term(cli):  # noqa: F811
    return cli


def _runs(db) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])


def test_the_new_owner_cannot_approve_from_the_terminal(term):
    code, out, _ = term("run", "hello", "-p", "who=ann", "--as", "alice", "--incident", "INC-123",
                       "--suggested-by", "alert:KubeNodeNotReady/ab12")
    run_id = _run_id(out)
    assert code == 0 and "linked: incident INC-123; suggested by alert KubeNodeNotReady/ab12" in out
    code, out, _ = term("handover", run_id, "--to", "bob", "--reason", "bob is the IC now",
                       "--as", "alice")
    assert code == 0 and "now owned by bob (was alice)" in out
    code, out, _ = term("approve", run_id, "--as", "bob", "--no-follow")
    assert code == 1 and "bob owns this run" in out
    code, out, _ = term("approve", run_id, "--as", "alice", "--no-follow")
    assert code == 1 and "alice started this run" in out
    code, out, _ = term("status", run_id)
    assert "owner: bob (handed over; requested by alice)" in out
    assert "incident: INC-123" in out and "suggested by: alert KubeNodeNotReady/ab12" in out
    assert "status: awaiting_approval" in out
    code, out, _ = term("runs")
    assert "bob (from alice)" in out
    code, out, _ = term("audit", "verify", run_id)
    assert code == 0


def test_handing_over_to_yourself_or_by_someone_else_is_refused(term):
    code, out, _ = term("run", "hello", "-p", "who=ann", "--as", "alice")
    run_id = _run_id(out)
    code, out, _ = term("handover", run_id, "--to", "alice", "--as", "alice")
    assert code == 1 and "alice already owns" in out
    code, out, _ = term("handover", run_id, "--to", "bob", "--as", "bob")
    assert code == 1 and "only the run's owner (alice) or its requester (alice)" in out
    code, out, _ = term("status", run_id)
    assert "owner: alice" in out and "handed over" not in out


def test_a_bad_incident_or_reference_starts_nothing(term):
    code, _, err = term("run", "hello", "-p", "who=ann", "--as", "alice",
                       "--incident", "INC-1 <!channel>")
    assert code != 0 and "incident:" in err and "has characters" in err
    code, _, err = term("run", "hello", "-p", "who=ann", "--as", "alice", "--incident", "x" * 201)
    assert code != 0 and "at most 200" in err
    code, _, err = term("run", "hello", "-p", "who=ann", "--as", "alice",
                       "--suggested-by", "pager:42")
    assert code != 0 and "expected alert:<ref> or diagnosis:<ref>" in err
    assert _runs(term.db) == 0
