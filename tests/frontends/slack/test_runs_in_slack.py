"""A run driven from Slack end to end: slash command, run card, approvals, thread, summary."""

from __future__ import annotations

from collections.abc import Callable

from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import ALICE, BOB, DAVE, Bot, button_in, texts


def test_a_slash_command_starts_a_run_with_one_card_and_an_approval_in_its_thread(bot: Bot) -> None:
    status, _ = bot.command("run change-thing name=web-1")
    assert status == 200
    card = bot.card()
    assert "Test runbook change-thing" in texts([card])[0]
    assert f"<@{ALICE}>" in texts([card])[0]
    approval = bot.approval("change")
    approve = button_in(approval, "rb_approve")
    assert approve["style"] == "danger" and approve["confirm"]["title"]["text"]
    assert "set Thing web-1" in texts([approval])[0]
    assert "read 0 s ago" in texts([approval])[0]
    run = bot.run_id()
    assert bot.db.load(run).origin["channel"] == CHANNEL


def test_approvals_from_eligible_people_carry_the_run_to_its_summary(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    assert bot.world.get("web-1") == "on"
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    run = bot.db.load(bot.run_id())
    assert run.status == "succeeded", run.outcome
    all_text = "\n".join(texts(bot.replies()))
    assert "Approved by <@UBOB000001>" in all_text
    assert "out-of-service taint still on web-1: run node-recovered when it is repaired" in all_text
    assert "succeeded" in texts([bot.card()])[0]


def test_a_waits_progress_is_one_thread_message_edited_in_place(bot: Bot) -> None:
    bot.command("run slow-wait")
    run = bot.run_id()
    [progress] = [m for m in bot.replies() if "Wait for it to settle" in texts([m])[0]]
    for _ in range(2):
        bot.clock.advance(30)
        bot.runner.run_due()
        bot.settle()
    assert bot.db.load(run).status == "succeeded"
    versions = [texts([m])[0] for m in bot.fake.revisions(CHANNEL, progress["ts"])]
    assert any("1 of 3" in v for v in versions) and any("2 of 3" in v for v in versions)
    assert "done" in versions[-1]
    assert sum("Wait for it to settle" in t for t in texts(bot.replies())) == 1
    card_versions = bot.fake.revisions(CHANNEL, bot.card()["ts"])
    assert len(card_versions) > 2 and len(bot.fake.messages(CHANNEL)) == 1


def test_a_card_for_a_long_runbook_stays_within_fifty_blocks(bot: Bot) -> None:
    bot.command("run many-steps")
    run = bot.db.load(bot.run_id())
    assert run.status == "succeeded" and len(run.steps) == 120
    for version in bot.fake.revisions(CHANNEL, bot.card()["ts"]):
        assert len(version["blocks"]) <= 50
    assert "s119" in texts([bot.card()])[0]
    assert not [c for c in bot.fake.calls() if not c.response.get("ok")]


def test_a_plan_too_long_for_its_approval_is_cut_there_and_given_whole_in_the_thread(bot: Bot) -> None:
    bot.command("run cordon-fleet")
    approval = bot.approval("cordon")
    shown = texts([approval])[0]
    assert "… full plan in the thread" in shown and "ip-10-0-1-149" not in shown
    [whole] = [m for m in bot.replies() if "Full plan of `cordon`" in texts([m])[0]]
    assert "(400 changes)" in texts([whole])[0] and "ip-10-0-1-149" in texts([whole])[0]
    for message in (approval, whole, bot.card()):
        assert len(message["blocks"]) <= 50
    assert all(c.response.get("ok") for c in bot.fake.calls())  # Slack took every message
    bot.click(approval, "rb_approve", user=BOB)
    assert bot.world.get("cordoned") == 400


def test_a_rate_limited_card_is_retried_after_retry_after(bot: Bot) -> None:
    bot.fake.fail_next("chat.postMessage", status=429, retry_after=5)
    bot.command("run change-thing name=web-2")
    assert bot.db.load(bot.run_id()).status == "awaiting_approval"  # the run goes on meanwhile
    assert bot.fake.messages(CHANNEL) == []
    assert bot.fake.ephemerals(ALICE) == []  # slow, not refused: no "invite the bot" hint
    bot.clock.advance(4)
    bot.settle()
    assert bot.fake.messages(CHANNEL) == []  # Slack said five seconds: not before
    bot.clock.advance(1)
    bot.settle()
    posts = bot.fake.calls("chat.postMessage")
    assert [p.status for p in posts[:2]] == [429, 200]
    assert bot.card()["ts"] and bot.approval("change")


def test_a_card_that_fails_to_post_is_posted_on_a_later_attempt(bot: Bot) -> None:
    bot.fake.fail_next("chat.postMessage", status=500, retry_after=None, error="internal_error")
    bot.command("run change-thing name=web-3")
    first = bot.fake.calls("chat.postMessage")[0]
    assert first.status == 500
    assert bot.db.load(bot.run_id()).status == "awaiting_approval"
    bot.clock.advance(2)
    bot.settle()
    assert "Test runbook change-thing" in texts([bot.card()])[0]
    assert bot.approval("change")


def test_slack_refusing_every_message_never_breaks_the_run(bot: Bot) -> None:
    bot.fake.fail_next("chat.postMessage", status=200, retry_after=None, error="channel_not_found",
                       times=1000)
    bot.command("run change-thing name=web-4")
    run = bot.run_id()
    assert bot.db.load(run).status == "awaiting_approval"
    bot.command(f"approve {run} change", user=DAVE)
    bot.command(f"approve {run}", user=BOB)
    state = bot.db.load(run)
    assert state.status == "succeeded", state.outcome
    assert bot.fake.messages(CHANNEL) == []
    assert bot.world.get("web-4") == "on"


def test_a_fast_runs_card_is_edited_at_most_once_an_interval_and_ends_up_current(
    make_bot: Callable[..., Bot],
) -> None:
    bot = make_bot(card_interval=60.0)
    bot.command("run many-steps")
    assert bot.db.load(bot.run_id()).status == "succeeded"
    versions = bot.fake.revisions(CHANNEL, bot.card()["ts"])
    assert len(versions) <= 3
    assert "succeeded" in texts([versions[-1]])[0]


def test_a_requester_is_told_when_the_bot_is_not_in_their_channel(bot: Bot) -> None:
    bot.fake.add_channel("C0NEWINC01", name="inc-4711", bot_member=False)
    bot.command("run change-thing name=web-5", channel="C0NEWINC01")
    run = bot.run_id()
    assert {c.response["error"] for c in bot.fake.calls("chat.postMessage")} == {"not_in_channel"}
    [eph] = bot.fake.ephemerals(ALICE)  # through the command's response_url: no membership needed
    assert eph["via"] == "response_url" and eph["channel"] == "C0NEWINC01"
    assert run in eph["text"] and "/invite @runbook-bot" in eph["text"]
    assert bot.db.load(run).status == "awaiting_approval"
    bot.fake.add_channel("C0NEWINC01", name="inc-4711", bot_member=True)  # /invite @runbook-bot
    bot.command(f"approve {run} change", user=DAVE, channel="C0NEWINC01")
    [card] = bot.fake.messages("C0NEWINC01")  # the run's next change brings its card
    assert run in texts([card])[0] and "✓ *change*" in texts([card])[0]


def test_the_summary_publishes_the_audit_head_that_catches_a_later_truncation(bot: Bot) -> None:
    import re

    from sqlalchemy import delete, select, update

    from bot.store.db import events_t, runs
    from bot.store.integrity import verify_run

    bot.command("run change-thing name=web-1")
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    run = bot.run_id()
    events = bot.db.events(run)
    finished = next(e for e in events if e.type == "run.finished")
    [summary] = [t for t in texts(bot.replies()) if "Audit head" in t]
    published = re.search(r"Audit head `(\d+):([0-9a-f]{64})`", summary)
    assert published and published.groups() == (str(finished.seq), finished.hash)
    head = (int(published.group(1)), published.group(2))
    assert verify_run(bot.db, run, key=bot.db.key, published=head).ok
    # a database writer drops the run's end and moves the head
    keep = finished.seq - 2
    with bot.db.engine.begin() as conn:
        conn.execute(delete(events_t).where(events_t.c.run_id == run, events_t.c.seq > keep))
        last = conn.execute(select(events_t.c.hash).where(events_t.c.run_id == run,
                                                          events_t.c.seq == keep)).scalar_one()
        conn.execute(update(runs).where(runs.c.id == run).values(audit_seq=keep, audit_hash=last))
    verdict = verify_run(bot.db, run, key=bot.db.key, published=head)
    assert not verdict.ok and verdict.first_bad_seq == keep + 1
