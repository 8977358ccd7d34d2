"""EC2 actions: reads, fencing stop, detach with interlock 2, delete, and batching."""

from __future__ import annotations

import pytest

from bot.errors import InterlockBlocked, PermanentError, RetryableError
from tests.fakes.calls import sent


def _ops(calls):
    return sent(calls)


def test_instance_get_reports_state_code_zone_status_and_volumes(world):
    iid = world.instance()
    vid = world.volume(attach_to=iid)
    plan, plan_calls = world.plan("aws.ec2.instance.get", instance_id=iid)
    result, calls = world.apply(plan)
    assert plan_calls == []
    assert result.data["exists"] and result.data["state"] == "running"
    assert result.data["state_code"] == 16 and result.data["zone"] == "us-east-1a"
    assert vid in result.data["volume_ids"]
    assert _ops(calls) == ["DescribeInstances", "DescribeInstanceStatus", "DescribeInstanceAttribute"]
    assert all(c.request_id for c in calls)


def test_instance_get_of_an_unknown_id_is_not_an_error(world):
    result = world.run("aws.ec2.instance.get", instance_id="i-0123456789abcdef0")
    assert result.data["exists"] is False and result.data["state"] is None


# what a fence destroys for good (its type's instance store, local volumes) and the io2
# Multi-Attach volumes it shares
LOCAL_DATA_READS = ["DescribeInstanceTypes", "list_pod_for_all_namespaces", "list_persistent_volume",
                    "DescribeVolumes"]


def test_force_stop_fences_the_instance_and_a_second_apply_is_a_no_op(world):
    iid = world.instance()
    node = world.dead_node(iid)
    plan, plan_calls = world.plan("aws.ec2.instance.stop", instance_id=iid)
    assert [c.summary() for c in plan.changes] == [f"force-stop Instance {iid}: running -> stopped"]
    assert plan.summary == f"Stop EC2 instance {iid} (force)"
    # one live read of the instance: DescribeInstanceStatus gives the state and the status checks
    # and what the stop would destroy for good: the instance type's storage, the node's pods and
    # the PVs (tests/actions/test_fence_local_data.py), and the volumes it shares, read before
    # interlock 8 (its Lease), so that a refused fence shows them too
    assert _ops(plan_calls) == ["DescribeInstanceStatus", "list_node", "DescribeInstances",
                                *LOCAL_DATA_READS, "read_namespaced_lease"]
    assert plan.fact(f"node {node}", "liveness")["verdict"] == "dead"
    result, calls = world.apply(plan)
    assert _ops(calls) == ["DescribeInstanceStatus", "DescribeInstances", "list_node",
                           "read_namespaced_lease", "StopInstances"]
    # moto answers "stopping" and is stopped on the next read: the engine polls apply again
    assert result.done is False and result.retry_after > 0 and "stopping" in result.progress
    final, final_calls = world.apply(plan, poll=True)
    assert final.done and final.data == {"instance_id": iid, "state": "stopped"}
    assert _ops(final_calls) == ["DescribeInstances"]
    assert world.instance_state(iid) == "stopped"
    assert world.plan("aws.ec2.instance.stop", instance_id=iid)[0].is_noop


def test_stopping_an_unknown_instance_is_a_permanent_error_naming_it(world):
    with pytest.raises(PermanentError) as e:
        world.plan("aws.ec2.instance.stop", instance_id="i-0123456789abcdef0")
    assert e.value.code == "InvalidInstanceID.NotFound" and "i-0123456789abcdef0" in str(e.value)


def test_volumes_list_batches_ids_instance_and_tags_in_one_call(world):
    iid = world.instance()
    team = iid  # unique per test: the EC2 account is shared by the session
    attached = world.volume(attach_to=iid, tags={"team": team})
    loose = world.volume(tags={"team": team})
    world.volume(tags={"team": "other"})
    by_tag, calls = world.apply(world.plan("aws.ec2.volumes.list", tags={"team": team})[0])
    assert {i["volume_id"] for i in by_tag.data["items"]} == {attached, loose}
    assert _ops(calls) == ["DescribeVolumes"]
    by_instance = world.run("aws.ec2.volumes.list", instance_id=iid)
    found = {i["volume_id"] for i in by_instance.data["items"]}
    assert attached in found and loose not in found  # plus the instance's root volume
    by_ids = world.run("aws.ec2.volumes.list", volume_ids=[attached, loose, "vol-0123456789abcdef0"])
    assert by_ids.data["count"] == 2


