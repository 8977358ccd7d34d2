"""Rotating the audit key while runs are open, through the engine with a real store (SQLite and
PostgreSQL; a worker restarted with the new key) and ``runbook-bot audit verify``/``export`` via
``bot.cli.main``.

The bot signs with ``RUNBOOK_BOT_AUDIT_KEY`` and verifies with it and the keys of
``RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS``. A chain written under key A that the bot continues under key B
records the change as an ``audit.key_rotated`` event signed with A, so whoever holds only B can
neither rewrite what came before it nor move it; a chain that changes keys without it is broken.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, update

from bot.cli import main
from bot.config import settings_from_mapping
from bot.errors import ConfigError
from bot.store.audit import Event, Redactor, head_mac, key_id, make_event
from bot.store.db import Database, events_t, runs
from tests.fakes.engine_harness import Engine, runbook

A, B, C = "audit-key-A-2025", "audit-key-B-2026", "audit-key-C-2027"
ROTATED = "audit.key_rotated"

TWO_CHANGES = runbook("two", """
- id: first
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
  approval: {required: true, description: "Turn x on."}
- id: second
  title: Set y
  action: fake.set
  with: {name: y, value: "on"}
  approval: {required: true, description: "Turn y on."}
""", approvals="groups: [sre]\n")

Cli = Callable[..., tuple[int, str]]
# what does not depend on the store's backend runs on SQLite alone (the db_url fixture's first)
SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def make_engine(db_url: str, tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    """Engines on one database: each is the bot (re)started with the keys it is given."""
    made: list[Engine] = []

    def make(texts: dict[str, str], **kw: Any) -> Engine:
        made.append(Engine(db_url, tmp_path, texts, **kw))
        return made[-1]

    yield make
    for e in made:
        e.db.close()


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """``runbook-bot`` on the engines' database, with the current key and the previous ones."""
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", db_url)
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)

    def call(*argv: str, key: str | None = B, previous: tuple[str, ...] = (A,)) -> tuple[int, str]:
        for var, value in (("RUNBOOK_BOT_AUDIT_KEY", key),
                           ("RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS", ",".join(previous))):
            if value:
                monkeypatch.setenv(var, value)
            else:
                monkeypatch.delenv(var, raising=False)
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out + out.err

    return call


def _kid(key: str) -> str:
    return key_id(key.encode())


def _rotated_run(make_engine: Callable[..., Engine]) -> tuple[Engine, str]:
    """A run approved once under key A, then, the bot restarted with key B, approved again."""
    old = make_engine({"two": TWO_CHANGES}, audit_key=A)
    run = old.start("two")
    assert old.approve(run, "bob").ok
    assert old.state(run).status == "awaiting_approval"  # open, waiting for the second step
    new = make_engine({"two": TWO_CHANGES}, audit_key=B, previous_keys=[A])
    assert new.approve(run, "carol").ok
    assert new.state(run).status == "succeeded", new.state(run).outcome
    return new, run


def _rotation(db: Database, run: str) -> Event:
    [ev] = [e for e in db.events(run) if e.type == ROTATED]
    return ev


def test_a_run_open_across_a_key_rotation_verifies_and_exports_intact(make_engine, cli, tmp_path):
    new, run = _rotated_run(make_engine)
    code, out = cli("audit", "verify", run)
    assert code == 0, out
    path = tmp_path / "export.json"
    code, out = cli("export", run, "--format", "json", "-o", str(path))
    assert code == 0, out
    rot = _rotation(new.db, run)
    assert rot.actor == "runbook-bot"
    assert dict(rot.payload) == {"previous": {"mode": "hmac-sha256", "key_id": _kid(A)},
                                 "chain": {"mode": "hmac-sha256", "key_id": _kid(B)}}
    code, out = cli("audit", "verify", run)
    assert f"key {_kid(B)}" in out and f"audit key rotated at seq {rot.seq}" in out, out
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["integrity"]["status"] == "intact" and doc["integrity"]["key_id"] == _kid(B)
    assert doc["seal"]["key_id"] == _kid(B)
    assert any(t["kind"] == ROTATED and _kid(A) in t["text"] for t in doc["timeline"])
    code, out = cli("audit", "verify", "--file", str(path))
    assert code == 0 and "intact" in out, out
    code, out = cli("audit", "head", run)
    assert code == 0 and f"key {_kid(B)}" in out, out
    # one of the two keys alone cannot vouch for the whole chain: cannot verify, not tampered
    code, out = cli("audit", "verify", run, previous=())
    assert code == 2 and f"written with key {_kid(A)}" in out and "BROKEN" not in out, out
    code, out = cli("audit", "verify", run, key=A, previous=())
    assert code == 2 and f"written with key {_kid(B)}" in out and "BROKEN" not in out, out
    assert cli("audit", "verify", "--file", str(path), previous=())[0] == 2


