"""k8s.claims.status: is each claim a dead node held served again elsewhere, or no longer wanted?

Counting pods cannot tell a good recovery from a bad one: a RollingUpdate Deployment lists an old
and a new pod for one claim, a workload scaled to 0 has no pod at all, and a finished Job's pod
lingers with the claim in its spec. So the recovery is judged claim by claim. A claim is
``satisfied`` when a pod using it is Running and Ready (its containers passed their readiness
probes: it serves), and not being deleted, on a node other than ``away_from`` that is Ready
itself; or when no
consumer is ``wanted`` any more: no pod using it is live (not finished, not being deleted) and no
workload would create one (its Deployment or ReplicaSet wants 0 replicas
or is gone, its StatefulSet no longer has that ordinal, its Job has finished or is suspended).

A pod on a node that is not Ready does not serve its claim, whatever its own condition says: a
kubelet that posts Ready=False (its PLEG stuck, its runtime or network down) starts nothing new
and is trusted by no one, its status manager writes back the pod's last Ready for as long as it
runs, and the node's ``not-ready`` NoExecute taint evicts the pod within minutes
(``tolerationSeconds``, 300 by default). Such a claim waits, and says on which node
(``waiting``).

A pod being deleted whose controller is of a kind judged nowhere here (an operator's custom
resource, a DaemonSet) makes its claim wanted: the check then waits for a Running pod instead of
passing on a guess. Read-only: everything is read in ``apply``; the workloads of a namespace are
listed only when one of its claims has no live pod left to tell.
"""

from __future__ import annotations

from typing import Any

from bot.actions.authoring import (
    ActionSpec,
    Env,
    Obj,
    Plan,
    Result,
    action,
    ebs_volume_id_of_pv,
    meta,
    pod_claims,
    pod_finished,
    ready_condition,
    terminating,
)
from bot.actions.declarations import ClaimsStatusParams

# the controllers whose wishes this module reads from their workloads; a Deployment's pods are
# owned by its ReplicaSets
JUDGED = frozenset({"ReplicaSet", "StatefulSet", "Job"})


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _replicas(obj: Obj) -> int:
    value = _spec(obj).get("replicas")
    return 1 if value is None else int(value)  # the API's default


def _template_claims(obj: Obj) -> set[str]:
    """``namespace/name`` of the claims a workload's pod template mounts by name."""
    ns = meta(obj).get("namespace") or "default"
    vols = ((_spec(obj).get("template") or {}).get("spec") or {}).get("volumes") or ()
    return {f"{ns}/{v['persistentVolumeClaim'].get('claimName')}" for v in vols
            if v.get("persistentVolumeClaim")}


def _statefulset_claims(sts: Obj) -> set[str]:
    """The claims of the ordinals a StatefulSet keeps: ``<template>-<name>-<ordinal>``."""
    ns, name = meta(sts).get("namespace") or "default", meta(sts)["name"]
    start = int((_spec(sts).get("ordinals") or {}).get("start") or 0)
    return {f"{ns}/{(t.get('metadata') or {}).get('name')}-{name}-{i}"
            for t in _spec(sts).get("volumeClaimTemplates") or ()
            for i in range(start, start + _replicas(sts))}


def _job_done(job: Obj) -> bool:
    return bool(_spec(job).get("suspend")) or any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ())


def workload_wants(env: Env, namespace: str) -> dict[str, str]:
    """Claim -> the workload of ``namespace`` that wants a pod using it, in words."""
    k = env.kube
    wants: dict[str, str] = {}
    for dep in k.list_deployments(namespace=namespace):
        if _replicas(dep) > 0:
            for c in _template_claims(dep):
                wants.setdefault(c, f"Deployment {meta(dep)['name']} wants {_replicas(dep)} "
                                    "replica(s)")
    for rs in k.list_replica_sets(namespace=namespace):
        if _replicas(rs) > 0:  # an old ReplicaSet of a finished rollout is at 0
            for c in _template_claims(rs):
                wants.setdefault(c, f"ReplicaSet {meta(rs)['name']} wants {_replicas(rs)} "
                                    "replica(s)")
    for sts in k.list_stateful_sets(namespace=namespace):
        claims = _statefulset_claims(sts) | (_template_claims(sts) if _replicas(sts) else set())
        for c in claims:
            wants.setdefault(c, f"StatefulSet {meta(sts)['name']} wants {_replicas(sts)} "
                                "replica(s)")
    for job in k.list_jobs(namespace=namespace):
        if not _job_done(job):
            for c in _template_claims(job):
                wants.setdefault(c, f"Job {meta(job)['name']} has not finished")
    return wants


def _controller(pod: Obj) -> Obj | None:
    return next((o for o in meta(pod).get("ownerReferences") or () if o.get("controller")), None)


