"""Deployments and ReplicaSets: the other way a pod with an EBS claim comes back.

A Deployment owns one ReplicaSet per pod template (named by its ``pod-template-hash``). Unlike a
StatefulSet, a ReplicaSet does not wait for a pod being deleted to go: it counts only pods that are
not terminating, so when a dead node's pod is evicted (and stays Terminating there) the ReplicaSet
creates a replacement at once, and two pods name one claim. With one ReadWriteOnce claim the
replacement then waits on Multi-Attach until the old node lets go of the volume: a real EKS shape.

``RollingUpdate`` (the default) creates the new template's pods while the old ones still exist, as
far as ``maxSurge`` allows, and removes old pods only while ``maxUnavailable`` allows; ``Recreate``
removes every old pod first. Only what the scenarios need: no revision history, no progress
deadline, no pausing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

from bot.sim.controllers.context import Context
from bot.sim.controllers.workloads import DEFAULT_TOLERATIONS

HASH_LABEL = "pod-template-hash"
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the letters Kubernetes uses in generated names


def _replicas(obj: dict[str, Any]) -> int:
    value = obj["spec"].get("replicas")
    return 1 if value is None else int(value)


def _owned(objs: list[dict[str, Any]], owner: dict[str, Any]) -> list[dict[str, Any]]:
    uid = owner["metadata"]["uid"]
    return [o for o in objs if any(r.get("uid") == uid and r.get("controller")
                                   for r in o["metadata"].get("ownerReferences") or ())]


def _owner_ref(owner: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "apps/v1", "kind": kind, "name": owner["metadata"]["name"],
             "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]


def _suffix(seed: str, n: int = 5) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SUFFIX[b % len(_SUFFIX)] for b in digest[:n])


def _ready(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and \
        not pod["metadata"].get("deletionTimestamp")


def _active(pod: dict[str, Any]) -> bool:
    """What a ReplicaSet counts: not being deleted, not finished."""
    return not pod["metadata"].get("deletionTimestamp") and \
        pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


def _scaled(value: Any, desired: int, *, up: bool, default: str) -> int:
    """maxSurge (rounded up) or maxUnavailable (rounded down): a count or a percentage."""
    raw = default if value is None else value
    if isinstance(raw, str) and raw.endswith("%"):
        exact = desired * int(raw[:-1]) / 100
        return math.ceil(exact) if up else math.floor(exact)
    return int(raw)


def _set_replicas(ctx: Context, rs: dict[str, Any], n: int) -> None:
    if _replicas(rs) != n:
        ns, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
        ctx.store.mutate("ReplicaSet", ns, name, lambda o: o["spec"].update(replicas=n))
        ctx.event(rs, type="Normal", reason="ScalingReplicaSet",
                  message=f"Scaled {'up' if n > _replicas(rs) else 'down'} replica set {name} "
                          f"from {_replicas(rs)} to {n}", source="deployment-controller")


def _new_replica_set(ctx: Context, dep: dict[str, Any], rses: list[dict[str, Any]]) -> dict[str, Any]:
    """The ReplicaSet of the Deployment's current template, created at 0 replicas if missing."""
    template = dep["spec"]["template"]
    digest = _suffix(json.dumps(template, sort_keys=True), 10)
    found = next((r for r in rses if r["metadata"].get("labels", {}).get(HASH_LABEL) == digest), None)
    if found is not None:
        return found
    ns, name = dep["metadata"]["namespace"], f"{dep['metadata']['name']}-{digest}"
    tpl = copy.deepcopy(template)
    labels = {**tpl.setdefault("metadata", {}).get("labels", {}), HASH_LABEL: digest}
    tpl["metadata"]["labels"] = labels
    selector = {**dep["spec"].get("selector", {}).get("matchLabels", {}), HASH_LABEL: digest}
    rs = ctx.store.create(ctx.store_res("ReplicaSet"), {
        "metadata": {"name": name, "namespace": ns, "labels": labels,
                     "ownerReferences": _owner_ref(dep, "Deployment")},
        "spec": {"replicas": 0, "selector": {"matchLabels": selector}, "template": tpl}}, ns)
    return rs