@SQLITE
def test_a_run_open_across_two_rotations_and_one_finished_before_them_verify(make_engine, cli):
    first = make_engine({"two": TWO_CHANGES}, audit_key=A)
    done = first.start("two")
    assert first.reject(done, "bob").ok  # finished under key A, never rewritten
    run = first.start("two")
    second = make_engine({"two": TWO_CHANGES}, audit_key=B, previous_keys=[A])
    assert second.approve(run, "bob").ok
    third = make_engine({"two": TWO_CHANGES}, audit_key=C, previous_keys=[B, A])
    assert third.approve(run, "carol").ok
    assert third.state(run).status == "succeeded"
    rotations = [dict(e.payload) for e in third.db.events(run) if e.type == ROTATED]
    assert [(r["previous"]["key_id"], r["chain"]["key_id"]) for r in rotations] == [
        (_kid(A), _kid(B)), (_kid(B), _kid(C))]
    code, out = cli("audit", "verify", run, key=C, previous=(B, A))
    assert code == 0 and out.count("audit key rotated at seq") == 2, out
    code, out = cli("audit", "verify", done, key=C, previous=(B, A))
    assert code == 0 and f"key {_kid(A)}" in out, out
    code, out = cli("export", done, key=C, previous=(B, A))
    assert code == 0 and "BROKEN" not in out, out
    assert [e.type for e in first.db.events(done)].count(ROTATED) == 0


@SQLITE
def test_a_key_set_while_a_run_is_open_is_recorded_and_verifies(make_engine, cli):
    old = make_engine({"two": TWO_CHANGES}, audit_key=None)
    run = old.start("two")
    new = make_engine({"two": TWO_CHANGES}, audit_key=B)
    assert new.approve(run, "bob").ok
    assert _rotation(new.db, run).payload["previous"] == {"mode": "sha256"}
    code, out = cli("audit", "verify", run, previous=())
    assert code == 0 and f"key {_kid(B)}" in out, out


@pytest.mark.parametrize("key", [B, None])
def test_a_bot_without_the_chains_key_refuses_to_write_into_it(make_engine, cli, key):
    """Not what it used to do: sign the events with the new key (or none) in the old key's chain."""
    old = make_engine({"two": TWO_CHANGES}, audit_key=A)
    run = old.start("two")
    before = old.db.signed_head(run)
    new = make_engine({"two": TWO_CHANGES}, audit_key=key)  # the old key not kept
    with pytest.raises(ConfigError, match=rf"written with key {_kid(A)}.*"
                                          "RUNBOOK_BOT_AUDIT_(PREVIOUS_KEYS|KEY)"):
        new.approve(run, "bob")
    assert new.db.signed_head(run) == before  # nothing written
    assert cli("audit", "verify", run, key=A, previous=())[0] == 0


def _resign(db: Database, run: str, *, start: int, key_of: Callable[[Event], bytes],
            edit: Callable[[list[Event]], list[Event]] = lambda evs: evs) -> None:
    """What a database writer holding some key does: rewrite the chain from ``start`` on, each
    event hashed with ``key_of(event)``, and sign the new head with the last one's key."""
    events = edit(db.events(run))
    prev = events[start - 2] if start > 1 else None
    out = events[:start - 1]
    for e in events[start - 1:]:
        payload = dict(e.payload)
        made = make_event(run_id=run, prev=prev, ts=e.ts, actor=e.actor, type_=e.type,
                          payload=payload, key=key_of(e), redact=Redactor())
        prev = made
        out.append(made)
    last = out[-1]
    with db.engine.begin() as conn:
        conn.execute(delete(events_t).where(events_t.c.run_id == run))
        conn.execute(events_t.insert(), [
            {"run_id": run, "seq": e.seq, "ts": e.ts, "actor": e.actor, "type": e.type,
             "payload": json.dumps(dict(e.payload), sort_keys=True, separators=(",", ":"),
                                   ensure_ascii=False),
             "prev_hash": e.prev_hash, "hash": e.hash} for e in out])
        conn.execute(update(runs).where(runs.c.id == run).values(
            audit_seq=last.seq, audit_hash=last.hash,
            audit_mac=head_mac(run_id=run, seq=last.seq, hash_=last.hash, key=key_of(last))))


