"""Authentication through the served WSGI app: what the authenticator refuses is a 401 that never
quotes the token, and what it lets in meets the engine's rules, so the bot's own ServiceAccount and
a requester under an alias cannot approve through the API."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from bot.config import PolicyConfig, settings_from_mapping
from bot.engine.commands import StartRun
from bot.frontends.api import auth as api_auth
from bot.frontends.api.app import api_app
from bot.runtime.facade import Runtime
from tests.fakes.engine_harness import make_engine, runbook

__all__ = ["make_engine"]

STATIC = "rbt_0123456789abcdefghijklmnopqrstuv"
SSO_ALICE = "arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_SRE_0a1b/alice"
USERS = {"alice-kube": SSO_ALICE, "bot-sa": "system:serviceaccount:runbook-bot:runbook-bot",
         "mallory-as-bob": "arn:aws:sts::111122223333:assumed-role/oncall/bob"}
CHANGE = runbook("change-it", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
  approval: {min_approvers: 1}
""", approvals="groups: [sre]\n")


def _review(token: str, audiences: Sequence[str]) -> Mapping[str, Any]:
    if token not in USERS:
        return {"authenticated": False, "error": "invalid bearer token"}
    return {"authenticated": True, "audiences": list(audiences),
            "user": {"username": USERS[token], "groups": ["system:authenticated"]}}


def _auth() -> Any:
    settings = settings_from_mapping({"clusters": {"prod": {}}, "api": {
        "tokens": {"ci": api_auth.hash_token(STATIC)},
        "kubernetes": {"cluster": "prod", "pinned_session_roles": ["AWSReservedSSO_*"]}}}, {})
    return api_auth.build_authenticator(settings, token_reviewer=_review)


ALICE = "k8s:" + api_auth.normalise(SSO_ALICE)
BOT = "system:k8s:serviceaccount:runbook-bot:runbook-bot"
POLICY = PolicyConfig(groups={"sre": ("slack:UALICE", "carol", ALICE, BOT)},
                      aliases={ALICE: "slack:UALICE"})


def call(app: Any, method: str, path: str, token: str | None = None,
         body: Any = None) -> tuple[str, dict[str, Any]]:
    data = b"" if body is None else json.dumps(body).encode()
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "",
               "REMOTE_ADDR": "127.0.0.1", "wsgi.input": io.BytesIO(data),
               "CONTENT_LENGTH": str(len(data)), "CONTENT_TYPE": "application/json",
               "SERVER_NAME": "test", "SERVER_PORT": "80", "wsgi.url_scheme": "http"}
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    seen: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
        seen["status"], seen["headers"] = status, dict(headers)
    out = b"".join(app(environ, start_response))
    answer = json.loads(out) if out else {}
    return seen["status"], {**answer, "_headers": seen["headers"]}


@pytest.fixture
def served(make_engine: Any) -> Any:
    e = make_engine({"change-it": CHANGE}, policy=POLICY)
    runtime = Runtime(e.runner, names=lambda: ["change-it"], history=e.db)
    app = api_app(runtime, _auth(), submit=lambda *a, **k: None)
    return e, runtime, app


def test_bad_credentials_are_401_and_never_echoed(served: Any) -> None:
    _, _, app = served
    for token in (None, "not-a-known-token", "mallory-as-bob", STATIC[:-1] + "x"):
        status, answer = call(app, "GET", "/api/v1/whoami", token)
        assert status.startswith("401"), (token, status)
        assert answer["_headers"].get("WWW-Authenticate", "").startswith("Bearer")
        assert token is None or token not in json.dumps(answer)
    status, answer = call(app, "GET", "/api/v1/whoami", STATIC)
    assert status.startswith("200") and answer["identity"] == "token:ci"


def test_through_the_api_neither_the_bot_nor_the_requester_under_an_alias_approves(
        served: Any) -> None:
    e, runtime, app = served
    run = runtime.start(StartRun(runbook="change-it", params={}, requester="slack:UALICE")).run_id
    runtime.drive(run)
    for token, words in (("bot-sa", "never approves"), ("alice-kube", "cannot approve")):
        status, answer = call(app, "POST", f"/api/v1/runs/{run}/approve", token, {})
        assert status.startswith("409"), (token, status, answer)
        assert words in answer["message"]
    assert e.world.effects == []
    assert e.state(run).steps["change"].status == "awaiting_approval"
