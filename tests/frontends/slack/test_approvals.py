"""Approval buttons in Slack: the engine's policy decides, Slack shows who may not and why."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import ALICE, BOB, CAROL, DAVE, ONCALL, Bot, button_in, texts


def refusals(bot: Bot, run: str) -> list[tuple[str, str]]:
    return [(e.actor, str(e.payload.get("reason"))) for e in bot.events(run)
            if e.type == "command.refused"]


def test_the_requester_cannot_approve_their_own_step(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.click(bot.approval("change"), "rb_approve", user=ALICE)
    [eph] = bot.fake.ephemerals(ALICE)
    assert "cannot approve its steps" in eph["text"] and eph["channel"] == CHANNEL
    assert refusals(bot, run)[0][0] == "slack:" + ALICE
    assert bot.db.load(run).steps["change"].status == "awaiting_approval"
    assert button_in(bot.approval("change"), "rb_approve")  # still open for someone else


def test_a_click_by_someone_outside_the_approver_groups_is_refused_and_audited(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.click(bot.approval("change"), "rb_approve", user=CAROL)
    [eph] = bot.fake.ephemerals(CAROL)
    assert "not in an approver group" in eph["text"]
    [(actor, reason)] = refusals(bot, run)
    assert actor == "slack:" + CAROL and "sre" in reason
    assert bot.world.get("web-1") is None


def test_user_group_membership_is_read_again_at_click_time(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    assert bot.parts.usergroups.is_member("slack:" + BOB, ONCALL)  # cached now
    bot.fake.set_usergroup(ONCALL, [CAROL])  # bob left on-call a minute ago
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert "not in an approver group" in bot.fake.ephemerals(BOB)[0]["text"]
    assert refusals(bot, run)[0][0] == "slack:" + BOB
    bot.click(bot.approval("change"), "rb_approve", user=CAROL)
    assert bot.world.get("web-1") == "on"


def test_an_approval_typed_with_a_foreach_step_id_reads_membership_again_too(bot: Bot) -> None:
    bot.command("run set-each")
    run = bot.run_id()
    assert bot.db.load(run).steps["change[0]"].status == "awaiting_approval"
    assert bot.parts.usergroups.is_member("slack:" + BOB, ONCALL)  # cached now
    bot.fake.set_usergroup(ONCALL, [CAROL])  # bob left on-call a minute ago
    bot.command(f"approve {run} change", user=BOB)  # the step as people type it, not change[0]
    assert "not in an approver group" in bot.fake.ephemerals(BOB)[-1]["text"]
    assert bot.world.get("web-1") is None
    bot.command(f"approve {run} change", user=CAROL)
    assert bot.world.get("web-1") == "on"


def test_a_click_that_cannot_check_membership_is_not_counted_and_can_be_repeated(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.fake.fail_next("usergroups.users.list", status=200, retry_after=None, error="fatal_error")
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert "was not counted" in bot.fake.ephemerals(BOB)[0]["text"]
    assert "command.approve" not in [e.type for e in bot.events(run)]
    assert bot.world.get("web-1") is None
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert bot.world.get("web-1") == "on"


def test_a_refused_click_counts_once_the_reason_is_gone(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.fake.set_usergroup(ONCALL, [])  # bob is not on call yet
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert "not in an approver group" in bot.fake.ephemerals(BOB)[-1]["text"]
    bot.fake.set_usergroup(ONCALL, [BOB])  # the rotation hands over
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert "already counted" not in bot.fake.ephemerals(BOB)[-1]["text"]
    assert bot.world.get("web-1") == "on"
    types = [e.type for e in bot.events(run)]
    assert types.count("command.refused") == 1 and types.count("approval.granted") == 1


def test_a_click_in_a_channel_outside_the_allowed_ones_changes_nothing(
    make_bot: Callable[..., Bot],
) -> None:
    bot = make_bot(allowed=(CHANNEL,))
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.click(bot.approval("change"), "rb_approve", user=BOB, channel="C0ELSEWHERE")
    assert "not enabled in this channel" in bot.fake.ephemerals(BOB)[-1]["text"]
    assert bot.world.get("web-1") is None
    assert "command.approve" not in [e.type for e in bot.events(run)]
    bot.click(bot.approval("change"), "rb_approve", user=BOB)  # in the run's own channel
    assert bot.world.get("web-1") == "on"


def test_a_double_click_has_a_single_effect(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    message = bot.approval("change")
    bot.click(message, "rb_approve", user=BOB, settle=False)
    bot.click(message, "rb_approve", user=BOB)
    types = [e.type for e in bot.events(run)]
    assert types.count("command.approve") == 1 and "command.refused" not in types
    assert [e["name"] for e in bot.world.effects] == ["web-1"]
    assert "already counted" in bot.fake.ephemerals(BOB)[-1]["text"]


def test_after_a_decision_the_buttons_become_who_decided_and_when(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    ts = bot.approval("change")["ts"]
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    now = bot.fake.message(CHANNEL, ts)
    assert not [b for b in now["blocks"] if b["type"] == "actions"]
    assert (f"Approved by <@{BOB}> <!date^1767225600^{{date_short_pretty}} {{time}}|Jan 01 2026 "
            "00:00 UTC>") in texts([now])[0]
    assert len(bot.fake.revisions(CHANNEL, ts)) >= 2


def test_a_non_destructive_approval_has_a_primary_button_without_confirm(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    approve = button_in(bot.approval("taint"), "rb_approve")
    assert approve["style"] == "primary" and "confirm" not in approve


def test_reject_asks_for_a_reason_in_a_modal_and_stops_the_run(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.click(bot.approval("change"), "rb_reject", user=BOB)
    [view] = bot.fake.views()
    assert view["callback_id"] == "rb_reject_reason"
    status, body = bot.submit(view, {"reason": {"value": "no"}}, user=BOB)
    answer = json.loads(body)
    assert status == 200 and answer["response_action"] == "errors"
    assert "at least 8 characters" in answer["errors"]["reason"]
    assert bot.db.load(run).status == "awaiting_approval"
    bot.submit(view, {"reason": {"value": "wrong node, this one is healthy"}}, user=BOB)
    state = bot.db.load(run)
    assert state.status == "failed" and "wrong node" in state.outcome
    assert "Rejected by <@UBOB000001>" in "\n".join(texts(bot.replies()))
    assert bot.world.effects == []


def test_a_refused_rejection_from_the_form_is_answered_where_the_button_was(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.click(bot.approval("change"), "rb_reject", user=CAROL)
    [view] = bot.fake.views()
    bot.submit(view, {"reason": {"value": "I do not like the look of it"}}, user=CAROL)
    [answer] = bot.fake.ephemerals(CAROL)
    assert answer["via"] == "response_url" and "not in an approver group" in answer["text"]
    assert bot.db.load(run).status == "awaiting_approval"
    assert refusals(bot, run)[0][0] == "slack:" + CAROL


def test_text_fallbacks_approve_and_reject_like_the_buttons(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.command(f"approve {run}", user=CAROL)
    assert "not in an approver group" in bot.fake.ephemerals(CAROL)[0]["text"]
    bot.command(f"approve {run} change", user=DAVE)
    assert bot.world.get("web-1") == "on"
    bot.command(f"reject {run} not during the freeze please", user=BOB)
    state = bot.db.load(run)
    assert state.status == "failed" and state.steps["taint"].status == "rejected"


def test_a_manual_step_is_confirmed_with_its_button(bot: Bot) -> None:
    bot.command("run check-by-hand")
    run = bot.run_id()
    message = bot.approval("console")
    assert "Confirm step" in texts([message])[0]
    bot.click(message, "rb_confirm", user=BOB)
    assert bot.db.load(run).status == "succeeded"
    assert f"Confirmed by <@{BOB}>" in texts([bot.fake.message(CHANNEL, message["ts"])])[0]


def test_a_step_blocked_by_an_interlock_offers_no_approve_button_until_retried(bot: Bot) -> None:
    bot.world.lock("web-1")
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    state = bot.db.load(run)
    assert state.steps["change"].blocked
    blocked = [m for m in bot.replies() if "Blocked by interlock" in texts([m])[0]]
    assert blocked and not [b for b in blocked[0]["blocks"] if b["type"] == "actions"]
    bot.world.lock("web-1", False)
    bot.command(f"retry {run} change")
    button_in(bot.approval("change"), "rb_approve")
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert bot.world.get("web-1") == "on"


def test_a_plan_that_changed_before_apply_supersedes_its_approval_message(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    old = bot.approval("change")
    bot.world.set("web-1", "off")  # someone changed it by hand after the plan was shown
    bot.click(old, "rb_approve", user=BOB)
    run = bot.run_id()
    assert "approval.invalidated" in [e.type for e in bot.events(run)]
    new = bot.approval("change")
    assert new["ts"] != old["ts"] and "off -&gt; on" in texts([new])[0]
    assert "The plan changed" in texts([bot.fake.message(CHANNEL, old["ts"])])[0]
    assert bot.world.get("web-1") == "off"


def test_two_people_break_glass_on_a_blocked_step_with_reasons(bot: Bot) -> None:
    bot.world.lock("web-1")
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.command(f"break-glass {run} I asked for it, so I override it", user=ALICE)
    assert "command.refused" in [e.type for e in bot.events(run)]  # the requester never counts
    bot.command(f"break-glass {run} the lock is stale, its holder left hours ago", user=BOB)
    assert "1 of 2" in texts(bot.fake.ephemerals(BOB))[-1]
    assert bot.world.get("web-1") is None  # one person is not enough
    bot.command(f"break-glass {run} confirmed with the lock holder by phone", user=DAVE)
    assert bot.world.get("web-1") == "on"
    [over] = [e.payload for e in bot.events(run) if e.type == "interlock.overridden"]
    assert over["approvers"] == ["slack:" + BOB, "slack:" + DAVE]
    assert "confirmed with the lock holder by phone" in over["reasons"]


def test_a_manual_step_is_confirmed_with_the_text_command_too(bot: Bot) -> None:
    bot.command("run check-by-hand")
    run = bot.run_id()
    ts = bot.approval("console")["ts"]
    bot.command(f"confirm {run}", user=BOB)
    assert bot.db.load(run).status == "succeeded"
    message = bot.fake.message(CHANNEL, ts)
    assert f"Confirmed by <@{BOB}>" in texts([message])[0]
    assert not [b for b in message["blocks"] if b["type"] == "actions"]


def test_an_approval_nobody_gave_in_time_loses_its_buttons(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    ts = bot.approval("change")["ts"]
    bot.clock.advance(1801)
    bot.runner.run_due()
    bot.settle()
    assert bot.db.load(run).steps["change"].status == "expired"
    message = bot.fake.message(CHANNEL, ts)
    assert "The approval expired before anyone decided" in texts([message])[0]
    assert not [b for b in message["blocks"] if b["type"] == "actions"]
    assert bot.world.get("web-1") is None
