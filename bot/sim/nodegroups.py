"""Who launched a scenario's instances, and the tags EKS, Karpenter and the EBS CSI driver put on them.

Tags matter because IAM conditions read them (``aws:ResourceTag/...``, see ``iam``). An instance
of an EKS managed node group carries ``eks:cluster-name``, ``eks:nodegroup-name``,
``aws:autoscaling:groupName`` and ``kubernetes.io/cluster/NAME=owned``; a self-managed Auto Scaling
group's only the last two; a Karpenter one ``karpenter.sh/nodepool``, ``karpenter.sh/nodeclaim``,
``karpenter.k8s.aws/ec2nodeclass``, ``eks:eks-cluster-name`` and ``kubernetes.io/cluster/NAME=owned``,
and Karpenter launches Spot capacity as one-time requests (they cannot be stopped).

The EBS CSI driver tags every volume it creates ``CSIVolumeName``, ``ebs.csi.aws.com/cluster=true``
and ``kubernetes.io/created-for/pv/name``, ``.../pvc/name``, ``.../pvc/namespace``; it adds
``kubernetes.io/cluster/NAME=owned`` only when it runs with ``--k8s-tag-cluster-id`` (sandbox
option ``k8s_tag_cluster_id``, off by default as in the EKS add-on's default configuration).

Options: ``cluster_name`` (``sandbox``), ``node_group`` (``managed-node-group``, ``asg`` or
``karpenter``), ``capacity`` (``on-demand`` or ``spot``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.sim.controllers.context import instance_id

if TYPE_CHECKING:
    from bot.sim.sandbox import Sandbox

GROUP_TAGS = ("eks:cluster-name", "eks:nodegroup-name", "aws:autoscaling:groupName",
              "karpenter.sh/nodepool", "karpenter.k8s.aws/ec2nodeclass", "eks:eks-cluster-name")
KINDS = ("managed-node-group", "asg", "karpenter")


def cluster_name(options: dict[str, Any]) -> str:
    return str(options.get("cluster_name") or "sandbox")


def instance_tags(options: dict[str, Any], zone: str) -> tuple[str, dict[str, str]]:
    """(group name, tags) for an instance of the scenario's node group in ``zone``."""
    cluster = cluster_name(options)
    kind = str(options.get("node_group") or "managed-node-group")
    if kind not in KINDS:
        raise ValueError(f"option node_group={kind!r}: expected one of {', '.join(KINDS)}")
    owned = {f"kubernetes.io/cluster/{cluster}": "owned"}
    if kind == "karpenter":
        return "karpenter/default", {**owned, "karpenter.sh/nodepool": "default",
                                     "karpenter.k8s.aws/ec2nodeclass": "default",
                                     "eks:eks-cluster-name": cluster}
    group = f"eks-general-{zone}" if kind == "managed-node-group" else f"{cluster}-nodes-{zone}"
    tags = {**owned, "aws:autoscaling:groupName": group}
    if kind == "managed-node-group":
        tags |= {"eks:cluster-name": cluster, "eks:nodegroup-name": "general"}
    return group, tags


def node_labels(options: dict[str, Any]) -> dict[str, str]:
    """The labels the group's nodes carry (capacity type, node group or node pool)."""
    kind = str(options.get("node_group") or "managed-node-group")
    spot = str(options.get("capacity") or "on-demand") == "spot"
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


def adopt(sb: Sandbox, names: list[str]) -> None:
    """Tag the instances behind these new nodes as their group launched them, and remember them."""
    assert sb.ctx is not None
    spot = str(sb.options.get("capacity") or "on-demand") == "spot"
    labels = node_labels(sb.options)
    for name in names:
        sb.store.mutate("Node", None, name, lambda n: n["metadata"]["labels"].update(labels))
        node = sb.get("Node", None, name)
        iid = instance_id(node)
        assert iid, name
        group, tags = instance_tags(sb.options, node["metadata"]["labels"]["topology.kubernetes.io/zone"])
        sb.ec2.backend.create_tags([iid], tags)
        if spot:
            inst = sb.ec2.instance(iid)
            assert inst is not None, iid
            inst.lifecycle = "spot"
        sb.ctx.state.setdefault("groups", {}).setdefault(group, []).append(iid)
        sb.ctx.state.setdefault("templates", {})[iid] = node


def group_of(state: dict[str, Any], iid: str) -> str:
    return next((g for g, ids in state.get("groups", {}).items() if iid in ids), "default")
