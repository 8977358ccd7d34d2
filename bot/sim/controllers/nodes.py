"""The node lifecycle controller: how kubelets' Leases and posts become Node conditions and taints.

It judges a node from what reaches the API server, as the real controller does, never from the
machine: a node is stale once both its Lease's ``renewTime`` and its Ready ``lastHeartbeatTime``
are older than ``node-monitor-grace-period`` (50 s since Kubernetes 1.32, option
``node_monitor_grace_period``). A stale node gets Ready and the pressure conditions ``Unknown``
(``NodeStatusUnknown``, "Kubelet stopped posting node status."). The agent's conditions are not
touched: they are not the kubelet's. Only a node it saw go from Ready=True gets the
``NodeNotReady`` event and its pods marked not ready; a kubelet's own Ready=False is the
kubelet's to report, and its pods keep their Ready when it then falls silent.

Taints follow the conditions (``doNoScheduleTaintingPass``/``doNoExecuteTaintingPass``): Ready
``Unknown`` -> ``unreachable``, Ready ``False`` (a live kubelet said so) -> ``not-ready``, both
NoSchedule and NoExecute; MemoryPressure/DiskPressure/PIDPressure ``True`` -> the matching
``*-pressure`` NoSchedule taint. A taint kept keeps its ``timeAdded`` (tolerationSeconds count
from it); taints go when their condition does. Eviction is the taint eviction controller's
(``controllers/gc.py``).

``machine_up`` is here because the kubelets (``controllers/kubelet.py``) and the staging code
need it; the lifecycle controller never reads it.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers import leases
from bot.sim.controllers.context import (
    NOT_READY,
    UNREACHABLE,
    Context,
    condition,
    instance_id,
    seconds_option,
)
from bot.sim.controllers.node_status import PRESSURE
from bot.sim.store import ts

GRACE_PERIOD = 50.0  # node-monitor-grace-period: 40 s before Kubernetes 1.32, 50 s since
UNKNOWN = ("NodeStatusUnknown", "Kubelet stopped posting node status.")
NEVER = ("NodeStatusNeverUpdated", "Kubelet never posted node status.")
# condition -> (status, taint key, effects) the controller taints for
TAINTS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("Ready", "False", NOT_READY, ("NoSchedule", "NoExecute")),
    ("Ready", "Unknown", UNREACHABLE, ("NoSchedule", "NoExecute")),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure", ("NoSchedule",)),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure", ("NoSchedule",)),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure", ("NoSchedule",)),
)
MANAGED = {key for _, _, key, _ in TAINTS}


def machine_up(ctx: Context, node: dict[str, Any]) -> bool:
    """The kubelet reaches the API server: the instance runs, is not hung, and not partitioned."""
    iid = instance_id(node)
    return iid is not None and ctx.ec2.instance_state(iid) == "running" and \
        iid not in ctx.ec2.hung and iid not in ctx.state.get("partitioned", ())


def grace_period(ctx: Context) -> float:
    return seconds_option(ctx, "node_monitor_grace_period", GRACE_PERIOD)


def reconcile_node_lifecycle(ctx: Context) -> None:
    now = ts(ctx.now)
    grace = grace_period(ctx)
    for node in ctx.items("Node"):
        name = node["metadata"]["name"]
        ready = condition(node, "Ready")
        if ready is None:
            continue
        lease = leases.lease_of(ctx, name)
        ages = [ctx.seconds_since(ready.get("lastHeartbeatTime"))]
        if lease is not None:
            ages.append(ctx.seconds_since(lease.get("spec", {}).get("renewTime")))
        if min(ages) >= grace and ready.get("status") != "Unknown":
            ctx.store.mutate("Node", None, name, lambda n: _unknown(n, now))
            if ready.get("status") == "True":  # only Ready it saw go from True (monitorNodeHealth)
                ctx.event(node, type="Normal", reason="NodeNotReady",
                          message=f"Node {name} status is now: NodeNotReady", source="node-controller")
                _pods_not_ready(ctx, name, now)
            node = ctx.find("Node", None, name) or node
        _taint(ctx, node, now)


def _pods_not_ready(ctx: Context, node: str, now: str) -> None:
    """As the node lifecycle controller does once it stops hearing from a node it last saw Ready
    (MarkPodsNotReady): the Ready condition of every pod on it turns False. A node whose kubelet
    posted Ready=False before it fell silent is not one: its pods keep the Ready they had, stale,
    as in Kubernetes (the taint eviction is what moves them)."""
    def mark(p: dict[str, Any]) -> None:
        for c in p.get("status", {}).get("conditions") or ():
            if c.get("type") == "Ready" and c.get("status") == "True":
                c.update(status="False", lastTransitionTime=now)

    for pod in ctx.items("Pod"):
        if pod["spec"].get("nodeName") == node and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in pod.get("status", {}).get("conditions") or ()):
            meta = pod["metadata"]
            ctx.store.mutate("Pod", meta.get("namespace"), meta["name"], mark)


def _unknown(n: dict[str, Any], now: str) -> None:
    conds = n["status"].setdefault("conditions", [])
    for ctype in ("Ready", *PRESSURE):
        c = condition(n, ctype)
        if c is None:
            conds.append({"type": ctype, "status": "Unknown", "reason": NEVER[0], "message": NEVER[1],
                          "lastHeartbeatTime": now, "lastTransitionTime": now})
        elif c.get("status") != "Unknown":
            c.update(status="Unknown", reason=UNKNOWN[0], message=UNKNOWN[1], lastTransitionTime=now)


def _taint(ctx: Context, node: dict[str, Any], now: str) -> None:
    """Make the node's condition taints match its conditions."""
    statuses: dict[Any, Any] = {}  # type -> status of its first condition, as ``condition`` finds
    for c in node.get("status", {}).get("conditions") or ():
        statuses.setdefault(c.get("type"), c.get("status"))
    wanted = [(key, effect) for ctype, status, key, effects in TAINTS
              if statuses.get(ctype) == status for effect in effects]
    have = [t for t in node["spec"].get("taints") or [] if t.get("key") in MANAGED]
    if sorted((t.get("key", ""), t.get("effect", "")) for t in have) == sorted(wanted):
        return

    def apply(n: dict[str, Any]) -> None:
        kept = {(t.get("key"), t.get("effect")): t for t in n["spec"].get("taints") or []}
        taints = [t for t in n["spec"].get("taints") or [] if t.get("key") not in MANAGED]
        for key, effect in wanted:
            taints.append(kept.get((key, effect)) or {"key": key, "effect": effect, "timeAdded": now})
        n["spec"]["taints"] = taints
    ctx.store.mutate("Node", None, node["metadata"]["name"], apply)
