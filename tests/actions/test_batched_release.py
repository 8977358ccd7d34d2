"""The batched releases of a zone outage: aws.ec2.volumes.detach (interlock 2 for every volume)
and k8s.volumeattachments.delete (interlock 10 for every VolumeAttachment). Each reads once for
the whole batch, judges each volume with the single action's rule, and refuses the whole step,
changing nothing, when one of them is refused."""

from __future__ import annotations

import pytest

from bot.errors import InterlockBlocked, PermanentError
from tests.fakes.calls import sent

DETACH = "aws.ec2.volumes.detach"
DELETE = "k8s.volumeattachments.delete"


def _held(world, *states: str) -> list[dict[str, str]]:
    """One volume per instance, each instance in the state given, all let go by Kubernetes."""
    out = []
    for state in states:
        iid = world.instance(state=state)
        out.append({"volume_id": world.volume(attach_to=iid), "instance_id": iid})
    return out


# -- aws.ec2.volumes.detach -------------------------------------------------------------------

def test_one_volume_on_a_running_instance_refuses_the_whole_batch_and_detaches_nothing(world):
    ok, live = _held(world, "stopped", "running")
    with pytest.raises(InterlockBlocked) as e:
        world.plan(DETACH, volumes=[ok, live], force=True)
    assert e.value.rule == "force-detach"
    assert f"{live['instance_id']} (running)" in e.value.message
    assert live["volume_id"] in e.value.message and "none of them is" in e.value.message
    assert ok["volume_id"] not in e.value.message.split(":", 1)[1]  # only the one refused
    assert world.writes() == []
    assert {world.volume_state(v["volume_id"]) for v in (ok, live)} == {"in-use"}


def test_an_instance_started_after_approval_refuses_the_batch_at_apply_before_any_detach(world):
    first, second = _held(world, "stopped", "stopped")
    plan, _ = world.plan(DETACH, volumes=[first, second], force=True)
    assert [c.operation for c in plan.changes] == ["force-detach", "force-detach"]
    world.ec2.start_instances(InstanceIds=[second["instance_id"]])
    with pytest.raises(InterlockBlocked) as e:
        world.apply(plan)
    assert e.value.rule == "force-detach" and second["instance_id"] in e.value.message
    assert "DetachVolume" not in world.proxy.requests
    assert world.volume_state(first["volume_id"]) == "in-use"


def test_a_volume_kubernetes_still_holds_refuses_the_batch_naming_its_attachment(world):
    free, held = _held(world, "stopped", "stopped")
    world.node("n1", ready="Unknown", instance_id=held["instance_id"])
    world.pv("pv-1", volume_id=held["volume_id"])
    world.va("csi-1", node="n1", pv="pv-1")  # not being deleted: Kubernetes still uses it there
    with pytest.raises(InterlockBlocked) as e:
        world.plan(DETACH, volumes=[free, held], force=True)
    assert "not let go" in e.value.message and "csi-1" in e.value.message
    assert held["volume_id"] in e.value.message and world.writes() == []


def test_break_glass_on_rule_2_lets_the_batch_through_and_is_recorded(world):
    free, held = _held(world, "stopped", "stopped")
    world.node("n1", ready="Unknown", instance_id=held["instance_id"])
    world.pv("pv-1", volume_id=held["volume_id"])
    world.va("csi-1", node="n1", pv="pv-1")
    glass = frozenset({"force-detach"})
    plan, _ = world.plan(DETACH, volumes=[free, held], force=True, overrides=glass)
    assert world.contexts[-1].overridden == ["force-detach"]
    results, _ = world.until_done(plan, overrides=glass)
    assert results[-1].data["remaining"] == [] and "force-detach" in world.contexts[-1].overridden
    assert {world.volume_state(v["volume_id"]) for v in (free, held)} == {"available"}


def test_the_batch_reads_once_however_many_volumes_it_detaches(world):
    volumes = _held(world, "stopped", "stopped", "terminated", "stopped")
    world.pv("pv-x", volume_id=world.volume())
    world.va("csi-x", node="elsewhere", pv="pv-x")  # a VolumeAttachment of another volume
    plan, calls = world.plan(DETACH, volumes=volumes, force=True)
    assert sent(calls) == ["DescribeVolumes", "DescribeInstances", "list_volume_attachment",
                           "list_persistent_volume", "list_node", "DescribeVolumeStatus"]
    assert len(plan.changes) == 4
    result, calls = world.apply(plan)
    assert sent(calls).count("DetachVolume") == 4 and sent(calls).count("DescribeVolumes") == 2
    assert result.done and result.data["detached"] == sorted(v["volume_id"] for v in volumes)
    # an attachment that is not stuck gets a normal DetachVolume, even when force is allowed
    assert not any(i["forced"] for i in result.data["items"])


