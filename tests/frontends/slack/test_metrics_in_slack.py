"""``slack serve`` in HTTP mode answers ``/metrics`` and ``/readyz`` on the ops port (never the Slack
port), behind the body limits, and counts what people did in Slack, the acks and Slack's failures."""

from __future__ import annotations

from tests.frontends.observe import get, scrape, value
from tests.frontends.slack.conftest import BOB, DAVE, Bot


def test_a_run_approved_in_slack_is_counted_and_served_on_the_ops_port(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.clock.advance(45)  # Bob takes 45 s to approve
    bot.click(bot.approval("change"), "rb_approve", user=BOB)
    bot.clock.advance(600)  # the on-call takes ten minutes for the destructive step
    bot.fake.fail_next("chat.postMessage", status=500, retry_after=None, error="internal_error")
    bot.click(bot.approval("taint"), "rb_approve", user=DAVE)
    assert bot.db.load(run).status == "succeeded"

    m = scrape(bot.ops_base)
    assert value(m, "runbook_bot_runs_total", runbook="change-thing", status="started") == 1
    assert value(m, "runbook_bot_runs_total", runbook="change-thing", status="succeeded") == 1
    assert value(m, "runbook_bot_approval_wait_seconds_count", runbook="change-thing") == 2
    assert value(m, "runbook_bot_approval_wait_seconds_sum", runbook="change-thing") == 645
    assert value(m, "runbook_bot_steps_total", runbook="change-thing", action="fake.taint",
                 outcome="applied") == 1
    # every request was acked and timed: one slash command, two clicks
    assert value(m, "runbook_bot_slack_ack_seconds_count", kind="slash_command") == 1
    assert value(m, "runbook_bot_slack_ack_seconds_count", kind="block_actions") == 2
    assert value(m, "runbook_bot_slack_ack_seconds_bucket", kind="block_actions", le="3.0") == 2
    assert value(m, "runbook_bot_slack_failures_total", method="chat.postMessage", transient="true") == 1
    assert value(m, "runbook_bot_slack_outbox_backlog") == 1  # the failed reply waits its retry
    bot.clock.advance(10)
    bot.settle()
    assert value(scrape(bot.ops_base), "runbook_bot_slack_outbox_backlog") == 0


def test_readyz_on_the_ops_port_follows_the_worker_loop_and_takes_no_body(bot: Bot) -> None:
    assert get(bot.ops_base + "/readyz")[0] == 503  # the worker loop has not gone round yet
    bot.runner.run_due()
    assert get(bot.ops_base + "/readyz")[0] == 200
    bot.clock.advance(121)
    status, _, body = get(bot.ops_base + "/readyz")
    assert status == 503 and body.startswith("worker: ")
    for path in ("/metrics", "/readyz", "/healthz"):
        status, _, body = get(bot.ops_base + path, data=b"{}")
        assert status == 413, (path, status, body)
    assert get(bot.ops_base + "/healthz")[:3:2] == (200, "ok\n")
