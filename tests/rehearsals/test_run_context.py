"""A run records what it acted on and as whom (``run.context``), once, before it first touches the
cluster, also in a dry run and when the cluster was defaulted; the transcript shows it and names
no file of the bot's host."""

from __future__ import annotations

import hashlib
import json

import pytest

from bot.engine.commands import StartRun
from bot.present.transcript import export
from bot.sim.rehearsal import REPO, Rehearsal
from bot.sim.sandbox import BOT_CONTEXT
from tests.rehearsals.conftest import assert_clean

ROLE = "arn:aws:iam::123456789012:role/runbook-bot"
pytestmark = pytest.mark.slow


def _start_without_cluster(r: Rehearsal, *, dry_run: bool) -> str:
    """A run that names no cluster: the only configured one is used."""
    state = r.runner.start(StartRun(runbook="node-dead-ngns", params={"node": r.facts["node"]},
                                    requester="alice", dry_run=dry_run,
                                    origin={"frontend": "rehearsal"}))
    return state.run_id


def _contexts(r: Rehearsal, run_id: str):
    return [e for e in r.events(run_id) if e.type == "run.context"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_the_context_is_recorded_once_before_the_cluster_is_touched(rehearse, dry_run):
    r = rehearse("node-hung")
    run_id = _start_without_cluster(r, dry_run=dry_run)
    st = r.play(run_id)
    assert st.status == "succeeded", st.outcome
    [ctx] = _contexts(r, run_id)
    types = [e.type for e in r.events(run_id)]
    assert types.index("run.context") < types.index("step.planned")  # before the first step
    p = ctx.payload
    assert p["cluster"] == "sandbox"  # defaulted: the run's params name none
    assert st.params.get("cluster") is None
    assert p["kube_context"] == BOT_CONTEXT
    assert p["api_server"].startswith("https://127.0.0.1:")
    assert p["account"] == "123456789012"
    assert p["caller_arn"].startswith("arn:aws:")
    assert p["problems"] == [] and p["writes_as"] == {}
    text = (REPO / "runbooks" / "node-dead-ngns.yaml").read_text()
    assert p["runbook_digest"] == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert p["bot_version"]
    # the identity was asked at the sandbox's STS endpoint, on the wire, with the bot's key
    assert [c.access_key for c in r.sandbox.ec2.sts.calls if c.action == "GetCallerIdentity"] == [
        "testing"]
    assert [c["operation"] for c in p["calls"]] == ["GetCallerIdentity"]
    assert r.verified(run_id)


def test_the_transcript_shows_the_context_and_no_file_of_the_bot_s_host(rehearse):
    r = rehearse("node-hung")
    run_id = _start_without_cluster(r, dry_run=False)
    st = r.play(run_id)
    assert st.status == "succeeded", st.outcome
    doc = json.loads(export(r.store, run_id, fmt="json"))
    assert doc["run"]["cluster"] == "sandbox"
    [ctx] = doc["context"]
    assert (ctx["cluster"], ctx["kube_context"], ctx["account"]) == (
        "sandbox", BOT_CONTEXT, "123456789012")
    html = export(r.store, run_id, fmt="html")
    assert '<section id="context">' in html and BOT_CONTEXT in html
    assert "<th scope=\"row\">Cluster</th><td>-</td>" not in html
    host_paths = {str(r.sandbox.kubeconfig_path), str(r.workdir), str(REPO)}
    for fmt in ("json", "html", "md"):
        text = export(r.store, run_id, fmt=fmt)
        found = [p for p in host_paths if p in text]
        assert found == [], (fmt, found)


def test_with_a_role_arn_the_context_names_the_session_writes_are_made_with(rehearse):
    r = rehearse("node-hung", role_arn=ROLE)
    st = r.run("node-dead-ngns", node=r.facts["node"])
    assert st.status == "succeeded", st.outcome
    [ctx] = _contexts(r, st.run_id)
    assert ctx.payload["caller_arn"].endswith(":assumed-role/runbook-bot/runbook-bot-sandbox")
    assert ctx.payload["writes_as"] == {"role_arn": ROLE,
                                        "session_name": f"runbook-bot-{st.run_id}",
                                        "source_identity": st.run_id}
    [session] = [c for c in r.sandbox.ec2.sts.calls
                 if c.action == "AssumeRole" and c.source_identity == st.run_id]
    assert session.session_name == ctx.payload["writes_as"]["session_name"]
    assert_clean(r, st.run_id)
