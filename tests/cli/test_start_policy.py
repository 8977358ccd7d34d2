"""``policy.start`` at the terminal: ``run`` by someone outside the groups is an error line and
exit 1, and ``audit refusals`` lists it and says whether the chain verifies (an edit is named)."""

from __future__ import annotations

import sqlite3
import textwrap

import pytest

from bot.cli import main

RUNBOOK = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata: {name: hello, title: Say hello}
spec:
  steps:
    - {id: greet, title: Greet, action: notify, with: {message: hello}}
"""


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    books = tmp_path / "runbooks"
    books.mkdir()
    (books / "hello.yaml").write_text(RUNBOOK)
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(textwrap.dedent(f"""\
        database_url: sqlite:///{tmp_path / 'state.db'}
        runbooks_dir: {books}
        policy:
          groups: {{sre: [alice], dba: [erin]}}
          allow_impersonation: true
          start:
            "*": {{groups: [sre]}}
            hello: {{groups: [dba], channels: [C0INC]}}
        """))
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "k")
    for var in ("RUNBOOK_BOT_DATABASE_URL", "RUNBOOK_BOT_RUNBOOKS_DIR"):
        monkeypatch.delenv(var, raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    run.db = tmp_path / "state.db"  # type: ignore[attr-defined]
    return run


def test_the_terminal_refuses_a_start_outside_the_groups_and_audit_refusals_lists_it(cli):
    code, out, err = cli("run", "hello", "--as", "alice", "--no-follow")
    assert code == 1 and not out.strip()
    assert "starting hello needs a member of dba, from channel C0INC (you are alice, outside " \
           "Slack)" in err
    code, out, _ = cli("run", "hello", "--as", "erin", "--no-follow")  # a member: no channel needed
    assert code == 0 and "rb-" in out
    code, out, _ = cli("audit", "refusals")
    assert code == 0
    [line, verdict] = out.strip().splitlines()
    assert "alice  start hello: starting hello needs a member of dba" in line
    assert "frontend=terminal" in line
    assert verdict == "refusals chain intact: 1 refusals (HMAC-SHA256)"
    with sqlite3.connect(cli.db) as conn:
        conn.execute("UPDATE refusals SET reason = 'nothing to see' WHERE seq = 1")
    code, out, _ = cli("audit", "refusals", "--limit", "0")
    assert code == 1
    assert out.strip() == ("refusals chain BROKEN at refusal 1: refusal 1 was changed after it "
                           "was recorded (0 refusals before it verify)")
