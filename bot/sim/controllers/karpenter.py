"""Karpenter's termination of a NodeClaim: self-managed Karpenter and EKS Auto Mode alike.

Deleting a NodeClaim (or its Node) is how a person asks Karpenter to take a machine away; on EKS
Auto Mode it is the only way, since EC2 refuses anyone else's stop or terminate of a managed
instance (``bot.sim.ec2_managed``). Karpenter's termination controllers (kubernetes-sigs/karpenter
v1: node termination, drain, volume detachment, instance termination) do, in order:

1. delete the Node, which the ``karpenter.sh/termination`` finalizer holds, and taint it
   ``karpenter.sh/disrupted:NoSchedule``;
2. drain it: a graceful eviction of every pod it may drain (not a DaemonSet's, not one that
   tolerates the disrupted taint). On a node whose kubelet is silent the evicted pods stay
   Terminating; Karpenter stops waiting for a pod once it has been terminating a minute past its
   grace period ("stuck terminating": ``STUCK_AFTER``). NodeClaim condition ``Drained``;
3. wait for the VolumeAttachments of the pods it drained to go (``VolumesDetached=False``,
   ``AwaitingVolumeDetachment``); the volumes of pods it could not drain do not block. With a
   ``spec.terminationGracePeriod`` it stops waiting when that has run out since the deletion;
4. terminate the instance (``InstanceTerminating``) and wait until EC2 says it is gone;
5. remove the Node's finalizer (the Node goes), then the NodeClaim's.

A Node that is not Ready and whose instance is already terminated loses its finalizer at once:
Karpenter does not drain a machine that no longer exists. Eviction here ignores
PodDisruptionBudgets (the sandbox has none) and drains in one wave, not by priority class.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.context import Context, node_ready, pod_pvcs
from bot.sim.nodegroups import TERMINATION_FINALIZER
from bot.sim.store import ts

DISRUPTED = "karpenter.sh/disrupted"
STUCK_AFTER = 60.0  # seconds past a pod's grace period after which Karpenter stops waiting for it
SOURCE = "karpenter"
GONE = ("terminated", "missing")


def reconcile_nodeclaims(ctx: Context) -> None:
    claims = ctx.items("NodeClaim")
    if not claims:
        return
    by_node = {c.get("status", {}).get("nodeName"): c for c in claims}
    for node in ctx.items("Node"):
        nc = by_node.get(node["metadata"]["name"])
        if nc is not None and node["metadata"].get("deletionTimestamp") and \
                not nc["metadata"].get("deletionTimestamp"):
            # someone deleted the Node: Karpenter terminates its NodeClaim with it
            ctx.store.delete(ctx.store_res("NodeClaim"), None, nc["metadata"]["name"])
    for nc in ctx.items("NodeClaim"):
        if nc["metadata"].get("deletionTimestamp"):
            _terminate(ctx, nc)


def _terminate(ctx: Context, nc: dict[str, Any]) -> None:
    name = str(nc.get("status", {}).get("nodeName") or "")
    iid = str(nc.get("status", {}).get("providerID", "")).rsplit("/", 1)[-1]
    state = ctx.ec2.instance_state(iid) if iid else "missing"
    node = ctx.find("Node", None, name) if name else None
    if node is not None and not node["metadata"].get("deletionTimestamp"):
        ctx.store.delete(ctx.store_res("Node"), None, name)
        node = ctx.find("Node", None, name)
    if node is not None and state in GONE and not node_ready(node):
        _release(ctx, "Node", name)  # the machine no longer exists: nothing to drain
        node = None
    if node is not None and (not _drained(ctx, nc, node) or not _volumes_detached(ctx, nc, node)):
        return
    if state not in GONE:
        if state != "shutting-down":
            ctx.ec2.terminate_now(iid)
            ctx.event(nc, type="Normal", reason="InstanceTerminating",
                      message=f"Terminating instance {iid}", source=SOURCE)
        _set(ctx, nc, "InstanceTerminating", "True", "InstanceTerminating",
             f"instance {iid} is {ctx.ec2.instance_state(iid)}")
        return
    if node is not None:
        _release(ctx, "Node", name)
    _release(ctx, "NodeClaim", nc["metadata"]["name"])


def _drained(ctx: Context, nc: dict[str, Any], node: dict[str, Any]) -> bool:
    name = node["metadata"]["name"]
    if not any(t.get("key") == DISRUPTED for t in node["spec"].get("taints") or []):
        ctx.store.mutate("Node", None, name, lambda n: n["spec"].update(taints=[
            *(n["spec"].get("taints") or []),
            {"key": DISRUPTED, "effect": "NoSchedule", "timeAdded": ts(ctx.now)}]))
    waiting = []
    for pod in _pods_on(ctx, name):
        if not _drainable(ctx, pod):
            continue
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            ctx.event(pod, type="Normal", reason="Evicted", source=SOURCE,
                      message=f"Evicted pod: the node {name} is being terminated")
            ctx.store.delete(ctx.store_res("Pod"), meta["namespace"], meta["name"])
        waiting.append(f"{meta['namespace']}/{meta['name']}")
    if waiting:
        _set(ctx, nc, "Drained", "False", "Draining",
             f"{len(waiting)} pod(s) still terminating: {', '.join(sorted(waiting))}")
        return False
    _set(ctx, nc, "Drained", "True", "Drained", "")
    return True


def _volumes_detached(ctx: Context, nc: dict[str, Any], node: dict[str, Any]) -> bool:
    name = node["metadata"]["name"]
    keep = set()
    for pod in _pods_on(ctx, name):
        if _drainable(ctx, pod):
            continue
        ns = pod["metadata"]["namespace"]
        for claim in pod_pvcs(pod):
            pvc = ctx.find("PersistentVolumeClaim", ns, claim)
            if pvc is not None and pvc.get("spec", {}).get("volumeName"):
                keep.add(pvc["spec"]["volumeName"])
    blocking = sorted(va["metadata"]["name"] for va in ctx.items("VolumeAttachment")
                      if va.get("spec", {}).get("nodeName") == name
                      and (va["spec"].get("source") or {}).get("persistentVolumeName")
                      and va["spec"]["source"]["persistentVolumeName"] not in keep)
    grace = nc.get("spec", {}).get("terminationGracePeriod")
    ran_out = grace is not None and ctx.seconds_since(
        nc["metadata"]["deletionTimestamp"]) >= _seconds(str(grace))
    if blocking and not ran_out:
        _set(ctx, nc, "VolumesDetached", "False", "AwaitingVolumeDetachment",
             f"waiting on VolumeAttachment(s) {', '.join(blocking)}")
        ctx.event(node, type="Normal", reason="AwaitingVolumeDetachment", source=SOURCE,
                  message=f"Awaiting deletion of bound VolumeAttachments ({', '.join(blocking)})")
        return False
    _set(ctx, nc, "VolumesDetached", "True", "VolumesDetached", "")
    return True


def _pods_on(ctx: Context, node: str) -> list[dict[str, Any]]:
    return [p for p in ctx.items("Pod") if p.get("spec", {}).get("nodeName") == node]


def _drainable(ctx: Context, pod: dict[str, Any]) -> bool:
    """Karpenter drains it, and waits for it: not finished, not a DaemonSet's, not tolerating
    the disrupted taint, and not stuck terminating."""
    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or ()):
        return False
    for tol in pod.get("spec", {}).get("tolerations") or ():
        if tol.get("operator") == "Exists" and tol.get("key") in (None, "", DISRUPTED) \
                and tol.get("effect") in (None, "", "NoSchedule"):
            return False
    since = pod["metadata"].get("deletionTimestamp")
    grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
    return not (since and ctx.seconds_since(since) > grace + STUCK_AFTER)


def _set(ctx: Context, nc: dict[str, Any], ctype: str, status: str, reason: str,
         message: str) -> None:
    def put(obj: dict[str, Any]) -> None:
        conds = [c for c in obj.setdefault("status", {}).get("conditions") or []
                 if c.get("type") != ctype]
        old: dict[str, Any] = next((c for c in obj["status"].get("conditions") or []
                                    if c.get("type") == ctype), {})
        since = old.get("lastTransitionTime") if old.get("status") == status else ts(ctx.now)
        obj["status"]["conditions"] = [*conds, {"type": ctype, "status": status, "reason": reason,
                                                "message": message, "lastTransitionTime": since}]
    ctx.store.mutate("NodeClaim", None, nc["metadata"]["name"], put)


def _release(ctx: Context, kind: str, name: str) -> None:
    ctx.store.mutate(kind, None, name, lambda o: o["metadata"].update(finalizers=[
        f for f in o["metadata"].get("finalizers") or [] if f != TERMINATION_FINALIZER]))


def _seconds(duration: str) -> float:
    """A Go duration as Karpenter writes it (``48h``, ``30m``, ``90s``, ``1h30m``)."""
    total, number = 0.0, ""
    for ch in duration:
        if ch.isdigit() or ch == ".":
            number += ch
        else:
            total += float(number or 0) * {"h": 3600, "m": 60, "s": 1}.get(ch, 0)
            number = ""
    return total + (float(number) if number else 0.0)
