"""The ack histogram times what Slack waits for: a slow listener moves it into the slow buckets.

Signed requests go over HTTP to the app ``slack serve`` builds, and a Socket Mode envelope
through bolt's socket-mode adapter to the same app; the ack timer is injected, and a listener that is
slow advances it by the time it "took", so no test waits. A fast acknowledgement stays in the
first bucket; one that takes 2.5 s lands between the 2 s and 3 s buckets, where
``RunbookBotSlackAcksSlow`` (over 1 s at the 99th percentile) sees it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.fakes.slack_api import CHANNEL, TEAM_ID
from tests.fakes.slack_requests import slash_command_body
from tests.frontends.observe import scrape, value
from tests.frontends.slack.conftest import ALICE, Bot

SLOW = "/runbook-slow"  # a command whose listener takes 2.5 s to acknowledge


class Timer:
    """A monotonic timer that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def slow_bot(make_bot: Callable[..., Bot]) -> tuple[Bot, Timer]:
    timer = Timer()
    bot = make_bot(ack_timer=timer)

    @bot.app.command(SLOW)
    def slow(ack: Any) -> None:
        timer.advance(2.5)  # the listener's work before its ack
        ack(text="done")

    return bot, timer


def test_a_slow_listener_moves_the_ack_histogram_into_the_slow_buckets(
        make_bot: Callable[..., Bot]) -> None:
    bot, _ = slow_bot(make_bot)
    assert bot.post(slash_command_body(text="", user_id=ALICE, command=SLOW))[0] == 200
    m = scrape(bot.ops_base)
    bucket = {le: value(m, "runbook_bot_slack_ack_seconds_bucket", kind="slash_command", le=le)
              for le in ("0.005", "1.0", "2.0", "3.0", "+Inf")}
    assert bucket == {"0.005": 0, "1.0": 0, "2.0": 0, "3.0": 1, "+Inf": 1}
    assert value(m, "runbook_bot_slack_ack_seconds_sum", kind="slash_command") == 2.5


def test_a_fast_acknowledgement_stays_in_the_first_bucket(make_bot: Callable[..., Bot]) -> None:
    bot, _ = slow_bot(make_bot)
    status, body = bot.command("help")  # answered in the ack itself
    assert status == 200 and b"/runbook" in body
    m = scrape(bot.ops_base)
    assert value(m, "runbook_bot_slack_ack_seconds_bucket", kind="slash_command", le="0.005") == 1
    assert value(m, "runbook_bot_slack_ack_seconds_sum", kind="slash_command") == 0


def test_a_slow_listener_over_socket_mode_is_timed_the_same(make_bot: Callable[..., Bot]) -> None:
    """An envelope as Socket Mode hands it on: bolt's socket-mode adapter turns each envelope into a
    request for the app's dispatch (``run_bolt_app``, what ``SocketModeHandler`` calls); no
    socket here (the SDK's client takes seconds to close), the same dispatch as over one."""
    from slack_bolt.adapter.socket_mode.internals import run_bolt_app
    from slack_sdk.socket_mode.request import SocketModeRequest

    bot, _ = slow_bot(make_bot)
    envelope = SocketModeRequest(type="slash_commands", envelope_id="env-1", payload={
        "command": SLOW, "text": "", "user_id": ALICE, "channel_id": CHANNEL, "team_id": TEAM_ID,
        "trigger_id": "1.2.3"}, accepts_response_payload=True)
    response = run_bolt_app(bot.app, envelope)
    assert (response.status, response.body) == (200, "done")
    m = scrape(bot.ops_base)
    assert value(m, "runbook_bot_slack_ack_seconds_bucket", kind="slash_command", le="2.0") == 0
    assert value(m, "runbook_bot_slack_ack_seconds_bucket", kind="slash_command", le="3.0") == 1
    assert value(m, "runbook_bot_slack_ack_seconds_sum", kind="slash_command") == 2.5