def reconcile_deployments(ctx: Context) -> None:
    all_rs, pods = ctx.items("ReplicaSet"), ctx.items("Pod")
    for dep in ctx.items("Deployment"):
        if dep["metadata"].get("deletionTimestamp"):
            continue  # being deleted (foreground or orphaning): the garbage collector's now
        rses = _owned(all_rs, dep)
        new = _new_replica_set(ctx, dep, rses)
        olds = [r for r in rses if r["metadata"]["uid"] != new["metadata"]["uid"]]
        desired = _replicas(dep)
        strategy = dep["spec"].get("strategy") or {}
        old_pods = [p for r in olds for p in _owned(pods, r)]
        if strategy.get("type") == "Recreate":
            for r in olds:
                _set_replicas(ctx, r, 0)
            # the new pods only once every old one is gone, terminating ones too
            _set_replicas(ctx, new, desired if not old_pods else 0)
        elif not olds or not any(_replicas(r) for r in olds):
            _set_replicas(ctx, new, desired)
        else:
            rolling = strategy.get("rollingUpdate") or {}
            surge = _scaled(rolling.get("maxSurge"), desired, up=True, default="25%")
            unavailable = _scaled(rolling.get("maxUnavailable"), desired, up=False, default="25%")
            if surge == 0 and unavailable == 0:
                unavailable = 1  # the API refuses both at zero; as if one pod may be down
            old_total = sum(_replicas(r) for r in olds)
            room = desired + surge - old_total - _replicas(new)
            _set_replicas(ctx, new, min(desired, _replicas(new) + max(0, room)))
            ready = sum(1 for r in rses for p in _owned(pods, r) if _ready(p))
            can_remove = max(0, ready - (desired - unavailable))
            for r in olds:
                mine = _owned(pods, r)
                not_ready = sum(1 for p in mine if _active(p) and not _ready(p))
                cut = min(_replicas(r), not_ready + can_remove)  # unready old pods go first
                can_remove -= max(0, cut - not_ready)
                _set_replicas(ctx, r, _replicas(r) - cut)

        def status(d: dict[str, Any], rses: list[dict[str, Any]] = rses) -> None:
            mine = [p for r in rses for p in _owned(pods, r)]
            d["status"] = {"replicas": sum(1 for p in mine if _active(p)),
                           "readyReplicas": sum(1 for p in mine if _ready(p)),
                           "availableReplicas": sum(1 for p in mine if _ready(p)),
                           "observedGeneration": d["metadata"].get("generation", 1)}
        ctx.store.mutate("Deployment", dep["metadata"]["namespace"], dep["metadata"]["name"], status)


def reconcile_replicasets(ctx: Context) -> None:
    pods = ctx.items("Pod")
    created: dict[str, int] = ctx.state.setdefault("replicaset_pods_created", {})
    for rs in ctx.items("ReplicaSet"):
        ns, name, uid = rs["metadata"]["namespace"], rs["metadata"]["name"], rs["metadata"]["uid"]
        active = [p for p in _owned(pods, rs) if _active(p)]
        # one being deleted manages no pods (neither creates nor deletes): only its status
        want = len(active) if rs["metadata"].get("deletionTimestamp") else _replicas(rs)
        for _ in range(want - len(active)):
            n = created[uid] = created.get(uid, 0) + 1
            pod_name = f"{name}-{_suffix(f'{uid}/{n}')}"
            tpl = copy.deepcopy(rs["spec"]["template"])
            spec = tpl["spec"]
            spec.setdefault("tolerations", [])
            for tol in DEFAULT_TOLERATIONS:
                if not any(t.get("key") == tol["key"] for t in spec["tolerations"]):
                    spec["tolerations"].append(dict(tol))
            ctx.store.create(ctx.store_res("Pod"), {
                "metadata": {"name": pod_name, "namespace": ns,
                             "labels": dict(tpl.get("metadata", {}).get("labels", {})),
                             "ownerReferences": _owner_ref(rs, "ReplicaSet")},
                "spec": spec, "status": {"phase": "Pending"}}, ns)
            ctx.event(rs, type="Normal", reason="SuccessfulCreate",
                      message=f"Created pod: {pod_name}", source="replicaset-controller")
        # too many: the ones not yet scheduled go first, then those not ready, then the newest
        newest = sorted(active, key=lambda p: str(p["metadata"].get("creationTimestamp", "")),
                        reverse=True)
        extra = sorted(newest, key=lambda p: (bool(p["spec"].get("nodeName")), _ready(p)))[
            :max(0, len(active) - want)]
        for pod in extra:
            ctx.store.delete(ctx.store_res("Pod"), ns, pod["metadata"]["name"])
            ctx.event(rs, type="Normal", reason="SuccessfulDelete",
                      message=f"Deleted pod: {pod['metadata']['name']}", source="replicaset-controller")

        def status(r: dict[str, Any]) -> None:
            mine = [p for p in _owned(ctx.items("Pod"), r) if _active(p)]
            r["status"] = {"replicas": len(mine), "readyReplicas": sum(1 for p in mine if _ready(p)),
                           "availableReplicas": sum(1 for p in mine if _ready(p))}
        ctx.store.mutate("ReplicaSet", ns, name, status)