def test_volume_get_shows_attachments(world):
    iid = world.instance()
    vid = world.volume(attach_to=iid)
    data = world.run("aws.ec2.volume.get", volume_id=vid).data
    assert data["state"] == "in-use" and data["attachments"] == [
        {"instance_id": iid, "state": "attached", "device": "/dev/xvdf"}]
    assert world.run("aws.ec2.volume.get", volume_id="vol-0123456789abcdef0").data["exists"] is False


def test_many_instances_state_is_one_describe_instances_call(world):
    ids = [world.instance() for _ in range(3)] + ["i-0123456789abcdef0"]
    ctx = world.ctx()
    env = world.catalog._env(world.catalog.validate("aws.ec2.instance.get", {"instance_id": ids[0]}), ctx)
    found = env.ec2.describe_instances(ids)
    assert set(found) == set(ids[:3]) and _ops(ctx.calls) == ["DescribeInstances"]


@pytest.mark.parametrize("force", [True, False])
def test_detach_from_a_stopped_instance_waits_for_available_and_is_idempotent(world, force):
    iid = world.instance(state="stopped")
    vid = world.volume(attach_to=iid)
    plan, _ = world.plan("aws.ec2.volume.detach", volume_id=vid, force=force)
    op = "force-detach" if force else "detach"
    assert [c.summary() for c in plan.changes] == [
        f"{op} Volume {vid}: attached to {iid} (attached) -> available"]
    result, calls = world.apply(plan)
    assert "DetachVolume" in _ops(calls)
    # an attachment that is not stuck gets a normal DetachVolume, even when force is allowed
    assert result.done and result.data == {"volume_id": vid, "state": "available", "forced": False}
    assert world.volume_state(vid) == "available"
    again, again_calls = world.apply(plan)
    assert again.already_done and _ops(again_calls) == ["DescribeVolumes"]


def test_force_detach_from_a_running_instance_is_refused_at_plan_and_apply(world):
    iid = world.instance(state="stopped")
    vid = world.volume(attach_to=iid)
    plan, _ = world.plan("aws.ec2.volume.detach", volume_id=vid, force=True)
    world.ec2.start_instances(InstanceIds=[iid])
    with pytest.raises(InterlockBlocked) as e:
        world.apply(plan)
    assert e.value.rule == "force-detach" and iid in e.value.message
    with pytest.raises(InterlockBlocked):
        world.plan("aws.ec2.volume.detach", volume_id=vid, force=True)
    assert world.volume_state(vid) == "in-use"
    assert "DetachVolume" not in world.proxy.requests


def test_detach_of_a_volume_attached_elsewhere_than_asked_is_refused(world):
    iid, other = world.instance(state="stopped"), world.instance(state="stopped")
    vid = world.volume(attach_to=iid)
    with pytest.raises(PermanentError) as e:
        world.plan("aws.ec2.volume.detach", volume_id=vid, instance_id=other)
    assert e.value.code == "InvalidAttachment.NotFound"


def test_delete_removes_an_available_volume_once(world):
    vid = world.released_volume()
    plan, _ = world.plan("aws.ec2.volume.delete", volume_id=vid)
    assert [c.summary() for c in plan.changes] == [f"delete Volume {vid}: available -> deleted"]
    result, calls = world.apply(plan)
    assert result.data == {"volume_id": vid, "deleted": True} and not result.already_done
    assert _ops(calls) == ["DescribeVolumes", "read_persistent_volume",
                           "read_namespaced_persistent_volume_claim", "list_namespaced_pod",
                           "DeleteVolume", "DescribeVolumes"]  # then checked
    assert world.volume_state(vid) is None
    again, again_calls = world.apply(plan)
    assert again.already_done and _ops(again_calls) == ["DescribeVolumes"]


def test_delete_of_an_in_use_volume_is_refused_before_any_write(world):
    vid = world.volume(attach_to=world.instance())
    with pytest.raises(PermanentError, match="detach it first"):
        world.plan("aws.ec2.volume.delete", volume_id=vid)
    assert "DeleteVolume" not in world.proxy.requests


def test_ec2_dry_run_operation_means_permitted(world):
    iid = world.instance()
    ctx = world.ctx()
    env = world.catalog._env(world.catalog.validate("aws.ec2.instance.get", {"instance_id": iid}), ctx)
    assert env.ec2.stop_instances([iid], force=True, dry_run=True) == {"DryRun": True}
    assert ctx.calls[0].outcome == "DryRunOperation" and world.instance_state(iid) == "running"


