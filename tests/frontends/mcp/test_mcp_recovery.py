"""An AI agent recovers a dead node through the MCP server, and a person approves it.

The bot (the API and the MCP server on the sandbox, holding the cluster and EC2 credentials and
the database) serves MCP's streamable HTTP transport on an ephemeral port; the agent ``holmes``
talks to it with the SDK's own client, and a second agent process (``mcp serve --stdio``, the one
subprocess) talks to the bot's API with only holmes's token and the server's URL: no database,
no cloud credential. Bob approves from his terminal (the CLI, as a client of the API). Holmes's
identity was put in the approver group by mistake: it still cannot approve.

Time is the sandbox's: between the decisions the test lets the simulated minutes pass.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto", reason="the recovery needs the sandbox: pip install runbook-bot[sim]")
pytest.importorskip("mcp", reason="the MCP server needs the mcp extra: pip install runbook-bot[mcp]")

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bot.actions.env import ClusterClients
from bot.cli import main as cli
from bot.cli.wiring import scanner
from bot.clients.ec2 import Ec2Client
from bot.clients.kube import KubeClient
from bot.config_agents import AgentsConfig
from bot.config_api import ApiConfig
from bot.engine import commands as c
from bot.frontends.api.agents import triage_from
from bot.frontends.api.app import api_app, api_listener
from bot.frontends.api.auth import build_authenticator, hash_token
from bot.frontends.api.records import StoreAudit, store_exporter
from bot.frontends.mcp.server import MCP_PATH, http_app, mcp_listener
from bot.runtime.facade import Runtime
from bot.sim.rehearsal import CLUSTER, GROUP, Rehearsal
from bot.sim.sandbox import BOT_CONTEXT
from bot.store.audit import Keyring

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
TOKENS = {"holmes": "holmes-token-0123456789", "bob": "bob-token-0123456789",
          "alice": "alice-token-0123456789"}
AGENTS = AgentsConfig(identities={"token:holmes": "holmes"},
                      runbooks={"node-dead-ngns": {"node": "triage", "cluster": "any"}},
                      max_active_runs=1)


@dataclass
class Bot:
    r: Rehearsal
    api_url: str
    mcp_url: str
    tmp: Path


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[Bot]:
    # the agent's identities in the approver group by mistake: they still never approve
    r = Rehearsal("node-dead", workdir=tmp_path / "bot", policy={
        "groups": {GROUP: ("token:bob", "token:alice", "token:holmes", "agent:holmes")},
        "allow_impersonation": False})
    with r:
        sb = r.sandbox
        settings = replace(r.settings, api=ApiConfig(tokens={
            n: hash_token(t) for n, t in TOKENS.items()}), agents=AGENTS)
        clients = ClusterClients.of(
            kube=KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT,
                                        pool=sb.kube_transport()),
            ec2=Ec2Client(client=sb.ec2_client(as_bot=True)))
        scan = scanner(settings, clients_factory=lambda _cfg: clients, clock=r.clock)
        runtime = Runtime(r.runner, history=r.store, refusals=r.store.refusals, agents=AGENTS,
                          triage=triage_from(scan))
        app = api_app(runtime, build_authenticator(settings), exporter=store_exporter(r.store),
                      audit=StoreAudit(r.store, Keyring(b"rehearsal", ())), diagnoser=scan,
                      submit=lambda fn, *a: fn(*a), agents=AGENTS)
        api = api_listener(app, host="127.0.0.1", port=0)
        api.start()
        mcp = mcp_listener(http_app(app, host="127.0.0.1"), host="127.0.0.1", port=0)
        mcp.start()
        try:
            yield Bot(r, f"http://127.0.0.1:{api.effective_port}",
                      f"http://127.0.0.1:{mcp.effective_port}{MCP_PATH}", tmp_path)
        finally:
            mcp.stop()
            api.stop()


def _let_time_pass(r: Rehearsal, run_id: str) -> Any:
    """Carry the run through its waits until it needs a person or ends, as a worker would."""
    for _ in range(200):
        state = r.runner.drive(run_id)
        if state.status not in ("running", "waiting") or not state.next_check_at:
            return state
        due = datetime.fromisoformat(state.next_check_at)
        r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))
    raise AssertionError(f"run {run_id} kept waiting")


def _bob(bot: Bot, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """``runbook-bot ARGV`` at Bob's terminal: a client of the API with his token."""
    config = bot.tmp / "bob.yaml"
    config.write_text(f"server:\n  url: {bot.api_url}\n  token: env:BOB_TOKEN\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.setenv("BOB_TOKEN", TOKENS["bob"])
    return cli([*argv, "--no-follow"])


def _stdio(bot: Bot) -> StdioServerParameters:
    """The agent host's process: holmes's token and the API's URL, nothing else."""
    config = bot.tmp / "agent.yaml"
    config.write_text(f"server:\n  url: {bot.api_url}\n  token: env:HOLMES_TOKEN\n")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(bot.tmp), "PYTHONPATH": str(ROOT),
           "RUNBOOK_BOT_CONFIG": str(config), "HOLMES_TOKEN": TOKENS["holmes"]}
    assert not any(k.startswith(("AWS_", "RUNBOOK_BOT_DATABASE")) or k == "KUBECONFIG"
                   for k in env)
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "bot", "mcp", "serve", "--stdio"], env=env,
                                 cwd=str(bot.tmp))


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def _refusal(result: Any) -> str:
    assert result.is_error, result.content
    return str(result.content[0].text)


def test_an_agent_requests_a_recovery_over_mcp_and_only_a_person_approves_it(
        bot: Bot, monkeypatch: pytest.MonkeyPatch) -> None:
    asyncio.run(_scenario(bot, monkeypatch))


