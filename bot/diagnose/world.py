"""One read of a cluster and its EC2 side, joined in memory: what every diagnosis rule looks at.

A scan lists each kind once (nodes, pods, PVs, claims, VolumeAttachments, StorageClasses, events,
and the kubelets' Leases when a node is not Ready) and asks EC2 three batched questions (the
instances behind the nodes, the status checks of the NotReady ones still running, the volumes no
instance holds), so its cost does not grow with the
number of problems it finds: one request per page of 500 objects, one per 200 instance ids.
Everything is read through the cluster's clients, bound read-only to one list of call records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from bot.actions.liveness import Liveness, classify
from bot.actions.objects import (
    Obj,
    ebs_volume_id_of_pv,
    ec2_tags,
    instance_id_of,
    meta,
    pod_claims,
    pod_finished,
    ready_condition,
    va_node,
)

if TYPE_CHECKING:
    from bot.clients.ec2 import Ec2Client
    from bot.clients.kube import KubeClient

# EC2 takes at most 200 values in one filter
FILTER_VALUES = 200

SRC_NODES = "GET /api/v1/nodes"
SRC_PODS = "GET /api/v1/pods"
SRC_PVS = "GET /api/v1/persistentvolumes"
SRC_PVCS = "GET /api/v1/persistentvolumeclaims"
SRC_VAS = "GET /apis/storage.k8s.io/v1/volumeattachments"
SRC_CLASSES = "GET /apis/storage.k8s.io/v1/storageclasses"
SRC_EVENTS = "GET /api/v1/events"
SRC_INSTANCES = "ec2:DescribeInstances"
SRC_STATUS = "ec2:DescribeInstanceStatus"
SRC_VOLUMES = "ec2:DescribeVolumes"
SRC_LEASES = "GET /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def _chunks(ids: Iterable[str], size: int = FILTER_VALUES) -> Iterator[list[str]]:
    ordered = sorted(set(ids))
    for i in range(0, len(ordered), size):
        yield ordered[i:i + size]


def claim_key(namespace: str | None, name: str | None) -> str:
    return f"{namespace or 'default'}/{name}"


@dataclass
class World:
    """Everything one scan read, with the indexes the rules join on."""

    now: datetime
    nodes: list[Obj]
    pods: list[Obj]
    pvs: list[Obj]
    pvcs: list[Obj]
    vas: list[Obj]
    classes: list[Obj]
    events: list[Obj]
    instances: dict[str, Obj] = field(default_factory=dict)  # by instance id
    statuses: dict[str, Obj] = field(default_factory=dict)  # by instance id
    available: dict[str, Obj] = field(default_factory=dict)  # EBS volumes no instance holds
    leases: dict[str, Obj] = field(default_factory=dict)  # kubelet Leases by node name
    # EBS volumes of attached VolumeAttachments whose Node is gone, as EC2 describes them
    orphan_volumes: dict[str, Obj] = field(default_factory=dict)
    grace: float = 50.0  # the cluster's node-monitor-grace-period (policy)

    def __post_init__(self) -> None:
        self.node = {str(meta(n).get("name")): n for n in self.nodes}
        self.pv = {str(meta(p).get("name")): p for p in self.pvs}
        self.pvc = {claim_key(meta(c).get("namespace"), meta(c).get("name")): c for c in self.pvcs}
        self.pv_of_claim: dict[str, Obj] = {}
        for pv in self.pvs:
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if ref.get("name"):
                self.pv_of_claim[claim_key(ref.get("namespace"), ref["name"])] = pv
        self.vas_on: dict[str, list[Obj]] = {}
        self.vas_of_pv: dict[str, list[Obj]] = {}
        for va in self.vas:
            self.vas_on.setdefault(str(va_node(va)), []).append(va)
            source = ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
            if source:
                self.vas_of_pv.setdefault(str(source), []).append(va)
        self.users: dict[str, list[Obj]] = {}  # claim -> pods that have not finished
        self.pods_on: dict[str, list[Obj]] = {}
        for pod in self.pods:
            if pod_finished(pod):
                continue
            for claim in pod_claims(pod):
                self.users.setdefault(claim, []).append(pod)
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                self.pods_on.setdefault(str(node), []).append(pod)
        self.events_of: dict[tuple[str, str, str], list[Obj]] = {}
        for ev in self.events:
            inv = ev.get("involvedObject") or ev.get("regarding") or {}
            key = (str(inv.get("kind")), str(inv.get("namespace") or ""), str(inv.get("name")))
            self.events_of.setdefault(key, []).append(ev)
        self.pv_of_volume = {v: str(meta(pv).get("name")) for pv in self.pvs
                             if (v := ebs_volume_id_of_pv(pv))}

    def ready(self, node: Obj) -> bool:
        return ready_condition(node)[0] == "True"

    def volume_of_va(self, va: Obj) -> str | None:
        """The EBS volume id behind a VolumeAttachment (its PV's, or its inline spec's)."""
        source = (va.get("spec") or {}).get("source") or {}
        pv = self.pv.get(str(source.get("persistentVolumeName") or ""))
        if pv is not None:
            return ebs_volume_id_of_pv(pv)
        inline = source.get("inlineVolumeSpec")
        return ebs_volume_id_of_pv({"spec": inline}) if inline else None

    def liveness(self, node: Obj) -> Liveness:
        """Rule 8's verdict on the node, from this scan's reads."""
        iid = instance_id_of(node)
        return classify(node=node, lease=self.leases.get(str(meta(node).get("name"))),
                        instance=self.instances.get(iid) if iid else None,
                        status=self.statuses.get(iid) if iid else None, now=self.now,
                        grace=self.grace)

    def pod_events(self, pod: Obj) -> list[Obj]:
        m = meta(pod)
        return self.events_of.get(("Pod", str(m.get("namespace") or ""), str(m.get("name"))), [])

    def pv_events(self, name: str) -> list[Obj]:
        return [*self.events_of.get(("PersistentVolume", "", name), []),
                *self.events_of.get(("PersistentVolume", "default", name), [])]

    def cluster_names(self) -> set[str]:
        """The cluster's EKS name(s), as its node group and Karpenter tag their instances."""
        names: set[str] = set()
        for inst in self.instances.values():
            tags = ec2_tags(inst)
            names |= {k.removeprefix("kubernetes.io/cluster/") for k in tags
                      if k.startswith("kubernetes.io/cluster/")}
            names |= {tags[k] for k in ("eks:cluster-name", "eks:eks-cluster-name") if tags.get(k)}
        return names


