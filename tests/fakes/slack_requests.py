"""Builders for what Slack sends the app: signed slash commands, button clicks, modal submissions.

Tests drive the running app over HTTP with the bytes Slack would send, so bolt's own signature
check, body parsing and routing run as in production. Shapes follow Slack's documentation
(docs.slack.dev: slash commands, ``block_actions`` and ``view_submission`` interaction payloads,
verifying requests from Slack). Slash commands are a form body; interactions are a form body with
one ``payload`` field holding JSON. Retries carry ``X-Slack-Retry-Num`` / ``X-Slack-Retry-Reason``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from slack_sdk.signature import SignatureVerifier

from tests.fakes.slack_api import APP_ID, CHANNEL, TEAM_ID

SIGNING_SECRET = "fake-signing-secret-0123456789ab"
TEAM_DOMAIN = "fake-workspace"
VERIFICATION_TOKEN = "fake-verification-token"  # deprecated by Slack, still sent in payloads


@dataclass(frozen=True)
class SignedRequest:
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


def signature(body: str | bytes, *, secret: str, timestamp: int | str) -> str:
    """``v0=`` + hex HMAC-SHA256 of ``v0:{timestamp}:{body}``, computed by slack_sdk itself."""
    value = SignatureVerifier(secret).generate_signature(timestamp=str(timestamp), body=body)
    assert value is not None
    return value


def signed(
    body: str | bytes,
    *,
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    content_type: str = "application/x-www-form-urlencoded",
    retry_num: int | None = None,
    retry_reason: str | None = None,
) -> SignedRequest:
    """Sign a body as Slack does; ``timestamp`` defaults to now (bolt checks it on the wall clock)."""
    raw = body.encode() if isinstance(body, str) else body
    ts = int(time.time()) if timestamp is None else timestamp
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": str(ts),
        "X-Slack-Signature": signature(raw, secret=secret, timestamp=ts),
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
    return SignedRequest(raw, headers)


def slash_command_body(
    *,
    text: str,
    user_id: str,
    user_name: str = "someone",
    command: str = "/runbook",
    channel_id: str = CHANNEL,
    channel_name: str = "ops",
    team_id: str = TEAM_ID,
    team_domain: str = TEAM_DOMAIN,
    trigger_id: str = "1.2.3",
    response_url: str = "https://hooks.slack.com/commands/T0FAKE0001/1/fake",
    token: str = VERIFICATION_TOKEN,
    api_app_id: str | None = APP_ID,
) -> str:
    """The form body of a slash command, fields in the order Slack sends them."""
    fields = [("token", token), ("team_id", team_id), ("team_domain", team_domain),
              ("channel_id", channel_id), ("channel_name", channel_name), ("user_id", user_id),
              ("user_name", user_name), ("command", command), ("text", text),
              ("response_url", response_url), ("trigger_id", trigger_id)]
    if api_app_id is not None:
        fields += [("api_app_id", api_app_id), ("is_enterprise_install", "false")]
    return urlencode(fields)


def interaction_body(payload: Mapping[str, Any]) -> str:
    """Interactions arrive as ``payload=<url-encoded JSON>``."""
    return "payload=" + quote(json.dumps(payload))


def _user(user_id: str, user_name: str) -> dict[str, Any]:
    return {"id": user_id, "username": user_name, "name": user_name, "team_id": TEAM_ID}


def _team() -> dict[str, Any]:
    return {"id": TEAM_ID, "domain": TEAM_DOMAIN}


def block_actions_payload(
    *,
    user_id: str,
    action_id: str,
    value: str | None = None,
    block_id: str = "actions",
    message: Mapping[str, Any] | None = None,
    channel_id: str = CHANNEL,
    user_name: str = "someone",
    trigger_id: str = "1.2.3",
    action_ts: str | None = None,
    button_text: str = "Approve",
    response_url: str = f"https://hooks.slack.com/actions/{TEAM_ID}/1/fake",
) -> dict[str, Any]:
    """A button click on a message (pass the message as stored by the fake, for its ts and blocks)."""
    message = dict(message or {"type": "message", "ts": "1.000001", "text": ""})
    action: dict[str, Any] = {
        "type": "button", "action_id": action_id, "block_id": block_id,
        "text": {"type": "plain_text", "text": button_text, "emoji": True},
        "action_ts": action_ts or f"{time.time():.6f}",
    }
    if value is not None:
        action["value"] = value
    return {
        "type": "block_actions",
        "user": _user(user_id, user_name),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel_id,
                      "is_ephemeral": False},
        "trigger_id": trigger_id,
        "team": _team(),
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel_id, "name": "ops"},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [action],
    }


def view_submission_payload(
    *,
    user_id: str,
    view: Mapping[str, Any],
    values: Mapping[str, Mapping[str, Any]] | None = None,
    user_name: str = "someone",
    trigger_id: str = "1.2.3",
) -> dict[str, Any]:
    """A modal submission; ``values`` is block_id -> action_id -> text typed (or a full state value).

    ``view`` is the view as opened (``fake.views()[i]`` or the views.open response); its state
    is filled the way Slack fills ``view.state.values`` for plain_text_input elements.
    """
    state: dict[str, dict[str, Any]] = {}
    for block_id, actions in (values or {}).items():
        state[block_id] = {
            action_id: v if isinstance(v, Mapping) else {"type": "plain_text_input", "value": v}
            for action_id, v in actions.items()
        }
    submitted = {k: v for k, v in view.items() if k != "user"}
    submitted["state"] = {"values": state}
    return {
        "type": "view_submission",
        "team": _team(),
        "user": _user(user_id, user_name),
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id,
        "view": submitted,
        "response_urls": [],
        "is_enterprise_install": False,
    }


def send(url: str, request: SignedRequest, *, timeout: float = 10.0) -> tuple[int, bytes]:
    """POST a signed request into the running app; returns (HTTP status, body), errors included."""
    req = urllib.request.Request(url, data=request.body, headers=dict(request.headers), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()
