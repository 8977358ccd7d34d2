"""Data that lives on a zone's dead machines alone: it keeps a node out of a batch, and its claims
from being called recovered.

A zone batch (``k8s.zone.fence_taint``) fences tens of machines on one approval. The fence of a
machine whose pods' data lives on its own disks (its instance store, local volumes: see
``bot.actions.local_data``) destroys that data for good, so the fence of one node names what is
lost and asks for one more person. A batch cannot ask one more person for one of its nodes
without asking it for all, and its approvers read a list of nodes, not what each one holds; so the
batch leaves such a node out, saying what it holds and where to fence it (``node-dead-ngns``, where
two people are shown what is lost), as it leaves out Auto Mode machines. Its reads are made once
for the batch: one DescribeInstanceTypes, one list of pods and one of PVs for every machine it may
fence, instead of one of each per machine.

A claim bound to a local volume of a dead node can never run on another node: its PV's node
affinity pins it there, and its data is on that machine. Such a volume has no VolumeAttachment, so
the survey finds these claims by their PVs' affinity (``pinned``), and the placement check reports
each one ``blocked`` with what it takes (the node back, or the data given up), never recovered.
"""

from __future__ import annotations

from bot.actions import local_data
from bot.actions.authoring import Env, Obj, instance_id_of, instance_state, meta, ready_condition
from bot.actions.local_data import INSTANCE_TYPE_LABELS, LocalData, local_kind, pinned_to

FENCEABLE = frozenset({"pending", "running", "stopping"})  # states a batch may stop or terminate


class BatchLocalData:
    """What the fence of each machine of a batch would destroy, read once for the batch."""

    def __init__(self, env: Env, nodes: list[Obj], instances: dict[str, Obj]) -> None:
        self.env = env
        self._nodes = nodes
        self._instances = instances
        self._warm = False

    def _warm_up(self) -> None:
        """One DescribeInstanceTypes for every type the batch may fence, and, when more than one
        machine may be fenced, one list of every pod: each machine's reads are then served from
        the pass's shared reads (the list of PVs is shared from the first read on)."""
        self._warm = True
        types: set[str] = set()
        fenceable = 0
        for node in self._nodes:
            inst = self._instances.get(instance_id_of(node) or "")
            if instance_state(inst) not in FENCEABLE:
                continue
            fenceable += 1
            labels = meta(node).get("labels") or {}
            kind = next((str(labels[k]) for k in INSTANCE_TYPE_LABELS if labels.get(k)), None)
            if kind or (inst or {}).get("InstanceType"):
                types.add(kind or str((inst or {}).get("InstanceType")))
        if types:
            self.env.ec2.describe_instance_types(sorted(types))
        if fenceable > 1:
            self.env.kube.list_pods()

    def of(self, instance_id: str, instance: Obj | None) -> LocalData:
        if not self._warm:
            self._warm_up()
        return local_data.find(self.env, instance_id=instance_id, instance=instance)


def left_out(lost: LocalData) -> str:
    """Why a batch leaves a machine with local data out, and where to fence it instead."""
    parts = []
    if lost.instance_store:
        parts.append(f"the {lost.instance_store.get('total_gb')} GB instance store of "
                     f"{lost.instance_type}")
    claims = [str(v.get("claim") or f"volume {v['pv']}") for v in lost.volumes]
    if claims:
        more = f" and {len(claims) - 3} more" if len(claims) > 3 else ""
        parts.append(f"claim{'s' if len(claims) > 1 else ''} {', '.join(claims[:3])}{more} on "
                     f"local volume{'s' if len(claims) > 1 else ''}")
    return (f"holds local data ({'; '.join(parts)}): fence it alone with node-dead-ngns, where two "
            "people see what is lost, or repair it in place, which keeps the data")


def pinned(pvs: list[Obj], nodes: list[Obj]) -> dict[str, str]:
    """The local PVs (``local_data.local_kind``) that their node affinity pins to one of
    ``nodes``: PV name -> node name."""
    out: dict[str, str] = {}
    for pv in pvs:
        if local_kind(pv) is None:
            continue
        holder = next((str(meta(n)["name"]) for n in nodes if pinned_to(pv, n)), None)
        if holder is not None:
            out[str(meta(pv)["name"])] = holder
    return out


def placement(pv: Obj, *, pod: Obj | None, dead: set[str], nodes: list[Obj]) -> tuple[str, str] | None:
    """The outcome of a claim bound to a local volume of one of the ``dead`` nodes, or None when
    its volume is not one: ``running`` only on that very node, back and Ready; else ``blocked``."""
    kind = local_kind(pv)
    if kind is None:
        return None
    by_name = {str(meta(n)["name"]): n for n in nodes}
    # a node deleted meanwhile is known by its name alone
    holder = next((name for name in sorted(dead)
                   if pinned_to(pv, by_name.get(name) or {"metadata": {"name": name}})), None)
    if holder is None:
        return None
    where = ((pod or {}).get("spec") or {}).get("nodeName")
    phase = ((pod or {}).get("status") or {}).get("phase")
    back = holder in by_name and ready_condition(by_name[holder])[0] == "True"
    if pod is not None and phase == "Running" and where == holder and back:
        return "running", f"running on {holder}, which came back: its local data was kept"
    path = ((pv.get("spec") or {}).get("local") or (pv.get("spec") or {}).get("hostPath") or {})
    at = f" ({path['path']})" if path.get("path") else ""
    return "blocked", (
        f"its {kind} volume {meta(pv)['name']}{at} is on {holder}'s own disks: no other node can "
        f"run its pod, and its data lives only there. Bring {holder} back (repaired in place; a "
        "stop or terminate has wiped its instance store) and lift its taint with node-recovered, "
        "or accept the data as lost: delete the claim and its PV so that its workload makes a "
        "new one elsewhere")
