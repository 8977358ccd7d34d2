"""node-dead-ngns and node-recovered, end to end in the sandbox, and their negative rehearsals."""

from __future__ import annotations

import pytest

from bot.engine.commands import Reject
from tests.rehearsals.conftest import assert_clean, taint_keys, types

OOS = "node.kubernetes.io/out-of-service"
pytestmark = pytest.mark.slow


def _recovered_state(r, f):
    sb = r.sandbox
    pod = sb.get("Pod", f["namespace"], f["pod"])
    assert pod["status"]["phase"] == "Running"
    new_node = sb.get("Node", None, pod["spec"]["nodeName"])
    assert pod["spec"]["nodeName"] != f["dead_node"]
    assert new_node["metadata"]["labels"]["topology.kubernetes.io/zone"] == f["zone"]
    new_instance = new_node["spec"]["providerID"].rsplit("/", 1)[1]
    assert r.sandbox.ec2.attachments()[f["volume_id"]] == [(new_instance, "attached")]
    assert [v for v in sb.list("VolumeAttachment") if v["spec"]["nodeName"] == f["dead_node"]] == []


def test_node_dead_recovers_the_pod_on_a_new_node_and_leaves_the_taint(rehearse):
    r = rehearse("node-dead")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    _recovered_state(r, f)
    assert OOS in taint_keys(r.sandbox.get("Node", None, f["dead_node"]))
    assert any("node-recovered" in c for c in st.compensations), st.compensations
    assert st.steps["fence"].status == "skipped"  # the instance was already stopped
    assert_clean(r, st.run_id)

    r.sandbox.repair_node(f["dead_node"])
    r.sandbox.advance(60)
    back = r.run("node-recovered", node=f["dead_node"])
    assert back.status == "succeeded", back.outcome
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["dead_node"]))
    assert_clean(r, back.run_id, repaired=f["dead_node"])
    # the recovery names the run whose taint it lifted, in its audited chain; the parent lists it
    assert back.parent == st.run_id
    [linked] = [e.payload for e in r.store.events(back.run_id) if e.type == "run.linked"]
    assert linked["parent"] == st.run_id and f["dead_node"] in linked["parent_why"]
    assert r.verified(back.run_id)
    assert [c.run_id for c in r.store.children(st.run_id)] == [back.run_id]
    # once lifted, a later recovery of the same node has no parent left to name
    again = r.run("node-recovered", node=f["dead_node"])
    assert again.parent is None


def test_a_rejected_taint_changes_nothing(rehearse):
    r = rehearse("node-dead")
    f = r.facts
    before = r.sandbox.get("Node", None, f["node"])

    def reject(state, s):
        return Reject(run_id=state.run_id, actor="bob", reason="wrong node, it is rebooting", step=s.key)

    st = r.run("node-dead-ngns", node=f["node"], decide=reject)
    assert st.status == "failed" and st.steps["taint"].status == "rejected"
    after = r.sandbox.get("Node", None, f["node"])
    assert taint_keys(after) == taint_keys(before) and OOS not in taint_keys(after)
    assert r.sandbox.ec2.attachments()[f["volume_id"]][0][0] == f["instance_id"]
    assert_clean(r, st.run_id)


def test_an_instance_running_again_before_the_taint_is_refused_and_explained(rehearse):
    r = rehearse("node-dead")
    f = r.facts
    restarted = []

    def restart_then_approve(state, s):
        if s.key == "taint" and not restarted:
            r.sandbox.ec2.set_state(f["instance_id"], "running")  # someone started it again
            restarted.append(True)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=restart_then_approve)
    taint = st.steps["taint"]
    assert st.status == "awaiting_approval"
    assert taint.blocked is not None and taint.blocked["rule"] == "oos-taint"
    assert "running" in taint.blocked["message"]
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    kinds = [t for t, _ in types(r, st.run_id)]
    assert "interlock.blocked" in kinds and "step.applying" not in [
        t for t, k in types(r, st.run_id) if k == "taint"]
    assert_clean(r, st.run_id)


def test_a_throttled_ec2_still_completes_the_run(rehearse):
    r = rehearse("node-dead", throttle_rate=0.3)
    st = r.run("node-dead-ngns", node=r.facts["node"])
    assert st.status == "succeeded", st.outcome
    _recovered_state(r, r.facts)
    assert_clean(r, st.run_id)


def test_a_hung_node_is_fenced_before_the_taint_never_after(rehearse):
    r = rehearse("node-hung")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    seq = types(r, st.run_id)
    fenced = seq.index(("step.succeeded", "fence"))
    tainted = seq.index(("step.applying", "taint"))
    assert fenced < tainted
    assert st.steps["fenced"].result["state"] in ("stopped", "terminated")
    _recovered_state(r, f)
    assert_clean(r, st.run_id)


