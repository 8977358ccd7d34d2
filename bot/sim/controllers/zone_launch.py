"""Where a replacement instance launches when its zone has failed (for ``replacement``).

EC2 refuses launches into an impaired zone (``InsufficientInstanceCapacity``, see ``ec2_zone``).
What the replacer does about it depends on what it may launch into:

- An Auto Scaling group over one zone's subnets (the sandbox's default: one node group per zone,
  as eksctl's ``--node-zones`` or a group per zone for zonal workloads) cannot go elsewhere: the
  launch fails, and the group tries again on its next health-check pass while the desired
  capacity is unmet (here: every ``replace_after`` seconds, as long as the old instance is
  unhealthy). The latest failures are kept in ``ctx.state['failed_launches']``, as the group's
  scaling activities would record them.
- A group over several zones (option ``multi_az=true``: one Auto Scaling group, or managed node
  group, across the three subnets) launches where capacity is: under the Auto Scaling group's
  default Availability Zone distribution, "balanced best effort", a launch that fails in one zone
  is tried in another healthy one, and a balanced group picks the least populated zone.
- Karpenter never pins a replacement to the old zone (its NodePool offers every zone unless told
  otherwise, and it remembers an offering that answered insufficient capacity as unavailable), so
  it launches into a healthy zone too. The NodeClaim the replacement registers with is made by
  the replacement controller once the node joins, whatever the zone.

The new node carries its new zone's labels (``topology.kubernetes.io/zone`` and the EBS driver's
``topology.ebs.csi.aws.com/zone``) and an address in that zone's subnet; a pod whose volume is in
the failed zone still cannot be placed there, which is the point.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.context import EBS_ZONE, ZONE, Context
from bot.sim.ec2_zone import launch_refusal
from bot.sim.nodegroups import KARPENTER_KINDS
from bot.sim.store import clone, ts


def multi_az(options: dict[str, Any]) -> bool:
    return str(options.get("multi_az") or "").lower() in ("1", "true", "yes", "on")


def placement(ctx: Context, iid: str, template: dict[str, Any], kind: str,
              instance_type: str) -> dict[str, Any] | None:
    """The template of the replacement for ``iid`` in the zone it can launch into (the old zone
    when it has capacity), or None, the failure recorded, when it can launch nowhere."""
    zone = template["metadata"]["labels"][ZONE]
    zones = tuple(sorted(z.name for z in ctx.ec2.backend.describe_availability_zones()))
    refusal = launch_refusal(ctx.ec2.zone, zone, instance_type, zones)
    if refusal is None:
        return template
    if kind in KARPENTER_KINDS or multi_az(ctx.options):
        healthy = [z for z in zones if z not in ctx.ec2.zone.impaired_zones]
        if healthy:
            count = {z: 0 for z in healthy}  # instances running or launching, per zone
            for r in ctx.ec2.backend.reservations.values():
                for inst in r.instances:
                    z = getattr(getattr(inst, "placement", None), "zone", None)
                    if z in count and inst._state.name in ("pending", "running"):
                        count[z] += 1
            return relocate(template, min(healthy, key=lambda z: (count[z], z)), zones)
    failed: list[dict[str, str]] = ctx.state.setdefault("failed_launches", [])
    failed.append({"time": ts(ctx.now), "instance": iid, "zone": zone, "code": refusal.code,
                   "message": refusal.message})
    del failed[:-100]  # the latest, as a group's activity history keeps its recent ones
    return None


def relocate(template: dict[str, Any], zone: str, zones: tuple[str, ...]) -> dict[str, Any]:
    """A copy of ``template`` as a node of ``zone``: its zone labels and its subnet's address."""
    node = clone(template)
    labels = node["metadata"]["labels"]
    labels[ZONE] = zone
    if EBS_ZONE in labels:
        labels[EBS_ZONE] = zone
    head, dot, domain = node["metadata"]["name"].partition(".")
    parts = head.split("-")  # ip-10-0-OCTET-HOST: the sandbox gives each zone its own third octet
    if len(parts) == 5 and zone in zones:
        parts[3] = str(zones.index(zone) + 1)
        node["metadata"]["name"] = "-".join(parts) + dot + domain
    return node
