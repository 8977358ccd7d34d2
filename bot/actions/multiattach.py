"""io2 Multi-Attach: one EBS volume attached to several instances at once, on purpose.

An io2 (or io1) volume created with ``MultiAttachEnabled`` may be attached to up to 16 Nitro
instances of its zone, each attachment its own (DescribeVolumes lists them all; DetachVolume and
its ``Force`` act on the one instance named). A cluster file system or an application that fences
its own writers shares it between a dead node and live ones: a force detach from the dead node
leaves the others' attachments alone, so interlock 2 asks only that the instance detached from is
fenced, and every plan that detaches, or fences a machine holding one, shows every holder.

A volume that is not Multi-Attach, or that only one instance holds, is described as before: no
fact is added, so those plans hash as they always did.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.actions.authoring import Env, Fact, Obj, instance_state


def holders(volume: Obj) -> list[Obj]:
    """The attachments of a Multi-Attach volume that more than one instance holds (else none)."""
    if not volume.get("MultiAttachEnabled"):
        return []
    atts = [a for a in volume.get("Attachments") or () if a.get("State") != "detached"]
    return atts if len({a.get("InstanceId") for a in atts}) > 1 else []


def fact(env: Env, volume: Obj, *, target: str | None,
         instances: Mapping[str, Obj] | None = None) -> Fact:
    """Every holder of the volume: its attachment's state, its instance's state (one
    DescribeInstances for all of them, unless ``instances`` already holds them), and whether it
    is ``target``, the instance the step detaches the volume from (or fences)."""
    atts = sorted(holders(volume), key=lambda a: str(a.get("InstanceId")))
    ids = sorted({str(a.get("InstanceId")) for a in atts})
    states = instances if instances is not None else (
        env.ec2.describe_instances(ids) if ids else {})
    return env.fact(f"volume {volume['VolumeId']}", "attachments", [
        {"instance_id": str(a.get("InstanceId")), "state": a.get("State"),
         "instance_state": instance_state(states.get(str(a.get("InstanceId")))),
         "target": a.get("InstanceId") == target} for a in atts])


def others(volume: Obj, instance_id: str) -> list[str]:
    """The instances besides ``instance_id`` that keep the volume attached."""
    return sorted({str(a.get("InstanceId")) for a in holders(volume)} - {instance_id})


def of_instance(env: Env, instance_id: str) -> list[Fact]:
    """For a fence: the Multi-Attach volumes the instance shares with others, every holder of
    each (one DescribeVolumes by attachment; none when it shares nothing)."""
    vols = env.ec2.describe_volumes(
        filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])
    return [fact(env, vol, target=instance_id) for _, vol in sorted(vols.items()) if holders(vol)]
