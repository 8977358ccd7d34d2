"""node-dead-ngns on EKS Auto Mode: EC2 lets only EKS stop or terminate the machine, so the fence
deletes its NodeClaim and waits while Auto Mode's Karpenter drains, waits for volumes and
terminates; the taint follows only a terminated instance. Interlock 8 holds the NodeClaim DELETE
to the same rule as a stop: a machine whose kubelet is alive is never fenced this way either."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.actions.interlocks import RULE_FENCE
from bot.sim.iam import ADMIN_KEY
from bot.sim.rehearsal import CLUSTER, Rehearsal
from tests.rehearsals.conftest import assert_clean

NS = "search"


def _ec2_writes(r: Rehearsal) -> list[str]:
    return [w.action for w in r.sandbox.ec2.wire
            if w.access_key != ADMIN_KEY and w.action in ("StopInstances", "TerminateInstances")]


def _nodeclaim_deletes(r: Rehearsal, run_id: str) -> list[str]:
    """The NodeClaim DELETEs the run's audit records (each step event lists the calls it made)."""
    return [str(c.get("targets")) for e in r.events(run_id) for c in e.payload.get("calls") or ()
            if c.get("operation") == "delete_cluster_custom_object" and c.get("outcome") == "ok"]


def _deleting(r: Rehearsal) -> list[str]:
    return [c["metadata"]["name"] for c in r.sandbox.list("NodeClaim")
            if c["metadata"].get("deletionTimestamp")]


def test_an_auto_mode_node_is_fenced_by_deleting_its_nodeclaim_and_its_pod_recovers(rehearse):
    r = rehearse("auto-mode-node-hung")
    f = r.facts
    asked: list[str] = []

    def approver(state, s):
        asked.append(s.key)
        if s.key == "fence_nodeclaim":
            assert "EKS Auto Mode machine" in (s.approval_text or "")
            assert "eks.amazonaws.com manages it" in s.approval_text
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["dead_node"], decide=approver)
    assert st.status == "succeeded", st.outcome
    assert st.steps["instance"].result["fence_by"] == "nodeclaim"
    assert st.steps["fence"].status == "skipped" and st.steps["fence_terminate"].status == "skipped"
    assert st.steps["fence_nodeclaim"].status == "succeeded" and "fence_nodeclaim" in asked
    assert _ec2_writes(r) == []  # never a StopInstances or TerminateInstances behind EKS's back
    assert len(_nodeclaim_deletes(r, st.run_id)) == 1
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "terminated"
    # Karpenter let the Node go once the instance was terminated: the gone branch finished it
    assert r.sandbox.find("Node", None, f["dead_node"]) is None
    pod = r.sandbox.get("Pod", NS, f["pod"])
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] != f["dead_node"]
    polled = [e.payload.get("progress", "") for e in r.events(st.run_id)
              if e.type == "step.polled" and e.payload.get("step") == "fence_nodeclaim"]
    assert any("EKS is" in p and "NodeClaim" in p for p in polled), polled
    assert_clean(r, st.run_id)


def test_a_sick_auto_mode_node_is_never_fenced_through_its_nodeclaim(rehearse, tmp_path: Path):
    """The attack: a runbook that deletes the NodeClaim of a node whose kubelet is alive."""
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "delete-nodeclaim.yaml").write_text(
        "apiVersion: runbook-bot/v1\nkind: Runbook\nmetadata:\n  name: delete-nodeclaim\n"
        "  title: Delete a node's NodeClaim\nspec:\n  params:\n    node: {type: string, required: true}\n"
        "    instance_id: {type: string, required: true}\n    cluster: {type: string}\n"
        "  steps:\n    - id: fence\n      title: Delete the NodeClaim\n"
        "      action: k8s.nodeclaim.delete\n      with:\n        node: \"{{ params.node }}\"\n"
        "        instance_id: \"{{ params.instance_id }}\"\n        cluster: \"{{ params.cluster }}\"\n")
    r = Rehearsal("node-not-ready", options={"node_group": "auto-mode"},
                  workdir=tmp_path / "r", runbooks_dir=str(runbooks))
    r.start()
    try:
        f = r.facts
        st = r.run("delete-nodeclaim", node=f["node"], instance_id=f["instance_id"],
                   cluster=CLUSTER)
        assert st.status != "succeeded"
        refused = [e for e in r.events(st.run_id) if e.type == "interlock.blocked"]
        assert refused and refused[0].payload.get("rule") == RULE_FENCE, [
            (e.type, e.payload) for e in r.events(st.run_id)][-5:]
        assert "kubelet is ALIVE" in refused[0].payload.get("message", "")
        assert _nodeclaim_deletes(r, st.run_id) == [] and _deleting(r) == []
        assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
        assert {c["status"]["nodeName"] for c in r.sandbox.list("NodeClaim")} >= {f["node"]}
    finally:
        r.stop()


@pytest.mark.parametrize("scenario", ["node-not-ready"])
def test_node_dead_ngns_refuses_a_sick_auto_mode_node_before_anyone_is_asked(rehearse, scenario):
    r = rehearse(scenario, node_group="auto-mode")
    f = r.facts
    asked: list[str] = []

    def approver(state, s):
        asked.append(s.key)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=approver)
    assert st.status == "failed" and "not dead" in st.outcome
    assert asked == [] and _nodeclaim_deletes(r, st.run_id) == [] and _ec2_writes(r) == []
    assert _deleting(r) == []
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