def read_world(kube: KubeClient, ec2: Ec2Client, *, now: datetime, grace: float = 50.0) -> World:
    """List every kind once, then the EC2 side of what was listed."""
    world = World(now=now, nodes=kube.list_nodes(), pods=kube.list_pods(), pvs=kube.list_pvs(),
                  pvcs=kube.list_pvcs(), vas=kube.list_volume_attachments(),
                  classes=kube.list_storage_classes(), events=kube.list_events(), grace=grace)
    if any(not world.ready(n) for n in world.nodes):  # whose kubelet is alive: the Leases say
        world.leases = {str(meta(x).get("name")): x for x in kube.list_node_leases()}
    ids = {i for n in world.nodes if (i := instance_id_of(n))}
    for chunk in _chunks(ids):
        world.instances.update(ec2.describe_instances(chunk))
    down = {i for n in world.nodes if not world.ready(n) and (i := instance_id_of(n))
            and ((world.instances.get(i) or {}).get("State") or {}).get("Name") == "running"}
    for chunk in _chunks(down):
        world.statuses.update(ec2.describe_instance_status(chunk))
    world.available = ec2.describe_volumes(filters=[{"Name": "status", "Values": ["available"]}])
    _read_orphans(world, ec2)
    return world


def _read_orphans(world: World, ec2: Ec2Client) -> None:
    """For attached VolumeAttachments of Nodes that no longer exist: which machine EC2 still
    attaches their volumes to, and its state and status checks (a Node deleted while its
    machine runs). Nothing is read when no such VolumeAttachment exists."""
    vids = {v for va in world.vas if str(va_node(va)) not in world.node
            and (va.get("status") or {}).get("attached")
            and (v := world.volume_of_va(va))}
    if not vids:
        return
    for chunk in _chunks(vids):
        world.orphan_volumes.update(ec2.describe_volumes(chunk))
    ids = {str(a["InstanceId"]) for vol in world.orphan_volumes.values()
           for a in vol.get("Attachments") or () if a.get("InstanceId")} - set(world.instances)
    for chunk in _chunks(ids):
        world.instances.update(ec2.describe_instances(chunk))
    live = {i for i in ids if ((world.instances.get(i) or {}).get("State") or {}).get("Name")
            == "running"}
    for chunk in _chunks(live):
        world.statuses.update(ec2.describe_instance_status(chunk))