def test_a_volume_already_off_its_instance_is_left_alone_and_the_others_detached(world):
    gone, still = _held(world, "stopped", "stopped")
    world.ec2.detach_volume(VolumeId=gone["volume_id"], InstanceId=gone["instance_id"])
    plan, _ = world.plan(DETACH, volumes=[gone, still], force=True)
    assert [c.target for c in plan.changes] == [still["volume_id"]]
    assert plan.fact(f"volume {gone['volume_id']}", "attachment") is None
    results, _ = world.until_done(plan)
    assert results[-1].data["remaining"] == [] and world.proxy.requests.count("DetachVolume") == 1


def test_a_volume_ec2_refuses_fails_alone_and_the_others_are_detached(world):
    volumes = sorted(_held(world, "stopped", "stopped"), key=lambda v: v["volume_id"])
    plan, _ = world.plan(DETACH, volumes=volumes, force=True)
    world.proxy.fail_actions["DetachVolume"] = [(403, "UnauthorizedOperation", "not allowed")]
    with pytest.raises(PermanentError) as e:
        world.apply(plan)
    refused, other = volumes
    assert "1 of 2 volume(s) detached" in str(e.value) and refused["volume_id"] in str(e.value)
    assert "UnauthorizedOperation" in str(e.value)
    assert world.volume_state(refused["volume_id"]) == "in-use"
    assert world.volume_state(other["volume_id"]) == "available"


# -- k8s.volumeattachments.delete --------------------------------------------------------------

def _leftover(world, name: str, *, attached_to: str | None = None) -> str:
    """A VolumeAttachment on a node that no longer exists, for a volume EC2 attaches to
    ``attached_to`` (to nothing when None)."""
    vid = world.volume(attach_to=attached_to)
    world.pv(f"pv-{name}", volume_id=vid)
    world.va(name, node=f"gone-{name}", pv=f"pv-{name}")
    return vid


def test_a_va_whose_volume_ec2_still_attaches_to_a_live_machine_refuses_and_deletes_nothing(world):
    _leftover(world, "csi-1")
    machine = world.instance()  # running, and no Node names it: it may be the deleted node's
    vid = _leftover(world, "csi-2", attached_to=machine)
    with pytest.raises(InterlockBlocked) as e:
        world.plan(DELETE, names=["csi-1", "csi-2"])
    assert e.value.rule == "va-delete" and "1 may not be deleted, so none is" in e.value.message
    assert f"csi-2: EC2 still attaches volume {vid} to {machine}" in e.value.message
    assert "csi-1:" not in e.value.message
    assert world.writes() == []


def test_a_volume_attached_back_after_approval_refuses_the_batch_at_apply(world):
    _leftover(world, "csi-1")
    vid = _leftover(world, "csi-2")
    plan, _ = world.plan(DELETE, names=["csi-1", "csi-2"])
    assert [c.target for c in plan.changes] == ["csi-1", "csi-2"]
    world.ec2.attach_volume(VolumeId=vid, InstanceId=world.instance(state="stopped"),
                            Device="/dev/xvdg")
    with pytest.raises(InterlockBlocked) as e:
        world.apply(plan)
    assert e.value.rule == "va-delete" and vid in e.value.message
    assert world.writes() == []


def test_a_va_whose_volume_cannot_be_resolved_refuses_the_batch(world):
    _leftover(world, "csi-1")
    world.va("csi-2", node="gone", pv="pv-missing")
    with pytest.raises(InterlockBlocked) as e:
        world.plan(DELETE, names=["csi-1", "csi-2"])
    assert "csi-2: its EBS volume cannot be resolved" in e.value.message
    assert world.writes() == []


def test_the_batch_deletes_what_is_left_and_what_is_gone_is_already_done(world):
    _leftover(world, "csi-1")
    _leftover(world, "csi-2")
    plan, calls = world.plan(DELETE, names=["csi-1", "csi-2", "csi-gone"])
    assert [c.target for c in plan.changes] == ["csi-1", "csi-2"]
    assert sent(calls) == ["list_volume_attachment", "list_persistent_volume", "list_node",
                           "DescribeVolumes"]
    result, _ = world.apply(plan)
    assert result.data == {"deleted": ["csi-1", "csi-2"], "count": 2}
    assert world.writes() == ["DELETE /apis/storage.k8s.io/v1/volumeattachments/csi-1",
                              "DELETE /apis/storage.k8s.io/v1/volumeattachments/csi-2"]
    again, _ = world.apply(plan)
    assert again.already_done and len(world.writes()) == 2
