"""The controllers follow Kubernetes' rules on the sandbox clock: node lifecycle, attach/detach
fencing, pod GC, NoExecute eviction, StatefulSet recreation and a scheduler that honours PV zones.

Time moves only through ``advance``; every expectation is an outcome in the store, in EC2 or in the
recorded events, at the simulated second the rule says.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.sim.kit import api_for, ec2_attachments, events, node_of, ready, taint_keys, vas_on

NS = "search"
OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
UNREACHABLE = "node.kubernetes.io/unreachable"


def taint(sb: Any, node: str, t: dict[str, str]) -> None:
    """Add a taint the way a client does: through the API server (which settles the controllers)."""
    http = api_for(sb)
    try:
        current = http("GET", f"/api/v1/nodes/{node}")[1]
        body = [{"op": "test", "path": "/metadata/resourceVersion",
                 "value": current["metadata"]["resourceVersion"]},
                {"op": "add", "path": "/spec/taints", "value": [*current["spec"].get("taints", []), t]}]
        code, out = http("PATCH", f"/api/v1/nodes/{node}", body, content_type="application/json-patch+json")
        assert code == 200, out
    finally:
        http.close()


def zone_of(sb: Any, node: str) -> str:
    return str(sb.get("Node", None, node)["metadata"]["labels"]["topology.kubernetes.io/zone"])


def pv_zone(sb: Any, pod: str) -> str:
    pvc = sb.get("PersistentVolumeClaim", NS, f"data-{pod}")
    pv = sb.get("PersistentVolume", None, pvc["spec"]["volumeName"])
    [term] = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    return str(term["matchExpressions"][0]["values"][0])


# -- node lifecycle ------------------------------------------------------------------------------

def test_a_stopped_instance_makes_its_node_notready_with_unreachable_taints_after_the_grace_period(pool):
    sb = pool.fresh("node-dead")
    node = node_of(sb, NS, "es-data-1")
    broken_at = sb.clock.now()
    sb.break_node(node)
    # the Lease was renewed at most 10 s ago; the grace period is 50 s after the last renewal
    sb.advance(35)
    assert ready(sb, node) == "True" and taint_keys(sb, node) == []
    sb.advance(15)
    assert ready(sb, node) == "Unknown"
    # the cloud node lifecycle controller adds the shutdown taint once the node is NotReady
    assert taint_keys(sb, node) == [(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute"),
                                    ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule")]
    [ev] = events(sb, reason="NodeNotReady", obj=f"Node/{node}")
    assert ev.message == f"Node {node} status is now: NodeNotReady"
    assert 30 <= (_parse(ev.time) - broken_at).total_seconds() <= 45

    sb.repair_node(node)
    sb.advance(5)
    assert ready(sb, node) == "True" and taint_keys(sb, node) == []
    assert events(sb, reason="NodeReady", obj=f"Node/{node}")


def test_a_hung_instance_that_ec2_still_calls_running_also_makes_its_node_notready(pool):
    sb = pool.get("node-hung")
    f = sb.facts
    assert sb.ec2.instance_state(f["instance_id"]) == "running"
    assert ready(sb, f["dead_node"]) == "Unknown"
    assert (UNREACHABLE, "NoExecute") in taint_keys(sb, f["dead_node"])


# -- attach/detach ---------------------------------------------------------------------------------

def test_with_the_timeout_detach_disabled_the_ad_controller_never_detaches_from_a_dead_node(pool):
    sb = pool.fresh("node-dead", disable_force_detach_on_timeout=True)
    f = sb.facts
    sb.advance(1800)
    [va] = vas_on(sb, f["dead_node"])
    assert va["status"]["attached"] is True and not va["metadata"].get("deletionTimestamp")
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "attached")]
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Pending"
    multi = events(sb, reason="FailedAttachVolume", obj=f"Pod/{NS}/{f['pod']}")
    assert multi and multi[-1].message == (
        f'Multi-Attach error for volume "{f["pv"]}" Volume is already exclusively attached to one node '
        "and can't be attached to another")
    assert multi[-1].source == "attachdetach-controller"


def test_the_out_of_service_taint_detaches_at_once_through_ec2_and_the_pod_starts_elsewhere(pool):
    sb = pool.fresh("node-dead")
    f = sb.facts
    before = sb.ec2.requests
    taint(sb, f["dead_node"], OOS)
    assert vas_on(sb, f["dead_node"]) == []
    [va] = vas_on(sb, f["new_node"])
    assert va["status"]["attached"] is True
    new_iid = sb.get("Node", None, f["new_node"])["spec"]["providerID"].rsplit("/", 1)[-1]
    assert ec2_attachments(sb, f["volume_id"]) == [(new_iid, "attached")]
    assert sb.ec2.requests - before >= 2  # DetachVolume and AttachVolume crossed the endpoint
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Running"
    assert events(sb, reason="SuccessfulAttachVolume", obj=f"Pod/{NS}/{f['pod']}")[-1].message == (
        f'AttachVolume.Attach succeeded for volume "{f["pv"]}" ')
    assert sb.violations == []


def test_without_the_taint_the_ad_controller_force_detaches_after_six_minutes_as_on_eks(pool):
    sb = pool.fresh("node-dead")  # EKS: the timeout detach cannot be turned off
    assert not sb.options.get("disable_force_detach_on_timeout")
    f = sb.facts
    since = sb.ctx.state["detach_requested"][f["volume_attachment"]]
    waited = (sb.clock.now() - _parse(since)).total_seconds()
    sb.advance(355 - waited)
    assert [v["metadata"]["name"] for v in vas_on(sb, f["dead_node"])] == [f["volume_attachment"]]
    sb.advance(10)
    assert vas_on(sb, f["dead_node"]) == []
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Running"


def test_the_timeout_force_detach_cannot_free_a_volume_from_a_hung_instance(pool):
    sb = pool.fresh("node-hung")
    f = sb.facts
    sb.advance(400)
    va = sb.get("VolumeAttachment", None, f["volume_attachment"])
    assert va["metadata"]["deletionTimestamp"]
    assert "is still detaching" in va["status"]["detachError"]["message"]
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "detaching")]
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Pending"


def test_no_scenario_turns_the_timeout_detach_off_by_default():
    from bot.sim.scenarios import SCENARIOS

    assert len(SCENARIOS) >= 12
    assert [n for n, s in SCENARIOS.items() if "disable_force_detach_on_timeout" in s.defaults] == []


def test_disabling_force_detach_on_timeout_keeps_the_attachment_for_good(pool):
    sb = pool.fresh("node-dead", disable_force_detach_on_timeout=True)  # named, never implied
    sb.advance(3600, step=30)
    assert [v["metadata"]["name"] for v in vas_on(sb, sb.facts["dead_node"])] == [
        sb.facts["volume_attachment"]]


# -- eviction, pod GC, StatefulSet and scheduler ----------------------------------------------------

def test_unreachable_pods_are_evicted_after_their_toleration_and_stay_terminating_until_pod_gc(pool):
    sb = pool.fresh("node-dead")
    node = node_of(sb, NS, "es-data-1")
    zone = pv_zone(sb, "es-data-1")
    sb.break_node(node)
    sb.advance(50)
    added = next(t["timeAdded"] for t in sb.get("Node", None, node)["spec"]["taints"]
                 if t["effect"] == "NoExecute")
    sb.advance(290)
    assert not sb.get("Pod", NS, "es-data-1")["metadata"].get("deletionTimestamp")
    sb.advance(20)
    pod = sb.get("Pod", NS, "es-data-1")
    assert pod["metadata"]["deletionTimestamp"]  # tolerationSeconds 300 of the unreachable taint
    [ev] = events(sb, reason="TaintManagerEviction", obj=f"Pod/{NS}/es-data-1")
    assert 300 <= (_parse(ev.time) - _parse(added)).total_seconds() <= 305
    sb.advance(120)  # nobody confirms the deletion on a dead node; pod GC needs the taint
    assert sb.get("Pod", NS, "es-data-1")["spec"]["nodeName"] == node

    taint(sb, node, OOS)
    sb.advance(20)  # pod GC runs every 20 s
    [gc] = events(sb, reason="PodGCForceDelete", obj=f"Pod/{NS}/es-data-1")
    assert gc.source == "pod-garbage-collector"
    pod = sb.get("Pod", NS, "es-data-1")
    assert pod["spec"]["nodeName"] != node and not pod["metadata"].get("deletionTimestamp")
    assert zone_of(sb, pod["spec"]["nodeName"]) == zone  # the PV's zone, not just any free node
    assert pod["status"]["phase"] == "Running"
    created = events(sb, reason="SuccessfulCreate", obj=f"StatefulSet/{NS}/es-data")[-1]
    assert created.message == "create Pod es-data-1 in StatefulSet es-data successful"
    assert created.time == gc.time


def test_a_noexecute_taint_the_pod_does_not_tolerate_evicts_it_at_once(pool):
    sb = pool.fresh("node-dead")
    node = node_of(sb, NS, "es-data-2")
    taint(sb, node, {"key": "example.com/drain", "value": "now", "effect": "NoExecute"})
    [ev] = events(sb, reason="TaintManagerEviction", obj=f"Pod/{NS}/es-data-2")
    assert ev.message == f"Marking for deletion Pod {NS}/es-data-2"
    # The kubelet on the live node stops it within its grace period (120 s) and confirms the
    # deletion; the recreated pod cannot go back there, and its volume keeps it in its zone.
    assert sb.get("Pod", NS, "es-data-2")["metadata"]["deletionTimestamp"]
    sb.advance(130, step=10)
    pod = sb.get("Pod", NS, "es-data-2")
    assert pod["spec"]["nodeName"] != node and zone_of(sb, pod["spec"]["nodeName"]) == zone_of(sb, node)
    assert pod["status"]["phase"] == "Running"
    # A live kubelet unmounted the volume, so the AD controller detached it without any taint.
    assert vas_on(sb, node) == [] and "volumesInUse" in sb.get("Node", None, node)["status"]
    assert sb.get("Node", None, node)["status"]["volumesInUse"] == []

    # With the zone's other node cordoned too, the pod has nowhere to go, and says why.
    other = pod["spec"]["nodeName"]
    taint(sb, other, {"key": "example.com/drain", "value": "now", "effect": "NoExecute"})
    sb.advance(130, step=10)
    sched = events(sb, obj=f"Pod/{NS}/es-data-2", reason="FailedScheduling")[-1]
    assert sched.message == (
        "0/6 nodes are available: 2 node(s) had untolerated taint {example.com/drain: now}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, "
        "3 node(s) had volume node affinity conflict. "
        "preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling.")


def test_an_immediate_volume_in_a_full_zone_leaves_the_pod_pending_with_the_real_scheduler_text(pool):
    sb = pool.get("az-capacity-deadlock")
    f = sb.facts
    pod = sb.get("Pod", NS, f["pod"])
    assert "nodeName" not in pod["spec"] and pod["status"]["phase"] == "Pending"
    assert pv_zone(sb, f["pod"]) == f["zone"]
    [cond] = pod["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
    assert cond["message"] == (
        "0/15 nodes are available: 1 Insufficient cpu, 14 node(s) had volume node affinity conflict. "
        "preemption: 0/15 nodes are available: 15 Preemption is not helpful for scheduling.")
    sb.store.remove(sb.res("Pod"), NS, "batch-filler")  # capacity returns to the volume's zone
    sb.advance(5)
    pod = sb.get("Pod", NS, f["pod"])
    assert pod["spec"]["nodeName"] == f["full_node"] and pod["status"]["phase"] == "Running"


def test_a_throttled_create_volume_is_reported_on_the_claim_and_retried_on_the_next_pass(pool):
    sb = pool.get("az-capacity-deadlock")
    sb.ec2.throttle_rate = 1.0
    sb.create("PersistentVolumeClaim", {
        "metadata": {"name": "scratch", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp2-immediate",
                 "resources": {"requests": {"storage": "10Gi"}}}}, NS)
    sb.settle()
    [failed] = events(sb, reason="ProvisioningFailed", obj=f"PersistentVolumeClaim/{NS}/scratch")
    assert failed.message == ('failed to provision volume with StorageClass "gp2-immediate": rpc error: '
                              "code = Internal desc = RequestLimitExceeded: Request limit exceeded.")
    assert "volumeName" not in sb.get("PersistentVolumeClaim", NS, "scratch")["spec"]
    sb.ec2.throttle_rate = 0.0
    sb.advance(5)
    pvc = sb.get("PersistentVolumeClaim", NS, "scratch")
    assert pvc["status"]["phase"] == "Bound" and pvc["spec"]["volumeName"].startswith("pvc-")


def _parse(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def test_the_attacher_retries_a_failing_detach_with_a_doubling_back_off_and_then_takes_its_time(
        pool):
    """The CSI external-attacher requeues a failed VolumeAttachment with exponential back-off
    (``--retry-interval-start`` 1 s, doubling, ``--retry-interval-max`` 5 min), and its own error
    writes do not requeue it: a detach that keeps failing is tried a handful of times in ten
    minutes, not on every pass, and once EC2 lets the volume go the VolumeAttachment stays until
    the next try, minutes later. A runbook watching it go must wait that long."""
    sb = pool.fresh("node-hung")
    f = sb.facts
    sb.advance(400)  # the timeout detach began; the hung guest holds the volume ("detaching")

    def error_time() -> str | None:
        va = sb.find("VolumeAttachment", None, f["volume_attachment"])
        return ((va or {}).get("status") or {}).get("detachError", {}).get("time")

    tries = {error_time()}
    for _ in range(120):  # ten minutes, watched every 5 s
        sb.advance(5)
        tries.add(error_time())
    assert 3 <= len(tries) <= 8, sorted(t for t in tries if t)
    sb.ec2.set_state(f["instance_id"], "stopped")  # someone stops the machine: the unplug can end
    sb.settle()
    sb.advance(60)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is not None  # not tried yet
    sb.advance(300)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
    assert f["instance_id"] not in [iid for iid, _ in ec2_attachments(sb, f["volume_id"])]
    assert sb.violations == []


def test_a_rebased_clock_keeps_the_attacher_s_back_off(pool):
    """``sim up`` rebases the sandbox onto the wall clock, shifting every time it holds: a
    VolumeAttachment waiting out its back-off is not taken as changed (and tried at once)."""
    from datetime import timedelta

    sb = pool.fresh("node-hung")
    name = sb.facts["volume_attachment"]
    sb.advance(700)  # the detach has failed several times: the next try is minutes away

    def error_time() -> str:
        return str(sb.get("VolumeAttachment", None, name)["status"]["detachError"]["time"])

    before = error_time()
    sb.rebase(sb.clock.now() + timedelta(days=30))
    shifted = error_time()
    assert shifted != before  # the stamp moved with the clock
    sb.advance(5)
    assert error_time() == shifted  # and no try was set off by the move


def _attachment(http: Any, name: str, node: str, pv: str) -> None:
    code, out = http("POST", "/apis/storage.k8s.io/v1/volumeattachments", {
        "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node,
                 "source": {"persistentVolumeName": pv}}})
    assert code == 201, out


def _attach_error(sb: Any, name: str) -> str:
    """The attachError of VolumeAttachment ``name``, which must not be attached."""
    va = sb.get("VolumeAttachment", None, name)
    assert va["status"].get("attached") is not True
    return str(va["status"]["attachError"]["message"])


def test_the_attacher_says_why_it_cannot_attach_a_missing_volume_or_to_a_node_it_cannot_name(pool):
    """The external-attacher reads the PV, then the node's id from its CSINode, and records
    what it could not find as the attachError (retried after its back-off), as it does on EKS;
    an attachment with neither is never left waiting without a word. A missing PV is refused
    before anything is written; a node without a CSINode after the PV's finalizer is on."""
    sb = pool.fresh("node-dead")
    f = sb.facts
    http = api_for(sb)
    try:
        _attachment(http, "csi-no-such-pv", f["new_node"], "pv-that-was-never-made")
        _attachment(http, "csi-no-such-node", "ip-10-0-9-9.ap-southeast-1.compute.internal", f["pv"])
        # named by hand, not csi-<sha256>: tried as any other (the volume is held elsewhere)
        _attachment(http, "by-hand", f["new_node"], f["pv"])
    finally:
        http.close()
    sb.advance(30)
    assert "VolumeInUse" in _attach_error(sb, "by-hand")
    assert _attach_error(sb, "csi-no-such-pv") == 'persistentvolume "pv-that-was-never-made" not found'
    assert _attach_error(sb, "csi-no-such-node") == (
        'csinode.storage.k8s.io "ip-10-0-9-9.ap-southeast-1.compute.internal" not found')
    for name in ("csi-no-such-pv", "csi-no-such-node"):
        assert not sb.get("VolumeAttachment", None, name)["metadata"].get("finalizers")
    assert "external-attacher/ebs-csi-aws-com" in sb.get("PersistentVolume", None, f["pv"])[
        "metadata"]["finalizers"]
    assert [a[0] for a in ec2_attachments(sb, f["volume_id"])] == [f["instance_id"]]  # where it was
    assert sb.violations == []


