"""A secret typed into a param, a reason or a note is redacted where it enters: the runs, steps and
events tables, every export format, and the errors that name the database never hold it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.cli import main
from bot.engine.commands import Abort, Confirm, Reject, StartRun
from bot.engine.redaction import Redactor
from bot.errors import ConfigError
from bot.present.transcript import export_verified
from bot.runtime.runner import Runner
from bot.store.db import Database
from bot.store.integrity import verify_document, verify_run
from tests.fakes.engine_harness import Engine, runbook

SLACK_TOKEN = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9abcdefgh"
SECRETS = (SLACK_TOKEN, AWS_KEY, BEARER.split()[1])

BOOK = runbook("leaky", """
- id: read
  title: "Read {{ params.name }}"
  action: fake.read
  with: {name: "{{ params.name }}"}
- id: change
  title: "Set {{ params.name }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "{{ params.note }}"}
""", params="""
name: {type: string, required: true}
note: {type: string, default: "none"}
""", approvals="""
groups: [sre]
""")


def _stored(db: Database) -> str:
    with db.engine.connect() as conn:
        rows = [*conn.execute(text("SELECT header FROM runs")),
                *conn.execute(text("SELECT state FROM steps")),
                *conn.execute(text("SELECT payload FROM events"))]
    return "\n".join(str(r[0]) for r in rows)


@pytest.fixture
def engine(tmp_path: Path):
    e = Engine(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, {"leaky": BOOK})
    yield e
    e.db.close()


def test_a_token_passed_as_a_param_never_reaches_the_tables_or_an_export(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = engine.start("leaky", name="thing", note=f"use {SLACK_TOKEN} and {AWS_KEY}")
    engine.runner.submit(Confirm(run_id=run, actor="bob", note=f"token was {BEARER}"))
    engine.runner.submit(Reject(run_id=run, actor="bob", reason=f"do not paste {SLACK_TOKEN} here"))
    stored = _stored(engine.db)
    assert "[REDACTED]" in stored
    for secret in SECRETS:
        assert secret not in stored
    assert engine.state(run).params["note"] == "use [REDACTED] and [REDACTED]"
    assert engine.verified(run)
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path / 'state.db'}\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "test-key")
    monkeypatch.delenv("RUNBOOK_BOT_DATABASE_URL", raising=False)
    for fmt in ("md", "html", "json"):
        assert main(["export", run, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "REDACTED" in out
        for secret in SECRETS:
            assert secret not in out, fmt


def test_an_abort_reason_is_redacted_before_it_is_stored(engine: Engine) -> None:
    run = engine.start("leaky", name="thing")
    out = engine.runner.submit(Abort(run_id=run, actor="bob", reason=f"leaked {AWS_KEY}, stop"))
    assert out.ok, out.message
    assert AWS_KEY not in _stored(engine.db)
    assert engine.state(run).status == "aborted"


def test_the_configured_patterns_of_the_store_are_redacted_at_entry_too(engine: Engine,
                                                                         tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'other.db'}", redact_patterns=[r"ticket-\d+"])
    runner = Runner(store=db, catalog=engine.catalog, runbooks=engine.runner.runbooks,
                    policy=engine.policy, clock=engine.clock, redact=db.redact)  # a port, handed in
    state = runner.start(StartRun(runbook="leaky", params={"name": "x", "note": "see ticket-4242"},
                                  requester="alice"))
    assert state.params["note"] == "see [REDACTED]"
    assert "ticket-4242" not in _stored(db)
    db.close()


@pytest.mark.parametrize("url", ["postgresql://bot:hunter2@127.0.0.1:9/state",
                                 "postgresql+psycopg://bot:hunter2@127.0.0.1:9/state?sslmode=disable"])
def test_the_database_password_is_masked_when_the_database_cannot_be_opened(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Database(url)
    assert "hunter2" not in str(caught.value)
    assert "bot:***@127.0.0.1:9/state" in str(caught.value)


def test_the_command_line_never_prints_the_database_password(tmp_path: Path) -> None:
    env = {**os.environ, "RUNBOOK_BOT_DATABASE_URL": "postgresql://bot:hunter2@127.0.0.1:9/state"}
    env.pop("RUNBOOK_BOT_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "bot", "runs"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert done.returncode != 0
    assert "cannot open the state database" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


class _Before(Redactor):
    """The redactor of a release that knew none of today's patterns (GitHub tokens among them)."""

    def text(self, text: str) -> str:
        return text


def test_a_run_recorded_before_a_pattern_was_added_still_verifies_and_exports(
        engine: Engine) -> None:
    token = "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngOnly0001"
    engine.db.redact = engine.runner.redact = _Before()
    run = engine.start("leaky", name="thing", note=f"old {token}")
    engine.runner.submit(Reject(run_id=run, actor="bob", reason=f"not with {token} again"))
    assert token in _stored(engine.db)  # as that release stored it
    upgraded = Database(engine.db.url, audit_key="test-key")  # today's patterns redact the token
    try:
        assert verify_run(upgraded, run, key=upgraded.key).ok
        text_, verdict = export_verified(upgraded, run, fmt="json")
        assert verdict.ok, verdict.reason
        assert verify_document(json.loads(text_), key=upgraded.key).ok
    finally:
        upgraded.close()
