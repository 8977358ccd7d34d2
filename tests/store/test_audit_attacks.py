"""Attacks on the audit trail by someone who can write the database or edit an export, through
the real store (SQLite and PostgreSQL) and ``runbook-bot audit``/``export`` via ``bot.cli.main``.

Each test performs the attack and asserts that verification names it: truncation with the head
moved, a head that disagrees with the one published, edited sections of an exported document, a
chain rewritten without its key, a wrong or missing key, and an edited run header.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select, update

from bot.cli import main
from bot.engine import events as ev
from bot.engine.runstate import RunState, StepState
from bot.engine.state import RunStatus
from bot.store.audit import Event, Redactor, make_event
from bot.store.db import Database, events_t, runs

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUN = "rb-atk34"
FIXTURES = Path(__file__).parent / "fixtures"


def _store_rejected_run(db: Database) -> None:
    """A run whose one step bob rejected: the rejection is what an attacker wants gone."""
    st = RunState(run_id=RUN, runbook="drain", runbook_text="x", runbook_file="drain.yaml",
                  title="Drain", params={"node": "n1"}, requester="alice",
                  created_at=T0.isoformat(), origin={"frontend": "terminal"})
    st.steps["drain"] = StepState(key="drain", step_id="drain", position=0)
    ts = T0.isoformat()
    db.create(st, [ev.run_created(runbook="drain", file="drain.yaml", params={"node": "n1"},
                                  dry_run=False, origin={"frontend": "terminal"},
                                  title="Drain").draft(actor="alice", ts=ts)])
    db.claim(RUN, owner="w", now=T0, ttl=60)
    st.status = RunStatus.FAILED
    drafts = [
        ev.step_planned("drain", plan=None, plan_hash="h1", summary="drain n1").draft(actor="bot", ts=ts),
        ev.approval_requested("drain", confirmation=False, plan_hash="h1", min_approvers=1,
                              groups=["sre"], expires_at=None, reason="destructive",
                              already=[]).draft(actor="bot", ts=ts),
        ev.command_given("reject", {"step": "drain"}).draft(actor="bob", ts=ts),
        ev.approval_rejected("drain", plan_hash="h1", reason="freeze").draft(actor="bob", ts=ts),
        ev.run_finished(status="failed", outcome="rejected by bob", compensations=[],
                        duration_seconds=0.0).draft(actor="bot", ts=ts),
    ]
    db.save(st, owner="w", steps=["drain"], events=drafts, next_check_at=None,
            lease_until=T0 + timedelta(seconds=60))
    db.release(RUN, owner="w")


@pytest.fixture
def cli(db_url, tmp_path, monkeypatch, capsys):
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(json.dumps({"database_url": db_url}))
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "key-one")
    monkeypatch.delenv("RUNBOOK_BOT_DATABASE_URL", raising=False)

    def call(*argv: str, key: str | None = "key-one") -> tuple[int, str]:
        if key is None:
            monkeypatch.delenv("RUNBOOK_BOT_AUDIT_KEY", raising=False)
        else:
            monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", key)
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out + out.err

    return call


@pytest.fixture
def opened():
    stores: list[Database] = []
    yield stores
    for d in stores:
        d.close()


@pytest.fixture
def _db(opened):
    def open_(db_url: str, key: str | None = "key-one") -> Database:
        d = Database(db_url, audit_key=key)
        opened.append(d)
        return d
    return open_


def _truncate(db: Database, keep: int) -> None:
    """What a database writer can do without the key: drop the newest events, move the head."""
    with db.engine.begin() as conn:
        conn.execute(delete(events_t).where(events_t.c.run_id == RUN, events_t.c.seq > keep))
        last = conn.execute(select(events_t.c.hash).where(events_t.c.run_id == RUN,
                                                          events_t.c.seq == keep)).scalar_one()
        conn.execute(update(runs).where(runs.c.id == RUN).values(audit_seq=keep, audit_hash=last))


@pytest.mark.parametrize("status", ["failed", "awaiting_approval"])
def test_deleting_the_rejection_and_moving_the_head_is_detected(db_url, cli, status, _db):
    db = _db(db_url)
    _store_rejected_run(db)
    assert cli("audit", "verify", RUN)[0] == 0
    _truncate(db, keep=3)  # the reject command, the rejection and run.finished are gone
    with db.engine.begin() as conn:  # and the header says it is still waiting, or still failed
        header = json.loads(conn.execute(select(runs.c.header).where(runs.c.id == RUN)).scalar_one())
        conn.execute(update(runs).where(runs.c.id == RUN).values(
            status=status, header=json.dumps(header | {"status": status})))
    code, out = cli("audit", "verify", RUN)
    assert code == 1, out
    assert "BROKEN at seq 4" in out and "head is not signed" in out


def test_a_finished_run_is_sealed_by_its_run_finished_event(db_url, _db):
    # without the head's signature (the MAC column wiped too), the seal still catches it
    db = _db(db_url)
    _store_rejected_run(db)
    _truncate(db, keep=5)
    from bot.store.integrity import verify_run

    v = verify_run(db, RUN, key=db.key)
    assert not v.ok and v.first_bad_seq == 6


def test_without_a_key_the_published_head_catches_the_truncation(db_url, cli, _db):
    db = _db(db_url, key=None)
    _store_rejected_run(db)
    code, out = cli("audit", "head", RUN, key=None)
    assert code == 0
    published = re.search(r"audit head (\d+:[0-9a-f]{64})", out)
    assert published, out
    _truncate(db, keep=3)
    with db.engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.id == RUN).values(status="awaiting_approval"))
    assert cli("audit", "verify", RUN, "--head", published.group(1), key=None)[0] == 1


def test_a_bad_head_argument_is_a_usage_error(cli):
    with pytest.raises(SystemExit) as exc:
        cli("audit", "verify", RUN, "--head", "seven")
    assert exc.value.code == 2


def test_an_edited_requester_in_the_run_header_is_detected(db_url, cli, _db):
    db = _db(db_url)
    _store_rejected_run(db)
    with db.engine.begin() as conn:
        header = json.loads(conn.execute(select(runs.c.header).where(runs.c.id == RUN)).scalar_one())
        conn.execute(update(runs).where(runs.c.id == RUN).values(
            requester="mallory", header=json.dumps(header | {"requester": "mallory"})))
    assert db.load(RUN).requester == "mallory"  # what `status` would show
    code, out = cli("audit", "verify", RUN)
    assert code == 1 and "requester" in out and "alice" in out, out


def _rewrite(db: Database, key: bytes | None) -> None:
    """Recompute the whole chain (and head) as plain SHA-256 or under another key."""
    old = db.events(RUN)
    prev: Event | None = None
    with db.engine.begin() as conn:
        conn.execute(delete(events_t).where(events_t.c.run_id == RUN))
        for e in old:
            payload = {k: v for k, v in e.payload.items() if k != "chain"}
            prev = make_event(run_id=RUN, prev=prev, ts=e.ts, actor=e.actor, type_=e.type,
                              payload=payload, key=key, redact=Redactor())
            conn.execute(events_t.insert().values(
                run_id=RUN, seq=prev.seq, ts=prev.ts, actor=prev.actor, type=prev.type,
                payload=json.dumps(prev.payload, sort_keys=True, separators=(",", ":")),
                prev_hash=prev.prev_hash, hash=prev.hash))
        assert prev is not None
        conn.execute(update(runs).where(runs.c.id == RUN).values(audit_hash=prev.hash,
                                                                 audit_mac=None))


def test_a_chain_rewritten_without_its_key_fails_with_the_key(db_url, cli, _db):
    db = _db(db_url)
    _store_rejected_run(db)
    _rewrite(db, key=None)
    code, out = cli("audit", "verify", RUN)
    assert code == 1 and "written without a key" in out, out


def test_a_missing_or_wrong_key_is_not_reported_as_tampering(db_url, cli, _db):
    db = _db(db_url)
    _store_rejected_run(db)
    code, out = cli("audit", "verify", RUN, key=None)
    assert code == 2 and "you gave none" in out and "BROKEN" not in out, out
    code, out = cli("audit", "verify", RUN, key="key-two")
    assert code == 2 and "you gave another" in out and "BROKEN" not in out, out


def test_a_chain_written_under_an_old_key_still_verifies_with_that_key(db_url, cli, _db):
    old = _db(db_url, key="key-one")
    _store_rejected_run(old)
    code, out = cli("audit", "verify", RUN, key="key-two")  # the key rotated
    kid = re.search(r"written with key ([0-9a-f]{12})", out)
    assert code == 2 and kid, out
    code, out = cli("audit", "verify", RUN, key="key-one")
    assert code == 0 and f"key {kid.group(1)}" in out, out


@pytest.mark.parametrize("edit", [
    lambda doc: doc["run"].update(requester="mallory"),
    lambda doc: doc["run"].update(status="succeeded"),
    lambda doc: [t.update(actor="carol") for t in doc["timeline"] if t["actor"] == "bob"],
    lambda doc: doc["steps"][0].update(status="succeeded"),
])
def test_an_edited_section_of_an_export_fails_verification(db_url, cli, tmp_path, edit, _db):
    db = _db(db_url)
    _store_rejected_run(db)
    path = tmp_path / "export.json"
    assert cli("export", RUN, "--format", "json", "-o", str(path))[0] == 0
    assert cli("audit", "verify", "--file", str(path))[0] == 0
    doc = json.loads(path.read_text(encoding="utf-8"))
    edit(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, out = cli("audit", "verify", "--file", str(path))
    assert code == 1 and "BROKEN" in out, out


def test_a_truncated_export_with_its_head_moved_fails_with_the_key(db_url, cli, tmp_path, _db):
    db = _db(db_url)
    _store_rejected_run(db)
    path = tmp_path / "export.json"
    assert cli("export", RUN, "--format", "json", "-o", str(path))[0] == 0
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["events"] = doc["events"][:3]
    doc["head"].update(seq=3, hash=doc["events"][-1]["hash"])
    doc["run"]["status"] = "awaiting_approval"
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, out = cli("audit", "verify", "--file", str(path))
    assert code == 1 and "head is not signed" in out, out


def test_an_export_of_a_chain_written_before_modes_were_recorded_still_verifies(cli):
    # written by the chain format in which the mode and key id were not recorded (key "test-key")
    code, out = cli("audit", "verify", "--file", str(FIXTURES / "legacy-rejected.json"),
                    key="test-key")
    assert code == 0, out
    assert "legacy chain: mode not recorded" in out
    doc = json.loads((FIXTURES / "legacy-rejected.json").read_text(encoding="utf-8"))
    assert "seal" not in doc and "chain" not in doc["events"][0]["payload"]


@pytest.fixture
def sqlite_cli(tmp_path, monkeypatch, capsys):
    """``cli`` on SQLite alone, for what does not depend on the store's backend."""
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)

    def call(*argv: str, key: str | None = "key-one") -> tuple[int, str]:
        if key is None:
            monkeypatch.delenv("RUNBOOK_BOT_AUDIT_KEY", raising=False)
        else:
            monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", key)
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out + out.err

    return call


