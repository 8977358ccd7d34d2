"""The cloud side of nodes: the cloud node lifecycle controller (shutdown taint, Node deleted with
its instance) and replacement by a managed node group's health check or by Karpenter."""

from __future__ import annotations

from typing import Any

from tests.sim.kit import events, ready, taint_keys

SHUTDOWN = ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule")


def iid_of(sb: Any, node: str) -> str:
    return str(sb.get("Node", None, node)["spec"]["providerID"].rsplit("/", 1)[-1])


def test_a_stopped_instance_s_notready_node_gets_the_shutdown_taint_and_loses_it_when_ready(pool):
    sb = pool.fresh("node-dead")
    node = sb.facts["dead_node"]
    assert SHUTDOWN in taint_keys(sb, node)
    sb.repair_node(node)
    sb.advance(10)
    assert ready(sb, node) == "True" and SHUTDOWN not in taint_keys(sb, node)


def test_a_hung_running_instance_s_node_is_notready_but_not_shutdown_tainted(pool):
    sb = pool.get("node-hung")
    assert ready(sb, sb.facts["node"]) == "Unknown"
    assert SHUTDOWN not in taint_keys(sb, sb.facts["node"])


def test_a_terminated_instance_s_node_and_csinode_are_deleted_with_an_event(pool):
    sb = pool.fresh("node-dead", disable_force_detach_on_timeout=False)
    node, iid = sb.facts["dead_node"], sb.facts["instance_id"]
    sb.ec2_client(max_attempts=0, timeout=10).terminate_instances(InstanceIds=[iid])
    sb.advance(55)
    assert sb.find("Node", None, node) is not None  # still shutting-down
    sb.advance(5)
    assert sb.find("Node", None, node) is None and sb.find("CSINode", None, node) is None
    [e] = events(sb, reason="DeletingNode")
    assert e.message == f"Deleting node {node} because it does not exist in the cloud provider"
    # the attach/detach controller still counts the volume mounted there: the 6-minute timeout
    # detaches it, and the pod starts on its new node
    sb.advance(400)
    pod = sb.get("Pod", sb.facts["namespace"], sb.facts["pod"])
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] == sb.facts["new_node"]


def test_a_ready_node_is_never_touched_by_the_cloud_controller(pool):
    sb = pool.get("node-dead")
    healthy = sb.facts["new_node"]
    assert SHUTDOWN not in taint_keys(sb, healthy) and events(sb, reason="DeletingNode") == []


def test_the_node_group_replaces_the_stopped_instance_and_a_new_node_joins_in_its_zone(pool):
    sb = pool.fresh("node-replaced")
    f = sb.facts
    before = {n["metadata"]["name"] for n in sb.list("Node")}
    sb.advance(180)  # the health check has not acted yet
    assert sb.ec2.instance_state(f["instance_id"]) == "stopped"
    sb.advance(190)  # replaced 600 s after it died, terminated a minute later
    assert sb.ec2.instance_state(f["instance_id"]) == "terminated"
    assert sb.find("Node", None, f["node"]) is None
    [joined] = {n["metadata"]["name"] for n in sb.list("Node")} - before
    new = sb.get("Node", None, joined)
    assert ready(sb, joined) == "True"
    assert new["metadata"]["labels"]["topology.kubernetes.io/zone"] == f["zone"]
    new_iid = iid_of(sb, joined)
    assert sb.ec2.tags(new_iid)["eks:nodegroup-name"] == "general"
    assert sb.ec2.tags(new_iid)["kubernetes.io/cluster/sandbox"] == "owned"
    assert [e.object for e in events(sb, reason="RegisteredNode")] == [f"Node/{joined}"]


def test_without_the_replacement_option_a_stopped_instance_stays(pool):
    sb = pool.fresh("node-dead", replace_after=60)
    sb.advance(300)
    assert sb.ec2.instance_state(sb.facts["instance_id"]) == "stopped"
    assert sb.find("Node", None, sb.facts["node"]) is not None


def test_karpenter_replaces_a_spot_node_with_spot_capacity(pool):
    sb = pool.fresh("spot-node-dead", replacement=True, repair_after=600)
    f = sb.facts
    before = {n["metadata"]["name"] for n in sb.list("Node")}
    assert sb.ec2.instance(f["instance_id"]).lifecycle == "spot"
    assert sb.get("Node", None, f["node"])["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
    sb.advance(600)  # node repair: NotReady for its toleration, then replaced
    assert sb.ec2.instance_state(f["instance_id"]) in ("shutting-down", "terminated")
    sb.advance(120)
    [joined] = {n["metadata"]["name"] for n in sb.list("Node")} - before
    assert sb.ec2.instance(iid_of(sb, joined)).lifecycle == "spot"
    assert sb.ec2.tags(iid_of(sb, joined))["karpenter.sh/nodepool"] == "default"


def test_at_death_stages_the_moment_the_node_died(pool):
    sb = pool.fresh("node-hung", at_death=True)
    f = sb.facts
    assert f["died_at"] == sb.now_ts() and f["new_node"] is None
    assert ready(sb, f["node"]) == "True"  # nothing has noticed yet: the grace period is ahead
    pod = sb.get("Pod", f["namespace"], f["pod"])
    assert pod["spec"]["nodeName"] == f["node"] and "deletionTimestamp" not in pod["metadata"]
    sb.advance(55)
    assert ready(sb, f["node"]) == "Unknown"


def test_eks_node_auto_repair_replaces_a_node_notready_for_30_minutes(pool):
    sb = pool.fresh("node-dead", at_death=True, auto_repair=True)
    f = sb.facts
    sb.advance(1800)  # NotReady since 50 s: not yet 30 minutes
    assert sb.ec2.instance_state(f["instance_id"]) == "stopped"
    sb.advance(60)
    assert sb.ec2.instance_state(f["instance_id"]) in ("shutting-down", "terminated")


def test_eks_node_auto_repair_pauses_while_most_of_a_group_is_unhealthy(pool):
    sb = pool.fresh("az-outage", nodes=6, volumes_per_node=1, auto_repair=True)
    ids = sb.facts["instance_ids"]
    sb.advance(2000)
    assert all(sb.ec2.instance_state(i) == "stopped" for i in ids)


def _taint_out_of_service(sb: Any, node: str) -> None:
    sb.store.mutate("Node", None, node, lambda n: n["spec"].setdefault("taints", []).append(
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}))
    sb.settle()


def test_ebs_attach_and_detach_take_the_seconds_their_options_give(pool):
    sb = pool.fresh("node-dead", at_death=True, ebs_detach_seconds=15, ebs_attach_seconds=20)
    f = sb.facts
    sb.advance(60)
    _taint_out_of_service(sb, f["node"])
    sb.advance(20)  # pod GC's pass at 70 s, then the detach under way for 15 s
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is not None
    sb.advance(10)  # detached; the attach to the new node under way for 20 s
    pod = sb.get("Pod", f["namespace"], f["pod"])
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
    assert pod["status"].get("phase") != "Running"
    sb.advance(20)
    pod = sb.get("Pod", f["namespace"], f["pod"])
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] != f["node"]
