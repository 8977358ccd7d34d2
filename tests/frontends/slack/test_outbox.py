"""The Slack outbox: Slack failing or slow never holds a run, and Slack always catches up.

Each test breaks Slack (or the process) in one way and asserts two outcomes: the run's state in
the store moved on regardless, and what the channel shows ends up matching it once Slack is well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from bot.engine.commands import Approve, Confirm, StartRun
from bot.frontends.slack.drawing import RunFacts
from bot.frontends.slack.outbox import THOROUGH_SCAN_EVERY
from bot.frontends.slack.persistence import SlackStore
from bot.runtime.runner import Runner
from tests.fakes.slack_api import CHANNEL
from tests.frontends.slack.conftest import BOB, DAVE, POLICY, Bot, button_in, texts

SUMMARY = "out-of-service taint still on web-1: run node-recovered when it is repaired"


@pytest.fixture
def any_bot(make_bot: Callable[..., Bot], db_url: str) -> Bot:
    """A bot on SQLite, and again on PostgreSQL (the store of replicated installations)."""
    return make_bot(db_url=db_url)


def _to_last_approval(bot: Bot) -> str:
    bot.command("run change-thing name=web-1")
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    return bot.run_id()


def _thread(bot: Bot) -> str:
    return "\n".join(texts(bot.replies()))


def _summaries(bot: Bot, run: str) -> int:
    return sum((m.get("text") or "").startswith(f"{run} succeeded") for m in bot.replies())


def test_a_summary_slack_refused_is_posted_once_slack_recovers(bot: Bot) -> None:
    run = _to_last_approval(bot)
    bot.fake.fail_next("chat.postMessage", status=500, retry_after=None, error="internal_error")
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    assert bot.db.load(run).status == "succeeded"  # the run did not wait for Slack
    assert _summaries(bot, run) == 0
    assert run in bot.parts.outbox.pending()  # a retry is scheduled, not dropped
    bot.clock.advance(10)
    bot.settle()
    assert _summaries(bot, run) == 1
    thread = _thread(bot)
    assert thread.index("tainted web-1") < thread.index(SUMMARY)  # in order despite the failure
    assert "succeeded" in texts([bot.card()])[0]
    assert run not in bot.parts.outbox.pending()


def test_a_rate_limit_is_waited_out_by_the_outbox_not_by_the_run(bot: Bot) -> None:
    run = _to_last_approval(bot)
    bot.fake.fail_next("chat.update", status=429, retry_after=30)
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    state = bot.db.load(run)
    assert state.status == "succeeded"
    assert bot.db.lease_of(run) == (None, None)  # nothing holds the run while Slack says wait
    assert "✓ *taint*" not in texts([bot.card()])[0]
    due = bot.parts.outbox.pending()[run]
    assert due >= bot.clock.now().timestamp() + 30  # Slack's Retry-After is honoured
    assert [c.status for c in bot.fake.calls("chat.update")].count(429) == 1  # no hammering
    bot.clock.advance(30)
    bot.settle()
    assert "✓ *taint*" in texts([bot.card()])[0]
    assert _summaries(bot, run) == 1


def test_a_permanent_refusal_is_not_retried_until_the_run_changes(bot: Bot) -> None:
    bot.fake.fail_next("chat.postMessage", status=200, retry_after=None, error="channel_not_found",
                       times=1000)
    bot.command("run change-thing name=web-2")
    run = bot.run_id()
    calls = len(bot.fake.calls("chat.postMessage"))
    assert bot.parts.outbox.pending() == {}
    assert bot.parts.slack_store.lagging(now=bot.clock.now().timestamp()) == []
    bot.clock.advance(600)
    bot.settle()
    assert len(bot.fake.calls("chat.postMessage")) == calls
    assert bot.db.load(run).status == "awaiting_approval"


def test_a_change_made_from_the_terminal_reaches_the_card(any_bot: Bot) -> None:
    bot = any_bot
    bot.command("run change-thing name=web-3")
    run = bot.run_id()
    terminal = Runner(store=bot.db, catalog=bot.runner.catalog, runbooks=bot.runner.runbooks,
                      policy=POLICY, clock=bot.clock)  # another process: no Slack notifier
    assert terminal.submit(Approve(run_id=run, actor="slack:" + DAVE, step="change")).ok
    terminal.drive(run)
    assert bot.world.get("web-3") == "on"
    assert button_in(bot.approval("change"), "rb_approve")  # Slack has not heard yet
    bot.clock.advance(bot.parts.outbox.scan_every)
    bot.settle()
    assert f"<@{DAVE}>" in texts([bot.replies()[0]])[0]
    assert not [b for b in bot.replies()[0]["blocks"] if b.get("type") == "actions"]
    assert bot.approval("taint")  # and the next step's approval was posted


def test_a_run_started_by_a_replica_that_stopped_before_drawing_it_is_drawn(any_bot: Bot) -> None:
    bot = any_bot
    gone = Runner(store=bot.db, catalog=bot.runner.catalog, runbooks=bot.runner.runbooks,
                  policy=POLICY, clock=bot.clock)  # a replica that died right after the start
    state = gone.start(StartRun(runbook="change-thing", params={"name": "web-7"},
                                requester="slack:" + BOB,
                                origin={"frontend": "slack", "channel": CHANNEL}))
    assert bot.fake.messages(CHANNEL) == []
    bot.clock.advance(bot.parts.outbox.scan_every)
    bot.settle()
    [card] = bot.fake.messages(CHANNEL)
    assert state.run_id in texts([card])[0]


def test_a_finished_run_drawn_to_its_summary_drops_out_of_the_scans(any_bot: Bot) -> None:
    bot = any_bot
    run = _to_last_approval(bot)
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    assert _summaries(bot, run) == 1
    with bot.db.engine.connect() as conn:
        done = conn.execute(text("SELECT done FROM slack_runs WHERE run_id = :r"), {"r": run}).scalar()
    assert done
    with bot.db.engine.begin() as conn:  # even if its row moved on, a done run is not redrawn
        conn.execute(text("UPDATE runs SET version = version + 1 WHERE id = :r"), {"r": run})
    assert bot.parts.slack_store.lagging(now=bot.clock.now().timestamp()) == []


def test_a_restart_draws_what_slack_missed_before_it(make_bot: Callable[..., Bot]) -> None:
    first = make_bot()
    first.fake.fail_next("chat.postMessage", status=503, retry_after=None,
                         error="service_unavailable", times=1000)
    first.command("run change-thing name=web-4")
    run = first.run_id()
    assert first.fake.messages(CHANNEL) == []
    first.close()  # the bot stops with the card never posted
    first.fake.clear_failures()
    second = make_bot()  # a new process on the same database
    second.clock.advance(60)
    second.settle()
    [card] = second.fake.messages(CHANNEL)
    assert run in texts([card])[0] and "waiting for a person" in texts([card])[0]
    assert second.approval("change")


def test_two_replicas_on_one_database_draw_each_message_once(make_bot: Callable[..., Bot],
                                                             db_url: str) -> None:
    one, two = make_bot(db_url=db_url), make_bot(db_url=db_url)
    one.command("run change-thing name=web-5")
    two.click(one.approval("change"), "rb_approve", user=BOB)  # the click lands on the other
    one.clock.advance(10)
    one.settle()
    two.settle()
    assert len(one.fake.messages(CHANNEL)) == 1
    run = one.run_id()
    first, *rest = [m.get("text") for m in one.replies()]
    assert first.startswith(f"{run}: change ")  # the approval message of change, decided since
    assert rest == [f"{run}: change succeeded", f"{run}: taint needs a person to approve: Taint web-5"]


def test_only_one_replica_at_a_time_may_draw_a_run(any_bot: Bot) -> None:
    slack_store = any_bot.parts.slack_store
    assert slack_store.claim_drawing("rb-aaaaa", owner="a", now=100.0, ttl=30) is not None
    assert slack_store.claim_drawing("rb-aaaaa", owner="b", now=110.0, ttl=30) is None
    assert slack_store.claim_drawing("rb-aaaaa", owner="b", now=131.0, ttl=30) is not None  # a died


def test_runs_from_before_the_outbox_existed_are_not_replayed(any_bot: Bot) -> None:
    bot = any_bot
    bot.command("run change-thing name=web-6")
    with bot.db.engine.begin() as conn:
        # a database from an earlier release: no cursor table, and no schema revision recorded
        conn.execute(text("DROP TABLE slack_runs"))
        conn.execute(text("DROP TABLE alembic_version_slack"))
    slack_store = SlackStore(bot.db.engine)
    assert slack_store.lagging(now=bot.clock.now().timestamp() + 3600) == []


class _FinishedBeforeLoad:
    """The store, but the run is finished by another process between the outbox reading its
    events and reading its state: the window a drawing must not take for "shown to its end"."""

    def __init__(self, db: Any, finish: Callable[[], None]) -> None:
        self.db, self.finish = db, finish

    def events(self, *args: Any, **kwargs: Any) -> Any:
        return self.db.events(*args, **kwargs)

    def load(self, run_id: str) -> Any:
        finish, self.finish = self.finish, lambda: None
        finish()
        return self.db.load(run_id)


def test_a_run_finished_while_it_was_being_drawn_gets_its_whole_thread_in_order(bot: Bot) -> None:
    run = _to_last_approval(bot)
    terminal = Runner(store=bot.db, catalog=bot.runner.catalog, runbooks=bot.runner.runbooks,
                      policy=POLICY, clock=bot.clock)

    def finish() -> None:
        assert terminal.submit(Approve(run_id=run, actor="slack:" + DAVE, step="taint")).ok
        terminal.drive(run)

    bot.parts.outbox.store = _FinishedBeforeLoad(bot.db, finish)
    bot.parts.outbox.mark(run)
    bot.settle()
    assert bot.db.load(run).status == "succeeded"
    assert _summaries(bot, run) == 0  # its events were read before it finished: not yet
    bot.parts.outbox.store = bot.db
    bot.clock.advance(bot.parts.outbox.scan_every)
    bot.settle()
    thread = _thread(bot)
    assert _summaries(bot, run) == 1 and thread.index("tainted web-1") < thread.index(SUMMARY)


def test_a_full_plan_that_failed_to_post_is_posted_on_the_retry(bot: Bot) -> None:
    # the card and the approval go through; the long plan's own reply does not
    bot.fake.fail_next("chat.postMessage", status=500, retry_after=None, error="internal_error",
                       after=2)
    bot.command("run cordon-fleet")
    assert not [m for m in bot.replies() if "Full plan of `cordon`" in texts([m])[0]]
    bot.clock.advance(2)
    bot.settle()
    assert len([m for m in bot.replies() if "Full plan of `cordon`" in texts([m])[0]]) == 1
    assert len([m for m in bot.replies() if "needs a person" in (m.get("text") or "")]) == 1


def test_a_revoked_token_is_retried_not_skipped(bot: Bot) -> None:
    run = _to_last_approval(bot)
    bot.fake.fail_next("chat.postMessage", status=200, retry_after=None, error="token_revoked",
                       times=3)
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    assert _summaries(bot, run) == 0 and run in bot.parts.outbox.pending()
    for _ in range(3):  # an admin reinstalls the app meanwhile
        bot.clock.advance(300)
        bot.settle()
    assert _summaries(bot, run) == 1


def test_a_run_that_cannot_be_drawn_at_all_is_given_up_on(bot: Bot) -> None:
    bot.command("run change-thing name=web-8")
    run = bot.run_id()

    def broken(state: Any) -> Any:
        raise RuntimeError("a bug in rendering")

    bot.parts.drawer.facts = RunFacts(runbook=broken, destructive=lambda state, key: True)
    bot.parts.outbox.give_up_after = 3
    bot.parts.outbox.mark(run)
    bot.settle()
    for _ in range(2):  # the first failure is behind us; the third is the last
        assert run in bot.parts.outbox.pending()  # backing off, not spinning
        bot.clock.advance(300)
        bot.settle()
    assert run not in bot.parts.outbox.pending()
    assert bot.parts.slack_store.lagging(now=bot.clock.now().timestamp(), thorough=True) == []


def test_a_finished_run_no_replica_drew_is_found_by_the_thorough_scan(bot: Bot) -> None:
    gone = Runner(store=bot.db, catalog=bot.runner.catalog, runbooks=bot.runner.runbooks,
                  policy=POLICY, clock=bot.clock)
    state = gone.start(StartRun(runbook="check-by-hand", params={}, requester="slack:" + BOB,
                                origin={"frontend": "slack", "channel": CHANNEL}))
    gone.drive(state.run_id)
    assert gone.submit(Confirm(run_id=state.run_id, actor="slack:" + DAVE)).ok
    gone.drive(state.run_id)
    assert bot.db.load(state.run_id).status == "succeeded"
    bot.clock.advance(THOROUGH_SCAN_EVERY)
    bot.settle()
    [card] = bot.fake.messages(CHANNEL)
    assert state.run_id in texts([card])[0] and _summaries(bot, state.run_id) == 1


def test_a_thread_behind_a_rate_limited_card_is_posted_after_the_wait(bot: Bot) -> None:
    # the run finishes before the outbox gets to it, so one drawing has the card edit, the step's
    # result and the summary to show, and Slack refuses the card edit first
    run = _to_last_approval(bot)
    terminal = Runner(store=bot.db, catalog=bot.runner.catalog, runbooks=bot.runner.runbooks,
                      policy=POLICY, clock=bot.clock)  # another process: no Slack notifier
    assert terminal.submit(Approve(run_id=run, actor="slack:" + DAVE, step="taint")).ok
    terminal.drive(run)
    assert bot.db.load(run).status == "succeeded"
    bot.fake.fail_next("chat.update", status=429, retry_after=30)
    bot.parts.outbox.mark(run)
    bot.settle()
    assert [c.status for c in bot.fake.calls("chat.update")].count(429) == 1
    assert _summaries(bot, run) == 0 and "tainted web-1" not in _thread(bot)
    bot.clock.advance(30)
    bot.settle()
    assert "✓ *taint*" in texts([bot.card()])[0]
    thread = _thread(bot)
    assert _summaries(bot, run) == 1 and thread.index("tainted web-1") < thread.index(SUMMARY)
