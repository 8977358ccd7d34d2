"""``runbook-bot slack serve``: one clear message when configuration is missing, else it serves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qsl

import pytest

from bot.cli import main
from bot.frontends.slack.socket_mode import SocketModeLink
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, CHANNEL, FakeSlack
from tests.fakes.slack_requests import block_actions_payload, slash_command_body
from tests.frontends.slack.conftest import ALICE, BOB, Bot, button_in, texts

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN",
                 "RUNBOOK_BOT_SLACK_API_URL", "RUNBOOK_BOT_CONFIG", "RUNBOOK_BOT_SLACK_CHANNELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    return monkeypatch


def test_missing_configuration_is_named_in_one_message(env: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slack", "serve"]) == 2  # a configuration error
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "SLACK_BOT_TOKEN" in err and "SLACK_SIGNING_SECRET" in err
    assert main(["slack", "serve", "--socket-mode"]) == 2
    err = capsys.readouterr().err
    assert "SLACK_APP_TOKEN" in err and "SLACK_SIGNING_SECRET" not in err


def test_a_malformed_api_url_or_a_refused_token_is_explained(env: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    env.setenv("SLACK_BOT_TOKEN", "xoxb-not-known")
    env.setenv("SLACK_SIGNING_SECRET", "s3cret")
    env.setenv("RUNBOOK_BOT_SLACK_API_URL", "http://127.0.0.1:9/api")
    assert main(["slack", "serve"]) == 2
    assert "must be an http(s) URL ending in /" in capsys.readouterr().err
    with FakeSlack() as fake:
        env.setenv("RUNBOOK_BOT_SLACK_API_URL", fake.base_url)
        assert main(["slack", "serve"]) == 2
    assert "Slack refused SLACK_BOT_TOKEN: invalid_auth" in capsys.readouterr().err


@pytest.mark.parametrize("socket_mode", [False, True], ids=["http", "socket-mode"])
def test_serve_answers_health_readiness_and_metrics_until_interrupted(tmp_path: Path,
                                                                      socket_mode: bool) -> None:
    """On the ops port in both modes; in HTTP mode the Slack port answers none of them."""
    with FakeSlack() as fake:
        env = {**os.environ, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": "s3cret",
               "RUNBOOK_BOT_SLACK_API_URL": fake.base_url,
               "RUNBOOK_BOT_RUNBOOKS_DIR": str(ROOT / "runbooks"),
               "RUNBOOK_BOT_DATABASE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
        env.pop("RUNBOOK_BOT_CONFIG", None)
        args = ["--host", "127.0.0.1", "--port", "0", "--metrics-host", "127.0.0.1", "--metrics-port", "0"]
        if socket_mode:
            fake.start_socket_mode()
            env["SLACK_APP_TOKEN"] = APP_TOKEN
            args = ["--socket-mode", "--metrics-host", "127.0.0.1", "--metrics-port", "0"]
        proc = subprocess.Popen([sys.executable, "-m", "bot", "slack", "serve", *args], cwd=tmp_path,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(
                proc.stdout.readline() for _ in range(1 if socket_mode else 2)))
            reader.start()
            reader.join(timeout=20)
            assert lines and "metrics on http://127.0.0.1:" in lines[0], proc.stderr.read()
            base = lines[0].split(" on ", 1)[1].split("/metrics", 1)[0]
            if not socket_mode:
                assert "serving Slack on http://127.0.0.1:" in lines[1], proc.stderr.read()
                slack = lines[1].split(" on ", 1)[1].split("/slack/events", 1)[0]
                assert slack != base
                for path in ("/metrics", "/readyz"):
                    with pytest.raises(urllib.error.HTTPError) as e:
                        urllib.request.urlopen(slack + path, timeout=5)
                    e.value.close()
                    assert e.value.code == 404, path
            with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
                assert r.status == 200
            with urllib.request.urlopen(base + "/readyz", timeout=5) as r:
                assert r.status == 200 and r.read() == b"ready\n"
            with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
                assert r.status == 200 and b"runbook_bot_slack_outbox_backlog 0.0" in r.read()
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                # a drain on a loaded machine (CI runs two workers on two cores) takes seconds
                code = proc.wait(timeout=45)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()  # reaped, so no "still running" warning lands on a later test
                proc.stdout.close()
                proc.stderr.close()
        assert code == 0


def test_the_manifests_ask_for_exactly_the_scopes_the_app_uses(
    bot_for_scopes: tuple[str, ...],
) -> None:
    from ruamel.yaml import YAML

    from tests.fakes.slack_api import _SCOPES

    used_methods = bot_for_scopes
    needed = {_SCOPES[m] for m in used_methods if _SCOPES.get(m)}
    # commands: the slash command itself; groups:history: conversations.replies in private channels
    needed |= {"commands", "groups:history"} if "conversations.replies" in used_methods else {"commands"}
    for name in ("slack-app-manifest.yaml", "slack-app-manifest-socket.yaml"):
        manifest = YAML(typ="safe").load((ROOT / "deploy" / name).read_text())
        assert set(manifest["oauth_config"]["scopes"]["bot"]) == needed, name


@pytest.fixture
def bot_for_scopes(bot: Bot) -> tuple[str, ...]:
    """Every Web API method the app calls in a run that is approved, exported and listed."""
    pytest.importorskip("bot.present.transcript")
    from tests.fakes.slack_api import CHANNEL
    from tests.frontends.slack.conftest import BOB, CAROL, DAVE

    bot.command("run change-thing")  # opens the params form
    bot.command("run change-thing name=web-1")
    bot.click(bot.approval("change"), "rb_reject", user=CAROL)
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    bot.fake.post_as_user(CHANNEL, BOB, "all good", thread_ts=bot.card()["ts"])
    bot.command(f"export {bot.run_id()}")
    return tuple({c.method for c in bot.fake.calls()})


def test_socket_mode_reaches_slack_through_the_configured_api_url(bot: Bot) -> None:
    config = replace(bot.settings.slack, app_token="xapp-1-fake")
    link = SocketModeLink(bot.app, config)
    try:
        assert link.client.web_client.base_url == bot.fake.base_url
        assert link.client.app_token == "xapp-1-fake"
    finally:
        link.stop()


def test_a_run_is_started_and_approved_over_socket_mode(bot: Bot) -> None:
    socket = bot.fake.start_socket_mode()
    link = SocketModeLink(bot.app, replace(bot.settings.slack, app_token=APP_TOKEN))
    assert link.connect_first()
    link.start()
    try:
        help_ack = socket.ack_of(socket.send("slash_commands", _slash_fields("help", ALICE)))
        assert "`/runbook` commands" in help_ack["payload"]["text"]  # answered inside the ack
        started = socket.send("slash_commands", _slash_fields("run change-thing name=web-9", ALICE))
        assert socket.ack_of(started).get("payload") in (None, {})
        bot.settle()
        assert "web-9" in texts([bot.card()])[0]
        approval = bot.approval("change")
        el = button_in(approval, "rb_approve")
        click = block_actions_payload(user_id=BOB, action_id="rb_approve", value=el["value"],
                                      block_id=el["_block_id"], message=approval)
        socket.ack_of(socket.send("interactive", click))
        bot.settle()
        assert bot.world.get("web-9") == "on"
        # Slack redelivers an envelope it thinks was lost: the same payload changes nothing
        socket.ack_of(socket.send("slash_commands", _slash_fields("run change-thing name=web-9",
                                                                  ALICE), retry_attempt=1))
        bot.settle()
        assert len(bot.db.runs()) == 1 and len(bot.fake.messages(CHANNEL)) == 1
    finally:
        link.stop()


def _slash_fields(text: str, user: str) -> dict[str, str]:
    return dict(parse_qsl(slash_command_body(text=text, user_id=user)))
