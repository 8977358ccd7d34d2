"""A server records itself in the database it serves; local-mode writes to it are refused
(bot/store/servers.py, bot/cli/remote.py ``check_local_write``), unless overridden."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.store.db import Database
from bot.store.servers import forget_server, record_server, served_by

URL = "https://runbook-bot.example.com"


def test_a_server_records_itself_once_per_url(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert served_by(db) is None
        record_server(db, URL, now=datetime(2026, 1, 1, tzinfo=UTC))
        record_server(db, URL)  # a restart: the same row, newer
        record_server(db, "https://old.example.com", now=datetime(2025, 1, 1, tzinfo=UTC))
        assert served_by(db) == URL
        forget_server(db, URL)
        assert served_by(db) == "https://old.example.com"
    finally:
        db.engine.dispose()


def test_local_writes_to_a_served_database_are_refused_unless_overridden(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    url = f"sqlite:///{tmp_path / 'state.db'}"
    db = Database(url)
    record_server(db, URL)
    db.engine.dispose()
    config = tmp_path / "runbook-bot.yaml"
    config.write_text("policy:\n  allow_self_approval: false\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", url)
    monkeypatch.delenv("RUNBOOK_BOT_SERVER", raising=False)
    for argv in (["approve", "rb-7k3qa"], ["abort", "rb-7k3qa", "wrong", "run"],
                 ["run", "zombie-volumeattachments", "--no-follow"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert (f"this database is served by {URL}: use --server {URL} (or set server.url), or "
                "set local_mode_override: true in the config to write to it anyway") in err
    assert main(["runs"]) == 0  # reading is not writing
    capsys.readouterr()
    config.write_text("local_mode_override: true\n")
    assert main(["approve", "rb-7k3qa"]) == 1
    err = capsys.readouterr().err
    assert "served by" not in err and "rb-7k3qa" in err  # it got as far as looking for the run
