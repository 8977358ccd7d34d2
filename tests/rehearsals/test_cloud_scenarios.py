"""node-dead-ngns where EC2 and the node groups behave as on EKS: a guest that recovers while the
fence waits for approval, a Spot node that cannot be stopped, a node group replacing the instance
mid-run, and IAM letting through or refusing the break-glass force detach as production would.
Where today's runbook is wrong the rehearsal states the right outcome and is marked strict
expected-to-fail, naming the defect."""

from __future__ import annotations

import json

import pytest

from bot.engine.plan import Result
from bot.engine.ports import StepContext
from bot.errors import PermanentError
from bot.sim.rehearsal import CLUSTER, REQUESTER
from tests.rehearsals.conftest import assert_clean, taint_keys
from tests.sim.kit import vas_on

OOS = "node.kubernetes.io/out-of-service"
pytestmark = pytest.mark.slow


def test_a_node_that_recovers_while_the_fence_waits_for_approval_is_not_fenced(rehearse):
    r = rehearse("node-recovers-during-approval")
    f = r.facts

    def slow_approver(state, s):
        if s.key == "fence" and r.sandbox.ec2.instance_state(f["instance_id"]) == "running":
            r.sandbox.advance(180)  # the approval takes three minutes; the guest is back after two
            conditions = r.sandbox.get("Node", None, f["node"])["status"]["conditions"]
            assert {c["type"]: c["status"] for c in conditions}["Ready"] == "True"
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=slow_approver)
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    assert st.steps["fence"].status != "succeeded"
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    assert_clean(r, st.run_id)


def test_a_node_that_recovered_before_the_run_is_refused_at_the_first_guard(rehearse):
    r = rehearse("node-recovers-during-approval", recover_after=30)
    f = r.facts
    r.sandbox.advance(45)
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "failed"
    assert "only for a dead node" in st.outcome
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    assert_clean(r, st.run_id)


def test_a_hung_spot_node_is_fenced_and_its_pod_recovers(rehearse):
    r = rehearse("spot-node-dead")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    assert r.sandbox.ec2.instance_state(f["instance_id"]) in ("stopped", "terminated")
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert_clean(r, st.run_id)


def test_a_spot_node_is_fenced_by_terminate_under_its_own_approval(rehearse):
    r = rehearse("spot-node-dead")
    f = r.facts
    asked: list[str] = []

    def approver(state, s):
        asked.append(s.key)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=approver)
    assert st.steps["fence"].status == "skipped"  # StopInstances would answer UnsupportedOperation
    assert st.steps["fence_terminate"].status == "succeeded"
    assert "fence_terminate" in asked
    assert st.steps["instance"].result["lifecycle"] == "spot"
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "terminated"


def test_a_node_only_a_terminate_could_fence_under_termination_protection_is_left_alone(rehearse):
    r = rehearse("spot-node-dead")
    f = r.facts
    r.sandbox.ec2_client().modify_instance_attribute(InstanceId=f["instance_id"],
                                                     DisableApiTermination={"Value": True})
    asked: list[str] = []

    def approver(state, s):
        asked.append(s.key)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=approver)
    assert st.status == "failed" and st.steps["fence_terminate"].status == "skipped"
    assert st.steps["instance"].result["fence_by"] == "none"
    assert "disableApiTermination" in st.outcome and "cannot fence it" in st.outcome
    assert asked == []  # nobody was asked to approve a fence EC2 would refuse
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    assert "node.kubernetes.io/out-of-service" not in taint_keys(r.sandbox.get("Node", None, f["node"]))


def test_a_spot_node_ready_again_is_not_terminated(rehearse):
    r = rehearse("spot-node-dead")
    f = r.facts

    def approver(state, s):
        if s.key == "fence_terminate":
            r.sandbox.ec2.set_hung(f["instance_id"], False)  # the guest comes back meanwhile
            r.sandbox.advance(60)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=approver)
    # the node's Ready condition is in the plan's facts: the approval is void, and asked again
    assert st.steps["fence_terminate"].status != "succeeded"
    assert st.status != "succeeded"
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    assert_clean(r, st.run_id)


def test_a_node_replaced_by_its_node_group_mid_run_ends_the_run_with_the_pod_running(rehearse):
    r = rehearse("node-replaced")
    f = r.facts

    def slow_approver(state, s):
        if s.key == "taint" and r.sandbox.find("Node", None, f["node"]) is not None:
            r.sandbox.advance(330)  # meanwhile the health check terminates and replaces it
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=slow_approver)
    assert r.sandbox.find("Node", None, f["node"]) is None
    assert st.status == "succeeded", (st.status, st.outcome)
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert_clean(r, st.run_id)


