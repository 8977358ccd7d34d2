"""Pods, events, VolumeAttachments, PVs, PVCs, StorageClasses and finalizers (interlock 4)."""

from __future__ import annotations

import pytest

from bot.errors import InterlockBlocked, PermanentError

MULTI = ('Multi-Attach error for volume "pvc-0a1b" Volume is already exclusively attached to one '
         "node and can't be attached to another")
OLD_AFFINITY = ("0/15 nodes are available: 3 node(s) had volume node affinity conflict, 12 node(s) "
                "didn't match Pod's node affinity/selector.")
NEW_AFFINITY = "0/3 nodes are available: 3 node(s) didn't match PersistentVolume's node affinity."
VOLUME_ZONE = "0/6 nodes are available: 2 Insufficient cpu, 4 node(s) had no available volume zone."


def _ops(calls):
    return [c.operation for c in calls]


def test_pods_list_by_node_reports_reasons_terminating_and_claims(world):
    world.pod("es-0", node="n1", terminating=True, pvc="data-es-0")
    world.pod("es-1", node="n2", waiting="ContainerCreating", pvc="data-es-1")
    result, calls = world.apply(world.plan("k8s.pods.list", node="n1")[0])
    assert result.data["count"] == 1
    assert result.data["items"][0] == {"name": "es-0", "namespace": "default", "node": "n1",
                                       "phase": "Running", "reason": None, "terminating": True,
                                       "pvcs": ["data-es-0"], "claims": ["default/data-es-0"],
                                       "tolerates_out_of_service": False}
    assert _ops(calls) == ["list_pod_for_all_namespaces"]
    by_ns = world.run("k8s.pods.list", namespace="default", selector="app=none")
    assert by_ns.data["count"] == 0
    creating = world.run("k8s.pods.list", node="n2").data["items"][0]
    assert creating["reason"] == "ContainerCreating"


@pytest.mark.parametrize("message, multi, affinity", [
    (MULTI, True, False), (OLD_AFFINITY, False, True), (NEW_AFFINITY, False, True),
    (VOLUME_ZONE, False, True),
    ("Successfully assigned default/es-0 to n2", False, False)])
def test_pod_events_detect_multi_attach_and_both_affinity_wordings(world, message, multi, affinity):
    world.event("es-0", reason="FailedAttachVolume" if multi else "FailedScheduling", message=message)
    world.event("other", reason="FailedAttachVolume", message=MULTI)
    result, calls = world.apply(world.plan("k8s.pod.events", pod="es-0")[0])
    assert result.data["multi_attach"] is multi and result.data["affinity_conflict"] is affinity
    assert result.data["multi_attach_volume"] == ("pvc-0a1b" if multi else None)
    assert len(result.data["items"]) == 1 and _ops(calls) == ["list_namespaced_event"]


def test_volumeattachments_list_for_one_node_is_one_list_with_errors_and_volume_ids(world):
    world.pv("pv-1", volume_id="vol-0123456789abcdef0")
    world.va("csi-a", node="dead", pv="pv-1", detach_error="rpc error: DeadlineExceeded")
    world.va("csi-b", node="alive", pv="pv-1")
    result, calls = world.apply(world.plan("k8s.volumeattachments.list", node="dead")[0])
    assert result.data["items"] == [{"name": "csi-a", "node": "dead", "pv": "pv-1", "attached": True,
                                     "attach_error": None,
                                     "detach_error": "rpc error: DeadlineExceeded",
                                     "deleting": False, "volume_id": "vol-0123456789abcdef0"}]
    assert _ops(calls) == ["list_volume_attachment", "list_persistent_volume"]
    assert world.run("k8s.volumeattachments.list", pv="pv-1").data["count"] == 2


@pytest.mark.parametrize("world", [{"page_size": 2}], indirect=True)
def test_lists_follow_continue_tokens_across_pages(world):
    for i in range(5):
        world.va(f"csi-{i}", node="dead" if i % 2 else "alive", pv=f"pv-{i}")
    result, calls = world.apply(world.plan("k8s.volumeattachments.wait_gone", node="dead")[0])
    assert result.data["count"] == 2
    assert _ops(calls) == ["list_volume_attachment"] * 3  # 5 items, 2 per page


def test_wait_gone_reports_progress_until_the_last_attachment_is_gone(world):
    for i in range(3):
        world.va(f"csi-{i}", node="dead", pv=f"pv-{i}")
    plan, _ = world.plan("k8s.volumeattachments.wait_gone", node="dead", timeout="10m")
    first, calls = world.apply(plan)
    assert not first.done and first.progress == "0 of 3 detached" and _ops(calls) == [
        "list_volume_attachment"]
    world.kube.delete("volumeattachments", "csi-0")
    world.kube.delete("volumeattachments", "csi-1")
    world.clock.advance(30)
    second, _ = world.apply(plan)
    assert second.progress == "2 of 3 detached" and second.data["remaining"] == ["csi-2"]
    world.kube.delete("volumeattachments", "csi-2")
    last, _ = world.apply(plan)
    assert last.done and last.data == {"remaining": [], "count": 0, "detached": 3}


def test_wait_gone_fails_after_its_timeout_with_what_to_do_next(world):
    world.va("csi-0", node="dead", pv="pv-0")
    plan, _ = world.plan("k8s.volumeattachments.wait_gone", node="dead", timeout="1m")
    world.clock.advance(61)
    with pytest.raises(PermanentError, match="force detach at EC2 is the last resort"):
        world.apply(plan)


