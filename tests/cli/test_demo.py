"""``runbook-bot demo`` tells the whole recovery and leaves a run the other commands can read."""

from __future__ import annotations

import pytest

from bot.cli import main

pytest.importorskip("moto", reason="the demo needs the sandbox: pip install runbook-bot[sim]")
pytestmark = pytest.mark.slow


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("RUNBOOK_BOT_AUDIT_KEY", "demo-key")
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_demo_recovers_the_node_and_its_run_stays_in_the_store(env, capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Multi-Attach" in out or "already attached" in out
    assert "approved by bob" in out
    assert "succeeded" in out and "hash chain intact" in out
    assert "none violated" in out
    run_id = next(w for w in out.split() if w.startswith("rb-") and len(w.rstrip(":")) == 8).rstrip(":")
    assert main(["audit", "verify", run_id]) == 0
    assert main(["status", run_id]) == 0
    status = capsys.readouterr().out
    assert "status: succeeded" in status and "[approved by bob]" in status


def test_the_interactive_demo_leaves_the_run_waiting_when_you_say_no(env, capsys, monkeypatch):
    monkeypatch.setattr("builtins.input", lambda _prompt="": "n")
    assert main(["demo", "--interactive"]) == 1
    out = capsys.readouterr().out
    assert "left waiting for an approval" in out
