"""A button decides only in its run's channel, like ``/runbook approve``, and under approvals_from.

The attack: a run card's buttons carry the run, step and plan in their value, so the same click
sent from another channel (a forwarded or copied message, or a crafted payload) used to approve
where nobody following the incident could see it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack import conftest as slack_conftest
from tests.frontends.slack.conftest import BOB, Bot

ELSEWHERE = "C0ELSEWHERE"


def test_an_approve_click_from_another_channel_is_refused_and_changes_nothing(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.click(bot.approval("change"), "rb_approve", user=BOB, channel=ELSEWHERE)
    answer = bot.fake.ephemerals(BOB)[-1]
    assert f"run `{run}` belongs to <#{CHANNEL}>" in answer["text"]
    assert bot.db.load(run).steps["change"].status == "awaiting_approval"
    assert "approval.granted" not in [e.type for e in bot.events(run)]
    assert bot.world.get("web-1") is None
    bot.click(bot.approval("change"), "rb_approve", user=BOB)  # the same person, in the channel
    assert bot.world.get("web-1") == "on"


def test_a_confirm_click_from_another_channel_is_refused(bot: Bot) -> None:
    bot.command("run check-by-hand")
    run = bot.run_id()
    bot.click(bot.approval("console"), "rb_confirm", user=BOB, channel=ELSEWHERE)
    assert "belongs to" in bot.fake.ephemerals(BOB)[-1]["text"]
    assert bot.db.load(run).status == "awaiting_approval"


def test_a_rejection_from_a_reject_button_clicked_in_another_channel_is_refused(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.click(bot.approval("change"), "rb_reject", user=BOB, channel=ELSEWHERE)
    [view] = bot.fake.views()
    bot.submit(view, {"reason": {"value": "wrong node, this one is healthy"}}, user=BOB)
    assert "belongs to" in bot.fake.ephemerals(BOB)[-1]["text"]
    assert bot.db.load(run).status == "awaiting_approval"
    assert "command.reject" not in [e.type for e in bot.events(run)]


@pytest.mark.parametrize(("approvals_from", "approved"), [(("slack",), True),
                                                          (("terminal",), False)])
def test_approvals_from_is_applied_to_slack_clicks_too(
    make_bot: Callable[..., Bot], monkeypatch: pytest.MonkeyPatch,
    approvals_from: tuple[str, ...], approved: bool,
) -> None:
    monkeypatch.setattr(slack_conftest, "POLICY",
                        replace(slack_conftest.POLICY, approvals_from=approvals_from))
    bot = make_bot()
    bot.command("run change-thing name=web-1")
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert (bot.world.get("web-1") == "on") is approved
    if not approved:
        assert ("cannot approve from Slack: policy.approvals_from accepts approvals only "
                "from terminal") in bot.fake.ephemerals(BOB)[-1]["text"]