def test_stuck_detach_is_forced_only_after_the_wait_and_with_two_approvals(rehearse):
    r = rehearse("stuck-detach")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    seq = types(r, st.run_id)
    forced = [k for t, k in seq if t == "step.applying" and k.startswith("force_detach")]
    assert forced, "the stuck EBS attachment needed a force detach"
    waited = max(i for i, (t, k) in enumerate(seq) if k == "wait_detach")
    first_force = min(i for i, (t, k) in enumerate(seq) if k.startswith("force_detach"))
    assert waited < first_force
    approvals = [e for e in r.events(st.run_id) if e.type == "approval.granted"
                 and str(e.payload["step"]).startswith("force_detach")]
    assert {e.actor for e in approvals} == {"bob", "carol"}
    _recovered_state(r, f)
    assert_clean(r, st.run_id)


def test_a_dry_run_on_a_hung_node_plans_the_fence_and_taint_and_changes_nothing(rehearse):
    r = rehearse("node-hung")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"], dry_run=True)
    assert st.status == "succeeded", st.outcome
    assert st.steps["fence"].status == "skipped" and "planned only" in st.steps["fence"].message
    assert st.steps["fence"].plan["changes"][0]["operation"] == "force-stop"
    # the fence was only planned, so the instance still runs: the dry run says the taint would be
    # refused, exactly as a real run would refuse it without the fence
    assert st.steps["taint"].status == "skipped"
    assert "interlock oos-taint would refuse" in st.steps["taint"].message
    inst = r.sandbox.ec2.instance(f["instance_id"])
    assert inst._state.name == "running"
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    applied = [e for e in r.events(st.run_id) if e.type == "step.applying"
               and e.payload["step"] in ("fence", "taint")]
    assert applied == []
    assert_clean(r, st.run_id)


def test_a_node_that_recovers_while_the_fence_waits_for_approval_is_never_stopped(rehearse):
    r = rehearse("node-hung")
    f = r.facts
    came_back: list[bool] = []

    def recover_then_approve(state, s):
        if s.key == "fence" and not came_back:
            r.sandbox.repair_node(f["node"])  # the kernel came back during the approval window
            r.sandbox.advance(20)  # the kubelet posts Ready again
            came_back.append(True)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=recover_then_approve)
    fence = st.steps["fence"]
    assert came_back and st.status == "awaiting_approval"
    assert fence.blocked is not None and fence.blocked["rule"] == "fence-live"
    assert "Ready again" in fence.blocked["message"]
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    kinds = [t for t, k in types(r, st.run_id) if k == "fence"]
    assert "interlock.blocked" in kinds and "step.applying" not in kinds
    assert_clean(r, st.run_id)


def test_an_instance_being_started_is_asked_about_not_fenced(rehearse):
    r = rehearse("node-dead")
    f = r.facts
    r.sandbox.ec2.set_state(f["instance_id"], "pending")  # someone's restart
    st = r.run("node-dead-ngns", node=f["node"])
    fence = st.steps["fence"]
    assert fence.blocked is not None and fence.blocked["rule"] == "fence-live"
    assert "pending" in fence.blocked["message"] and "ask" in fence.blocked["message"]
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "pending"
    assert not [k for t, k in types(r, st.run_id) if t == "step.applying" and k == "fence"]


@pytest.mark.parametrize("how", ["absent", "not-ready"])
def test_node_recovered_fails_for_a_node_that_is_absent_or_not_ready(rehearse, how):
    r = rehearse("node-dead")
    f = r.facts
    if how == "absent":
        r.sandbox.store.remove(r.sandbox.res("Node"), None, f["dead_node"])
    st = r.run("node-recovered", node=f["dead_node"])
    assert st.status == "failed", st.outcome
    why = st.steps["pods"].error
    assert ("does not exist" if how == "absent" else "not Ready") in why
    assert "untaint" not in [k for t, k in types(r, st.run_id) if t == "step.applying"]


def test_node_recovered_leaves_a_cordon_it_did_not_make(rehearse):
    r = rehearse("node-dead")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    r.sandbox.store.mutate("Node", None, f["dead_node"],
                           lambda n: n["spec"].update(unschedulable=True))  # a person's cordon
    r.sandbox.repair_node(f["dead_node"])
    r.sandbox.advance(60)
    back = r.run("node-recovered", node=f["dead_node"])
    assert back.status == "succeeded", back.outcome
    node = r.sandbox.get("Node", None, f["dead_node"])
    assert OOS not in taint_keys(node) and node["spec"]["unschedulable"] is True
    assert back.steps["uncordon"].status == "skipped"
