"""Secrets from files (``NAME_FILE``), as Kubernetes Secret volumes and the CSI drivers give them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.cli import main
from bot.config import load_settings
from bot.config_secrets import scrub_environment
from bot.errors import ConfigError

TOKEN = "xoxb-from-a-file-0123456789"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("RUNBOOK_BOT_CONFIG", "RUNBOOK_BOT_DATABASE_URL", "SLACK_BOT_TOKEN",
                 "SLACK_BOT_TOKEN_FILE", "RUNBOOK_BOT_DATABASE_URL_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_a_secret_given_by_file_is_used(env: pytest.MonkeyPatch, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bot-token").write_text(TOKEN + "\n")  # as `kubectl create secret --from-file`
    assert load_settings({"SLACK_BOT_TOKEN_FILE": str(tmp_path / "bot-token"),
                          "HOME": str(tmp_path)}).slack.bot_token == TOKEN
    # the database URL (its password) from a file, through a command that opens it
    url = f"sqlite:///{tmp_path / 'from-file.db'}"
    (tmp_path / "url").write_text(url)
    env.setenv("RUNBOOK_BOT_DATABASE_URL_FILE", str(tmp_path / "url"))
    assert main(["db", "upgrade"]) == 0
    assert main(["db", "status"]) == 0
    assert f"database: {url}" in capsys.readouterr().out
    assert (tmp_path / "from-file.db").is_file()


def test_both_set_is_an_error_naming_both(env: pytest.MonkeyPatch, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bot-token").write_text(TOKEN)
    env.setenv("SLACK_BOT_TOKEN", "xoxb-from-the-environment")
    env.setenv("SLACK_BOT_TOKEN_FILE", str(tmp_path / "bot-token"))
    assert main(["db", "status"]) == 2  # every command reads the config: a configuration error
    err = capsys.readouterr().err
    assert "both SLACK_BOT_TOKEN and SLACK_BOT_TOKEN_FILE are set" in err
    assert TOKEN not in err and "xoxb-from-the-environment" not in err


@pytest.mark.parametrize("problem", ["missing", "unreadable", "empty", "directory"])
def test_a_file_that_cannot_be_used_names_the_variable_and_the_path(
        tmp_path: Path, problem: str) -> None:
    path = tmp_path / "audit-key"
    if problem == "unreadable":
        path.write_text("s3cret-audit-key")
        path.chmod(0)
        if os.access(path, os.R_OK):  # root reads anything
            pytest.skip("running as root: every file is readable")
    elif problem == "empty":
        path.write_text("\n")
    elif problem == "directory":
        path.mkdir()
    with pytest.raises(ConfigError) as e:
        load_settings({"RUNBOOK_BOT_AUDIT_KEY_FILE": str(path), "HOME": str(tmp_path)})
    message = str(e.value)
    assert message.startswith(f"RUNBOOK_BOT_AUDIT_KEY_FILE names {path}, which "), message
    assert {"missing": "No such file", "unreadable": "Permission denied", "empty": "is empty",
            "directory": "Is a directory"}[problem] in message
    assert "s3cret" not in message


def test_a_serving_process_takes_the_secrets_out_of_its_environment() -> None:
    environ = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_APP_TOKEN_FILE": "/run/secrets/app-token",
               "RUNBOOK_BOT_LOG_FORMAT": "json"}
    assert scrub_environment(environ) == ["SLACK_BOT_TOKEN", "SLACK_APP_TOKEN_FILE"]
    assert environ == {"RUNBOOK_BOT_LOG_FORMAT": "json"}


def test_a_secret_file_s_surrounding_whitespace_is_dropped_and_blank_is_empty(
        env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # an editor's trailing newlines and spaces are never part of a token: left in, every
    # request would be refused with a signature or auth error far from the cause
    (tmp_path / "bot-token").write_text(f"  {TOKEN} \r\n\n")
    assert load_settings({"SLACK_BOT_TOKEN_FILE": str(tmp_path / "bot-token"),
                          "HOME": str(tmp_path)}).slack.bot_token == TOKEN
    (tmp_path / "blank").write_text(" \n\t\n")
    with pytest.raises(ConfigError, match=r"SLACK_BOT_TOKEN_FILE names .*blank, which is empty"):
        load_settings({"SLACK_BOT_TOKEN_FILE": str(tmp_path / "blank"), "HOME": str(tmp_path)})


def test_no_secret_is_in_the_settings_printed_form(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a repr lands in tracebacks, debug logs and crash reports: it never carries a secret
    secrets = {"SLACK_BOT_TOKEN": "xoxb-secret-bot-token-0001", "SLACK_SIGNING_SECRET": "signing-secret-0002",
               "SLACK_APP_TOKEN": "xapp-secret-app-token-0003",
               "RUNBOOK_BOT_DATABASE_URL": "postgresql://bot:db-password-0004@db/bot",
               "RUNBOOK_BOT_AUDIT_KEY": "audit-key-0005-0123456789abcdef",
               "RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS": "audit-key-0006-0123456789abcdef",
               "RUNBOOK_BOT_ALERTS_TOKEN": "alerts-token-0007-0123456789",
               "RUNBOOK_BOT_PAGERDUTY_WEBHOOK_SECRET": "pagerduty-secret-0008",
               "RUNBOOK_BOT_PAGERDUTY_TOKEN": "pagerduty-token-0009"}
    settings = load_settings({**secrets, "HOME": str(tmp_path)})
    assert settings.slack.bot_token == secrets["SLACK_BOT_TOKEN"]  # read, not lost
    printed = repr(settings) + str(settings) + repr(settings.slack) + repr(settings.alerts)
    leaked = [name for name, value in secrets.items()
              if value in printed or value.split("@")[0].split(":")[-1] in printed]
    assert leaked == []
