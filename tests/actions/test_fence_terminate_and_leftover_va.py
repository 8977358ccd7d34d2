"""The fence for instances EC2 cannot stop (aws.ec2.instance.terminate, interlock 8) and the
deletion of a VolumeAttachment left on a node that is gone (k8s.volumeattachment.delete,
interlock 10): each goes ahead only when its guard holds, and refuses before any write otherwise."""

from __future__ import annotations

import pytest

from bot.errors import InterlockBlocked


def _spot(world) -> str:
    return str(world.ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, Placement={"AvailabilityZone": "us-east-1a"},
        InstanceMarketOptions={"MarketType": "spot"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "karpenter.sh/nodepool", "Value": "default"},
            {"Key": "eks:eks-cluster-name", "Value": "test"}]}],
    )["Instances"][0]["InstanceId"])


def test_instance_get_says_a_spot_instance_is_fenced_by_terminate(world):
    iid = _spot(world)
    data = world.run("aws.ec2.instance.get", instance_id=iid).data
    assert (data["lifecycle"], data["fence_by"], data["stop_protected"]) == ("spot", "terminate", False)
    assert data["group"] == {"nodepool": "default"}
    assert world.run("aws.ec2.instance.get", instance_id=world.instance()).data["fence_by"] == "stop"


def test_instance_get_reads_stop_protection_and_offers_no_fence(world):
    iid = world.instance()
    world.ec2.modify_instance_attribute(InstanceId=iid, DisableApiStop={"Value": True})
    data = world.run("aws.ec2.instance.get", instance_id=iid).data
    assert data["stop_protected"] is True and data["fence_by"] == "none"


def test_instance_get_reads_termination_protection_only_where_a_terminate_is_the_fence(world):
    iid = _spot(world)
    world.ec2.modify_instance_attribute(InstanceId=iid, DisableApiTermination={"Value": True})
    result, calls = world.apply(world.plan("aws.ec2.instance.get", instance_id=iid)[0])
    assert (result.data["terminate_protected"], result.data["fence_by"]) == (True, "none")
    assert [c.operation for c in calls].count("DescribeInstanceAttribute") == 2
    # a machine a stop can fence: its termination protection is never read, and does not matter
    plain = world.instance()
    world.ec2.modify_instance_attribute(InstanceId=plain, DisableApiTermination={"Value": True})
    result, calls = world.apply(world.plan("aws.ec2.instance.get", instance_id=plain)[0])
    assert (result.data["terminate_protected"], result.data["fence_by"]) == (False, "stop")
    assert [c.operation for c in calls].count("DescribeInstanceAttribute") == 1


def test_terminate_fences_a_dead_spot_node_once(world):
    iid = _spot(world)
    world.dead_node(iid)
    plan, _ = world.plan("aws.ec2.instance.terminate", instance_id=iid)
    assert [c.operation for c in plan.changes] == ["terminate"]
    results, _ = world.until_done(plan)
    assert results[-1].data["state"] == "terminated" and world.instance_state(iid) == "terminated"
    again, calls = world.apply(plan)
    assert again.already_done and [c.operation for c in calls] == ["DescribeInstances"]


def test_terminate_is_refused_for_a_node_ready_again_at_plan_and_at_apply(world):
    iid = _spot(world)
    name = world.dead_node(iid)
    plan, _ = world.plan("aws.ec2.instance.terminate", instance_id=iid)
    world.node(name, ready="True", instance_id=iid)  # the kubelet posts Ready during the approval
    with pytest.raises(InterlockBlocked) as e:
        world.apply(plan)
    assert e.value.rule == "fence-live" and "Ready again" in e.value.message
    with pytest.raises(InterlockBlocked):
        world.plan("aws.ec2.instance.terminate", instance_id=iid)
    assert world.instance_state(iid) == "running" and "TerminateInstances" not in world.proxy.requests


def test_terminate_is_refused_for_an_instance_no_node_names(world):
    iid = _spot(world)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.terminate", instance_id=iid)
    assert "no Node names" in e.value.message and world.writes() == []


def _leftover(world, *, instance_state: str = "terminated", node_exists: bool = False,
              attached: bool = False) -> tuple[str, str]:
    iid = world.instance(state="stopped" if attached else instance_state)
    vid = world.volume(attach_to=iid if attached else None)
    if node_exists:
        world.node("n1", ready="Unknown", instance_id=iid)
    world.pv("pv-1", volume_id=vid)
    world.va("csi-1", node="n1", pv="pv-1")
    return iid, vid


def test_a_leftover_volumeattachment_of_a_deleted_node_is_deleted_not_stripped(world):
    _leftover(world)
    plan, _ = world.plan("k8s.volumeattachment.delete", name="csi-1")
    assert [c.operation for c in plan.changes] == ["delete"]
    result, _ = world.apply(plan)
    assert result.data == {"name": "csi-1", "deleted": True}
    assert world.writes() == ["DELETE /apis/storage.k8s.io/v1/volumeattachments/csi-1"]
    again, _ = world.apply(plan)
    assert again.already_done


def test_va_delete_is_refused_while_ec2_still_attaches_the_volume_to_an_unknown_instance(world):
    iid, vid = _leftover(world, attached=True)  # the node is gone, the instance only stopped
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.volumeattachment.delete", name="csi-1")
    assert e.value.rule == "va-delete" and vid in e.value.message and iid in e.value.message
    assert world.writes() == []


def test_va_delete_is_refused_while_the_node_exists_and_its_instance_is_not_terminated(world):
    iid, _ = _leftover(world, attached=True, node_exists=True)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.volumeattachment.delete", name="csi-1")
    assert "not terminated" in e.value.message and iid in e.value.message
    assert world.writes() == []


def test_va_delete_is_refused_at_apply_when_the_volume_was_attached_back_to_the_old_machine(world):
    iid = world.instance(state="stopped")
    vid = world.volume()
    world.pv("pv-1", volume_id=vid)
    world.va("csi-1", node="n1", pv="pv-1")
    plan, _ = world.plan("k8s.volumeattachment.delete", name="csi-1")
    world.ec2.attach_volume(VolumeId=vid, InstanceId=iid, Device="/dev/xvdg")
    with pytest.raises(InterlockBlocked):
        world.apply(plan)
    assert world.writes() == []


def test_va_delete_fails_closed_on_a_volume_it_cannot_resolve(world):
    world.va("csi-1", node="n1", pv="pv-missing")
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.volumeattachment.delete", name="csi-1")
    assert "cannot be resolved" in e.value.message and world.writes() == []


def test_va_delete_of_a_volumeattachment_that_is_gone_changes_nothing(world):
    plan, _ = world.plan("k8s.volumeattachment.delete", name="csi-gone")
    assert plan.changes == ()
    assert world.apply(plan)[0].already_done and world.writes() == []