def test_an_ec2_endpoint_that_ignores_dry_run_is_an_error_not_permitted(world):
    iid = world.instance()
    ctx = world.ctx()
    env = world.catalog._env(world.catalog.validate("aws.ec2.instance.get", {"instance_id": iid}), ctx)
    world.proxy.ignore_dry_run = True
    with pytest.raises(PermanentError) as e:
        env.ec2.stop_instances([iid], force=True, dry_run=True)
    assert e.value.code == "DryRunIgnored" and "ignored DryRun" in str(e.value)


def test_a_stop_ec2_refuses_while_the_instance_boots_is_tried_again_at_the_next_poll(world):
    iid = world.instance()
    world.dead_node(iid)
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid)
    world.proxy.fail_actions["StopInstances"] = [
        (400, "IncorrectInstanceState", f"The instance '{iid}' is not in a state from which it "
                                        "can be stopped.")]
    first, first_calls = world.apply(plan)
    assert not first.done and world.instance_state(iid) == "running"
    assert [(c.operation, c.outcome) for c in first_calls] == [
        ("DescribeInstanceStatus", "ok"), ("DescribeInstances", "ok"),
        ("DescribeInstanceStatus", "cached"), ("list_node", "ok"), ("read_namespaced_lease", "ok"),
        ("StopInstances", "IncorrectInstanceState")]
    results, _ = world.until_done(plan)
    assert results[-1].data == {"instance_id": iid, "state": "stopped"}
    assert world.instance_state(iid) == "stopped"


def _held_volume(world, *, deleting: bool, node_exists: bool = True):
    iid = world.instance(state="stopped")
    vid = world.volume(attach_to=iid)
    if node_exists:
        world.node("n1", ready="Unknown", instance_id=iid)
    world.pv("pv-1", volume_id=vid)
    world.va("csi-1", node="n1", pv="pv-1", detach_error="rpc error: DetachVolume timed out")
    if deleting:
        va = world.kube.get("volumeattachments", "csi-1")
        va["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        world.kube.put("volumeattachments", va)
    return iid, vid


@pytest.mark.parametrize("node_exists", [True, False])
def test_force_detach_is_refused_while_a_volumeattachment_still_holds_the_volume(world, node_exists):
    _, vid = _held_volume(world, deleting=False, node_exists=node_exists)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.volume.detach", volume_id=vid, force=True)
    assert e.value.rule == "force-detach" and "csi-1" in e.value.message
    assert "not let go" in e.value.message and world.writes() == []


def test_force_detach_goes_ahead_once_kubernetes_deleted_the_attachment_and_shows_its_error(world):
    _, vid = _held_volume(world, deleting=True)  # deleting, attached: true, detachError
    plan, _ = world.plan("aws.ec2.volume.detach", volume_id=vid, force=True)
    [row] = plan.fact(f"volume {vid}", "volume_attachments")
    assert row == {"name": "csi-1", "node": "n1", "deleting": True, "attached": True,
                   "detach_error": "rpc error: DetachVolume timed out"}
    results, _ = world.until_done(plan)
    assert results[-1].data["state"] == "available" and world.volume_state(vid) == "available"


@pytest.mark.parametrize("code", ["IncorrectState", "InvalidAttachment.NotFound"])
def test_a_detach_answered_from_a_stale_view_is_re_read_then_decided(world, code):
    iid = world.instance(state="stopped")
    vid = world.volume(attach_to=iid)
    plan, _ = world.plan("aws.ec2.volume.detach", volume_id=vid, instance_id=iid)

    class FinishedMeanwhile(list):  # EC2 completed a detach just as ours arrived
        def pop(self, index=-1):
            world.ec2.detach_volume(VolumeId=vid, InstanceId=iid)
            return super().pop(index)

    world.proxy.fail_actions["DetachVolume"] = FinishedMeanwhile([(400, code, f"{vid} is not attached")])
    result, calls = world.apply(plan)
    assert [(c.operation, c.outcome) for c in calls] == [
        ("DescribeVolumes", "ok"), ("DetachVolume", code), ("DescribeVolumes", "ok")]
    assert result.done and result.data["state"] == "available"


def test_a_detach_refused_as_stale_while_the_volume_is_still_attached_is_retried(world):
    iid = world.instance(state="stopped")
    vid = world.volume(attach_to=iid)
    plan, _ = world.plan("aws.ec2.volume.detach", volume_id=vid, instance_id=iid)
    world.proxy.fail_actions["DetachVolume"] = [(400, "IncorrectState", "eventually consistent")]
    with pytest.raises(RetryableError) as e:
        world.apply(plan)
    assert e.value.code == "IncorrectState" and world.volume_state(vid) == "in-use"
    results, _ = world.until_done(plan)
    assert results[-1].data["state"] == "available"
