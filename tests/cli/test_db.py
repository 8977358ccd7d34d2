"""``runbook-bot db status`` and ``db upgrade`` on a real database file."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from bot.cli import main


@pytest.fixture
def url(monkeypatch, tmp_path) -> str:
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", url)
    return url


def test_status_says_what_is_pending_and_upgrade_migrates_every_part(url, capsys):
    assert main(["db", "status"]) == 1
    out = capsys.readouterr().out
    assert "store: at -; newest store_0010 (not created)" in out
    assert "slack: at -; newest slack_0001 (not created)" in out
    assert main(["db", "upgrade"]) == 0
    assert main(["db", "status"]) == 0
    out = capsys.readouterr().out
    assert "store: at store_0010; newest store_0010 (up to date)" in out
    assert "slack: at slack_0001; newest slack_0001 (up to date)" in out


def test_a_database_from_a_newer_version_is_named_and_refused(url, capsys):
    assert main(["db", "upgrade"]) == 0
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'store_0042'"))
    engine.dispose()
    assert main(["db", "status"]) == 1
    assert "store: at store_0042; newest store_0010 (newer than this version)" in capsys.readouterr().out
    assert main(["db", "upgrade"]) == 2
    assert "store schema revision store_0042" in capsys.readouterr().err
    assert main(["runs"]) == 2  # every command checks the schema at start


def test_a_database_only_workers_used_is_healthy(db_url, monkeypatch, tmp_path, capsys):
    """A worker makes the store's tables, not the Slack front-end's: nothing is pending."""
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", db_url)
    assert main(["worker", "--once"]) == 0
    capsys.readouterr()
    assert main(["db", "status"]) == 0
    out = capsys.readouterr().out
    assert "store: at store_0010; newest store_0010 (up to date)" in out
    assert "slack: at -; newest slack_0001 (not created)" in out and "nothing pending" in out
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:  # a store behind is still a migration pending
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'store_0009'"))
    engine.dispose()
    assert main(["db", "status"]) == 1
