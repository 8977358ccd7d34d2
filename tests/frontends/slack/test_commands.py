"""``/runbook`` subcommands: answers go privately to whoever typed them, mistakes get a hint."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.fakes.slack_api import CHANNEL, PRIVATE_CHANNEL
from tests.frontends.slack.conftest import ALICE, BOB, DAVE, Bot, texts


def answers(bot: Bot, user: str = ALICE) -> list[str]:
    return texts(bot.fake.ephemerals(user))


@pytest.mark.parametrize("text", ["frobnicate", "run", "status not-an-id", "abort rb-7k3qa",
                                  "export rb-7k3qa pdf", 'run "unclosed'])
def test_unknown_or_malformed_input_gets_a_usage_hint_in_the_ack(bot: Bot, text: str) -> None:
    status, body = bot.command(text)
    assert status == 200
    answer = json.loads(body)
    assert "/runbook" in answer["text"] and "`run NAME [KEY=VALUE...]" in answer["text"]
    assert bot.fake.messages(CHANNEL) == [] and bot.db.runs() == []


def test_help_is_answered_in_the_ack(bot: Bot) -> None:
    _, body = bot.command("help")
    assert "`runs`: the active runs in this channel" in json.loads(body)["text"]


def test_list_and_show_describe_the_runbooks(bot: Bot) -> None:
    bot.command("list")
    bot.command("show change-thing")
    listing, shown = answers(bot)
    assert "`change-thing` Test runbook change-thing · 3 steps, 1 destructive" in listing
    assert "`name` (string, required): the thing to change" in shown
    assert "*change* Set {{ params.name }}" in shown and "destructive, needs approval" in shown


def test_an_unknown_runbook_is_named_in_the_answer(bot: Bot) -> None:
    bot.command("run no-such-thing")
    assert "no runbook named 'no-such-thing'" in answers(bot)[0]


def test_status_and_runs_show_the_channels_runs(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.command("runs", user=BOB)
    bot.command("status", user=BOB)
    bot.command(f"status {run.upper()}", user=BOB)
    runs, latest, named = answers(bot, BOB)
    assert run in runs and "change: approval 0 of 1 from sre" in runs
    assert latest == named and "*change* Set web-1 to on" in latest


def test_abort_stops_the_run_and_needs_a_reason(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.command(f"abort {run} short")
    assert "at least 8 characters" in answers(bot)[-1]
    bot.command(f"abort {run} wrong cluster, stopping")
    state = bot.db.load(run)
    assert state.status == "aborted" and "wrong cluster" in state.outcome
    assert "aborted" in texts([bot.card()])[0]


def test_export_says_when_transcripts_are_not_available(bot: Bot) -> None:
    bot.service.exporter = None
    bot.command("run change-thing name=web-1")
    bot.command(f"export {bot.run_id()} html")
    assert "Export is not available" in answers(bot)[-1]


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_export_uploads_the_transcript_with_the_threads_conversation(bot: Bot, fmt: str) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    bot.fake.post_as_user(CHANNEL, BOB, "checked the node console, it is really gone",
                          thread_ts=bot.card()["ts"])
    bot.command(f"export {run} {fmt}", user=DAVE)
    [upload] = bot.fake.uploads
    assert upload.filename == f"{run}.{fmt}" and upload.content
    assert upload.channel == CHANNEL and upload.thread_ts == bot.card()["ts"]
    text = upload.content.decode()
    assert run in text and "checked the node console, it is really gone" in text
    if fmt == "json":
        doc = json.loads(text)
        assert doc["events"][0]["type"] == "run.created"
        assert doc["integrity"]["verified"] is True  # the chain checked out when exported
    else:
        assert "bob" in text


def test_a_missing_param_opens_a_form_and_invalid_values_are_shown_inline(bot: Bot) -> None:
    bot.command("run change-thing count=9")
    [view] = bot.fake.views()
    assert view["callback_id"] == "rb_run" and bot.db.runs() == []
    by_block = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
    assert set(by_block) == {"param:name", "param:value", "param:count"}
    assert "required" in by_block["param:name"]["hint"]["text"]
    assert "above the maximum 5" in by_block["param:count"]["hint"]["text"]
    assert by_block["param:value"]["element"]["initial_value"] == "on"
    status, body = bot.submit(view, {"param:name": {"value": "Not Valid!"},
                                     "param:count": {"value": "0"}}, user=ALICE)
    errors = json.loads(body)["errors"]
    assert status == 200 and set(errors) == {"param:name", "param:count"}
    assert "does not match the pattern" in errors["param:name"]
    assert bot.db.runs() == []
    bot.submit(view, {"param:name": {"value": "web-9"}, "param:count": {"value": "2"}}, user=ALICE)
    [run] = bot.db.runs()
    assert run.params == {"name": "web-9", "value": "on", "count": 2}
    assert run.requester == "slack:" + ALICE and "web-9" in texts([bot.card()])[0]


def test_a_cluster_the_config_does_not_name_is_refused_in_the_form_before_a_run_exists(
        bot: Bot) -> None:
    bot.runner.clusters = ("sandbox", "staging")  # what build_runner takes from the config
    bot.command("run read-in-cluster cluster=prod")
    [view] = bot.fake.views()
    by_block = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
    assert by_block["param:cluster"]["hint"]["text"].startswith(
        "unknown cluster 'prod'; configured: sandbox, staging")
    assert bot.db.runs() == []
    status, body = bot.submit(view, {"param:cluster": {"value": "prod"}}, user=ALICE)
    assert status == 200 and "unknown cluster 'prod'" in json.loads(body)["errors"]["param:cluster"]
    assert bot.db.runs() == []
    bot.submit(view, {"param:cluster": {"value": "staging"}}, user=ALICE)
    [run] = bot.db.runs()
    assert run.params["cluster"] == "staging"


def test_an_unknown_param_is_refused_with_what_the_runbook_takes(bot: Bot) -> None:
    bot.command("run change-thing name=a colour=red")
    assert "unknown param colour (this runbook takes: name, value, count)" in answers(bot)[0]
    assert bot.fake.views() == [] and bot.db.runs() == []


def test_a_channel_outside_the_allowed_ones_is_told_where_to_go(make_bot: Callable[..., Bot]) -> None:
    bot = make_bot(allowed=("C0OTHER001",))
    status, body = bot.command("run change-thing name=a")
    assert status == 200 and "not enabled in this channel" in body.decode()
    assert "<#C0OTHER001>" in body.decode() and bot.db.runs() == []


def test_a_run_is_read_and_decided_only_in_its_own_channel(bot: Bot) -> None:
    bot.command("run change-thing name=web-1")
    run = bot.run_id()
    for text in (f"status {run}", f"approve {run} change", f"abort {run} wrong place"):
        bot.command(text, user=DAVE, channel=PRIVATE_CHANNEL)
        answer = bot.fake.ephemerals(DAVE)[-1]
        assert f"belongs to <#{CHANNEL}>" in answer["text"] and "web-1" not in answer["text"]
    state = bot.db.load(run)
    assert state.status == "awaiting_approval" and bot.world.get("web-1") is None
    bot.command(f"approve {run} change", user=DAVE)  # in the run's channel
    assert bot.world.get("web-1") == "on"


def test_a_dry_run_plans_every_step_and_says_so_on_the_card(bot: Bot) -> None:
    bot.command("run change-thing name=web-1 --dry-run")
    [run] = bot.db.runs()
    assert run.dry_run and "(dry run)" in texts([bot.card()])[0]
    assert bot.world.effects == []