def test_history_before_the_rotation_rewritten_with_the_new_key_is_detected(make_engine, cli,
                                                                             tmp_path):
    new, run = _rotated_run(make_engine)
    rot = _rotation(new.db, run).seq
    [granted] = [e for e in new.db.events(run) if e.type == "approval.granted"][:1]
    assert granted.seq < rot

    def forge(evs: list[Event]) -> list[Event]:  # bob's approval becomes erin's
        return [Event(e.seq, e.ts, "erin" if e.seq == granted.seq else e.actor, e.type, e.payload,
                      e.prev_hash, e.hash) for e in evs]

    # the attacker holds B only: everything from the edit on is re-signed with it
    _resign(new.db, run, start=granted.seq, key_of=lambda e: B.encode(), edit=forge)
    code, out = cli("audit", "verify", run)
    assert code == 1 and f"BROKEN at seq {granted.seq}" in out, out
    code, out = cli("export", run, "--format", "json", "-o", str(tmp_path / "x.json"))
    assert code == 1, out
    # and the verifier who holds only B is not told it is intact either
    code, out = cli("audit", "verify", run, previous=())
    assert code == 2 and "intact" not in out, out


@SQLITE
@pytest.mark.parametrize("forgery", ["no rotation event", "rotation signed with the new key",
                                     "rotation moved earlier"])
def test_a_chain_that_changes_keys_without_a_rotation_signed_by_the_old_key_is_detected(
        make_engine, cli, forgery):
    new, run = _rotated_run(make_engine)
    rot = _rotation(new.db, run).seq
    b = B.encode()
    if forgery == "no rotation event":  # the new key's events follow the old key's directly
        def drop(evs: list[Event]) -> list[Event]:
            return [e if e.seq < rot else Event(e.seq - 1, e.ts, e.actor, e.type, e.payload,
                                                e.prev_hash, e.hash) for e in evs if e.seq != rot]
        _resign(new.db, run, start=rot, key_of=lambda e: b, edit=drop)
        bad = rot
    elif forgery == "rotation signed with the new key":
        _resign(new.db, run, start=rot, key_of=lambda e: b)
        bad = rot
    else:  # B takes over two events earlier: a rotation there, and what follows, signed with B
        def move(evs: list[Event]) -> list[Event]:
            moved = [e for e in evs if e.seq < rot - 2]
            moved.append(Event(rot - 2, evs[rot - 1].ts, "runbook-bot", ROTATED,
                               evs[rot - 1].payload, "", ""))
            moved += [Event(e.seq + 1, e.ts, e.actor, e.type, e.payload, "", "")
                      for e in evs if rot - 2 <= e.seq < rot]
            return moved + [e for e in evs if e.seq > rot]
        _resign(new.db, run, start=rot - 2, key_of=lambda e: b, edit=move)
        bad = rot - 2
    code, out = cli("audit", "verify", run)
    assert code == 1 and f"BROKEN at seq {bad}" in out, out


def test_previous_keys_come_from_the_file_or_the_environment_and_are_never_echoed():
    s = settings_from_mapping({"audit_key": B, "audit_previous_keys": [A]}, {})
    assert s.audit_previous_keys == (A,)
    s = settings_from_mapping({"audit_previous_keys": [A]},
                              {"RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS": f" {B}, {C} ,"})
    assert s.audit_previous_keys == (B, C)
    with pytest.raises(ConfigError) as e:
        settings_from_mapping({"audit_previous_keys": [A, 42]}, {})
    assert str(e.value) == "audit_previous_keys[1]: must be a string"
