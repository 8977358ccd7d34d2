"""Taint-based eviction and pod garbage collection: how pods leave a dead node.

NoExecute taints evict pods that do not tolerate them (after ``tolerationSeconds`` if tolerated for
a while); eviction is a graceful delete, so on a dead node the pod stays ``Terminating`` forever.
Pod GC, every 20 s, force-deletes terminating pods on nodes that are not Ready *and* carry the
``node.kubernetes.io/out-of-service`` taint key (value and effect are not checked), and pods whose
node no longer exists. That is the first half of Non-Graceful Node Shutdown (DOMAIN.md §1).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.sim.controllers.context import OOS_TAINT, Context, has_taint, node_ready

GC_PERIOD = 20.0


def _tolerates(pod: dict[str, Any], taint: dict[str, Any]) -> tuple[bool, float | None]:
    for tol in pod.get("spec", {}).get("tolerations") or []:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        if op == "Exists" and (not tol.get("key") or tol.get("key") == taint.get("key")):
            return True, tol.get("tolerationSeconds")
        if op == "Equal" and tol.get("key") == taint.get("key") and \
                tol.get("value", "") == taint.get("value", ""):
            return True, tol.get("tolerationSeconds")
    return False, None


def reconcile_taint_eviction(ctx: Context) -> None:
    nodes = {n["metadata"]["name"]: n for n in ctx.items("Node")}
    for pod in ctx.items("Pod"):
        node = nodes.get(pod["spec"].get("nodeName", ""))
        if node is None or pod["metadata"].get("deletionTimestamp"):
            continue
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") != "NoExecute":
                continue
            ok, seconds = _tolerates(pod, taint)
            if ok and seconds is None:
                continue
            if ok and seconds is not None:
                added = taint.get("timeAdded")
                if added and ctx.seconds_since(added) < float(seconds):
                    continue
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            ctx.event(pod, type="Normal", reason="TaintManagerEviction",
                      message=f"Marking for deletion Pod {ns}/{name}", source="taint-eviction-controller")
            ctx.store.delete(ctx.store_res("Pod"), ns, name)
            break


def reconcile_pod_gc(ctx: Context) -> None:
    last: datetime | None = ctx.state.get("pod_gc_last")
    if last is not None and (ctx.now - last).total_seconds() < GC_PERIOD:
        return
    ctx.state["pod_gc_last"] = ctx.now
    nodes = {n["metadata"]["name"]: n for n in ctx.items("Node")}
    for pod in ctx.items("Pod"):
        node_name = pod["spec"].get("nodeName")
        if not node_name:
            continue
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        node = nodes.get(node_name)
        if node is None:
            reason = "PodGC: node no longer exists"
        elif pod["metadata"].get("deletionTimestamp") and not node_ready(node) and \
                has_taint(node, OOS_TAINT):
            reason = "PodGC: node is out of service"
        else:
            continue
        ctx.event(pod, type="Normal", reason="PodGCForceDelete" if node else "PodGCOrphaned",
                  message=reason, source="pod-garbage-collector")
        ctx.store.remove(ctx.store_res("Pod"), ns, name)
