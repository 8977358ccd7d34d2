"""node-dead-ngns from Slack against the sandbox: a slash command, clicks from two on-call people,
and the recovery as the channel sees it, card and thread."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.fakes.slack_api import CHANNEL, FakeSlack
from tests.frontends.observe import scrape, value
from tests.frontends.slack.conftest import BOB, DAVE, Bot, raw_iso_times, texts

pytest.importorskip("moto", reason="the sandbox needs runbook-bot[sim]")
pytestmark = pytest.mark.slow


def test_node_dead_ngns_recovers_from_slack_and_the_summary_names_the_taint(
    fake: FakeSlack, tmp_path: Path,
) -> None:
    from bot.sim.rehearsal import Rehearsal

    r = Rehearsal("node-dead", workdir=tmp_path / "sandbox")
    r.start()
    bot = Bot(fake, tmp_path, rehearsal=r)
    try:
        node = r.facts["node"]
        bot.command(f"run node-dead-ngns node={node} cluster=sandbox")
        run = bot.run_id()
        clicked: set[tuple[str, str]] = set()
        for _ in range(200):
            state = bot.db.load(run)
            if state.status in ("succeeded", "failed", "aborted"):
                break
            if state.status == "awaiting_approval":
                s = next(x for x in state.steps.values() if x.status == "awaiting_approval")
                assert not s.blocked, s.blocked
                who = next(u for u in (BOB, DAVE) if (s.key + (s.plan_hash or ""), u) not in clicked)
                clicked.add((s.key + (s.plan_hash or ""), who))
                action = "rb_confirm" if s.needs_confirmation and not s.needs_approval else "rb_approve"
                bot.click(bot.approval(s.key), action, user=who)
            else:
                due = datetime.fromisoformat(state.next_check_at or state.created_at)
                r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))
                bot.runner.run_due()
                bot.settle()
        state = bot.db.load(run)
        assert state.status == "succeeded", state.outcome
        card = texts([bot.card()])[0]
        assert "succeeded" in card and f"node={node}" in card
        thread = "\n".join(texts(bot.replies()))
        assert "node-recovered" in thread and "Still in place" in thread
        assert f"Approved by <@{BOB}>" in thread
        assert len(bot.fake.messages(CHANNEL)) == 1
        # every time Slack was shown (asks, decisions, waits, evidence) is a Slack date
        assert raw_iso_times(bot.fake) == []
        # the clients' call records, counted: every API call of every apply is in the audit too
        # (a read served again from the pass is audited as `cached`, and is no API call)
        m = scrape(bot.ops_base)
        applied = [c for ev in bot.events(run) for c in ev.payload.get("calls") or ()
                   if c.get("outcome") != "cached"]
        for service in ("kubernetes", "ec2"):
            counted = sum(v for (name, labels), v in m.items()
                          if name == "runbook_bot_api_calls_total" and ("service", service) in labels)
            audited = sum(c["service"] == service for c in applied)
            assert counted >= audited > 0, (service, counted, audited)
        assert value(m, "runbook_bot_runs_total", runbook="node-dead-ngns", status="succeeded") == 1
    finally:
        bot.close()
        r.stop()
