"""Who launched a scenario's instances, and the tags EKS, Karpenter and the EBS CSI driver put on them.

Tags matter because IAM conditions read them (``aws:ResourceTag/...``, see ``iam``). An instance
of an EKS managed node group carries ``eks:cluster-name``, ``eks:nodegroup-name``,
``aws:autoscaling:groupName`` and ``kubernetes.io/cluster/NAME=owned``; a self-managed Auto Scaling
group's only the last two; a Karpenter one ``karpenter.sh/nodepool``, ``karpenter.sh/nodeclaim``,
``karpenter.k8s.aws/ec2nodeclass``, ``eks:eks-cluster-name`` and ``kubernetes.io/cluster/NAME=owned``,
and Karpenter launches Spot capacity as one-time requests (they cannot be stopped). An EKS Auto Mode
one carries ``eks:eks-cluster-name``, ``eks:kubernetes-node-pool-name``,
``eks:kubernetes-node-class-name``, ``karpenter.sh/nodepool`` and ``karpenter.sh/nodeclaim``, and
is a managed instance EC2 lets only EKS stop or terminate (``ec2_managed``); its Node is labelled
``eks.amazonaws.com/compute-type: auto``.

Karpenter and Auto Mode nodes each have a NodeClaim (``karpenter.sh/v1``) naming the Node and the
instance, and both carry the ``karpenter.sh/termination`` finalizer: deleting either starts
Karpenter's termination (``controllers/karpenter.py``).

The EBS CSI driver tags every volume it creates ``CSIVolumeName``, ``ebs.csi.aws.com/cluster=true``
and ``kubernetes.io/created-for/pv/name``, ``.../pvc/name``, ``.../pvc/namespace``; it adds
``kubernetes.io/cluster/NAME=owned`` only when it runs with ``--k8s-tag-cluster-id`` (sandbox
option ``k8s_tag_cluster_id``, off by default as in the EKS add-on's default configuration).

Options: ``cluster_name`` (``sandbox``), ``node_group`` (``managed-node-group``, ``asg``,
``karpenter`` or ``auto-mode``), ``capacity`` (``on-demand`` or ``spot``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from bot.sim.controllers.context import instance_id
from bot.sim.ec2_managed import EKS
from bot.sim.iam import cluster_name
from bot.sim.resources import BY_KIND

GROUP_TAGS = ("eks:cluster-name", "eks:nodegroup-name", "aws:autoscaling:groupName",
              "karpenter.sh/nodepool", "karpenter.k8s.aws/ec2nodeclass", "eks:eks-cluster-name",
              "eks:kubernetes-node-pool-name", "eks:kubernetes-node-class-name")
KINDS = ("managed-node-group", "asg", "karpenter", "auto-mode")
KARPENTER_KINDS = ("karpenter", "auto-mode")  # nodes with a NodeClaim
TERMINATION_FINALIZER = "karpenter.sh/termination"
AUTO_POOL = "general-purpose"  # Auto Mode's built-in node pool


def instance_tags(options: dict[str, Any], zone: str) -> tuple[str, dict[str, str]]:
    """(group name, tags) for an instance of the scenario's node group in ``zone``."""
    cluster = cluster_name(options)
    kind = str(options.get("node_group") or "managed-node-group")
    if kind not in KINDS:
        raise ValueError(f"option node_group={kind!r}: expected one of {', '.join(KINDS)}")
    owned = {f"kubernetes.io/cluster/{cluster}": "owned"}
    if kind == "auto-mode":
        return f"auto-mode/{AUTO_POOL}", {"eks:eks-cluster-name": cluster,
                                          "eks:kubernetes-node-pool-name": AUTO_POOL,
                                          "eks:kubernetes-node-class-name": "default",
                                          "karpenter.sh/nodepool": AUTO_POOL}
    if kind == "karpenter":
        return "karpenter/default", {**owned, "karpenter.sh/nodepool": "default",
                                     "karpenter.k8s.aws/ec2nodeclass": "default",
                                     "eks:eks-cluster-name": cluster}
    # one group per zone, unless the group spans the zones (option multi_az, ``zone_launch``)
    spans = str(options.get("multi_az") or "").lower() in ("1", "true", "yes", "on")
    suffix = "" if spans else f"-{zone}"
    group = f"eks-general{suffix}" if kind == "managed-node-group" else f"{cluster}-nodes{suffix}"
    tags = {**owned, "aws:autoscaling:groupName": group}
    if kind == "managed-node-group":
        tags |= {"eks:cluster-name": cluster, "eks:nodegroup-name": "general"}
    return group, tags


