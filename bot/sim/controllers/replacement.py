"""Replacement: an Auto Scaling group's health check, or Karpenter, swapping out a broken instance.

Off unless the scenario's option ``replacement`` is true. Which replaces is the option
``node_group`` (see ``bot.sim.nodegroups``): an Auto Scaling group (self-managed or a managed
node group) marks an instance unhealthy when it is not ``running`` or fails its status checks (a
hung guest), and replaces it ``replace_after`` seconds later (120 by default). Karpenter learns of
a stopping, stopped or terminated instance from its interruption queue and replaces it
``replace_after`` seconds later (60 by default); a node that is only NotReady it repairs after
``repair_after`` (node repair's 30 minutes). Option ``auto_repair`` (with or without
``replacement``) is EKS node auto repair on a managed node group or Auto Scaling group: a node
NotReady for ``repair_after`` (1800 s, the EKS docs' 30 minutes for ``Ready``) is replaced,
except while more than 20% of a group of more than five nodes is unhealthy (EKS pauses repair
then: a zone outage is not repaired). EKS Auto Mode (``node_group=auto-mode``) replaces as
Karpenter does, and a replacement Karpenter or Auto Mode launches registers with a NodeClaim.

Replacing is what both do: terminate the old instance (its Node is then deleted by the cloud
node lifecycle controller, its volumes detach with the termination) and launch a new one of the
same group in the same zone, whose Node registers ``join_after`` seconds later (90 by default):
a copy of the old Node's labels and capacity under a new name, providerID and machine. When the
zone has failed, the launch goes to another zone or fails and is retried (``zone_launch``).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta
from typing import Any

from bot.sim.controllers.context import DRIVER, Context, instance_id, node_ready
from bot.sim.controllers.zone_launch import placement
from bot.sim.ec2_instances import boot_id
from bot.sim.ec2_moto import MotoQuery
from bot.sim.nodegroups import GROUP_TAGS, KARPENTER_KINDS, claim, group_of
from bot.sim.store import clone, ts

DEFAULTS = {"asg": 120.0, "managed-node-group": 120.0, "karpenter": 60.0, "auto-mode": 60.0}
REPAIR_AFTER = 1800.0
JOIN_AFTER = 90.0


def reconcile_replacement(ctx: Context) -> None:
    asg = _truthy(ctx.options.get("replacement"))
    # EKS node auto repair on a managed node group: a node NotReady for repair_after is replaced
    repair = _truthy(ctx.options.get("auto_repair"))
    if not asg and not repair:
        return
    kind = str(ctx.options.get("node_group") or "managed-node-group")
    after = float(ctx.options.get("replace_after") or DEFAULTS.get(kind, 120.0))
    since: dict[str, datetime] = ctx.state.setdefault("unhealthy_since", {})
    nodes = {instance_id(n): n for n in ctx.items("Node")}
    for inst in sorted(_instances(ctx), key=lambda i: i.id):
        iid, state = inst.id, inst._state.name
        if state in ("shutting-down", "terminated") and iid in ctx.state.get("replaced", {}):
            continue
        node = nodes.get(iid)
        if kind in KARPENTER_KINDS:
            broken = state in ("stopping", "stopped", "shutting-down", "terminated")
            wait = after if broken else float(ctx.options.get("repair_after") or REPAIR_AFTER)
            broken = broken or (node is not None and not node_ready(node))
        else:
            broken = asg and (state not in ("pending", "running") or iid in ctx.ec2.hung)
            wait = after
            if not broken and repair and node is not None and not node_ready(node) \
                    and not _repair_paused(ctx, iid, nodes):
                broken, wait = True, float(ctx.options.get("repair_after") or REPAIR_AFTER)
        if not broken:
            since.pop(iid, None)
            continue
        first = since.setdefault(iid, ctx.now)
        if (ctx.now - first).total_seconds() >= wait:
            _replace(ctx, iid, node, kind)
    _join(ctx)


def _repair_paused(ctx: Context, iid: str, nodes: dict[str | None, dict[str, Any]]) -> bool:
    """EKS pauses node auto repair in a managed node group of more than five nodes of which
    more than 20% are unhealthy (a zone outage): nothing new is repaired until that passes."""
    group = [i for i in ctx.state.get("groups", {}).get(group_of(ctx.state, iid), [])
             if ctx.ec2.instance_state(i) not in ("shutting-down", "terminated")]
    unhealthy = [i for i in group if i in nodes and not node_ready(nodes[i])]
    return len(group) > 5 and len(unhealthy) > 0.2 * len(group)


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def _instances(ctx: Context) -> list[Any]:
    groups = [g for g in ctx.state.get("groups", {}).values()]
    ids = {i for g in groups for i in g}
    return [i for r in ctx.ec2.backend.reservations.values() for i in r.instances if i.id in ids]


def _replace(ctx: Context, iid: str, node: dict[str, Any] | None, kind: str) -> None:
    replaced: dict[str, str] = ctx.state.setdefault("replaced", {})
    ctx.state["unhealthy_since"].pop(iid, None)
    ctx.ec2.terminate_now(iid)
    template = node or ctx.state.get("templates", {}).get(iid)
    if template is None:
        replaced[iid] = ""
        return
    inst = ctx.ec2.instance(iid)
    assert inst is not None, iid
    # a failed zone has no capacity: launch elsewhere, or fail and try again on a later pass
    placed = placement(ctx, iid, template, kind, inst.instance_type)
    if placed is None:
        return
    template = placed
    zone = template["metadata"]["labels"]["topology.kubernetes.io/zone"]
    tags = {k: v for k, v in ctx.ec2.tags(iid).items()
            if k in GROUP_TAGS or k.startswith("kubernetes.io/cluster/")}
    new = MotoQuery(ctx.ec2).run_instances(
        ImageId=inst.image_id, MinCount=1, MaxCount=1, InstanceType=inst.instance_type,
        Placement={"AvailabilityZone": zone}, Tags=tags,
        Spot=getattr(inst, "lifecycle", None) == "spot")["Instances"][0]["InstanceId"]
    replaced[iid] = new
    group = group_of(ctx.state, iid)
    ctx.state["groups"].setdefault(group, []).append(new)
    join_after = float(ctx.options.get("join_after") or JOIN_AFTER)
    ctx.state.setdefault("joining", {})[new] = (ctx.now + timedelta(seconds=join_after), clone(template))
    ctx.state.setdefault("templates", {})[new] = clone(template)


def _join(ctx: Context) -> None:
    joining: dict[str, tuple[datetime, dict[str, Any]]] = ctx.state.get("joining", {})
    for iid in sorted(joining):
        due, template = joining[iid]
        if due > ctx.now or ctx.ec2.instance_state(iid) != "running":
            continue
        del joining[iid]
        node = _node_like(ctx, template, iid)
        name = node["metadata"]["name"]
        created = ctx.store.create(ctx.store_res("Node"), node)
        uid = created["metadata"]["uid"]
        # the kubelet's CSINode, owned by its Node: the garbage collector deletes it with the Node
        ctx.store.create(ctx.store_res("CSINode"), {
            "metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]},
            "spec": {"drivers": [
                {"name": DRIVER, "nodeID": iid, "topologyKeys": ["topology.ebs.csi.aws.com/zone"],
                 "allocatable": {"count": 25}}]}})
        kind = str(ctx.options.get("node_group") or "managed-node-group")
        if kind in KARPENTER_KINDS:  # Karpenter launched it for a NodeClaim of its own
            claim(ctx.store, ctx.ec2, created, kind=kind, now=ts(ctx.now))
        ctx.state.setdefault("templates", {})[iid] = clone(node)
        ctx.event(ctx.find("Node", None, node["metadata"]["name"]) or node, type="Normal",
                  reason="RegisteredNode", source="node-controller",
                  message=f"Node {node['metadata']['name']} event: Registered Node "
                          f"{node['metadata']['name']} in Controller")


def _node_like(ctx: Context, template: dict[str, Any], iid: str) -> dict[str, Any]:
    old = template["metadata"]["name"]
    head, _, domain = old.partition(".")
    parts = head.split("-")  # ip-10-0-OCTET-HOST
    octet = parts[-2]
    # a name no node had in this sandbox: a large event replaces more nodes than one subnet's 50
    # host numbers, and a replacement named like the node it replaced would pass for it
    seen = {str(t["metadata"]["name"]) for t in ctx.state.get("templates", {}).values()}
    seen |= set(ctx.state.get("deleted_nodes", {}))
    while True:
        n = ctx.state["joined"] = int(ctx.state.get("joined", 0)) + 1
        parts[-2] = octet if n < 50 else str(100 + (int(octet) + n // 50) % 150)
        parts[-1] = str(200 + n % 50)
        name = "-".join(parts) + ("." + domain if domain else "")
        if name not in seen and ctx.find("Node", None, name) is None:
            break
    zone = template["metadata"]["labels"]["topology.kubernetes.io/zone"]
    digest = hashlib.sha256(iid.encode()).hexdigest()
    labels = {**template["metadata"]["labels"], "kubernetes.io/hostname": name}
    info = {**(template.get("status", {}).get("nodeInfo") or {}), "bootID": boot_id(iid, 0),
            "machineID": f"ec2{digest[:29]}", "systemUUID": str(uuid.UUID(digest[32:]))}
    address = ".".join(parts[1:5])
    status = template.get("status", {})
    return {
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"csi.volume.kubernetes.io/nodeid": f'{{"{DRIVER}":"{iid}"}}'}},
        "spec": {"providerID": f"aws:///{zone}/{iid}"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "kubelet is posting ready status",
                                   "lastHeartbeatTime": ts(ctx.now), "lastTransitionTime": ts(ctx.now)}],
                   "allocatable": status.get("allocatable", {}), "capacity": status.get("capacity", {}),
                   "addresses": [{"type": "InternalIP", "address": address},
                                 {"type": "Hostname", "address": name}],
                   "nodeInfo": info}}
