"""Interlocks 2 and 10, the rules that take an EBS volume away from a machine, for one volume or a
batch of them.

A zone outage leaves tens of volumes that EC2 still attaches to stopped instances, and tens of
VolumeAttachments naming nodes its node groups deleted. Checked one at a time, each volume or
VolumeAttachment read the same instances, VolumeAttachments, PVs and Nodes again, at plan and again
at apply. So each rule is split in two:

- the **reads** (``force_detach_reads``, ``va_delete_reads``): everything the rule looks at, for
  every volume or VolumeAttachment of the step at once: one DescribeVolumes, one DescribeInstances,
  one list each of VolumeAttachments, PVs and Nodes;
- the **judgement** of one (``force_detach_refusals``, ``va_delete_refusals``): why the rule
  refuses it, from those reads, adding what it read to the plan's facts.

The actions for one (``aws.ec2.volume.detach``, ``k8s.volumeattachment.delete``) and for a batch
(``aws.ec2.volumes.detach``, ``k8s.volumeattachments.delete``) call the same two functions, so a
batch applies exactly the rule a single action applies, on reads made at plan and again at apply.
A batch in which one is refused is refused as a whole, naming each one refused and why; nothing
of it is changed. Break-glass lifts rule 2 for the step it is given on, as for a single detach.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.actions import multiattach
from bot.actions.authoring import (
    FENCED_STATES,
    Env,
    Fact,
    Obj,
    csi_instance_id_of,
    ebs_volume_id_of_pv,
    instance_id_of,
    instance_state,
    is_ebs_driver,
    meta,
    nodes_of_instance,
    terminating,
    va_node,
)

RULE_FORCE_DETACH = "force-detach"  # 2
RULE_VA_DELETE = "va-delete"  # 10


# -- 2: no force detach from a machine that may run, nor of a volume Kubernetes still holds ------

@dataclass(frozen=True)
class DetachReads:
    """What rule 2 reads, once for all the volumes of a step: the instances they are detached from
    (and every holder of a Multi-Attach volume), the VolumeAttachments, and, only when there is
    one, the PVs (name -> EBS volume id) and Nodes that say whose each one is."""

    instances: Mapping[str, Obj]
    vas: Sequence[Obj]
    pv_volumes: Mapping[str, str | None]
    nodes: Sequence[Obj]


def _attached_ids(volume: Obj) -> list[str]:
    return sorted({a["InstanceId"] for a in volume.get("Attachments") or () if a.get("InstanceId")})


def _detached_from(volume: Obj, instance_id: str | None) -> list[str]:
    """The instances a detach of ``volume`` takes it from: every holder, or, for a Multi-Attach
    volume several hold, only ``instance_id`` (DetachVolume acts on the one attachment it names)."""
    ids = _attached_ids(volume)
    if multiattach.holders(volume):
        return [instance_id] if instance_id in ids else []
    return ids


def force_detach_reads(env: Env, targets: Sequence[tuple[Obj, str | None]]) -> DetachReads:
    """Rule 2's reads for every (volume, instance it is detached from) of a step, live."""
    ids: set[str] = set()
    for volume, iid in targets:
        ids |= set(_detached_from(volume, iid))
        ids |= {str(a.get("InstanceId")) for a in multiattach.holders(volume)}
    instances = env.ec2.describe_instances(sorted(ids)) if ids else {}
    vas = env.kube.list_volume_attachments()
    if not vas:
        return DetachReads(instances, [], {}, [])
    pvs = {str(meta(pv)["name"]): ebs_volume_id_of_pv(pv) for pv in env.kube.list_pvs()}
    return DetachReads(instances, vas, pvs, env.kube.list_nodes())


