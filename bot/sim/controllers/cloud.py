"""The cloud side of a node: EC2's clock and the cloud node lifecycle controller.

- **EC2's clock.** Instance transitions (stopping, pending, shutting-down) complete when due on
  the sandbox clock, and actions a test scheduled (``Sandbox.at``) run when their time comes.
- **Cloud node lifecycle controller** (cloud-controller-manager, AWS provider), for nodes that are
  not Ready: an instance that no longer exists or is ``terminated`` gets its Node deleted
  (``DeletingNode`` event; the garbage collector then takes its CSINode and Lease), and a
  ``stopped`` one gets the ``node.cloudprovider.kubernetes.io/shutdown:NoSchedule`` taint; the taint
  goes when the node is Ready again. A deleted node is remembered in ``ctx.state['deleted_nodes']``
  so the attach/detach controller can still detach what it had attached there.

The guest's boot id (``nodeInfo.bootID``, changed by a stop and start or a repair, with a
``Rebooted`` event) is the kubelet's to report: ``controllers/kubelet.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.sim.controllers.context import Context, condition, instance_id, node_ready
from bot.sim.store import clone

SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
SOURCE = "cloud-node-lifecycle-controller"


def reconcile_ec2_clock(ctx: Context) -> None:
    ctx.ec2.tick()
    due: list[tuple[datetime, int, Any]] = ctx.state.setdefault("scheduled", [])
    while due and due[0][0] <= ctx.now:
        _, _, action = due.pop(0)
        action()
        ctx.ec2.tick()


def schedule(ctx: Context, when: datetime, action: Any) -> None:
    """Run ``action()`` in the first controller pass at or after ``when`` (sandbox clock)."""
    due: list[tuple[datetime, int, Any]] = ctx.state.setdefault("scheduled", [])
    seq = ctx.state["schedule_seq"] = int(ctx.state.get("schedule_seq", 0)) + 1
    due.append((when, seq, action))
    due.sort(key=lambda row: (row[0], row[1]))


def reconcile_cloud_nodes(ctx: Context) -> None:
    for node in ctx.items("Node"):
        name = node["metadata"]["name"]
        iid = instance_id(node)
        if iid is None or node["metadata"].get("deletionTimestamp"):
            continue  # being deleted already: a finalizer's owner (Karpenter) finishes it
        tainted = any(t.get("key") == SHUTDOWN_TAINT for t in node["spec"].get("taints") or [])
        if node_ready(node):
            if tainted:
                ctx.store.mutate("Node", None, name, _untaint)
            continue
        state = ctx.ec2.instance_state(iid)
        if state in ("missing", "terminated"):
            _delete_node(ctx, node)
        elif state == "stopped" and not tainted:
            ctx.store.mutate("Node", None, name, _taint)


def _taint(n: dict[str, Any]) -> None:
    n["spec"]["taints"] = [*(n["spec"].get("taints") or []),
                           {"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}]


def _untaint(n: dict[str, Any]) -> None:
    n["spec"]["taints"] = [t for t in n["spec"].get("taints") or [] if t.get("key") != SHUTDOWN_TAINT]


def _delete_node(ctx: Context, node: dict[str, Any]) -> None:
    name = node["metadata"]["name"]
    ctx.event(node, type="Normal", reason="DeletingNode",
              message=f"Deleting node {name} because it does not exist in the cloud provider",
              source=SOURCE)
    gone: dict[str, Any] = ctx.state.setdefault("deleted_nodes", {})
    gone[name] = clone(node)
    ready = condition(gone[name], "Ready")
    if ready is not None:
        ready["status"] = "Unknown"
    ctx.store.delete(ctx.store_res("Node"), None, name)
