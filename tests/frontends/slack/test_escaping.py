"""Mentions, links and formatting typed by people never render in Slack: params, reasons and error
texts are escaped in every field Slack draws, ``text`` fallbacks included, over the real path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.frontends.slack.conftest import ALICE, BOB, Bot

HOSTILE_VALUE = "<!channel> *loud* `code` ~gone~"
HOSTILE_REASON = "not now <@U0EVIL0001> see <http://evil.example|the docs> *urgent*"
RAW = ("<!channel>", "<@U0EVIL0001>", "<http://evil.example", "*loud*", "`code`", "*urgent*",
       "~gone~", "<!here>")


NOT_DRAWN = ("value", "private_metadata", "initial_value", "action_id", "block_id", "callback_id",
             "url")


def _strings(value: Any) -> Iterator[str]:
    """Strings Slack draws as mrkdwn; plain_text is drawn literally, data is not drawn at all."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        if value.get("type") in ("plain_text", "plain_text_input"):
            return
        for k, v in value.items():
            if k not in NOT_DRAWN:
                yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _rendered(bot: Bot) -> list[str]:
    """Every string the bot sent Slack to draw: messages, edits, ephemerals, answers, modals."""
    out: list[str] = []
    for call in bot.fake.calls():
        if call.method in ("chat.postMessage", "chat.update", "chat.postEphemeral", "response_url",
                           "views.open", "views.update", "files.uploadV2",
                           "files.completeUploadExternal"):
            out += [s for key, v in call.params.items() if key not in ("channel", "ts", "thread_ts",
                                                                        "trigger_id", "view_id")
                    for s in _strings(v)]
    return out


def test_hostile_params_and_reasons_are_inert_in_every_field_slack_renders(bot: Bot) -> None:
    bot.command(f'run change-thing name=thing "value={HOSTILE_VALUE}"')
    run = bot.run_id()
    bot.command(f"reject {run} {HOSTILE_REASON}", user=BOB)
    bot.command(f"status {run}")
    state = bot.db.load(run)
    assert state.params["value"] == HOSTILE_VALUE  # stored as typed, escaped when drawn
    assert state.status == "failed"
    rendered = _rendered(bot)
    assert any("loud" in s for s in rendered) and any("urgent" in s for s in rendered)
    leaks = [(raw, s) for s in rendered for raw in RAW if raw in s]
    assert not leaks, leaks[:5]


def test_an_error_that_quotes_what_was_typed_is_escaped(bot: Bot) -> None:
    acks = [bot.command(typed)[1] for typed in (
        "run change-thing <!channel>=1", "run change-thing name=*loud*", "run no-such-<!here>",
        "status RB-<!channel>", "approve RB-<!here>", "frobnicate <!channel>")]
    bodies = [json.loads(a) for a in acks if a.startswith(b"{")]
    told = ([s for m in bot.fake.ephemerals(ALICE) for s in _strings(m)] + _rendered(bot)
            + [s for b in bodies for s in _strings(b)])
    assert told, "the person was told nothing"
    leaks = [(raw, s) for s in told for raw in RAW if raw in s]
    assert not leaks, leaks[:5]


def test_a_token_typed_as_a_param_is_not_echoed_back_into_slack(bot: Bot) -> None:
    token = "xoxb-1234567890-0987654321-AbCdEfGhIjKl"
    bot.command(f"run change-thing name={token}")  # not a valid name: the form or an answer says so
    bot.command(f"run change-thing name=thing value={token}")
    sent = [s for c in bot.fake.calls() for s in _everything(c.params)]
    assert sent and not [s for s in sent if token in s]
    assert token not in json.dumps(bot.db.load(bot.run_id()).params)


def _everything(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _everything(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _everything(v)