def test_wait_gone_with_nothing_attached_is_already_done(world):
    plan, _ = world.plan("k8s.volumeattachments.wait_gone", node="dead")
    result, _ = world.apply(plan)
    assert result.done and result.already_done


@pytest.mark.parametrize("legacy", [False, True])
def test_pv_get_reads_the_ebs_volume_id_and_zone_from_csi_and_in_tree_fields(world, legacy):
    world.pv("pv-1", volume_id="vol-0123456789abcdef0", zone="us-east-1c", legacy=legacy,
             claim=("default", "data-es-0"))
    data = world.run("k8s.pv.get", name="pv-1").data
    assert data["volume_id"] == "vol-0123456789abcdef0" and data["zone"] == "us-east-1c"
    assert data["claim"] == "default/data-es-0" and data["exists"] and not data["terminating"]
    assert world.run("k8s.pv.get", name="pv-gone").data["exists"] is False


def test_pv_list_filters_by_storage_class_and_claim_namespace(world):
    world.pv("pv-1", volume_id="vol-0123456789abcdef0", claim=("db", "data"))
    world.pv("pv-2", volume_id="vol-0123456789abcdef1", legacy=True, claim=("web", "data"))
    assert world.run("k8s.pv.list").data["count"] == 2
    assert [i["name"] for i in world.run("k8s.pv.list", storage_class="gp2").data["items"]] == ["pv-2"]
    assert [i["name"] for i in world.run("k8s.pv.list", claim_namespace="db").data["items"]] == ["pv-1"]


def test_pvc_get_reports_phase_volume_and_finalizers(world):
    world.pvc("data-es-0", volume_name="pv-1", terminating=True)
    data = world.run("k8s.pvc.get", name="data-es-0").data
    assert data == {"name": "data-es-0", "namespace": "default", "exists": True, "phase": "Bound",
                    "volume_name": "pv-1", "storage_class": "gp3",
                    "finalizers": ["kubernetes.io/pvc-protection"], "terminating": True}


def test_storageclass_audit_flags_immediate_binding_across_zones(world):
    world.node("a", zone="us-east-1a")
    world.node("b", zone="us-east-1b")
    world.node("c", zone="us-east-1c", ready="False")
    world.storage_class("gp2")  # Immediate by default
    world.storage_class("gp3", mode="WaitForFirstConsumer")
    world.storage_class("pinned", mode="Immediate", zones=["us-east-1a"])
    result, calls = world.apply(world.plan("k8s.storageclasses.audit")[0])
    assert result.data["zones"] == ["us-east-1a", "us-east-1b"]
    assert {i["name"]: i["risky"] for i in result.data["items"]} == {
        "gp2": True, "gp3": False, "pinned": False}
    assert len(result.data["problems"]) == 1 and "WaitForFirstConsumer" in result.data["problems"][0]
    assert sorted(_ops(calls)) == ["list_node", "list_storage_class"]


def _leaked(world, *, delete_volume: bool):
    vid = world.volume()
    world.pv("pv-1", volume_id=vid, terminating=True, phase="Released",
             finalizers=["kubernetes.io/pv-protection", "external-attacher/ebs-csi-aws-com"])
    world.pvc("data-es-0", volume_name="pv-1", terminating=True)
    world.va("csi-0", node="dead", pv="pv-1", terminating=True)
    if delete_volume:
        world.ec2.delete_volume(VolumeId=vid)
    return vid


@pytest.mark.parametrize("kind, name, namespace", [
    ("PersistentVolume", "pv-1", None), ("PersistentVolumeClaim", "data-es-0", "default"),
    ("VolumeAttachment", "csi-0", None)])
def test_finalizer_removal_is_refused_while_the_ebs_volume_exists(world, kind, name, namespace):
    vid = _leaked(world, delete_volume=False)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.finalizers.remove", kind=kind, name=name, namespace=namespace)
    assert e.value.rule == "finalizer-volume" and vid in e.value.message
    assert "aws.ec2.volume.delete" in e.value.message


def test_finalizer_removal_after_the_volume_is_deleted_clears_them_and_the_object_goes(world):
    _leaked(world, delete_volume=True)
    plan, calls = world.plan("k8s.finalizers.remove", kind="PersistentVolume", name="pv-1")
    assert _ops(calls) == ["read_persistent_volume", "DescribeVolumes"]
    assert plan.changes[0].after == ""
    result, _ = world.apply(plan)
    assert result.data == {"kind": "PersistentVolume", "name": "pv-1",
                           "removed": ["kubernetes.io/pv-protection",
                                       "external-attacher/ebs-csi-aws-com"], "remaining": []}
    assert world.kube.get("persistentvolumes", "pv-1") is None  # terminating, nothing holds it
    again, _ = world.apply(plan)
    assert again.already_done and again.data["removed"] == []


def test_finalizer_removal_can_remove_just_the_named_ones(world):
    _leaked(world, delete_volume=True)
    result = world.run("k8s.finalizers.remove", kind="PersistentVolume", name="pv-1",
                       finalizers=["external-attacher/ebs-csi-aws-com"])
    assert result.data["remaining"] == ["kubernetes.io/pv-protection"]
    assert world.kube.get("persistentvolumes", "pv-1")["metadata"]["finalizers"] == [
        "kubernetes.io/pv-protection"]


def test_finalizer_removal_on_a_claim_without_namespace_is_a_param_error_before_any_call(world):
    from bot.errors import ParamError

    ctx = world.ctx()
    with pytest.raises(ParamError, match="namespace"):
        world.catalog.plan("k8s.finalizers.remove", {"kind": "PersistentVolumeClaim", "name": "c"}, ctx)
    assert ctx.calls == []
