"""What an AI agent cannot do through the API (and so through the MCP server), each refused and
recorded: decide anything (even from an approver group), request what policy does not allow,
speak for someone it is not an agent for, flood requests. Against the app with a real runtime over
SQLite and fake actions (no sandbox); the rate limit's clock is injected, nothing sleeps."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest

from bot.config import PolicyConfig, settings_from_mapping
from bot.config_agents import AgentsConfig
from bot.engine.agents import AgentRequest
from bot.engine.ports import ManualClock
from bot.errors import ConfigError
from bot.frontends.api import api_app
from bot.frontends.api.auth import Unauthenticated
from bot.present.blockkit import approval_message, run_card
from bot.present.views import run_view
from bot.runtime.facade import Runtime
from bot.runtime.runner import Runner
from bot.store.db import Database
from tests.fakes.engine_world import FakeCatalog, World, make_registry
from tests.frontends.api.test_api_app import CHANGE, READ, Names

PEOPLE = {"holmes": "token:holmes", "dave": "token:dave", "alice": "token:alice",
          "ci": "token:ci"}
# the agent's identity in the approver group by mistake
POLICY = PolicyConfig(groups={"sre": ("token:dave", "token:holmes", "agent:holmes")})
AGENTS = AgentsConfig(identities={"token:holmes": "holmes"},
                      runbooks={"change-thing": {"name": ("web", "api")}},
                      rate_limit=1.0, rate_burst=3, max_active_runs=2)


@dataclass(frozen=True)
class Caller:
    identity: str
    groups: tuple[str, ...] = ()
    method: str = "token"


class FakeAuth:
    def authenticate(self, headers: Mapping[str, str]) -> Caller:
        token = headers.get("authorization", "").removeprefix("Bearer ")
        if token not in PEOPLE:
            raise Unauthenticated("no valid bearer token")
        return Caller(PEOPLE[token])


class App:
    def __init__(self, tmp: Path) -> None:
        reg = make_registry(World(tmp / "world.json"))
        self.db = Database(f"sqlite:///{tmp / 'state.db'}", audit_key="k")
        self.runner = Runner(store=self.db, catalog=FakeCatalog(reg),
                             runbooks=Names({"change-thing": CHANGE, "read-thing": READ},
                                            catalog=reg),
                             policy=POLICY, clock=ManualClock(), lease_wait=0.0)
        self.runtime = Runtime(self.runner, history=self.db, refusals=self.db.refusals,
                               agents=AGENTS)
        self.now = [0.0]
        self.app = api_app(self.runtime, FakeAuth(), clock=lambda: self.now[0],
                           submit=lambda fn, *a: fn(*a), agents=AGENTS, rate=1000, burst=1000)

    def call(self, method: str, path: str, body: Any = None, *, who: str = "holmes",
             headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": "/api/v1" + path,
                                   "CONTENT_LENGTH": str(len(data)),
                                   "wsgi.input": io.BytesIO(data), "REMOTE_ADDR": "10.0.0.9",
                                   "HTTP_AUTHORIZATION": f"Bearer {who}"}
        setup_testing_defaults(environ)
        environ.update({"HTTP_" + k.upper().replace("-", "_"): v
                        for k, v in (headers or {}).items()})
        seen: dict[str, Any] = {}

        def start_response(status: str, hdrs: list[tuple[str, str]]) -> None:
            seen["status"] = int(status.split()[0])

        body_out = b"".join(self.app(environ, start_response))
        return int(seen["status"]), json.loads(body_out)

    def request(self, *, who: str = "holmes", reason: str = "the web tier is down hard",
                name: str = "web", headers: Mapping[str, str] | None = None
                ) -> tuple[int, Any]:
        return self.call("POST", "/runs", {"runbook": "change-thing", "params": {"name": name},
                                           "reason": reason}, who=who, headers=headers)

    def refused(self) -> list[tuple[str, str]]:
        return [(r.actor, r.reason) for r in self.db.refusals.rows()]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    a = App(tmp_path)
    yield a
    a.app.close()
    a.db.close()


def test_an_agent_never_decides_even_from_an_approver_group(app: App) -> None:
    status, doc = app.request()
    assert status == 201, doc
    run_id = doc["run"]["run_id"]
    assert status == 201 and doc["run"]["requester"] == "agent:holmes"
    for verb, body in (("approve", {}), ("reject", {"reason": "not needed after all"}),
                       ("break-glass", {"reason": "override it, trust me"}), ("confirm", {})):
        app.now[0] += 1.0  # within the agent's rate: what refuses is the rule, not the flood
        status, doc = app.call("POST", f"/runs/{run_id}/{verb}", body)
        assert status == 403 and "AI agent" in doc["message"], (verb, doc)
    assert sum(a == "agent:holmes" and "AI agent" in w for a, w in app.refused()) == 4
    assert app.runner.store.load(run_id).status == "awaiting_approval"
    # a person takes the agent's run over (the agent owned it), never handing it to an agent
    status, doc = app.call("POST", f"/runs/{run_id}/handover",
                           {"to": "agent:other", "reason": "let the other agent own it"},
                           who="alice")
    assert status == 409 and "AI agent, not a person" in doc["message"]
    status, doc = app.call("POST", f"/runs/{run_id}/handover",
                           {"to": "token:alice", "reason": "I lead this incident now"}, who="alice")
    assert status == 200 and app.runner.store.load(run_id).current_owner == "token:alice"
    # a person in the group approves it
    status, doc = app.call("POST", f"/runs/{run_id}/approve", {}, who="dave")
    assert status == 200 and app.runner.store.load(run_id).status == "succeeded"


def test_an_agent_requests_only_what_policy_allows(app: App) -> None:
    status, doc = app.request(name="db")
    assert status == 403 and "only to one of web, api" in doc["message"]
    status, doc = app.request(reason="")
    assert status == 400 and "reason" in doc["message"]
    app.now[0] += 5.0
    status, doc = app.call("POST", "/runs", {"runbook": "read-thing", "params": {},
                                             "reason": "to see how it is"})
    assert status == 201  # read-only: allowed
    status, doc = app.call("POST", "/runs", {"runbook": "change-thing",
                                             "params": {"name": "db"}, "dry_run": True})
    assert status == 201 and doc["run"]["dry_run"]  # a dry run changes nothing
    assert any(a == "agent:holmes" and "web, api" in w for a, w in app.refused())


def test_on_behalf_of_grants_nothing_and_is_for_agents_only(app: App) -> None:
    status, doc = app.request(headers={"X-On-Behalf-Of": "token:dave"})
    run_id = doc["run"]["run_id"]
    assert status == 201 and app.runner.store.load(run_id).origin["on_behalf_of"] == "token:dave"
    status, doc = app.call("POST", f"/runs/{run_id}/approve", {}, who="dave")
    assert status == 409 and "behalf" in doc["message"]  # dave is now a requester
    status, doc = app.request(who="ci", headers={"X-On-Behalf-Of": "token:dave"})
    assert status == 400 and "for agents" in doc["message"]
    status, doc = app.request(headers={"X-On-Behalf-Of": "agent:other"})
    assert status == 400


def test_a_flood_of_requests_is_refused_with_a_clear_error_and_recorded_once(app: App) -> None:
    answers = [app.request(headers={"X-Runbook-Bot-Agent": "mcp"})[0] for _ in range(8)]
    # two runs (max_active_runs), then the cap, then past the burst of three the rate
    assert answers[:3] == [201, 201, 403] and set(answers[3:]) == {429}
    status, doc = app.request()
    assert status == 429 and "faster than agents may" in doc["message"] and "not queued" in doc["message"]
    floods = [w for a, w in app.refused() if a == "agent:holmes" and "faster" in w]
    assert len(floods) == 1  # recorded at most once a second, however long the flood
    app.now[0] += 1.0
    app.request()
    floods = [w for a, w in app.refused() if a == "agent:holmes" and "faster" in w]
    assert len(floods) == 1  # its token came back: refused by the cap this time, not the rate
    assert any("max_active_runs" in w for _, w in app.refused())


def test_the_slack_card_names_the_agent_and_whom_it_acts_for_inertly() -> None:
    from datetime import UTC, datetime

    from bot.engine.runstate import RunState

    origin = {"frontend": "api", **AgentRequest(
        agent="holmes", runs_as="token:holmes", on_behalf_of="slack:U0ALICE",
        reason="node dead ‹!here›, see hxxps[://]x", evidence="*bold* `code`").origin()}
    state = RunState(run_id="rb-abcde", runbook="change-thing", runbook_text=CHANGE,
                     runbook_file="change-thing.yaml", title="Change", params={},
                     requester="agent:holmes", created_at=datetime.now(UTC).isoformat(),
                     origin=origin)
    text = json.dumps(run_card(run_view(state)))
    assert "requested by agent *holmes* (on behalf of slack:U0ALICE): node dead" in text
    assert "<@" not in text and "<!" not in text
    view = run_view(state)
    assert view.agent_request is not None and view.agent_request.agent == "holmes"
    # the terminal's status says the same, in plain words on one line
    from bot.present.console import status as terminal_status
    said = terminal_status(view)
    assert "  requested by agent holmes (on behalf of slack:U0ALICE): node dead" in said


def test_the_approval_request_names_the_agent_and_marks_its_evidence(app: App) -> None:
    status, doc = app.call("POST", "/runs", {
        "runbook": "change-thing", "params": {"name": "web"},
        "reason": "the web tier is down hard", "evidence": "*5xx* rate 40% <!channel>"},
        headers={"X-On-Behalf-Of": "token:alice"})
    assert status == 201, doc
    state = app.runner.store.load(doc["run"]["run_id"])
    view = run_view(state)
    step = next(s for s in view.steps if s.status == "awaiting_approval")
    blocks = approval_message(view, step, destructive=True, now=None)
    text = json.dumps(blocks)
    assert "requested by agent *holmes* (on behalf of token:alice): the web tier is down" in text
    assert "Evidence from agent holmes" in text and "not checked by the bot" in text
    assert "<!channel>" not in text and "*5xx*" not in text  # inert: no mention, no bold
    assert any(b.get("type") == "actions" for b in blocks)  # the buttons, for people to click


def test_the_agents_section_is_checked() -> None:
    s = settings_from_mapping({"agents": {"identities": {"token:holmes": "holmes"},
                                          "runbooks": {"node-dead-ngns": {"node": "triage"}}}},
                              {})
    assert s.agents.runbooks["node-dead-ngns"]["node"] == "triage"
    with pytest.raises(ConfigError):
        settings_from_mapping({"agents": {"runbooks": {"x": {"node": "anything"}}}}, {})
    with pytest.raises(ConfigError):
        settings_from_mapping({"agents": {"identities": {"token:a": "Not A Name"}}}, {})
