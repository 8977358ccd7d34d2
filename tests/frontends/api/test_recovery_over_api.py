"""A whole node-dead-ngns recovery driven from the terminal as two people, over the API.

The bot (the API on the sandbox, holding the cluster and EC2 credentials and the database) is
served on an ephemeral port. Alice and Bob are people of the sandbox's cluster whose kubeconfig
tokens RBAC lets only read (the ``runbook-bot-operators`` group of deploy/rbac.yaml); the
terminal runs as a separate process with none of the bot's powers: no AWS credentials, no
database URL, only a kubeconfig whose token it sends to the API. The API learns who they are
from a ``TokenReview`` against the sandbox's API server, and the audit names them so.

Time is the sandbox's: between the people's commands the test lets the simulated minutes pass
(as a worker would carry the run through its waits).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bot.clients.kube import KubeClient
from bot.config_api import ApiConfig, KubernetesAuthConfig
from bot.errors import ExternalError
from bot.frontends.api.app import api_app, api_listener
from bot.frontends.api.auth import build_authenticator
from bot.frontends.api.records import StoreAudit, store_exporter
from bot.runtime.facade import Runtime
from bot.sim.authz import ADMIN_TOKEN
from bot.sim.rehearsal import CLUSTER, GROUP, Rehearsal
from bot.sim.sandbox import BOT_CONTEXT
from bot.store.audit import Keyring

pytest.importorskip("moto", reason="the recovery needs the sandbox: pip install runbook-bot[sim]")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
PEOPLE = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}
TERMINAL = ("k8s:alice", "k8s:bob")  # who TokenReview says they are, as the API names them


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[tuple[Rehearsal, str, Path]]:
    r = Rehearsal("node-dead", workdir=tmp_path / "bot",
                  policy={"groups": {GROUP: TERMINAL}, "allow_impersonation": False})
    with r:
        sb = r.sandbox
        for name, token in PEOPLE.items():  # EKS access entries mapping them to the read-only group
            sb.api.authorizer.add_user(token, name, ("runbook-bot-operators",))
        settings = replace(r.settings, api=ApiConfig(kubernetes=KubernetesAuthConfig(
            cluster=CLUSTER, audiences=())))  # an `aws eks get-token` token has no audience of ours
        reviewer = KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT,
                                          pool=sb.kube_transport())
        runtime = Runtime(r.runner, history=r.store, refusals=r.store.refusals)
        app = api_app(runtime, build_authenticator(settings, token_reviewer=reviewer.create_token_review),
                      exporter=store_exporter(r.store),
                      audit=StoreAudit(r.store, Keyring(b"rehearsal", ())),
                      submit=lambda fn, *a: fn(*a))  # a decision drives the run up to its next wait
        server = api_listener(app, host="127.0.0.1", port=0)
        server.start()
        kubeconfig = _people_kubeconfig(tmp_path, sb)
        try:
            yield r, f"http://127.0.0.1:{server.effective_port}", kubeconfig
        finally:
            server.stop()


def _people_kubeconfig(tmp: Path, sb: Any) -> Path:
    doc = json.loads(sb.kubeconfig_path.read_text())
    doc["users"] = [{"name": n, "user": {"token": t}} for n, t in PEOPLE.items()]
    doc["contexts"] = [{"name": n, "context": {"cluster": "sandbox", "user": n}} for n in PEOPLE]
    doc["current-context"] = "alice"
    path = tmp / "people-kubeconfig"
    path.write_text(json.dumps(doc))
    assert ADMIN_TOKEN not in path.read_text()
    return path


def _terminal(tmp: Path, url: str, kubeconfig: Path, who: str, *argv: str) -> tuple[int, str]:
    """``runbook-bot ARGV`` as ``who`` at their own terminal: a process holding none of the
    bot's credentials."""
    config = tmp / f"{who}.yaml"
    config.write_text(f"server:\n  url: {url}\n  kubeconfig: {kubeconfig}\n  context: {who}\n")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp), "PYTHONPATH": str(ROOT),
           "RUNBOOK_BOT_CONFIG": str(config)}
    assert not any(k.startswith(("AWS_", "RUNBOOK_BOT_DATABASE")) or k == "KUBECONFIG" for k in env)
    done = subprocess.run([sys.executable, "-m", "bot", *argv], cwd=tmp, env=env, text=True,
                          capture_output=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def _let_time_pass(r: Rehearsal, run_id: str) -> Any:
    """Carry the run through its waits until it needs a person or ends, as a worker would."""
    for _ in range(200):
        state = r.runner.drive(run_id)
        if state.status not in ("running", "waiting") or not state.next_check_at:
            return state
        due = datetime.fromisoformat(state.next_check_at)
        r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))
    raise AssertionError(f"run {run_id} kept waiting")


def test_two_people_recover_a_dead_node_from_their_terminals_through_the_api(
        bot: tuple[Rehearsal, str, Path], tmp_path: Path) -> None:
    r, url, kubeconfig = bot
    sb, f = r.sandbox, r.facts
    # their own tokens only read: they cannot taint the node themselves
    mine = KubeClient.from_config(kubeconfig=str(kubeconfig), context="alice", pool=sb.kube_transport())
    def untainted(node: dict[str, Any]) -> dict[str, Any]:
        node["metadata"].setdefault("labels", {})["touched-by"] = "alice"
        return node
    with pytest.raises(ExternalError, match=r"403|[Ff]orbidden"):
        mine.update(kind="Node", name=f["node"], mutate=untainted)
    assert "touched-by" not in sb.get("Node", None, f["node"])["metadata"].get("labels", {})

    code, out = _terminal(tmp_path, url, kubeconfig, "alice", "run", "node-dead-ngns",
                          "-p", f"cluster={CLUSTER}", "-p", f"node={f['node']}", "--incident", "INC-9")
    assert code == 0, out
    run_id = out.split("run ", 1)[1].split(":", 1)[0].strip()
    state = _let_time_pass(r, run_id)
    decided = 0
    while state.status == "awaiting_approval":
        step = next(s for s in state.steps.values() if s.status == "awaiting_approval")
        code, out = _terminal(tmp_path, url, kubeconfig, "alice", "approve", run_id, step.key)
        assert code == 1 and "self-approval" in out, out  # the requester never approves
        verb = "confirm" if step.needs_confirmation and not step.needs_approval else "approve"
        code, out = _terminal(tmp_path, url, kubeconfig, "bob", verb, run_id, step.key,
                              "--no-follow")
        assert code == 0, out
        decided += 1
        state = _let_time_pass(r, run_id)
    assert state.status == "succeeded", state.status
    assert decided >= 1
    # the cluster is recovered: the pod runs again, on a live node
    pod = sb.get("Pod", f["namespace"], f["pod"])
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] != f["node"]
    # the audit names both people as TokenReview returned them, and verifies from a terminal
    events = r.store.events(run_id)
    created = next(e for e in events if e.type == "run.created")
    assert created.actor == "k8s:alice"
    granted = {e.actor for e in events if e.type == "approval.granted"}
    assert granted == {"k8s:bob"}
    assert any(e.type == "command.refused" and e.actor == "k8s:alice" for e in events)
    code, out = _terminal(tmp_path, url, kubeconfig, "bob", "audit", "verify", run_id)
    assert code == 0 and "intact" in out, out
