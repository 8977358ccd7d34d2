"""The node agents every EKS node runs: ``aws-node`` (the VPC CNI) and ``kube-proxy``.

Their two DaemonSets in ``kube-system`` (served, so ``kubectl drain --ignore-daemonsets`` finds
the pods' owner) and one pod of each per Linux Node, created with ``spec.nodeName`` already set,
so the scheduler never places or moves them, tolerating every taint (``operator: Exists``, as the
EKS add-ons do), so no eviction takes them. Only these two: a DaemonSet someone else creates gets
no pods.

They are what a runbook finds left on a dead node after its workloads have gone; pod GC deletes
them with their Node. Under a kubelet sick of ``cni`` the ``aws-node`` container runs but is not
ready, and its ``restartCount`` climbs (its liveness probe restarts it about once a minute).
Option ``system_pods=false`` leaves them out.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bot.sim.controllers.context import Context
from bot.sim.store import ts

NAMESPACE = "kube-system"
RESTART_EVERY = 60.0  # seconds between restarts of a failing aws-node (liveness probe)
TOLERATE_ALL = [{"operator": "Exists"}]
AGENTS: dict[str, dict[str, Any]] = {
    "aws-node": {"labels": {"k8s-app": "aws-node"}, "pod": {
        "hostNetwork": True, "priorityClassName": "system-node-critical",
        "serviceAccountName": "aws-node", "tolerations": TOLERATE_ALL, "containers": [
        {"name": "aws-node", "image": "602401143452.dkr.ecr.ap-southeast-1.amazonaws.com/"
                                      "amazon-k8s-cni:v1.19.2-eksbuild.1",
         "resources": {"requests": {"cpu": "25m"}}},
        {"name": "aws-eks-nodeagent", "image": "602401143452.dkr.ecr.ap-southeast-1.amazonaws.com/"
                                               "amazon/aws-network-policy-agent:v1.1.6-eksbuild.1",
         "resources": {"requests": {"cpu": "25m"}}}]}},
    "kube-proxy": {"labels": {"k8s-app": "kube-proxy"}, "pod": {
        "hostNetwork": True, "priorityClassName": "system-node-critical",
        "serviceAccountName": "kube-proxy", "tolerations": TOLERATE_ALL, "containers": [
        {"name": "kube-proxy", "image": "602401143452.dkr.ecr.ap-southeast-1.amazonaws.com/"
                                        "eks/kube-proxy:v1.32.0-minimal-eksbuild.2",
         "resources": {"requests": {"cpu": "100m"}}}]}},
}


def enabled(ctx: Context) -> bool:
    return ctx.options.get("system_pods", True) not in (False, "false", "0")


def pod_name(agent: str, node: str) -> str:
    """``aws-node-xxxxx``: the DaemonSet controller's generated suffix, here from the node name."""
    name = _POD_NAMES.get((agent, node))
    if name is None:  # named once per agent and node, not on every pass
        alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the generator's alphabet: no vowels, no 0/1/3
        digest = hashlib.sha256(f"{agent}/{node}".encode()).digest()
        name = _POD_NAMES[(agent, node)] = f"{agent}-" + "".join(
            alphabet[b % len(alphabet)] for b in digest[:5])
    return name


_POD_NAMES: dict[tuple[str, str], str] = {}


def _eligible(node: dict[str, Any]) -> bool:
    # the add-ons' node affinity: Linux nodes (EKS also excludes Fargate, not modelled)
    return node["metadata"].get("labels", {}).get("kubernetes.io/os") == "linux"


def reconcile_daemonsets(ctx: Context) -> None:
    """Keep the agents' DaemonSets, one pod of each per eligible Node, and their status counts."""
    if not enabled(ctx):
        return
    nodes = [n for n in ctx.items("Node") if _eligible(n)]
    for agent, spec in AGENTS.items():
        ds = ctx.find("DaemonSet", NAMESPACE, agent) or _create(ctx, agent, spec)
        owner = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": agent,
                  "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        ready = 0
        for node in nodes:
            pname = pod_name(agent, node["metadata"]["name"])
            pod = ctx.find("Pod", NAMESPACE, pname)
            if pod is None:
                ctx.store.create(ctx.store_res("Pod"), {
                    "metadata": {"name": pname, "namespace": NAMESPACE, "ownerReferences": owner,
                                 "labels": {**spec["labels"], "controller-revision-hash": "1"}},
                    "spec": {**spec["pod"], "nodeName": node["metadata"]["name"]},
                    "status": {"phase": "Pending"}}, NAMESPACE)
                continue
            conds = pod.get("status", {}).get("conditions") or []
            ready += any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
        counts = {"desiredNumberScheduled": len(nodes), "currentNumberScheduled": len(nodes),
                  "updatedNumberScheduled": len(nodes), "numberReady": ready,
                  "numberAvailable": ready, "numberUnavailable": len(nodes) - ready,
                  "numberMisscheduled": 0, "observedGeneration": 1}
        if ds.get("status") != counts:
            def status(d: dict[str, Any], c: dict[str, int] = counts) -> None:
                d["status"] = c
            ctx.store.mutate("DaemonSet", NAMESPACE, agent, status)


def _create(ctx: Context, agent: str, spec: dict[str, Any]) -> dict[str, Any]:
    return ctx.store.create(ctx.store_res("DaemonSet"), {
        "metadata": {"name": agent, "namespace": NAMESPACE, "labels": dict(spec["labels"])},
        "spec": {"selector": {"matchLabels": dict(spec["labels"])},
                 "template": {"metadata": {"labels": dict(spec["labels"])}, "spec": spec["pod"]},
                 "updateStrategy": {"type": "RollingUpdate",
                                    "rollingUpdate": {"maxUnavailable": "10%"}}}}, NAMESPACE)


def failing_cni(ctx: Context, pod: dict[str, Any]) -> bool:
    """An ``aws-node`` pod whose ipamd cannot get ready (its node's kubelet is sick of ``cni``)."""
    sick = (ctx.state.get("kubelet_sick") or {}).get(pod["spec"].get("nodeName") or "")
    return sick == "cni" and pod["metadata"].get("labels", {}).get("k8s-app") == "aws-node" and \
        pod["metadata"].get("namespace") == NAMESPACE


def crash_loop(ctx: Context, pod: dict[str, Any]) -> None:
    """Report the failing ``aws-node``: running but not ready, restarted about once a minute."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    mine = next((cs for cs in statuses if cs.get("name") == "aws-node"), None)
    if mine is None:
        return  # not started yet: the kubelet starts it first
    started = mine.get("state", {}).get("running", {}).get("startedAt")
    restart = not mine.get("ready") and bool(started) and ctx.seconds_since(started) >= RESTART_EVERY
    if not mine.get("ready") and not restart:
        return  # reported, and not yet due for the next restart
    now = ts(ctx.now)

    def apply(p: dict[str, Any]) -> None:
        st = p.setdefault("status", {})
        for cs in st.get("containerStatuses") or []:
            if cs.get("name") != "aws-node":
                continue
            if restart:
                cs["lastState"] = {"terminated": {"exitCode": 137, "reason": "Error",
                                                  "startedAt": started, "finishedAt": now}}
                cs["restartCount"] = int(cs.get("restartCount", 0)) + 1
                cs["state"] = {"running": {"startedAt": now}}
            cs["ready"] = False
        st["conditions"] = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                             "message": "containers with unready status: [aws-node]"},
                            {"type": "PodScheduled", "status": "True"}]
    ctx.store.mutate("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], apply)