def force_detach_refusals(env: Env, *, volume: Obj, instance_id: str | None, reads: DetachReads,
                          facts: list[Fact]) -> list[str]:
    """2, for one volume, from ``reads``: why a force detach of it from ``instance_id`` is refused
    (none: it may go ahead). Every instance it is force-detached from must be stopped or
    terminated, and Kubernetes must have let go of the volume there: no VolumeAttachment for it
    on the instance's node (or on a node that no longer exists) unless it is being deleted.

    A VolumeAttachment with a ``deletionTimestamp`` is one the attach/detach controller gave up
    (the external attacher keeps ``attached: true``, a ``detachError`` and its finalizer while
    EC2 refuses the detach); one without is a volume Kubernetes still considers in use there.

    An io2 volume with Multi-Attach (``MultiAttachEnabled``) is attached to several instances on
    purpose, and a DetachVolume names one of them: only ``instance_id``'s attachment is detached,
    so only that instance must be fenced; the other holders are listed (fact ``attachments``, with
    their states) and block nothing. Which instance must then be named: without it, refused."""
    vid = volume["VolumeId"]
    refusals: list[str] = []
    if multiattach.holders(volume):
        facts.append(multiattach.fact(env, volume, target=instance_id, instances=reads.instances))
        if instance_id not in _attached_ids(volume):
            refusals.append(
                f"volume {vid} is Multi-Attach, attached to {', '.join(_attached_ids(volume))}: a "
                "force detach must name the one instance it detaches from (instance_id), the "
                f"fenced one; {instance_id or 'no instance'} holds no attachment of it")
    ids = _detached_from(volume, instance_id)
    states = {i: instance_state(reads.instances.get(i)) for i in ids}
    for iid, state in states.items():
        facts.append(env.fact(f"instance {iid}", "state", state))
    # an instance EC2 no longer knows about ("absent") was terminated long ago
    live = {i: s for i, s in states.items() if s not in FENCED_STATES | {"absent"}}
    if live:
        refusals.append(
            f"volume {vid} is attached to " + ", ".join(f"{i} ({s})" for i, s in live.items())
            + "; a force detach from a running instance can corrupt the file system. Stop the "
            "instance first (aws.ec2.instance.stop with force), or detach without force")
    held = _held_by_kubernetes(env, volume_id=vid, instance_ids=ids, reads=reads, facts=facts)
    if held:
        refusals.append(
            f"Kubernetes has not let go of volume {vid}: VolumeAttachment(s) {', '.join(held)} "
            "are not being deleted. The attach/detach controller still counts the volume as in "
            "use on that node; taint the node out-of-service (or wait for its pods to be deleted) "
            "and let the VolumeAttachment be deleted first")
    return refusals


def check_force_detach(env: Env, *, volume: Obj, facts: list[Fact],
                       instance_id: str | None = None) -> None:
    """2, for one volume: its reads, then its judgement; each refusal only break-glass lifts."""
    reads = force_detach_reads(env, [(volume, instance_id)])
    for message in force_detach_refusals(env, volume=volume, instance_id=instance_id,
                                         reads=reads, facts=facts):
        env.ctx.interlock(rule=RULE_FORCE_DETACH, ok=False, message=message)


def check_force_detaches(env: Env, *, targets: Sequence[tuple[Obj, str]],
                         facts: list[Fact]) -> None:
    """2, for every volume of a batch on one set of reads: one volume refused refuses the whole
    step (nothing of it is detached), naming each volume refused and why."""
    reads = force_detach_reads(env, targets)
    refused: dict[str, list[str]] = {}
    for volume, iid in targets:
        why = force_detach_refusals(env, volume=volume, instance_id=iid, reads=reads, facts=facts)
        if why:
            refused[str(volume["VolumeId"])] = why
    env.ctx.interlock(
        rule=RULE_FORCE_DETACH, ok=not refused,
        message=f"{len(refused)} of the {len(targets)} volume(s) of this step may not be "
                f"force-detached ({', '.join(refused)}), so none of them is: "
                + "; ".join(m for why in refused.values() for m in why))


