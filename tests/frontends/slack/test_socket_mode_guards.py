"""Over Socket Mode, through the link ``slack serve --socket-mode`` runs (``SocketModeLink``), the
same guards as over HTTP: the requester and people outside the approver groups cannot approve,
one click delivered several times counts once, and a payload bolt cannot read is acknowledged
and named in one line (Slack stops redelivering it), never a traceback, and not taken for a
lost connection."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl

import pytest

from bot.frontends.slack.socket_mode import SocketModeLink
from tests.fakes.slack_api import APP_TOKEN
from tests.fakes.slack_requests import block_actions_payload, slash_command_body
from tests.frontends.slack.conftest import ALICE, BOB, CAROL, Bot, button_in, wait_for

LOGGER = "bot.frontends.slack.socket_mode"


@pytest.fixture
def socket(bot: Bot) -> Iterator[Any]:
    fake = bot.fake.start_socket_mode()
    link = SocketModeLink(bot.app, replace(bot.settings.slack, app_token=APP_TOKEN), poll=0.01)
    assert link.connect_first()
    link.start()
    try:
        yield fake
    finally:
        link.stop()


def _start(bot: Bot, socket: Any) -> str:
    fields = dict(parse_qsl(slash_command_body(text="run change-thing name=web-1", user_id=ALICE)))
    socket.ack_of(socket.send("slash_commands", fields))
    bot.settle()
    return bot.run_id()


def _click(bot: Bot, user: str) -> dict[str, Any]:
    approval = bot.approval("change")
    el = button_in(approval, "rb_approve")
    return block_actions_payload(user_id=user, action_id="rb_approve", value=el["value"],
                                 block_id=el["_block_id"], message=approval)


def _types(bot: Bot, run: str) -> list[str]:
    return [e.type for e in bot.events(run)]


def test_over_socket_mode_the_requester_and_an_outsider_cannot_approve(bot: Bot, socket: Any) -> None:
    run = _start(bot, socket)
    for who in (ALICE, CAROL):  # the requester; someone in no approver group
        socket.ack_of(socket.send("interactive", _click(bot, who)))
        bot.settle()
    refused = [(e.actor, str(e.payload.get("reason"))) for e in bot.events(run)
               if e.type == "command.refused"]
    assert [a for a, _ in refused] == ["slack:" + ALICE, "slack:" + CAROL]
    assert "cannot approve its steps" in refused[0][1] and "sre" in refused[1][1]
    assert bot.world.get("web-1") is None
    assert bot.db.load(run).steps["change"].status == "awaiting_approval"
    socket.ack_of(socket.send("interactive", _click(bot, BOB)))
    bot.settle()
    assert bot.world.get("web-1") == "on"


def test_over_socket_mode_one_click_delivered_three_times_approves_once(bot: Bot, socket: Any) -> None:
    run = _start(bot, socket)
    click = _click(bot, BOB)
    first = socket.send("interactive", click)
    socket.ack_of(first)
    socket.ack_of(socket.send("interactive", click))  # the same click in a new envelope
    socket.ack_of(socket.send("interactive", click, envelope_id=first))  # the same envelope
    socket.ack_of(socket.send("interactive", click, retry_attempt=1))  # Slack's retry
    bot.settle()
    assert _types(bot, run).count("command.approve") == 1
    assert [e["name"] for e in bot.world.effects] == ["web-1"]


@pytest.mark.parametrize("payload", [
    {"type": "block_actions", "user": "UBOB000001", "actions": []},  # user: a string
    {"type": "block_actions", "user": {"id": BOB}, "actions": "rb_approve"},  # not a list
    {"type": "view_submission", "user": {"id": BOB}, "view": ["not", "an", "object"]},
], ids=["user-string", "actions-string", "view-list"])
def test_a_malformed_payload_is_acknowledged_and_named_in_one_line(
        bot: Bot, socket: Any, caplog: pytest.LogCaptureFixture, payload: dict[str, Any]) -> None:
    with caplog.at_level(logging.DEBUG):
        ack = socket.ack_of(socket.send("interactive", payload))
        assert ack.get("payload") in (None, {})
        said = [r for r in caplog.records if r.name == LOGGER]
        assert [r.levelno for r in said] == [logging.WARNING], [r.getMessage() for r in said]
        assert said[0].getMessage().startswith("refused a malformed Slack request over Socket Mode: ")
        assert not any(r.exc_info for r in caplog.records)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        # the connection is fine, and what follows is served
        help_ack = socket.ack_of(socket.send("slash_commands", dict(parse_qsl(
            slash_command_body(text="help", user_id=ALICE)))))
        assert "`/runbook` commands" in help_ack["payload"]["text"]


def test_a_request_bolt_fails_on_is_logged_once_and_never_named_as_a_lost_connection(
        bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    fake = bot.fake.start_socket_mode()
    link = SocketModeLink(bot.app, replace(bot.settings.slack, app_token=APP_TOKEN), poll=0.01)

    def broken(client: Any, req: Any) -> None:  # a failure inside bolt, injected
        raise RuntimeError("listener blew up: 7f3a")
    link.handler.handle = broken  # type: ignore[method-assign]
    assert link.connect_first()
    link.start()
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            fake.send("slash_commands", dict(parse_qsl(slash_command_body(text="help",
                                                                          user_id=ALICE))))
            wait_for(lambda: any(r.exc_info for r in caplog.records if r.name == LOGGER))
            assert link.check() is None  # still connected
            fake.drop()
            wait_for(lambda: any("connection lost" in r.getMessage() for r in caplog.records))
            fake.accept()
            wait_for(lambda: link.check() is None, timeout=20)  # reconnected by itself
    finally:
        link.stop()
    failed = [r for r in caplog.records if r.name == LOGGER and r.exc_info]
    assert len(failed) == 1 and "slash_commands request in envelope" in failed[0].getMessage()
    lost = [r.getMessage() for r in caplog.records if "connection lost" in r.getMessage()]
    assert lost and not any("7f3a" in m for m in lost), lost