def _ready(obj: Obj) -> bool:
    """A pod's or a node's Ready condition is True (a pod's: every container passed its
    readiness probe)."""
    return ready_condition(obj)[0] == "True"


def _pod_entry(pod: Obj, ready_nodes: frozenset[str]) -> Obj:
    return {"name": meta(pod)["name"], "node": _spec(pod).get("nodeName"),
            "phase": (pod.get("status") or {}).get("phase"), "ready": _ready(pod),
            "terminating": terminating(pod), "node_ready": _spec(pod).get("nodeName") in ready_nodes}


def _serving(pod: Obj, away_from: str) -> bool:
    """Running and Ready, not being deleted, on a node other than ``away_from``."""
    return ((pod.get("status") or {}).get("phase") == "Running" and _ready(pod)
            and not terminating(pod) and _spec(pod).get("nodeName") not in (None, away_from))


def _live_reason(users: list[Obj]) -> str | None:
    """Why a pod using the claim is still wanted, from the pods alone; None when they cannot say."""
    live = [u for u in users if not pod_finished(u) and not terminating(u)]
    if live:
        u = live[0]
        return (f"pod {meta(u)['name']} is {(u.get('status') or {}).get('phase') or 'Pending'} "
                f"on {_spec(u).get('nodeName') or 'no node yet'}")
    for u in users:
        owner = _controller(u)
        if terminating(u) and owner is not None and owner.get("kind") not in JUDGED:
            return (f"pod {meta(u)['name']} is owned by {owner.get('kind')} {owner.get('name')}, "
                    "which may recreate it: the bot cannot judge that kind")
    return None


def claims_status(claims: tuple[str, ...], away_from: str, pods: list[Obj], pvs: list[Obj],
                  nodes: list[Obj], wants: Any) -> Obj:
    """The result, from the pods, PVs and nodes read; ``wants(namespace)`` gives the workloads'
    wishes (claim -> words), called only for a namespace with a claim its pods cannot decide."""
    ready_nodes = frozenset(str(meta(n)["name"]) for n in nodes if _ready(n))
    users: dict[str, list[Obj]] = {c: [] for c in claims}
    for pod in sorted(pods, key=lambda x: str(meta(x)["name"])):
        for c in pod_claims(pod):
            if c in users:
                users[c].append(pod)
    volumes: dict[str, str | None] = {}
    for pv in pvs:
        ref = _spec(pv).get("claimRef") or {}
        if ref.get("name"):
            volumes[f"{ref.get('namespace') or 'default'}/{ref['name']}"] = ebs_volume_id_of_pv(pv)
    wished: dict[str, dict[str, str]] = {}
    items = []
    for claim in claims:
        mine = users[claim]
        serving = [u for u in mine if _serving(u, away_from)]
        running = any(_spec(u).get("nodeName") in ready_nodes for u in serving)
        held = (f"pod {meta(serving[0])['name']} of {claim} runs on "
                f"{_spec(serving[0]).get('nodeName')}, which is not Ready"
                if serving and not running else None)
        why = _live_reason(mine)
        if why is None:
            ns = claim.split("/", 1)[0]
            if ns not in wished:
                wished[ns] = wants(ns)
            why = wished[ns].get(claim)
        items.append({"claim": claim, "volume_id": volumes.get(claim), "running_elsewhere": running,
                      "wanted": why is not None, "wanted_by": why,
                      "satisfied": running or why is None, "held_by_node": held,
                      "pods": [_pod_entry(u, ready_nodes) for u in mine]})
    return {"items": items, "count": len(items), "satisfied": all(i["satisfied"] for i in items),
            "unsatisfied": [i["claim"] for i in items if not i["satisfied"]],
            "waiting": [i["held_by_node"] for i in items
                        if not i["satisfied"] and i["held_by_node"]],
            "wanted_volume_ids": [i["volume_id"] for i in items if i["wanted"] and i["volume_id"]]}


def plan_claims_status(p: ClaimsStatusParams, env: Env) -> Plan:
    return Plan(action="k8s.claims.status", params={})


def apply_claims_status(plan: Plan, p: ClaimsStatusParams, env: Env) -> Result:
    if not p.claims:
        return Result(data=claims_status((), p.away_from, [], [], [], lambda ns: {}))
    k = env.kube
    data = claims_status(p.claims, p.away_from, k.list_pods(), k.list_pvs(), k.list_nodes(),
                         lambda ns: workload_wants(env, ns))
    return Result(data=data)


CLAIMS_STATUS = action(
    "k8s.claims.status", ClaimsStatusParams, destructive=False,
    summary="Judge claims served away from {{ away_from }}",
    description="Per claim: a pod Running and Ready on another node that is Ready, or no "
                "consumer wanted any more.",
    plan=plan_claims_status, apply=apply_claims_status)

ACTIONS: tuple[ActionSpec[Any], ...] = (CLAIMS_STATUS,)