def test_a_node_replaced_after_the_run_leaves_the_cluster_clean(rehearse):
    r = rehearse("node-replaced", replace_after=1800)
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    r.sandbox.advance(1800)
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "terminated"
    assert r.sandbox.find("Node", None, f["node"]) is None  # the tainted node went with it
    pod = r.sandbox.get("Pod", f["namespace"], f["pod"])
    assert pod["status"]["phase"] == "Running"
    assert_clean(r, st.run_id)


def force_detach(r, volume_id: str, instance_id: str) -> Result:
    """node-dead-ngns's break-glass force detach, made as its step makes it: the catalog's
    aws.ec2.volume.detach with the run's clients, so with the bot's credentials, which the sandbox's
    EC2 endpoint holds to the IAM policy. Called directly: on a real stuck detach the runbook does
    not reach this step (STUCK_DETACH_DEFECT, a strict expected failure in test_node_dead.py)."""
    catalog = r.runner.catalog

    def ctx() -> StepContext:
        return StepContext(run_id="rb-force", step_id="force_detach", requester=REQUESTER,
                           clock=r.clock, params={"cluster": CLUSTER})

    plan = catalog.plan("aws.ec2.volume.detach", {"volume_id": volume_id, "instance_id": instance_id,
                                                  "force": True}, ctx())
    assert [c.operation for c in plan.changes] == ["force-detach"]  # the interlock let it through
    for _ in range(20):
        result = catalog.apply(plan.action, plan, ctx())
        if result.done:
            return result
        r.sandbox.advance(result.retry_after)
    raise AssertionError(f"the force detach of {volume_id} did not finish")


def test_the_shipped_policy_lets_the_force_detach_through_and_records_no_refusal(rehearse):
    r = rehearse("stuck-detach")
    f = r.facts
    assert r.sandbox.ec2.attachments()[f["volume_id"]] == [(f["instance_id"], "busy")]
    force_detach(r, f["volume_id"], f["instance_id"])
    assert r.sandbox.ec2.refused == []
    # freed at EC2, the volume goes to the node its pod waits on, and the pod runs
    r.sandbox.advance(30)
    assert [i for i, _ in r.sandbox.ec2.attachments()[f["volume_id"]]] != [f["instance_id"]]
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert r.sandbox.violations == []


def test_a_policy_production_would_refuse_fails_the_force_detach_at_the_refused_call(rehearse, tmp_path):
    old = tmp_path / "policy.json"
    old.write_text(json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"},
        {"Effect": "Allow", "Action": ["ec2:StopInstances", "ec2:DetachVolume", "ec2:DeleteVolume"],
         "Resource": "*", "Condition": {"StringEquals": {
             "aws:ResourceTag/kubernetes.io/cluster/CLUSTER_NAME": "owned"}}}]}))
    r = rehearse("stuck-detach", iam_policy=str(old))
    f = r.facts
    with pytest.raises(PermanentError) as e:
        force_detach(r, f["volume_id"], f["instance_id"])
    assert e.value.code == "UnauthorizedOperation"
    assert [a for _, a, _ in r.sandbox.ec2.refused] == ["DetachVolume"]
    assert r.sandbox.ec2.attachments()[f["volume_id"]] == [(f["instance_id"], "busy")]


def _forget_deleted_nodes(r) -> None:
    """kube-controller-manager restarts after the Node was deleted: its attach/detach controller
    rebuilds what is attached from the Nodes that exist, so a deleted node's VolumeAttachment is
    in no one's state of the world any more and is never detached by it."""
    r.sandbox.ctx.state.pop("deleted_nodes", None)


def test_a_node_replaced_mid_run_has_its_leftover_volumeattachment_deleted_not_stripped(rehearse):
    r = rehearse("node-replaced")
    f = r.facts
    forgotten: list[str] = []
    asked: list[str] = []

    def approver(state, s):
        asked.append(s.key)
        if s.key == "taint" and r.sandbox.find("Node", None, f["node"]) is not None:
            for _ in range(66):  # the health check terminates the instance; its Node is deleted
                r.sandbox.advance(5)
                if r.sandbox.find("Node", None, f["node"]) is None:
                    _forget_deleted_nodes(r)
                    forgotten[:] = [v["metadata"]["name"] for v in vas_on(r.sandbox, f["node"])]
                    break
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=approver)
    assert forgotten, "no VolumeAttachment was left on the deleted node"
    assert st.status == "succeeded", (st.status, st.outcome)
    assert st.steps["gone_instance"].result["state"] == "terminated"
    assert st.steps["gone_wait"].status == "failed"  # the controller's timeout ran out first
    assert "va_delete[0]" in asked  # a destructive step of its own, approved on its own
    assert vas_on(r.sandbox, f["node"]) == []
    writes = [c["operation"] for e in r.events(st.run_id) for c in e.payload.get("calls") or ()
              if "volume_attachment" in c["operation"] and not c["operation"].startswith(
                  ("read_", "list_"))]
    assert writes == ["delete_volume_attachment"] * len(forgotten)  # no finalizer edit
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert_clean(r, st.run_id)
