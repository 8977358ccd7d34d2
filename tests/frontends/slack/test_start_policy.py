"""``policy.start`` over signed HTTP: ``/runbook run`` from someone outside the groups, or from
another channel, starts nothing; the person is told privately what would be needed, and the
refusal is in the refusals chain."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from bot.config import StartRule
from bot.frontends.slack.service import Person
from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack import conftest as slack_conftest
from tests.frontends.slack.conftest import BOB, CAROL, Bot

ELSEWHERE = "C0ELSEWHERE"


def test_a_slack_user_outside_the_groups_or_channel_cannot_start_and_is_told_privately(
    make_bot: Callable[..., Bot], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slack_conftest, "POLICY", replace(slack_conftest.POLICY, start={
        "*": StartRule(groups=("sre",), channels=(CHANNEL,))}))
    bot = make_bot()
    status, _ = bot.command("run change-thing name=web-1", user=CAROL)
    assert status == 200
    assert bot.fake.ephemerals(CAROL)[-1]["text"] == (
        f":no_entry: starting change-thing needs a member of sre, from channel {CHANNEL} "
        f"(you are slack:{CAROL}, in channel {CHANNEL})")
    # bob is in sre through the Slack user group, but asks from another channel
    bot.command("run change-thing name=web-1", user=BOB, channel=ELSEWHERE)
    assert f"from channel {CHANNEL}" in bot.fake.ephemerals(BOB)[-1]["text"]
    assert bot.db.runs(limit=5) == [] and bot.fake.messages(CHANNEL) == []
    bot.command("run change-thing name=web-1", user=BOB)
    assert [r.requester for r in bot.db.runs(limit=5)] == [f"slack:{BOB}"]
    rows = bot.db.refusals.rows()
    assert [(r.actor, r.what, r.via["channel"]) for r in rows] == [
        (f"slack:{CAROL}", "start change-thing", CHANNEL),
        (f"slack:{BOB}", "start change-thing", ELSEWHERE)]
    assert "needs a member of sre" in rows[0].reason and bot.db.refusals.verify().ok


def test_no_params_form_opens_for_someone_the_policy_would_refuse(
    make_bot: Callable[..., Bot], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slack_conftest, "POLICY", replace(slack_conftest.POLICY, start={
        "*": StartRule(groups=("sre",))}))
    bot = make_bot()
    carol = Person(user=CAROL, channel=CHANNEL)
    bot.service.form("change-thing", {}, carol, trigger_id=bot.fake.new_trigger_id(CAROL))
    assert bot.fake.views() == []
    assert "needs a member of sre" in bot.fake.ephemerals(CAROL)[-1]["text"]
    bot.service.form("change-thing", {}, Person(user=BOB, channel=CHANNEL),
                     trigger_id=bot.fake.new_trigger_id(BOB))
    assert len(bot.fake.views()) == 1
