"""Requests built here are signed like Slack's and parse in bolt the way Slack's do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from slack_bolt import App, BoltRequest
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from tests.fakes.slack_api import BOT_TOKEN, CHANNEL, FakeSlack
from tests.fakes.slack_requests import (
    SIGNING_SECRET,
    block_actions_payload,
    interaction_body,
    signature,
    signed,
    slash_command_body,
    view_submission_payload,
)

# Slack's published example (docs.slack.dev, "Verifying requests from Slack").
DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
DOC_TIMESTAMP = 1531420618
DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


def doc_body() -> str:
    return slash_command_body(
        token="xyzz0WbapA4vBCDEFasx0q6G", team_id="T1DC2JH3J", team_domain="testteamnow",
        channel_id="G8PSS9T3V", channel_name="foobar", user_id="U2CERLKJA", user_name="roadrunner",
        command="/webhook-collect", text="",
        response_url="https://hooks.slack.com/commands/T1DC2JH3J/397700885554/96rGlfmibIGlgcZRskXaIFfN",
        trigger_id="398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c", api_app_id=None)


class FixedClock:
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def test_the_slash_command_body_and_signature_reproduce_slacks_published_vector() -> None:
    assert signature(doc_body(), secret=DOC_SECRET, timestamp=DOC_TIMESTAMP) == DOC_SIGNATURE
    request = signed(doc_body(), secret=DOC_SECRET, timestamp=DOC_TIMESTAMP)
    assert request.headers["X-Slack-Signature"] == DOC_SIGNATURE


def test_slacks_verifier_accepts_the_vector_within_five_minutes_and_refuses_it_after() -> None:
    body = doc_body()
    fresh = SignatureVerifier(DOC_SECRET, clock=FixedClock(DOC_TIMESTAMP + 300))
    stale = SignatureVerifier(DOC_SECRET, clock=FixedClock(DOC_TIMESTAMP + 301))
    assert fresh.is_valid(body, str(DOC_TIMESTAMP), DOC_SIGNATURE)
    assert not stale.is_valid(body, str(DOC_TIMESTAMP), DOC_SIGNATURE)
    assert not fresh.is_valid(body + "&x=1", str(DOC_TIMESTAMP), DOC_SIGNATURE)


def test_retry_headers_are_added_only_for_a_retry() -> None:
    assert "X-Slack-Retry-Num" not in signed("a=1").headers
    retry = signed("a=1", retry_num=1, retry_reason="http_timeout").headers
    assert (retry["X-Slack-Retry-Num"], retry["X-Slack-Retry-Reason"]) == ("1", "http_timeout")


@pytest.fixture
def app() -> Iterator[tuple[App, FakeSlack, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    with FakeSlack() as fake:
        bolt = App(client=WebClient(token=BOT_TOKEN, base_url=fake.base_url),
                   signing_secret=SIGNING_SECRET, token_verification_enabled=False)

        @bolt.command("/runbook")
        def on_command(ack: Any, command: dict[str, Any]) -> None:
            ack()
            seen.append(command)

        @bolt.action("approve")
        def on_click(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            ack()
            seen.append({"body": body, "action": action})

        @bolt.view("run-params")
        def on_submit(ack: Any, view: dict[str, Any]) -> None:
            ack()
            seen.append(view)

        yield bolt, fake, seen


def dispatch(bolt: App, body: str, **kwargs: Any) -> int:
    request = signed(body, **kwargs)
    return bolt.dispatch(BoltRequest(body=request.body.decode(), headers=dict(request.headers))).status


def test_bolt_routes_a_signed_slash_command_to_its_listener(app: Any) -> None:
    bolt, _, seen = app
    assert dispatch(bolt, slash_command_body(text="run node-dead-ngns node=ip-10-0-1-2",
                                             user_id="U0ALICE001")) == 200
    assert seen[0]["text"] == "run node-dead-ngns node=ip-10-0-1-2" and seen[0]["user_id"] == "U0ALICE001"


def test_bolt_refuses_a_forged_or_stale_signature_with_401(app: Any) -> None:
    bolt, _, seen = app
    body = slash_command_body(text="list", user_id="U0ALICE001")
    assert dispatch(bolt, body, secret="not-the-secret") == 401
    assert dispatch(bolt, body, timestamp=int(time.time()) - 301) == 401
    assert seen == []


def test_bolt_routes_a_button_click_on_a_message_the_fake_stored(app: Any) -> None:
    bolt, fake, seen = app
    posted = WebClient(token=BOT_TOKEN, base_url=fake.base_url).chat_postMessage(
        channel=CHANNEL, text="approve?")
    payload = block_actions_payload(user_id="U0BOB00001", action_id="approve", value="run-1:step-2",
                                    message=fake.message(CHANNEL, posted["ts"]))
    assert dispatch(bolt, interaction_body(payload)) == 200
    assert seen[0]["action"]["value"] == "run-1:step-2"
    assert seen[0]["body"]["container"]["message_ts"] == posted["ts"]
    assert seen[0]["body"]["user"]["id"] == "U0BOB00001"


def test_bolt_routes_a_modal_submission_with_the_typed_values(app: Any) -> None:
    bolt, fake, seen = app
    view = {"type": "modal", "callback_id": "run-params", "title": {"type": "plain_text", "text": "Run"},
            "blocks": [{"type": "input", "block_id": "node",
                        "label": {"type": "plain_text", "text": "Node"},
                        "element": {"type": "plain_text_input", "action_id": "value"}}]}
    opened = WebClient(token=BOT_TOKEN, base_url=fake.base_url).views_open(
        trigger_id=fake.new_trigger_id(), view=view)["view"]
    payload = view_submission_payload(user_id="U0ALICE001", view=opened,
                                      values={"node": {"value": "ip-10-0-1-2"}})
    assert dispatch(bolt, interaction_body(payload)) == 200
    assert seen[0]["state"]["values"]["node"]["value"]["value"] == "ip-10-0-1-2"
    assert seen[0]["id"] == opened["id"]
