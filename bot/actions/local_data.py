"""What a fence destroys for good: data that lives on the machine itself, not on EBS.

Stopping or terminating an instance wipes its instance store, the NVMe disks that come with its
instance type (``m5d``, ``i3``, ...). DescribeInstances' BlockDeviceMappings never list them; the
type's ``InstanceStorageInfo`` (DescribeInstanceTypes) does. And a pod whose claim is bound to a
local volume (a PV with ``spec.local`` or ``spec.hostPath``, or one a local-storage CSI driver made:
TopoLVM, OpenEBS LocalPV, the local-path provisioner) can never move to another node: its PV's
node affinity pins it to this one, and its data is on this machine's disks.

A fence is still sometimes right for such a node (a machine that may be writing must not share a
disk), but repairing the node in place keeps the data, so the fence's plan lists what is lost,
says so in words, and asks for one more approver than the step otherwise needs
(``approvals.RAISE_KEY`` in the plan's data). A plan that finds nothing adds no fact and no key:
its hash is that of a fence plan that never looked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.actions.authoring import Env, Fact, Obj, meta, nodes_of_instance, pod_claims
from bot.engine.approvals import RAISE_KEY

# CSI drivers (and provisioners, in ``pv.kubernetes.io/provisioned-by``) whose volumes live on one
# node's own disks: TopoLVM (and its pre-0.18 name), OpenEBS LocalPV (its LVM/ZFS CSI driver and
# its hostpath provisioner), Rancher's local-path provisioner
LOCAL_DRIVERS = frozenset({"topolvm.io", "topolvm.cybozu.com", "local.csi.openebs.io",
                           "openebs.io/local", "zfs.csi.openebs.io", "rancher.io/local-path"})
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# node-affinity keys whose value is the node's name, whether or not the node carries the label
NODE_KEYS = frozenset({"kubernetes.io/hostname", "topology.topolvm.io/node",
                       "topology.topolvm.cybozu.com/node", "openebs.io/nodename",
                       "openebs.io/nodeid"})
# labels many nodes share: a volume pinned by one of them is not pinned to one machine
SHARED_KEYS = frozenset({"topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                         "failure-domain.beta.kubernetes.io/zone",
                         "failure-domain.beta.kubernetes.io/region", "topology.ebs.csi.aws.com/zone",
                         "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os",
                         "beta.kubernetes.io/arch", "eks.amazonaws.com/nodegroup",
                         "karpenter.sh/nodepool", "eks.amazonaws.com/capacityType",
                         "karpenter.sh/capacity-type", *INSTANCE_TYPE_LABELS})


def local_kind(pv: Obj) -> str | None:
    """How a PV's data is bound to one machine (``local``, ``hostPath``, the driver), or None."""
    spec = pv.get("spec") or {}
    if spec.get("local"):
        return "local"
    if spec.get("hostPath"):
        return "hostPath"
    driver = str((spec.get("csi") or {}).get("driver") or "")
    if driver in LOCAL_DRIVERS:
        return driver
    by = str((meta(pv).get("annotations") or {}).get(PROVISIONED_BY) or "")
    return by if by in LOCAL_DRIVERS else None


