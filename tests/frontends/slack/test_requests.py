"""What reaches the app over HTTP: only signed, fresh, first deliveries change anything."""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests.fakes.slack_api import CHANNEL
from tests.fakes.slack_requests import SignedRequest, send, signed, slash_command_body
from tests.frontends.slack.conftest import ALICE, BOB, Bot


def run_body(bot: Bot) -> str:
    return slash_command_body(text="run change-thing name=web-1", user_id=ALICE,
                              trigger_id=bot.fake.new_trigger_id(ALICE))


@pytest.mark.parametrize("how", ["wrong secret", "stale timestamp", "no signature", "edited body"])
def test_a_forged_or_stale_request_gets_401_and_reaches_no_handler(bot: Bot, how: str) -> None:
    body = run_body(bot)
    if how == "wrong secret":
        request = signed(body, secret="not-the-secret-at-all-0000000000")
    elif how == "stale timestamp":
        request = signed(body, timestamp=int(time.time()) - 301)
    elif how == "no signature":
        request = SignedRequest(body.encode(), {"Content-Type": "application/x-www-form-urlencoded"})
    else:
        good = signed(body)
        request = SignedRequest(good.body.replace(b"web-1", b"web-2"), good.headers)
    status, _ = send(bot.url, request)
    bot.settle()
    assert status == 401
    assert bot.db.runs() == [] and bot.fake.calls("chat.postMessage") == []


def test_a_redelivery_with_retry_num_changes_nothing(bot: Bot) -> None:
    body = run_body(bot)
    assert bot.post(body)[0] == 200
    bot.settle()
    for n in (1, 2):
        assert bot.post(body, retry_num=n, retry_reason="http_timeout")[0] == 200
    bot.settle()
    assert len(bot.db.runs()) == 1 and len(bot.fake.messages(CHANNEL)) == 1


def test_a_redelivered_click_counts_once(bot: Bot) -> None:
    from tests.fakes.slack_requests import block_actions_payload, interaction_body
    from tests.frontends.slack.conftest import button_in

    bot.command("run change-thing name=web-1")
    message = bot.approval("change")
    el = button_in(message, "rb_approve")
    body = interaction_body(block_actions_payload(user_id=BOB, action_id="rb_approve",
                                                  value=el["value"], block_id=el["_block_id"],
                                                  message=message))
    bot.post(body)
    bot.post(body, retry_num=1)
    bot.settle()
    run = bot.run_id()
    assert [e.type for e in bot.events(run)].count("command.approve") == 1


def test_healthz_answers_for_load_balancers_and_other_paths_are_404(bot: Bot) -> None:
    base = bot.url.rsplit("/slack/events", 1)[0]
    with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
        assert r.status == 200 and r.read() == b"ok\n"
    status, _ = send(base + "/elsewhere", signed("x=1"))
    assert status == 404
