"""Taint-based eviction and pod garbage collection: how pods leave a dead node.

NoExecute taints evict pods that do not tolerate them (after ``tolerationSeconds`` if tolerated for
a while); eviction is a graceful delete, so on a dead node the pod stays ``Terminating`` forever.
Pod GC (kube-controller-manager's ``podgc``), every 20 s (``gcCheckPeriod``), force-deletes
terminating pods on nodes that are not Ready *and* carry the ``node.kubernetes.io/out-of-service``
taint key (value and effect are not checked): the first half of Non-Graceful Node Shutdown
(DOMAIN.md §1). It also force-deletes pods bound to a node that no longer exists, but not at once:
a missing node is held in quarantine for 40 s (``quarantineTime``, meant for an informer that has
not seen a new node yet) from the pass that first saw it missing, and only a pass after that which
finds it still gone deletes its pods. Pods leave a deleted node 40 to 60 s after the deletion.
Before each force delete a pod that had not finished is marked ``Failed`` (an orphan with the
``DisruptionTarget`` condition, ``DeletionByPodGC``), as a pod nobody will ever report on again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from bot.sim.controllers.context import OOS_TAINT, Context, has_taint, node_ready
from bot.sim.store import ts

GC_PERIOD = 20.0  # gcCheckPeriod
QUARANTINE = 40.0  # quarantineTime: how long a missing node may still be on its way
ORPHANED = "PodGC: node no longer exists"


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
    pods = ctx.items("Pod")
    gone = _deleted_nodes(ctx, nodes, pods)
    for pod in pods:
        node_name = pod["spec"].get("nodeName")
        if not node_name:
            continue
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        node = nodes.get(node_name)
        if node_name in gone:
            reason = ORPHANED
        elif node is not None and pod["metadata"].get("deletionTimestamp") and \
                not node_ready(node) and has_taint(node, OOS_TAINT):
            reason = "PodGC: node is out of service"
        else:
            continue
        ctx.event(pod, type="Normal", reason="PodGCForceDelete" if node else "PodGCOrphaned",
                  message=reason, source="pod-garbage-collector")
        ctx.store.mutate("Pod", ns, name, _fail(ctx, orphan=reason == ORPHANED))
        ctx.store.remove(ctx.store_res("Pod"), ns, name)


def _deleted_nodes(ctx: Context, nodes: dict[str, Any], pods: list[dict[str, Any]]) -> set[str]:
    """The names of missing nodes whose quarantine is over (``gcOrphaned``'s delaying queue): a
    node first seen missing is due ``QUARANTINE`` seconds later; a due one that is back (a new
    Node under the same name) is let go, as the real controller's GET finds it."""
    queue: dict[str, datetime] = ctx.state.setdefault("pod_gc_quarantine", {})
    for pod in pods:
        name = pod["spec"].get("nodeName")
        if name and name not in nodes and name not in queue:
            queue[name] = ctx.now + timedelta(seconds=QUARANTINE)
    due = {name for name, when in queue.items() if when <= ctx.now}
    for name in due:
        del queue[name]
    return {name for name in due if name not in nodes}


def _fail(ctx: Context, *, orphan: bool) -> Callable[[dict[str, Any]], None]:
    """Mark a pod that had not finished ``Failed`` before it is force-deleted."""
    def apply(pod: dict[str, Any]) -> None:
        st = pod.setdefault("status", {})
        if st.get("phase") in ("Succeeded", "Failed"):
            return
        st["phase"] = "Failed"
        if orphan:
            st["conditions"] = [c for c in st.get("conditions") or ()
                                if c.get("type") != "DisruptionTarget"]
            st["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                     "reason": "DeletionByPodGC", "message": ORPHANED,
                                     "lastTransitionTime": ts(ctx.now)})
    return apply