async def _scenario(bot: Bot, monkeypatch: pytest.MonkeyPatch) -> None:
    r, sb, f = bot.r, bot.r.sandbox, bot.r.facts
    dead = f["node"]
    zone = "topology.kubernetes.io/zone"
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][zone] for n in sb.list("Node")}
    sick = next(n for n, z in zone_of.items() if z != zone_of[dead])  # not the pod's zone
    sb.sicken_kubelet(sick, "cni")  # NotReady, its kubelet alive: never a node to fence
    params = {"cluster": CLUSTER, "node": dead}
    headers = {"Authorization": f"Bearer {TOKENS['holmes']}", "X-On-Behalf-Of": "token:alice"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(bot.mcp_url, http_client=http)) as over_http, \
            Client(_stdio(bot)) as over_stdio:
        for client in (over_http, over_stdio):
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"list_runbooks", "diagnose", "dry_run", "request_run",
                                  "run_status", "follow_run", "transcript"}
            assert tools["request_run"].annotations.destructive_hint is True
            assert tools["diagnose"].annotations.read_only_hint is True
            assert {"runbook", "params", "reason", "evidence"} <= set(
                tools["request_run"].input_schema["properties"])
        listed = _data(await over_stdio.call_tool("list_runbooks", {}))
        ngns = next(b for b in listed["runbooks"] if b["name"] == "node-dead-ngns")
        assert "node" in ngns["params_schema"]["properties"] and ngns["changes_things"]
        assert any(s["needs_approval"] and s["why"] for s in ngns["steps"])
        for client in (over_http, over_stdio):
            found = _data(await client.call_tool("diagnose", {"cluster": CLUSTER}))
            suggested = [x["params"]["node"] for x in found["findings"]
                         if x["runbook"] == "node-dead-ngns"]
            assert suggested == [dead], found
        # attacks, each refused with a sentence (and audited: below)
        why = _refusal(await over_http.call_tool("request_run", {
            "runbook": "node-dead-ngns", "params": {**params, "node": sick},
            "reason": "the node looks dead to me, fence it"}))
        assert "triage does not suggest" in why
        why = _refusal(await over_stdio.call_tool("request_run", {
            "runbook": "node-recovered", "params": params,
            "reason": "untaint it, it is fine now"}))
        assert "agents may not request node-recovered" in why
        # the request itself, over streamable HTTP, its reason full of mentions and links
        run = _data(await over_http.call_tool("request_run", {
            "runbook": "node-dead-ngns", "params": params,
            "reason": "node is dead <!here> @channel see https://evil.example/x <@U0BOSS>",
            "evidence": "Lease stale 10m; instance stopped; www.evil.example"}))["run"]
        run_id = run["run_id"]
        assert run["status"] == "awaiting_approval" and run["requester"] == "agent:holmes"
        status = _data(await over_stdio.call_tool("run_status", {"run_id": run_id}))
        assert status["run"]["waiting_on"]
        # a second request while the first is not finished: the cap refuses it
        why = _refusal(await over_stdio.call_tool("request_run", {
            "runbook": "node-dead-ngns", "params": params, "reason": "again, just in case"}))
        assert "max_active_runs" in why

        state = r.store.load(run_id)
        origin = state.origin
        assert origin["agent"] == "holmes" and origin["runs_as"] == "token:holmes"
        assert origin["on_behalf_of"] == "token:alice"
        for smuggled in ("<!here>", "<@U0BOSS>", "https://", "@channel", "www.evil"):
            assert smuggled not in origin["reason"] + origin["evidence"], origin
        assert origin["neutralised"] == ["reason", "evidence"]  # recorded as altered
        # the agent's identity is in the approver group, yet the engine never counts it; alice,
        # on whose behalf it asked, cannot approve either; bob, at his terminal, can
        step = next(s for s in state.steps.values() if s.status == "awaiting_approval")
        for who, said in (("agent:holmes", "AI agent"), ("token:alice", "behalf")):
            outcome = Runtime(r.runner).decide(c.Approve(run_id=run_id, actor=who,
                                                         step=step.key))
            assert not outcome.ok and said in outcome.message, outcome
        decided = 0
        while state.status == "awaiting_approval":
            step = next(s for s in state.steps.values() if s.status == "awaiting_approval")
            verb = "confirm" if step.needs_confirmation and not step.needs_approval else "approve"
            assert _bob(bot, monkeypatch, verb, run_id, step.key) == 0
            decided += 1
            state = _let_time_pass(r, run_id)
        assert state.status == "succeeded" and decided >= 1, state.outcome

        follow = _data(await over_stdio.call_tool("follow_run", {"run_id": run_id}))
        assert follow["finished"] and follow["status"] == "succeeded"
        doc = await over_stdio.read_resource(f"transcript://{run_id}")
        transcript = str(doc.contents[0].text)
    assert "agent:holmes" in transcript and "token:bob" in transcript
    events = r.store.events(run_id)
    assert next(e for e in events if e.type == "run.created").actor == "agent:holmes"
    assert {e.actor for e in events if e.type == "approval.granted"} == {"token:bob"}
    assert {e.actor for e in events if e.type == "command.refused"} >= {"agent:holmes",
                                                                          "token:alice"}
    refused = [(x.actor, x.reason) for x in r.store.refusals.rows()]
    assert any(a == "agent:holmes" and "triage" in w for a, w in refused), refused
    assert any(a == "agent:holmes" and "node-recovered" in w for a, w in refused)
    assert any(a == "agent:holmes" and "max_active_runs" in w for a, w in refused)
