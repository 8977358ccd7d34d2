"""EKS Auto Mode in the sandbox: managed instances EC2 lets only EKS stop, NodeClaims, and
Karpenter's termination of a deleted NodeClaim (drain, wait for volumes, terminate, release).

Every call goes through the real clients: boto3 to the EC2 endpoint, the kubernetes client to the
API server."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from kubernetes import client as k8s

from tests.sim.kit import kube_for

NS = "search"


@pytest.fixture
def auto(pool: Any) -> Any:
    return pool.fresh("auto-mode-node-hung")


def _claim_of(sb: Any, node: str) -> dict[str, Any]:
    return next(c for c in sb.list("NodeClaim") if c["status"]["nodeName"] == node)


def _condition(nc: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in nc["status"]["conditions"] if c["type"] == ctype), {})


def test_an_auto_mode_instance_is_managed_by_eks_and_ec2_refuses_anyone_else_a_stop_or_terminate(auto):
    f = auto.facts
    ec2 = auto.ec2_client(max_attempts=0, timeout=10)
    inst = ec2.describe_instances(InstanceIds=[f["instance_id"]])["Reservations"][0]["Instances"][0]
    assert inst["Operator"] == {"Managed": True, "Principal": "eks.amazonaws.com"}
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert tags["eks:eks-cluster-name"] == "sandbox" and tags["karpenter.sh/nodeclaim"]
    for call in (lambda: ec2.stop_instances(InstanceIds=[f["instance_id"]], Force=True),
                 lambda: ec2.terminate_instances(InstanceIds=[f["instance_id"]])):
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "OperationNotPermitted"
    assert auto.ec2.instance_state(f["instance_id"]) == "running"
    node = auto.get("Node", None, f["dead_node"])
    assert node["metadata"]["labels"]["eks.amazonaws.com/compute-type"] == "auto"
    assert "karpenter.sh/termination" in node["metadata"]["finalizers"]
    # every node has its NodeClaim, which the kubernetes client lists like kubectl get nodeclaims
    listed = k8s.CustomObjectsApi(kube_for(auto)).list_cluster_custom_object(
        "karpenter.sh", "v1", "nodeclaims")["items"]
    assert {c["status"]["nodeName"] for c in listed} == {n["metadata"]["name"] for n in auto.list("Node")}


def test_a_deleted_nodeclaim_is_drained_waited_on_and_its_instance_terminated_by_karpenter(auto):
    f = auto.facts
    nc = _claim_of(auto, f["dead_node"])
    name = nc["metadata"]["name"]
    api = k8s.CustomObjectsApi(kube_for(auto))
    api.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", name)
    auto.advance(5)
    node = auto.get("Node", None, f["dead_node"])
    assert node["metadata"]["deletionTimestamp"]
    assert ("karpenter.sh/disrupted", "NoSchedule") in {
        (t["key"], t["effect"]) for t in node["spec"].get("taints") or []}
    nc = auto.get("NodeClaim", None, name)
    drained = _condition(nc, "Drained")  # the pod on the silent kubelet stays Terminating
    assert drained["status"] == "False" and f"{NS}/{f['pod']}" in drained["message"]
    assert auto.ec2.instance_state(f["instance_id"]) == "running"
    auto.advance(240, step=10)  # past the pod's grace period plus Karpenter's minute
    assert auto.find("NodeClaim", None, name) is None
    assert auto.find("Node", None, f["dead_node"]) is None
    assert auto.ec2.instance_state(f["instance_id"]) == "terminated"
    assert auto.violations == []  # the guest was hung: terminating it harmed nothing
    auto.advance(600, step=30)
    pod = auto.get("Pod", NS, f["pod"])
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] != f["dead_node"]


def test_karpenter_waits_on_the_volume_of_a_force_deleted_pod_while_its_detach_hangs(pool):
    """A pod force-deleted before the NodeClaim went: Karpenter waits for its VolumeAttachment,
    whose timeout detach from the hung machine hangs at EC2, so the instance is not terminated
    (until the NodePool's terminationGracePeriod)."""
    sb = pool.fresh("auto-mode-node-hung", pod_force_deleted="true")
    f = sb.facts
    name = _claim_of(sb, f["dead_node"])["metadata"]["name"]
    k8s.CustomObjectsApi(kube_for(sb)).delete_cluster_custom_object(
        "karpenter.sh", "v1", "nodeclaims", name)
    sb.advance(600, step=30)
    nc = sb.get("NodeClaim", None, name)
    assert _condition(nc, "Drained")["status"] == "True"
    waiting = _condition(nc, "VolumesDetached")
    assert waiting["status"] == "False" and waiting["reason"] == "AwaitingVolumeDetachment"
    assert f["volume_attachment"] in waiting["message"]
    assert sb.ec2.instance_state(f["instance_id"]) == "running"