def pinned_to(pv: Obj, node: Obj) -> bool:
    """Whether the PV's required node affinity pins it to ``node``: a term with an ``In``
    expression whose value is the node's name, or the node's own label for that key (any key but
    those many nodes share, a zone, a type). That covers ``kubernetes.io/hostname`` (the local
    static provisioner, local-path, OpenEBS hostpath), TopoLVM's ``topology.topolvm.io/node``
    (``topology.topolvm.cybozu.com/node`` before 0.18), OpenEBS LVM's ``openebs.io/nodename`` and
    ZFS's ``openebs.io/nodeid`` (a node label, the node's name unless set), and a driver's own."""
    name = str(meta(node).get("name") or "")
    labels = meta(node).get("labels") or {}
    terms = ((((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {})
             .get("nodeSelectorTerms") or ())
    for term in terms:
        for e in term.get("matchExpressions") or ():
            key, values = str(e.get("key") or ""), e.get("values") or ()
            if e.get("operator", "In") != "In" or key in SHARED_KEYS:
                continue
            if (key in NODE_KEYS and name in values) or (key in labels and labels[key] in values):
                return True
        if any(f.get("key") == "metadata.name" and f.get("operator", "In") == "In"
               and name in (f.get("values") or ()) for f in term.get("matchFields") or ()):
            return True
    return False


def _path(pv: Obj) -> str | None:
    spec = pv.get("spec") or {}
    where = spec.get("local") or spec.get("hostPath") or {}
    return str(where.get("path")) if where.get("path") else None


@dataclass
class LocalData:
    """What the fence of one instance loses: its instance store and its nodes' local volumes."""

    instance_id: str
    instance_type: str | None = None
    instance_store: Mapping[str, Any] | None = None  # {"total_gb", "disks": [...]}
    volumes: list[dict[str, Any]] = field(default_factory=list)  # one per local PV on its nodes

    def __bool__(self) -> bool:
        return bool(self.instance_store or self.volumes)

    def words(self) -> str:
        """What is lost, for the approval: every claim and pod, and the instance-store disks."""
        parts = []
        if self.volumes:
            parts.append("; ".join(
                f"claim {v['claim'] or '(none, unbound)'} on {v['kind']} volume {v['pv']}"
                + (f" ({v['path']})" if v.get("path") else "")
                + (f", used by pod {', '.join(v['pods'])}" if v["pods"] else "")
                for v in self.volumes))
        if self.instance_store:
            disks = ", ".join(f"{d.get('count')} x {d.get('size_gb')} GB {d.get('type')}"
                              for d in self.instance_store.get("disks") or ())
            parts.append(f"the instance store of {self.instance_type} "
                         f"({self.instance_store.get('total_gb')} GB: {disks})")
        return ("THE FENCE DESTROYS DATA NO OTHER MACHINE HOLDS: " + "; and ".join(parts)
                + ". A stop or terminate wipes the instance store, and pods on local volumes can "
                "never run on another node. Repairing the node in place (reboot it, or fix its "
                "kubelet) keeps that data and may be better; fence only if losing it is accepted")

    def facts(self, env: Env) -> list[Fact]:
        out = []
        if self.instance_store:
            out.append(env.fact(f"instance {self.instance_id}", "instance_store",
                                {"instance_type": self.instance_type, **self.instance_store}))
        if self.volumes:
            out.append(env.fact(f"instance {self.instance_id}", "local_volumes", self.volumes))
        return out

    def raise_data(self) -> dict[str, Any]:
        """The plan data that asks for one more approver, or nothing when nothing is lost."""
        return {RAISE_KEY: {"by": 1, "why": self.words()}} if self else {}


def find(env: Env, *, instance_id: str, instance: Obj | None = None) -> LocalData:
    """Read what a fence of ``instance_id`` would destroy: the list of nodes (shared with the fence
    interlock), the pods on its nodes and the PVs, and its instance type's storage."""
    found = LocalData(instance_id=instance_id)
    nodes = nodes_of_instance(env.kube.list_nodes(), instance_id)
    found.instance_type = _instance_type(env, nodes, instance_id=instance_id, instance=instance)
    if found.instance_type:
        found.instance_store = _instance_store(env, found.instance_type)
    if not nodes:
        return found
    found.volumes = _local_volumes(env, nodes, _claim_users(env, nodes))
    return found


def _instance_type(env: Env, nodes: list[Obj], *, instance_id: str,
                   instance: Obj | None) -> str | None:
    """The instance type: from a node's label, else the instance given, else EC2 (node deleted)."""
    labels = [meta(n).get("labels") or {} for n in nodes]
    named: str | None = next((str(lb[k]) for lb in labels for k in INSTANCE_TYPE_LABELS
                              if lb.get(k)), None) or (instance or {}).get("InstanceType")
    if named is None:  # no node names it (deleted): EC2 does
        named = (env.ec2.describe_instances([instance_id]).get(instance_id)
                 or {}).get("InstanceType")
    return named


def _instance_store(env: Env, instance_type: str) -> dict[str, Any] | None:
    """The instance-store disks the type comes with (``InstanceStorageInfo``), or None."""
    it = env.ec2.describe_instance_types([instance_type]).get(instance_type) or {}
    info = it.get("InstanceStorageInfo") or {}
    if not (it.get("InstanceStorageSupported") or info.get("Disks")):
        return None
    return {"total_gb": info.get("TotalSizeInGB"),
            "disks": [{"count": d.get("Count"), "size_gb": d.get("SizeInGB"),
                       "type": d.get("Type")} for d in info.get("Disks") or ()]}


def _claim_users(env: Env, nodes: list[Obj]) -> dict[str, list[str]]:
    """Claim (namespace/name) -> the pods on these nodes that use it (namespace/name)."""
    users: dict[str, list[str]] = {}
    for name in [str(meta(n)["name"]) for n in nodes]:
        for pod in env.kube.list_pods(node=name):
            for claim in pod_claims(pod):
                users.setdefault(claim, []).append(f"{meta(pod).get('namespace')}/{meta(pod)['name']}")
    return users


def _local_volumes(env: Env, nodes: list[Obj], users: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """The local PVs on this machine, each with its claim and the pods here that use it."""
    volumes: list[dict[str, Any]] = []
    for pv in sorted(env.kube.list_pvs(), key=lambda v: str(meta(v)["name"])):
        kind = local_kind(pv)
        if kind is None:
            continue
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        claim = f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else ""
        pods = sorted(users.get(claim, ()))
        # on this machine: a pod here mounts it, or its node affinity pins it here (a pod of it
        # force-deleted already still has its data on this machine)
        if not pods and not any(pinned_to(pv, n) for n in nodes):
            continue
        volumes.append({"pv": str(meta(pv)["name"]), "kind": kind, "claim": claim or None,
                        "pods": pods, "path": _path(pv)})
    return volumes
