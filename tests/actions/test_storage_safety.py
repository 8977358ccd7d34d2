"""Storage interlocks against the real clients: deleting a volume someone still owns, finalizers
whose reason still holds, EBS objects of every driver, EC2's eventual consistency and DryRun."""

from __future__ import annotations

import pytest

from bot.errors import InterlockBlocked, PermanentError, RetryableError

AUTO = "ebs.csi.eks.amazonaws.com"


def _delete_refused(world, params, *needles):
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.volume.delete", **params)
    assert e.value.rule == "volume-delete"
    for needle in needles:
        assert needle in e.value.message, e.value.message
    assert "DeleteVolume" not in world.proxy.requests
    return e.value


def test_an_untagged_volume_is_never_deleted(world):
    vid = world.volume()
    _delete_refused(world, {"volume_id": vid}, "CSIVolumeName")
    assert world.volume_state(vid) == "available"


def test_a_volume_of_a_retain_pv_is_never_deleted(world):
    vid = world.released_volume(reclaim="Retain")
    _delete_refused(world, {"volume_id": vid}, "Retain")


def test_a_volume_of_a_bound_pv_is_never_deleted_even_when_available(world):
    vid = world.released_volume(phase="Bound")
    world.pvc("data-gone-0", volume_name="pv-r")
    _delete_refused(world, {"volume_id": vid}, "Bound", "claim default/data-gone-0 still exists")


def test_a_volume_whose_claim_a_pod_still_mounts_is_never_deleted(world):
    vid = world.released_volume(phase="Failed")
    world.pod("job-0", node="n1", pvc="data-gone-0", waiting="ContainerCreating")
    _delete_refused(world, {"volume_id": vid}, "mounted by default/job-0")


def test_a_finished_pod_does_not_hold_the_volume(world):
    vid = world.released_volume()
    world.pod("job-0", node="n1", pvc="data-gone-0")
    pod = world.kube.get("pods", "job-0", "default")
    pod["status"]["phase"] = "Succeeded"
    world.kube.put("pods", pod)
    world.run("aws.ec2.volume.delete", volume_id=vid, pv="pv-r")
    assert world.volume_state(vid) is None


def test_a_volume_whose_tags_name_another_pv_is_never_deleted(world):
    vid = world.released_volume()
    _delete_refused(world, {"volume_id": vid, "pv": "pv-other"}, "not pv-other")


def test_a_volume_whose_pv_is_gone_is_never_deleted(world):
    vid = world.released_volume()
    world.kube.delete("persistentvolumes", "pv-r")
    _delete_refused(world, {"volume_id": vid}, "is gone")


@pytest.mark.parametrize("driver", ["ebs.csi.aws.com", AUTO])
def test_finalizers_of_a_pv_of_either_csi_driver_stay_while_its_volume_exists(world, driver):
    vid = world.volume()
    world.pv("pv-a", volume_id=vid, driver=driver, terminating=True, phase="Released",
             finalizers=["external-provisioner.volume.kubernetes.io/finalizer"])
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.finalizers.remove", kind="PersistentVolume", name="pv-a")
    assert e.value.rule == "finalizer-volume" and vid in e.value.message
    assert world.run("k8s.pv.get", name="pv-a").data["volume_id"] == vid


@pytest.mark.parametrize("attacher", ["ebs.csi.aws.com", AUTO, "kubernetes.io/aws-ebs"])
def test_a_volumeattachment_of_an_ebs_attacher_whose_pv_is_gone_is_refused(world, attacher):
    world.va("csi-z", node="gone", pv="pv-missing", attacher=attacher, terminating=True)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.finalizers.remove", kind="VolumeAttachment", name="csi-z")
    assert e.value.rule == "finalizer-volume" and attacher in e.value.message
    # break-glass is the way through, and only for this rule
    glass = frozenset({"finalizer-volume"})
    plan, _ = world.plan("k8s.finalizers.remove", kind="VolumeAttachment", name="csi-z",
                         overrides=glass)
    world.apply(plan, overrides=glass)
    assert world.kube.get("volumeattachments", "csi-z") is None


def test_a_volumeattachment_of_another_driver_is_not_an_ebs_matter(world):
    world.va("csi-e", node="gone", pv="pv-missing", attacher="efs.csi.aws.com", terminating=True)
    world.run("k8s.finalizers.remove", kind="VolumeAttachment", name="csi-e")
    assert world.kube.get("volumeattachments", "csi-e") is None


@pytest.mark.parametrize("kind, name, namespace", [
    ("PersistentVolume", "pv-1", None), ("PersistentVolumeClaim", "data-0", "default"),
    ("VolumeAttachment", "csi-0", None)])
def test_finalizers_are_never_removed_from_an_object_not_being_deleted(world, kind, name, namespace):
    vid = world.volume()
    world.ec2.delete_volume(VolumeId=vid)
    world.pv("pv-1", volume_id=vid, phase="Released")
    world.pvc("data-0", volume_name="pv-1")
    world.va("csi-0", node="n1", pv="pv-1")
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.finalizers.remove", kind=kind, name=name, namespace=namespace)
    assert e.value.rule == "finalizer-blocker" and "not being deleted" in e.value.message
    assert world.writes() == []


def test_pv_protection_on_a_bound_pv_means_stop(world):
    vid = world.volume()
    world.ec2.delete_volume(VolumeId=vid)
    world.pv("pv-1", volume_id=vid, terminating=True, claim=("default", "data-0"))
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.finalizers.remove", kind="PersistentVolume", name="pv-1")
    assert e.value.rule == "finalizer-blocker" and "Bound to claim default/data-0" in e.value.message


