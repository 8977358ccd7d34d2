"""A signed but malformed Slack request (bad JSON, wrong types, missing fields) gets 400 and one
log line, never a 500 with a traceback; nothing is started or decided."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import pytest

from bot.present import blockkit as bk
from tests.fakes.slack_requests import block_actions_payload, slash_command_body
from tests.frontends.slack.conftest import ALICE, Bot


def _view(callback: str, **over: Any) -> dict[str, Any]:
    view = {"id": "V1", "type": "modal", "callback_id": callback, "private_metadata": "{}",
            "state": {"values": {}}}
    view.update(over)
    return {"type": "view_submission", "team": {"id": "T1"}, "user": {"id": ALICE},
            "api_app_id": "A1", "token": "t", "trigger_id": "1.2.3", "view": view}


def _click(**over: Any) -> dict[str, Any]:
    payload = block_actions_payload(user_id=ALICE, action_id=bk.ACTION_APPROVE,
                                    value=json.dumps({"r": "RB-X", "s": "a", "h": "h"}))
    payload.update(over)
    return payload


MALFORMED = {
    "payload that is not JSON": "payload=" + quote("{not json"),
    "payload that is a list": "payload=" + quote("[1, 2]"),
    "view without state": "payload=" + quote(json.dumps(_view(bk.VIEW_RUN, state=None))),
    "view with state values as a list": "payload=" + quote(json.dumps(
        _view(bk.VIEW_RUN, state={"values": [1]}))),
    "run form with metadata that is not JSON": "payload=" + quote(json.dumps(
        _view(bk.VIEW_RUN, private_metadata="{oops"))),
    "run form with metadata that is a list": "payload=" + quote(json.dumps(
        _view(bk.VIEW_RUN, private_metadata="[1]"))),
    "reject form without its reason block": "payload=" + quote(json.dumps(
        _view(bk.VIEW_REJECT, state={"values": {"reason": "text"}}))),
    "reject form with metadata that is not JSON": "payload=" + quote(json.dumps(
        _view(bk.VIEW_REJECT, private_metadata="{oops",
              state={"values": {bk.REASON_BLOCK: {"value": {"type": "plain_text_input",
                                                            "value": "a good long reason"}}}}))),
    "view submission without a user": "payload=" + quote(json.dumps(
        {k: v for k, v in _view(bk.VIEW_RUN).items() if k != "user"})),
    "click with a user that is a string": "payload=" + quote(json.dumps(_click(user="U1"))),
    "click with actions that are not a list": "payload=" + quote(json.dumps(_click(actions={}))),
}


@pytest.mark.parametrize("body", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_signed_malformed_request_gets_400_and_one_log_line(
    bot: Bot, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    status, answer = bot.post(body)
    bot.settle()
    assert status == 400, answer
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged"
    refused = [r for r in caplog.records if "malformed Slack request" in r.getMessage()]
    assert len(refused) == 1 and "\n" not in refused[0].getMessage()
    assert bot.db.runs() == []


def test_a_slash_command_with_a_text_that_is_not_a_string_is_still_a_usage_answer(bot: Bot) -> None:
    status, _ = bot.post(slash_command_body(text="", user_id=ALICE))
    assert status == 200
