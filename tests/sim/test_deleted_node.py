"""``kubectl delete node`` on a NotReady node whose instance still runs, as EKS answers it.

Pod GC force-deletes the deleted node's pods, the StatefulSet recreates its pod elsewhere (it waits
on Multi-Attach), and the attach/detach controller, which still tracks the deleted node's volumes,
detaches them ``maxWaitForUnmountDuration`` after the pods went, without the kubelet's word.
"""

from __future__ import annotations

from bot.sim.controllers.attachdetach import MAX_WAIT_FOR_UNMOUNT
from tests.sim.kit import ec2_attachments, events


def _pod_events(sb, f, reason):
    return events(sb, reason=reason, obj=f"Pod/{f['namespace']}/{f['pod']}")


def test_the_deleted_node_s_pod_is_force_deleted_and_recreated_waiting_on_multi_attach(pool):
    sb = pool.get("node-deleted-running")
    f = sb.facts
    assert sb.find("Node", None, f["node"]) is None
    assert sb.find("CSINode", None, f["node"]) is None  # owned by the Node: garbage collected
    assert sb.ec2.instance_state(f["instance_id"]) == "running"
    assert sb.ec2.status.failed(f["instance_id"])  # the hung guest's status check reads impaired
    assert _pod_events(sb, f, "PodGCOrphaned")
    pod = sb.get("Pod", f["namespace"], f["pod"])
    assert pod["spec"]["nodeName"] == f["new_node"] != f["node"]
    assert pod["status"]["phase"] == "Pending"
    [multi] = _pod_events(sb, f, "FailedAttachVolume")
    assert multi.message.startswith(f'Multi-Attach error for volume "{f["pv"]}"')
    va = sb.get("VolumeAttachment", None, f["volume_attachment"])
    assert va["spec"]["nodeName"] == f["node"] and va["status"]["attached"]
    assert not va["metadata"].get("deletionTimestamp")
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "attached")]
    # Pod GC holds a missing node in quarantine for 40 s before it deletes the node's pods (the
    # 6-minute clock starts then), and passes every 20 s: the pods went 40 to 60 s after the
    # deletion, so at 60 s after it nearly all of the timeout is left.
    assert MAX_WAIT_FOR_UNMOUNT - 20 <= f["timeout_detach_in"] <= MAX_WAIT_FOR_UNMOUNT
    assert f["deleted_at"] < sb.now_ts()
    assert sb.violations == []


def test_left_alone_the_timeout_detach_fires_on_the_hung_machine(pool):
    sb = pool.fresh("node-deleted-running")
    f = sb.facts
    sb.advance(f["timeout_detach_in"] - 5)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"])["metadata"].get(
        "deletionTimestamp") is None
    sb.advance(10)
    va = sb.get("VolumeAttachment", None, f["volume_attachment"])
    assert va["metadata"]["deletionTimestamp"]  # deleted by the attach/detach controller
    # a hung guest does not let go: the attacher's normal detach stays detaching at EC2
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "detaching")]
    assert va["status"].get("detachError")
    assert sb.violations == []  # the guest is hung: nothing is writing


def test_alive_the_timeout_detach_pulls_the_volume_from_the_running_machine(pool):
    sb = pool.fresh("node-deleted-running", alive=True)
    f = sb.facts
    assert f["instance_id"] not in sb.ec2.hung  # partitioned: the guest runs, its checks pass
    assert sb.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Pending"
    assert sb.violations == []
    sb.advance(f["timeout_detach_in"] + 10)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
    assert all(iid != f["instance_id"] for iid, _ in ec2_attachments(sb, f["volume_id"]))
    assert sb.ec2.instance_state(f["instance_id"]) == "running"
    assert [v.kind for v in sb.violations] == ["detach-from-live"]
    assert f["volume_id"] in sb.violations[0].details and f["instance_id"] in sb.violations[0].details
    sb.advance(10)
    assert sb.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"


def test_stopped_first_the_timeout_detach_is_no_violation(pool):
    sb = pool.fresh("node-deleted-running")
    f = sb.facts
    sb.ec2_client(as_bot=True).stop_instances(InstanceIds=[f["instance_id"]], Force=True)
    sb.advance(f["timeout_detach_in"] + 15)
    assert sb.ec2.instance_state(f["instance_id"]) == "stopped"
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
    assert all(iid != f["instance_id"] for iid, _ in ec2_attachments(sb, f["volume_id"]))
    assert sb.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert sb.violations == []


def test_alive_and_stopped_first_no_detach_from_live(pool):
    sb = pool.fresh("node-deleted-running", alive=True)
    f = sb.facts
    sb.ec2_client(as_bot=True).stop_instances(InstanceIds=[f["instance_id"]], Force=True)
    sb.advance(f["timeout_detach_in"] + 15)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
    # stopping a guest that runs is itself recorded, but the volume no longer leaves a live machine
    assert [v.kind for v in sb.violations] == ["fence-of-live"]


def test_a_controller_restart_after_the_deletion_leaves_the_volumeattachment(pool):
    sb = pool.fresh("node-deleted-running", alive=True)
    f = sb.facts
    sb.ctx.state.pop("deleted_nodes", None)  # kube-controller-manager restarted: memory lost
    sb.advance(f["timeout_detach_in"] + 30)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is not None
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "attached")]
    assert sb.violations == []