def node_labels(options: dict[str, Any]) -> dict[str, str]:
    """The labels the group's nodes carry (capacity type, node group or node pool)."""
    kind = str(options.get("node_group") or "managed-node-group")
    spot = str(options.get("capacity") or "on-demand") == "spot"
    if kind == "auto-mode":
        return {"eks.amazonaws.com/compute-type": "auto", "karpenter.sh/nodepool": AUTO_POOL,
                "eks.amazonaws.com/nodeclass": "default",
                "karpenter.sh/capacity-type": "spot" if spot else "on-demand"}
    if kind == "karpenter":
        return {"karpenter.sh/nodepool": "default",
                "karpenter.sh/capacity-type": "spot" if spot else "on-demand"}
    if kind == "managed-node-group":
        return {"eks.amazonaws.com/nodegroup": "general",
                "eks.amazonaws.com/capacityType": "SPOT" if spot else "ON_DEMAND"}
    return {}


def volume_tags(options: dict[str, Any], *, pv: str, pvc: str, namespace: str) -> dict[str, str]:
    """The tags the EBS CSI driver puts on a volume it creates for ``pv``."""
    tags = {"CSIVolumeName": pv, "ebs.csi.aws.com/cluster": "true",
            "kubernetes.io/created-for/pv/name": pv, "kubernetes.io/created-for/pvc/name": pvc,
            "kubernetes.io/created-for/pvc/namespace": namespace}
    if str(options.get("k8s_tag_cluster_id") or "").lower() in ("1", "true", "yes"):
        tags[f"kubernetes.io/cluster/{cluster_name(options)}"] = "owned"
    return tags


def claim(store: Any, ec2: Any, node: dict[str, Any], *, kind: str, now: str) -> str:
    """Give a Karpenter or Auto Mode node its NodeClaim and finalizer, as Karpenter registers it."""
    iid = instance_id(node)
    assert iid, node["metadata"]["name"]
    name = node["metadata"]["name"]
    pool = node["metadata"]["labels"].get("karpenter.sh/nodepool", "default")
    nc = f"{pool}-{hashlib.sha256(iid.encode()).hexdigest()[:5]}"
    ec2.backend.create_tags([iid], {"karpenter.sh/nodeclaim": nc})
    if kind == "auto-mode":
        ec2.managed.manage(iid, EKS)
    store.mutate("Node", None, name, lambda n: n["metadata"].update(
        finalizers=[*(n["metadata"].get("finalizers") or []), TERMINATION_FINALIZER]))
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
             "lastTransitionTime": now}
    store.create(BY_KIND["NodeClaim"], {
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": nc, "labels": {"karpenter.sh/nodepool": pool},
                     "finalizers": [TERMINATION_FINALIZER]},
        "spec": {"nodeClassRef": {"group": "eks.amazonaws.com" if kind == "auto-mode" else
                                  "karpenter.k8s.aws", "kind": "NodeClass" if kind == "auto-mode"
                                  else "EC2NodeClass", "name": "default"}},
        "status": {"nodeName": name, "providerID": node["spec"]["providerID"],
                   "conditions": [{**ready, "type": t} for t in
                                  ("Launched", "Registered", "Initialized")] + [ready]}})
    return nc


def group_of(state: dict[str, Any], iid: str) -> str:
    return next((g for g, ids in state.get("groups", {}).items() if iid in ids), "default")
