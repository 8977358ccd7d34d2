"""The EC2 machine behind a node, and the Ready, schedulable capacity of each zone.

The dead-node, zone-outage and volume-affinity rules (bot/diagnose/rules.py) all say what a node's
machine is doing and where pods could run; this module answers both from the one read of the
cluster (``World``), and keeps rules.py within the module-size budget (docs/architecture.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bot.actions.objects import LIVE_STATES, Obj, instance_id_of, instance_state, meta, zone_of_node
from bot.diagnose.world import World

GROUP_LABELS = ("eks.amazonaws.com/nodegroup", "karpenter.sh/nodepool",
                "alpha.eksctl.io/nodegroup-name")
SPOT_LABELS = {"eks.amazonaws.com/capacityType": "SPOT", "karpenter.sh/capacity-type": "spot"}


# -- the EC2 instance behind a node -----------------------------------------------------------

@dataclass(frozen=True)
class Machine:
    instance_id: str | None
    state: str  # EC2 state, "absent" when EC2 no longer knows it, "unknown" without an id
    hung: bool
    spot: bool
    reason: str

    @property
    def may_run(self) -> bool:
        """The machine may still be running and writing to its volumes."""
        return self.state in LIVE_STATES

    def words(self) -> str:
        if self.instance_id is None:
            return "no EC2 instance in its providerID"
        text = f"instance {self.instance_id} is {self.state}"
        if self.hung:
            text += " but hung (status checks impaired)"
        if self.spot:
            text += "; a Spot instance (StopInstances is refused: fence by terminating it)"
        return text + (f" ({self.reason})" if self.reason else "")


def machine(world: World, node: Obj) -> Machine:
    iid = instance_id_of(node)
    labels = meta(node).get("labels") or {}
    spot_label = any(labels.get(k) == v for k, v in SPOT_LABELS.items())
    if iid is None:
        return Machine(None, "unknown", False, spot_label, "")
    inst = world.instances.get(iid)
    status = world.statuses.get(iid) or {}
    hung = any((status.get(k) or {}).get("Status") == "impaired"
               for k in ("InstanceStatus", "SystemStatus"))
    reason = str(((inst or {}).get("StateReason") or {}).get("Message") or "")
    return Machine(iid, instance_state(inst), hung,
                   spot_label or (inst or {}).get("InstanceLifecycle") == "spot", reason)


# -- zone capacity ----------------------------------------------------------------------------

def zone_capacity(world: World) -> dict[str, Counter[str]]:
    """zone -> Ready, schedulable nodes by node group / NodePool (``-`` for none)."""
    out: dict[str, Counter[str]] = {}
    for node in world.nodes:
        if not world.ready(node) or (node.get("spec") or {}).get("unschedulable"):
            continue
        labels = meta(node).get("labels") or {}
        group = next((f"{k.split('/')[0].split('.')[0]} {labels[k]}" for k in GROUP_LABELS
                      if labels.get(k)), "-")
        out.setdefault(zone_of_node(node) or "?", Counter())[group] += 1
    return out


def capacity_words(world: World) -> str:
    cap = zone_capacity(world)
    if not cap:
        return "no Ready, schedulable node in any zone"
    parts = []
    for zone in sorted(cap):
        groups = cap[zone]
        detail = ", ".join(f"{g}: {n}" if g != "-" else f"{n} in no node group"
                           for g, n in sorted(groups.items()))
        parts.append(f"{zone}: {sum(groups.values())} Ready ({detail})")
    return "; ".join(parts)
