"""Each newer incident is staged as it happens on EKS; the facts a runbook needs hold."""

from __future__ import annotations

from tests.sim.kit import ec2_attachments

NS = "search"


def test_bound_pv_deleted_stays_terminating_and_bound_while_its_pod_runs(pool):
    sb = pool.get("bound-pv-deleted")
    f = sb.facts
    pv = sb.get("PersistentVolume", None, f["pv"])
    assert pv["metadata"]["deletionTimestamp"] and pv["status"]["phase"] == "Bound"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert "kubernetes.io/pv-protection" in pv["metadata"]["finalizers"]
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Running"


def test_tolerating_pod_is_not_evicted_and_keeps_its_volume_after_the_out_of_service_taint(pool):
    sb = pool.fresh("tolerating-pod")
    f = sb.facts
    node = sb.get("Node", None, f["dead_node"])
    node["spec"]["taints"].append({"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                                   "effect": "NoExecute"})
    sb.store.update(sb.res("Node"), node)
    sb.advance(600, step=30)
    pod = sb.get("Pod", NS, f["pod"])
    assert pod["spec"]["nodeName"] == f["dead_node"] and not pod["metadata"].get("deletionTimestamp")
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "attached")]
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is not None


def test_pod_force_deleted_the_timeout_detach_pulls_the_volume_from_the_live_machine(pool):
    sb = pool.fresh("pod-force-deleted")
    f = sb.facts
    assert sb.ec2.instance_state(f["instance_id"]) == "running"
    assert sb.violations == []
    sb.advance(f["timeout_detach_in"] + 10)
    assert [v.kind for v in sb.violations] == ["detach-from-live"]
    assert f["volume_id"] in sb.violations[0].details and f["instance_id"] in sb.violations[0].details


def test_a_timeout_detach_from_a_machine_booted_again_since_its_kubelet_last_reported_is_not_live(pool):
    # a stop and start ends the boot that had the file system mounted; the kubelet, still cut
    # off, has reported nothing of the new boot, and a kubelet reports a volume in use before it
    # mounts it: the new boot has nothing mounted, and the timeout detach takes nothing from it
    sb = pool.fresh("pod-force-deleted")
    f = sb.facts
    sb.ec2.set_state(f["instance_id"], "stopped")
    sb.advance(30)
    sb.ec2.set_state(f["instance_id"], "running")
    sb.advance(f["timeout_detach_in"] + 10)
    node = sb.get("Node", None, f["dead_node"])
    assert node["status"]["nodeInfo"]["bootID"] != sb.ec2.boot_id(f["instance_id"])  # never reported
    assert ec2_attachments(sb, f["volume_id"]) != [(f["instance_id"], "attached")]  # detached
    assert sb.violations == []


def test_auto_mode_leak_pv_waits_behind_the_auto_mode_finalizers_with_its_volume_attached(pool):
    sb = pool.get("auto-mode-leak")
    f = sb.facts
    pv = sb.get("PersistentVolume", None, f["pv"])
    assert pv["spec"]["csi"]["driver"] == "ebs.csi.eks.amazonaws.com"
    assert pv["metadata"]["deletionTimestamp"]
    assert "external-attacher/ebs-csi-eks-amazonaws-com" in pv["metadata"]["finalizers"]
    va = sb.get("VolumeAttachment", None, f["volume_attachment"])
    assert va["spec"]["attacher"] == "ebs.csi.eks.amazonaws.com" and va["status"]["detachError"]
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "busy")]


def test_old_incident_has_no_events_left_but_the_volume_is_still_held(pool):
    sb = pool.get("old-incident")
    f = sb.facts
    assert [e for e in sb.list("Event", NS) if e["involvedObject"]["name"] == f["pod"]] == []
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Pending"
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "detaching")]


def test_in_tree_volumes_are_attached_through_the_ebs_csi_driver(pool):
    sb = pool.fresh("node-dead", volume_driver="kubernetes.io/aws-ebs")
    f = sb.facts
    pv = sb.get("PersistentVolume", None, f["pv"])
    assert pv["spec"]["awsElasticBlockStore"]["volumeID"].endswith(f["volume_id"])
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/migrated-to"] == "ebs.csi.aws.com"
    va = sb.get("VolumeAttachment", None, f["volume_attachment"])
    assert va["spec"]["attacher"] == "ebs.csi.aws.com" and va["status"]["attached"] is True


def test_the_kubelet_reports_the_boot_id_the_ec2_model_gives_its_instance(pool):
    sb = pool.fresh("zombie-attachments")
    f = sb.facts
    other = next(n for n in sb.list("Node") if n["metadata"]["name"] != f["node"])
    before = other["status"]["nodeInfo"]["bootID"]
    boots = {f["instance_id"]: "7f1e0c55-0000-4000-8000-000000000002"}
    sb.ec2.boot_id = boots.get  # what an EC2 model that tracks boots exposes
    sb.advance(15)
    assert sb.get("Node", None, f["node"])["status"]["nodeInfo"]["bootID"] == boots[f["instance_id"]]
    # a node whose instance the model knows no boot of keeps the id it had
    assert sb.get("Node", None, other["metadata"]["name"])["status"]["nodeInfo"]["bootID"] == before