def test_an_export_that_showed_params_as_written_still_verifies(sqlite_cli):
    """Exports made while the run section showed params as written ("1h30m", not 5400.0; the
    default "90s" as "1m30s") verify: the verifier accepts that form for them, and only that."""
    path = FIXTURES / "legacy-written-params.json"
    code, out = sqlite_cli("audit", "verify", "--file", str(path), key="test-key")
    assert code == 0, out
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["run"]["params"] == {"name": "x", "pace": "1h30m", "settle": "1m30s"}
    assert "params_written" not in doc["run"]


@pytest.mark.parametrize(("edit", "shown"), [
    ({"pace": "1h31m"}, "'pace': '1h31m'"),  # another duration than the chain's
    ({"pace": 5460.0}, "'pace': 5460.0"),
    ({"name": "y"}, "'name': 'y'"),
])
def test_a_param_edited_in_either_form_fails_verification(sqlite_cli, tmp_path, edit, shown):
    doc = json.loads((FIXTURES / "legacy-written-params.json").read_text(encoding="utf-8"))
    doc["run"]["params"].update(edit)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, out = sqlite_cli("audit", "verify", "--file", str(path), key="test-key")
    assert code == 1 and "BROKEN at seq 1" in out and shown in out, out


def test_export_without_the_key_says_unverified_and_exits_2(sqlite_cli, tmp_path, _db):
    """A keyed chain exported with no key is unverified, not broken: the transcript says so and
    export exits as ``audit verify`` does (0 intact, 1 tampered, 2 cannot verify)."""
    cli = sqlite_cli
    db = _db(f"sqlite:///{tmp_path / 'state.db'}")
    _store_rejected_run(db)
    code, out = cli("export", RUN, key=None)
    assert code == 2, out
    assert "**BROKEN**" not in out and "BROKEN at seq" not in out, out
    assert "| Audit chain | **unverified**: written with key " in out, out
    assert "cannot verify" in out  # the line on standard error
    path = tmp_path / "export.json"
    code, out = cli("export", RUN, "--format", "json", "-o", str(path), key=None)
    assert code == 2 and path.exists(), out
    integrity = json.loads(path.read_text(encoding="utf-8"))["integrity"]
    assert integrity["status"] == "unverified" and integrity["first_bad_seq"] is None
    assert integrity["algorithm"] == "HMAC-SHA256"  # what the chain records, not what was given
    html = tmp_path / "export.html"
    assert cli("export", RUN, "--format", "html", "-o", str(html), key=None)[0] == 2
    assert "BROKEN" not in html.read_text(encoding="utf-8")
    # the document sealed without the key cannot be vouched for with it either: not "tampered"
    code, out = cli("audit", "verify", "--file", str(path))
    assert code == 2 and "sealed without the audit key" in out, out


def test_export_exits_1_naming_the_seq_when_the_chain_was_tampered_with(sqlite_cli, tmp_path, _db):
    cli = sqlite_cli
    db = _db(f"sqlite:///{tmp_path / 'state.db'}")
    _store_rejected_run(db)
    assert cli("export", RUN)[0] == 0
    with db.engine.begin() as conn:
        conn.execute(update(events_t).where(events_t.c.run_id == RUN, events_t.c.seq == 4)
                     .values(actor="mallory"))
    code, out = cli("export", RUN)
    assert code == 1 and "**BROKEN** at seq 4" in out, out