def _held_by_kubernetes(env: Env, *, volume_id: str, instance_ids: list[str], reads: DetachReads,
                        facts: list[Fact]) -> list[str]:
    """Names of VolumeAttachments that still hold the volume on one of the instances' nodes."""
    if not reads.vas:
        facts.append(env.fact(f"volume {volume_id}", "volume_attachments", []))
        return []
    names = {meta(n)["name"] for n in reads.nodes}
    mine = {meta(n)["name"] for i in instance_ids for n in nodes_of_instance(list(reads.nodes), i)}
    seen, held = [], []
    for va in sorted(reads.vas, key=lambda v: str(meta(v)["name"])):
        source = (va.get("spec") or {}).get("source") or {}
        pv_name = source.get("persistentVolumeName")
        inline = source.get("inlineVolumeSpec")
        vid = reads.pv_volumes.get(pv_name) if pv_name else (
            ebs_volume_id_of_pv({"spec": inline}) if inline else None)
        node = va_node(va)
        if vid != volume_id or not (node in mine or node not in names):
            continue
        status = va.get("status") or {}
        row = {"name": meta(va)["name"], "node": node, "deleting": terminating(va),
               "attached": bool(status.get("attached")),
               "detach_error": (status.get("detachError") or {}).get("message")}
        seen.append(row)
        if not row["deleting"]:
            held.append(str(row["name"]))
    facts.append(env.fact(f"volume {volume_id}", "volume_attachments", seen))
    return held


# -- 10: a leftover VolumeAttachment goes only once its machine is gone ------------------------

@dataclass(frozen=True)
class VaDeleteReads:
    """What rule 10 reads, once for all the VolumeAttachments of a step: their PVs (by name; None
    for one that is gone), the Nodes, the instances of the nodes that still exist, and the EBS
    volumes."""

    pvs: Mapping[str, Obj | None]
    nodes: Sequence[Obj]
    instances: Mapping[str, Obj]
    volumes: Mapping[str, Obj]


def _pv_name(va: Obj) -> str | None:
    name = ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
    return str(name) if name else None


def _va_volume_id(va: Obj, pvs: Mapping[str, Obj | None]) -> str | None:
    """The EBS volume of a VolumeAttachment: its PV's, or its inline spec's (None: unresolved)."""
    source = (va.get("spec") or {}).get("source") or {}
    pv = pvs.get(_pv_name(va) or "")
    inline = source.get("inlineVolumeSpec")
    return ebs_volume_id_of_pv(pv) if pv else (
        ebs_volume_id_of_pv({"spec": inline}) if inline else None)


def _own_instance(node: Obj | None) -> str | None:
    return (instance_id_of(node) or csi_instance_id_of(node)) if node is not None else None


def va_delete_reads(env: Env, vas: Sequence[Obj]) -> VaDeleteReads:
    """Rule 10's reads for every VolumeAttachment of a step, live: one PV read (a list when the
    step names more than one), one node list, one DescribeInstances, one DescribeVolumes."""
    k = env.kube
    names = sorted({n for n in (_pv_name(v) for v in vas) if n})
    if len(names) == 1:
        pvs: dict[str, Obj | None] = {names[0]: k.find(lambda: k.get_pv(names[0]))}
    elif names:
        listed = {str(meta(pv)["name"]): pv for pv in k.list_pvs()}
        pvs = {n: listed.get(n) for n in names}
    else:
        pvs = {}
    nodes = k.list_nodes()
    by_name = {meta(n)["name"]: n for n in nodes}
    own = sorted({i for v in vas if (i := _own_instance(by_name.get(va_node(v))))})
    instances = env.ec2.describe_instances(own) if own else {}
    vids = sorted({i for v in vas if (i := _va_volume_id(v, pvs))})
    volumes = env.ec2.describe_volumes(vids) if vids else {}
    return VaDeleteReads(pvs, nodes, instances, volumes)