def test_the_attacher_does_not_attach_to_a_deleted_node_s_machine(pool):
    """Once a Node is deleted (and its CSINode with it), an attach to it finds no node id: the
    attacher records that, and never attaches the volume to the machine that node was."""
    sb = pool.fresh("node-dead")
    f = sb.facts
    http = api_for(sb)
    try:
        code, out = http("DELETE", f"/api/v1/nodes/{f['dead_node']}")
        assert code == 200, out
        sb.advance(30)
        assert sb.find("CSINode", None, f["dead_node"]) is None
        _attachment(http, "csi-to-a-deleted-node", f["dead_node"], f["pv"])
    finally:
        http.close()
    sb.advance(30)
    assert _attach_error(sb, "csi-to-a-deleted-node") == (
        f'csinode.storage.k8s.io "{f["dead_node"]}" not found')
    assert sb.violations == []


def test_the_attacher_refuses_to_attach_a_persistent_volume_marked_for_deletion(pool):
    """The external-attacher refuses to attach a PV being deleted ("PersistentVolume ... is marked
    for deletion", as an attachError, retried after its back-off): a pod whose volume was
    deleted under it while it moved stays pending, its volume attached nowhere."""
    sb = pool.fresh("node-dead")
    f = sb.facts
    http = api_for(sb)
    try:
        code, out = http("DELETE", f"/api/v1/persistentvolumes/{f['pv']}")
        assert code == 200, out
    finally:
        http.close()
    assert sb.get("PersistentVolume", None, f["pv"])["metadata"]["deletionTimestamp"]  # protected
    taint(sb, f["dead_node"], OOS)
    sb.advance(60)
    [va] = vas_on(sb, f["new_node"])
    assert va["status"].get("attached") is not True
    assert va["status"]["attachError"]["message"] == f'PersistentVolume "{f["pv"]}" is marked for deletion'
    assert ec2_attachments(sb, f["volume_id"]) == []
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Pending"
    assert sb.violations == []