def test_pvc_protection_stays_while_a_pod_uses_the_claim(world):
    vid = world.volume()
    world.ec2.delete_volume(VolumeId=vid)
    world.pv("pv-1", volume_id=vid, phase="Released")
    world.pvc("data-0", volume_name="pv-1", terminating=True)
    world.pod("es-0", node="n1", pvc="data-0", terminating=True)  # not finished: still uses it
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.finalizers.remove", kind="PersistentVolumeClaim", name="data-0",
                   namespace="default")
    assert e.value.rule == "finalizer-blocker" and "default/es-0" in e.value.message


def test_blockers_name_the_bound_claim_and_say_stop(world):
    world.pv("pv-1", volume_id=world.volume(), terminating=True, claim=("default", "data-0"))
    world.pvc("data-0", volume_name="pv-1")
    world.pod("es-0", node="n1", pvc="data-0")
    data = world.run("k8s.pv.blockers", name="pv-1").data
    assert data["verdict"] == "bound" and "default/data-0" in data["why"]
    assert data["claim_users"] == ["default/es-0"]


def test_blockers_read_the_failing_csi_delete_from_its_event(world):
    vid = world.released_volume()
    pv = world.kube.get("persistentvolumes", "pv-r")
    pv["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    world.kube.put("persistentvolumes", pv)
    world.kube.put("events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "pv-r.1", "namespace": "default"},
        "involvedObject": {"kind": "PersistentVolume", "name": "pv-r"}, "type": "Warning",
        "reason": "VolumeFailedDelete", "lastTimestamp": "2026-01-01T00:00:00Z",
        "message": f'rpc error: code = Internal desc = Could not delete volume ID "{vid}": '
                   "VolumeInUse"})
    data = world.run("k8s.pv.blockers", name="pv-r").data
    assert data["verdict"] == "csi-delete-failing" and "VolumeInUse" in data["failed_delete"]


def test_a_snapshot_is_taken_once_per_step_and_tagged_with_the_run(world):
    vid = world.released_volume()
    first = world.run("aws.ec2.volume.snapshot", volume_id=vid)
    snap = world.ec2.describe_snapshots(SnapshotIds=[first.data["snapshot_id"]])["Snapshots"][0]
    tags = {t["Key"]: t["Value"] for t in snap["Tags"]}
    assert tags["runbook-bot/run"] == "rb-test1" and tags["runbook-bot/pv"] == "pv-r"
    again = world.run("aws.ec2.volume.snapshot", volume_id=vid)
    assert again.already_done and again.data["snapshot_id"] == first.data["snapshot_id"]
    assert world.proxy.requests.count("CreateSnapshot") == 1


def test_a_delete_answered_incorrect_state_reads_again_before_deciding(world):
    vid = world.released_volume()
    plan, _ = world.plan("aws.ec2.volume.delete", volume_id=vid)
    world.proxy.fail_actions["DeleteVolume"] = [
        (400, "IncorrectState", f"The volume {vid} is 'in-use'")]  # EC2 still sees it attached
    with pytest.raises(RetryableError) as e:
        world.apply(plan)
    assert e.value.code == "EventualConsistency" and world.volume_state(vid) == "available"
    result, _ = world.apply(plan)  # the step's retry: EC2 has caught up
    assert result.data["deleted"] and world.volume_state(vid) is None


def test_a_delete_answered_not_found_for_a_gone_volume_is_success(world):
    vid = world.released_volume()
    plan, _ = world.plan("aws.ec2.volume.delete", volume_id=vid)
    world.ec2.delete_volume(VolumeId=vid)  # someone else, in between
    result, _ = world.apply(plan)
    assert result.data["deleted"]


def test_an_endpoint_that_ignores_dry_run_is_an_error_not_a_permission(world, ec2_backend):
    from bot.clients.ec2 import Ec2Client

    vid = world.released_volume()
    client = Ec2Client(client=ec2_backend.product)  # through the proxy, as the product calls
    assert client.create_snapshot(volume_id=vid, description="d", tags={"k": "v"}, dry_run=True)["DryRun"]
    world.proxy.ignore_dry_run = True
    with pytest.raises(PermanentError) as e:
        client.create_snapshot(volume_id=vid, description="d", tags={"k": "v"}, dry_run=True)
    assert e.value.code == "DryRunIgnored"
    with pytest.raises(PermanentError) as e:
        client.delete_volume(volume_id=vid, dry_run=True)
    assert e.value.code == "DryRunIgnored"
    assert world.volume_state(vid) is None  # why: the "dry run" really deleted it


def test_a_detach_answered_incorrect_state_reads_again_before_deciding(world):
    iid = world.instance(state="stopped")
    vid = world.volume(attach_to=iid)
    plan, _ = world.plan("aws.ec2.volume.detach", volume_id=vid)
    world.proxy.fail_actions["DetachVolume"] = [  # EC2's view of the volume lags a change
        (400, "IncorrectState", f"Volume '{vid}' is in the 'available' state.")]
    with pytest.raises(RetryableError):  # read again: still attached, so tried again, not failed
        world.apply(plan)
    assert world.proxy.requests[-2:] == ["DetachVolume", "DescribeVolumes"]
    world.ec2.detach_volume(VolumeId=vid, InstanceId=iid)  # the detach lands
    result, _ = world.apply(plan)
    assert result.done and result.data["state"] == "available"


def test_a_detach_refused_for_another_reason_still_fails(world):
    vid = world.volume(attach_to=world.instance(state="stopped"))
    plan, _ = world.plan("aws.ec2.volume.detach", volume_id=vid)
    world.proxy.fail_actions["DetachVolume"] = [(403, "UnauthorizedOperation", "no")]
    with pytest.raises(PermanentError):
        world.apply(plan)
