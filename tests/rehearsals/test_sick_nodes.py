"""A sick node is not a dead node: the shipped runbooks never fence a machine whose kubelet is
alive, whichever way they are reached, and a machine that may be alive only by break-glass.

On EKS the commonest NotReady is a kubelet that is alive and posts ``Ready=False`` (the VPC CNI not
initialised): its pods run on and write to their volumes. Before rule 8 read the kubelet's Lease,
``node-dead-ngns`` force-stopped that machine and reported success.
"""

from __future__ import annotations

import pytest

from bot.engine.commands import BreakGlass
from bot.sim.rehearsal import APPROVERS
from tests.rehearsals.conftest import assert_clean, assert_overridden, taint_keys

OOS = "node.kubernetes.io/out-of-service"
pytestmark = pytest.mark.slow


def _alive(r, f):
    """The machine still runs, untainted, and its pod with it."""
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["spec"]["nodeName"] == f["node"]


def test_node_dead_ngns_refuses_to_start_on_a_node_whose_kubelet_says_the_cni_is_not_ready(
        rehearse):
    r = rehearse("node-not-ready", cause="cni")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "failed"
    assert "not dead" in st.outcome and "kubelet is ALIVE" in st.outcome, st.outcome
    assert "pod network is not ready" in st.outcome and "aws-node" in st.outcome
    assert st.steps["fence"].status != "succeeded" if "fence" in st.steps else True
    _alive(r, f)
    assert_clean(r, st.run_id)


@pytest.mark.parametrize("cause", ["pleg", "runtime"])
def test_other_live_kubelet_causes_are_named_and_refused(rehearse, cause):
    r = rehearse("node-not-ready", cause=cause)
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "failed" and "kubelet is ALIVE" in st.outcome
    assert {"pleg": "PLEG", "runtime": "container runtime is down"}[cause] in st.outcome
    _alive(r, f)


def test_the_triage_runbook_says_which_case_each_node_is(rehearse):
    r = rehearse("node-not-ready", cause="cni")
    st = r.run("node-not-ready-triage", node=r.facts["node"])
    assert st.status == "succeeded", st.outcome
    said = st.steps["verdict"].result["message"]
    assert said.startswith("SICK, NOT DEAD") and "Do not fence it" in said, said
    assert "aws-node" in said  # what to look at, and its not-ready pod on the node
    _alive(r, r.facts)


def test_the_triage_of_a_dead_node_hands_over_to_node_dead_ngns_with_its_params(rehearse):
    r = rehearse("node-hung")
    st = r.run("node-not-ready-triage", node=r.facts["node"])
    said = st.steps["verdict"].result["message"]
    assert said.startswith("DEAD") and f"node-dead-ngns -p node={r.facts['node']}" in said, said
    assert st.steps["triage"].result["next"] == {"runbook": "node-dead-ngns",
                                                 "params": {"node": r.facts["node"]}}


def test_a_partitioned_node_is_fenced_only_by_break_glass_and_only_after_the_wait(rehearse):
    r = rehearse("node-partitioned")
    f = r.facts
    triage = r.run("node-not-ready-triage", node=f["node"])
    assert triage.steps["verdict"].result["message"].startswith("MAY BE ALIVE")

    def decide(state, s):
        if s.blocked:
            return None
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=decide)
    fence = st.steps["fence"]
    assert st.status == "awaiting_approval" and fence.blocked["rule"] == "fence-wait", fence.blocked
    assert "may be alive" in fence.blocked["message"]
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    # break-glass cannot lift the wait
    for who in APPROVERS[:2]:
        r.submit(BreakGlass(run_id=st.run_id, actor=who, step="fence", reason="sure it is dead"))
    st = r.play(st.run_id, decide=decide)
    assert st.steps["fence"].blocked["rule"] == "fence-wait"
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    # after fence_ambiguous_after, a retry turns it into a refusal only break-glass lifts
    r.sandbox.advance(300)
    from bot.engine.commands import Retry
    r.submit(Retry(run_id=st.run_id, actor=APPROVERS[0], step="fence"))
    st = r.play(st.run_id, decide=decide)
    fence = st.steps["fence"]
    assert fence.blocked["rule"] == "fence-live" and "MAY BE ALIVE" in fence.blocked["message"]
    for who in APPROVERS[:2]:
        r.submit(BreakGlass(run_id=st.run_id, actor=who, step="fence",
                            reason="no SSM, no serial console answer, pods unreachable"))
    st = r.play(st.run_id)
    assert r.sandbox.ec2.instance_state(f["instance_id"]) in ("stopped", "stopping")
    # the sandbox saw a running guest stopped: reported as overridden by the two people, never
    # as a clean pass
    [said] = assert_overridden(r, st.run_id, rule="fence-live")
    assert "fence-of-live" in said and "no SSM" in said


def test_the_fence_approval_shows_the_ready_reason_the_lease_age_and_the_status_checks(rehearse):
    r = rehearse("node-hung")
    seen = {}

    def look(state, s):
        if s.key == "fence":
            seen["text"] = s.approval_text
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=r.facts["node"], decide=look)
    assert st.status == "succeeded", st.outcome
    text = seen["text"]
    assert "Ready reason NodeStatusUnknown" in text, text
    assert "Lease last renewed" in text and "status checks system" in text
    assert "instance impaired" in text


def test_a_zone_run_leaves_a_sick_node_of_its_zone_alone(rehearse):
    r = rehearse("node-not-ready", cause="cni")
    f = r.facts
    st = r.run("zone-outage-ngns", zone=f["zone"], nodes=[f["node"]])
    survey = st.steps["survey"].result
    [item] = survey["items"]
    assert item["outcome"] == "skipped" and "kubelet is ALIVE" in item["reason"], item
    assert survey["todo"] == []
    _alive(r, f)
    assert_clean(r, st.run_id)


def test_a_node_whose_machine_is_tagged_for_another_cluster_is_never_fenced(rehearse):
    """The kubeconfig reaches the staging cluster (node names repeat across clusters), the run is
    for sandbox: the dead node's machine belongs to staging, and nothing lifts that."""
    r = rehearse("node-hung", cluster_name="staging")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"], decide=lambda state, s: (
        None if s.blocked else r.approve_all(state, s)))
    fence = st.steps["fence"]
    assert fence.blocked["rule"] == "fence-cluster", fence.blocked
    assert "belongs to cluster staging, not sandbox" in fence.blocked["message"]
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))


def test_a_node_deleted_while_its_machine_runs_is_found_urgent_and_fenced_by_its_instance(
        rehearse):
    """Someone ran kubectl delete node: pod GC force-deletes the pods, and the attach/detach
    controller would detach the volume within minutes from a machine that may still write."""
    from tests.rehearsals.test_diagnose import scan

    r = rehearse("node-deleted-running")
    f = r.facts
    [urgent] = [x for x in scan(r).findings if x.kind == "node-deleted-machine-running"]
    assert urgent.severity.value == "urgent" and urgent.runbook == "node-dead-ngns"
    assert urgent.params == {"node": f["node"], "instance_id": f["instance_id"],
                             "cluster": "sandbox"}
    st = r.run("node-dead-ngns", node=f["node"], instance_id=f["instance_id"])
    assert st.status == "succeeded", st.outcome
    assert st.steps["urgent"].status == "succeeded"  # the URGENT notice went out first
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "stopped"
    pod = r.sandbox.get("Pod", f["namespace"], f["pod"])
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] != f["node"]
    assert_clean(r, st.run_id)  # no detach from the machine while it ran