def va_delete_refusals(env: Env, *, va: Obj, reads: VaDeleteReads, facts: list[Fact]) -> list[str]:
    """10, for one leftover VolumeAttachment, from ``reads``: what keeps it from being deleted
    (none: it may be).

    Its node must be absent from the cluster or its instance ``terminated``; the EBS volume must be
    resolvable (the attacher an EBS driver, the PV or inline spec naming a volume) and attached at
    EC2 to no instance that could be that node's: not the node's own instance, and, for an absent
    node, no instance that no present Node names. Deleting the object is what the attach/detach
    controller would do itself; it is never a finalizer edit.
    """
    name = str(meta(va)["name"])
    spec = va.get("spec") or {}
    node_name = va_node(va)
    problems: list[str] = []
    if not is_ebs_driver(spec.get("attacher")):
        problems.append(f"its attacher {spec.get('attacher')!r} is not an EBS driver")
    vid = _va_volume_id(va, reads.pvs)
    facts.append(env.fact(f"volumeattachment {name}", "volume_id", vid))
    node = next((n for n in reads.nodes if meta(n)["name"] == node_name), None)
    facts.append(env.fact(f"volumeattachment {name}", "node_exists", node is not None))
    own = _own_instance(node)
    if node is not None:
        if own is None:
            problems.append(f"node {node_name} exists and names no EC2 instance")
        else:
            state = instance_state(reads.instances.get(own))
            facts.append(env.fact(f"instance {own}", "state", state))
            if state != "terminated":
                problems.append(f"node {node_name} still exists and its instance {own} is {state}, "
                                "not terminated")
    if vid is None:
        problems.append("its EBS volume cannot be resolved (no PV with an EBS volume id)")
    else:
        vol = reads.volumes.get(vid)
        on = [str(a.get("InstanceId")) for a in (vol or {}).get("Attachments") or ()]
        facts.append(env.fact(f"volume {vid}", "attached_to", on))
        known = {i for n in reads.nodes if meta(n)["name"] != node_name
                 for i in (instance_id_of(n), csi_instance_id_of(n)) if i}
        suspect = [i for i in on if i == own or (node is None and i not in known)]
        if suspect:
            problems.append(f"EC2 still attaches volume {vid} to {', '.join(suspect)}, which may "
                            f"be node {node_name}'s machine")
    return problems


VA_DELETE_WHY = ("A leftover VolumeAttachment is deleted only when its node is gone (or its "
                 "instance is terminated) and EC2 no longer attaches the volume to that machine")


def check_va_delete(env: Env, *, va: Obj, facts: list[Fact]) -> None:
    """10, for one VolumeAttachment: its reads, then its judgement."""
    problems = va_delete_refusals(env, va=va, reads=va_delete_reads(env, [va]), facts=facts)
    env.ctx.interlock(
        rule=RULE_VA_DELETE, ok=not problems,
        message=f"refusing to delete VolumeAttachment {meta(va)['name']}: {'; '.join(problems)}. "
                f"{VA_DELETE_WHY}")


def check_va_deletes(env: Env, *, vas: Sequence[Obj], facts: list[Fact]) -> None:
    """10, for every VolumeAttachment of a batch on one set of reads: one refused refuses the
    whole step (none is deleted), naming each one refused and why."""
    reads = va_delete_reads(env, vas)
    refused: dict[str, list[str]] = {}
    for va in vas:
        problems = va_delete_refusals(env, va=va, reads=reads, facts=facts)
        if problems:
            refused[str(meta(va)["name"])] = problems
    env.ctx.interlock(
        rule=RULE_VA_DELETE, ok=not refused,
        message=f"refusing to delete the {len(vas)} VolumeAttachment(s) of this step: "
                f"{len(refused)} may not be deleted, so none is. "
                + "; ".join(f"{name}: {'; '.join(why)}" for name, why in refused.items())
                + f". {VA_DELETE_WHY}")
