"""Staging a scenario: the ``Stage`` a scenario builds on, and the building blocks every scenario uses.

A scenario (``bot.sim.scenarios`` and the incident modules it lists) builds a healthy cluster
through the controllers, then breaks it. What it builds on is the ``Sandbox``, but only through
the few members ``Stage`` names: the scenarios sit below the sandbox (the sandbox looks its
scenario up in ``SCENARIOS``), so they name the protocol, never the class, and import nothing above
them. The blocks here (nodes, storage classes, StatefulSets, losing a node) are public so that
every incident module shares them without reaching into another module's private helpers.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from bot.sim.controllers.context import (
    AUTO_DRIVER,
    DRIVER,
    EBS_ZONE,
    IN_TREE,
    ZONE,
    ebs_source,
    instance_id,
    va_name,
)
from bot.sim.controllers.nodes import grace_period
from bot.sim.nodegroups import KARPENTER_KINDS, claim, instance_tags, node_labels

if TYPE_CHECKING:
    from bot.engine.ports import Clock
    from bot.sim.apiserver import ApiServer
    from bot.sim.controllers.context import Context
    from bot.sim.ec2 import Ec2Sim
    from bot.sim.ec2_moto import MotoQuery
    from bot.sim.resources import Resource
    from bot.sim.store import Store

REGION = "ap-southeast-1"
ZONES = ("ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c")
NAMESPACE = "search"

ES_DATA_PATH = "/usr/share/elasticsearch/data"
VOLUME_DRIVERS = (DRIVER, AUTO_DRIVER, IN_TREE)


class Stage(Protocol):
    """What a scenario builds on: the members of ``bot.sim.sandbox.Sandbox`` a scenario uses."""

    options: dict[str, Any]
    store: Store
    ec2: Ec2Sim
    seed_ec2: MotoQuery  # arranging calls straight to moto
    ctx: Context | None
    clock: Clock
    api: ApiServer

    def advance(self, seconds: float, *, step: float = 5.0) -> None: ...
    def at(self, seconds: float, action: Callable[[], None]) -> None: ...
    def partition(self, node: str, cut: bool = True) -> None: ...
    def sicken_kubelet(self, node: str, cause: str | None) -> None: ...
    def res(self, kind: str) -> Resource: ...
    def create(self, kind: str, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]: ...
    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]: ...
    def find(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...
    def now_ts(self) -> str: ...
    def next_host(self, octet: int) -> int: ...
    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    seed: int
    build: Callable[[Stage], dict[str, Any]]
    defaults: dict[str, Any]


# -- building blocks ---------------------------------------------------------------------------

def add_nodes(sb: Stage, zone: str, count: int, *, pods: int = 29, cpu: str = "4",
              attach: int = 25) -> list[str]:
    ids = sb.seed_ec2.run_instances(ImageId="ami-12c6146b", MinCount=count, MaxCount=count,
                                    InstanceType="m5.xlarge",
                                    Placement={"AvailabilityZone": zone})["Instances"]
    names = []
    octet = ZONES.index(zone) + 1 if zone in ZONES else 9
    for inst in sorted(ids, key=lambda i: i["AmiLaunchIndex"]):
        iid = inst["InstanceId"]
        host = sb.next_host(octet)
        name = f"ip-10-0-{octet}-{host}.{REGION}.compute.internal"
        node = sb.create("Node", {
            "metadata": {"name": name, "labels": {
                ZONE: zone, EBS_ZONE: zone, "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": REGION, "node.kubernetes.io/instance-type": "m5.xlarge",
                "kubernetes.io/os": "linux"},
                "annotations": {"csi.volume.kubernetes.io/nodeid": f'{{"{DRIVER}":"{iid}"}}'}},
            "spec": {"providerID": f"aws:///{zone}/{iid}"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": sb.now_ts()}],
                       "allocatable": {"pods": str(pods), "cpu": cpu, "memory": "15Gi"},
                       "capacity": {"pods": str(pods), "cpu": cpu, "memory": "16Gi"},
                       "addresses": [{"type": "InternalIP", "address": f"10.0.{octet}.{host}"},
                                     {"type": "Hostname", "address": name}],
                       "nodeInfo": node_info(iid)}})
        # the kubelet writes its CSINode owned by the Node: the garbage collector deletes it with it
        sb.create("CSINode", {"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}]},
            "spec": {"drivers": [
            {"name": DRIVER, "nodeID": iid, "topologyKeys": [EBS_ZONE],
             "allocatable": {"count": attach}}]}})
        names.append(name)
    adopt(sb, names)
    return names


def node_info(instance: str) -> dict[str, str]:
    """Every field the API marks required: typed clients refuse a Node without them."""
    digest = hashlib.sha256(instance.encode()).hexdigest()
    return {"architecture": "amd64", "bootID": str(uuid.UUID(digest[:32])),
            "containerRuntimeVersion": "containerd://1.7.22",
            "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
            "kubeProxyVersion": "v1.32.0-eks", "kubeletVersion": "v1.32.0-eks",
            "machineID": f"ec2{digest[:29]}", "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023.6.20241031", "systemUUID": str(uuid.UUID(digest[32:]))}


def storage_class(sb: Stage, name: str, mode: str, zones: list[str] | None = None,
                  default: bool = False, provisioner: str | None = None) -> None:
    """``provisioner`` defaults to the option ``volume_driver``: ``ebs.csi.aws.com``,
    ``ebs.csi.eks.amazonaws.com`` (EKS Auto Mode) or ``kubernetes.io/aws-ebs`` (in-tree, migrated)."""
    provisioner = provisioner or str(sb.options.get("volume_driver") or DRIVER)
    if provisioner not in VOLUME_DRIVERS:
        raise ValueError(f"option volume_driver={provisioner!r}: expected one of "
                         f"{', '.join(VOLUME_DRIVERS)}")
    sc: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner, "reclaimPolicy": "Delete",
                          "volumeBindingMode": mode, "parameters": {"type": "gp3"}}
    if default:
        sc["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": EBS_ZONE, "values": zones}]}]
    sb.create("StorageClass", sc)


def statefulset(sb: Stage, name: str, replicas: int, sc: str, *, ns: str = NAMESPACE,
                anti_affinity: bool = True, cpu: str = "500m") -> None:
    labels = {"app": name}
    spec: dict[str, Any] = {"containers": [{"name": "elasticsearch",
                                            "image": "docker.elastic.co/elasticsearch/elasticsearch:8.15.0",
                                            "resources": {"requests": {"cpu": cpu}},
                                            "volumeMounts": [{"name": "data",
                                                              "mountPath": ES_DATA_PATH}]}],
                            "terminationGracePeriodSeconds": 120}
    if anti_affinity:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}}
    sb.create("StatefulSet", {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": spec},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                     "resources": {"requests": {"storage": "100Gi"}}}}]}}, ns)


def namespace(sb: Stage, name: str) -> None:
    sb.create("Namespace", {"metadata": {"name": name}, "status": {"phase": "Active"}})


def pod_facts(sb: Stage, ns: str, pod: str) -> dict[str, Any]:
    p = sb.get("Pod", ns, pod)
    node = p["spec"]["nodeName"]
    pvc = sb.get("PersistentVolumeClaim", ns, f"data-{pod}")
    pv = sb.get("PersistentVolume", None, pvc["spec"]["volumeName"])
    src = ebs_source(pv)
    assert src is not None, pv
    driver, vid = src
    return {"namespace": ns, "pod": pod, "node": node, "instance_id": instance_id(sb.get("Node", None, node)),
            "pvc": pvc["metadata"]["name"], "pv": pv["metadata"]["name"], "volume_id": vid,
            "zone": sb.get("Node", None, node)["metadata"]["labels"][ZONE],
            "volume_attachment": va_name(vid, node, driver)}


def es_cluster(sb: Stage, *, per_zone: int = 2) -> dict[str, Any]:
    """Six nodes over three zones, an Elasticsearch StatefulSet of three, all Running."""
    namespace(sb, NAMESPACE)
    for zone in ZONES:
        add_nodes(sb, zone, per_zone)
    storage_class(sb, "gp3", "WaitForFirstConsumer", default=True)
    statefulset(sb, "es-data", 3, "gp3")
    sb.advance(10)
    pods = [f"es-data-{i}" for i in range(3)]
    victim = next(p for p in pods if sb.get("Pod", NAMESPACE, p)["spec"]["nodeName"].startswith("ip-10-0-1-"))
    return pod_facts(sb, NAMESPACE, victim)


def lose_contact(sb: Stage) -> None:
    """Advance until a node whose kubelet just went silent is marked: its last Lease renewal and
    status post are no later than now, so after node-monitor-grace-period (50 s) the lifecycle
    controller sets it Unknown (NotReady) with the unreachable taints."""
    assert sb.ctx is not None
    sb.advance(grace_period(sb.ctx))


def at_death(sb: Stage) -> bool:
    """Option ``at_death=true``: the scenario is ready the moment its node died, before the
    grace period, eviction or any force delete (``bench/recovery.py`` times recovery from it)."""
    return str(sb.options.get("at_death") or "").lower() in ("1", "true", "yes")


def lose_node(sb: Stage, facts: dict[str, Any], *, hung: bool,
              force_delete: bool = True) -> dict[str, Any]:
    """The node in ``facts`` dies (``hung``: its guest hangs, the instance still runs; else it
    stops), is marked unreachable, its pod evicted and (``force_delete``) force-deleted, as the
    usual first reaction: the replacement pod's node is ``new_node``."""
    iid = facts["instance_id"]
    if hung:
        sb.ec2.set_hung(iid)  # kernel panic: EC2 still says running, status checks fail
    else:
        sb.ec2.set_state(iid, "stopped", reason_code="Server.InternalError",
                         reason_message="Server.InternalError: Internal error on the host")
    if at_death(sb):  # staged the moment it died: nothing has noticed yet
        return {**facts, "dead_node": facts["node"], "new_node": None, "died_at": sb.now_ts()}
    lose_contact(sb)
    sb.advance(300)  # tolerationSeconds of the unreachable taint: the pod is evicted, Terminating
    if not force_delete:
        return {**facts, "dead_node": facts["node"], "new_node": None}
    # The usual first reaction, and a wrong fix: force-delete the stuck pod.
    sb.store.remove(sb.res("Pod"), facts["namespace"], facts["pod"])
    sb.advance(5)
    new = sb.get("Pod", facts["namespace"], facts["pod"])
    return {**facts, "dead_node": facts["node"], "new_node": new["spec"]["nodeName"]}


def lose_node_of(sb: Stage, facts: dict[str, Any], *, hung: bool) -> dict[str, Any]:
    """node-hung's (``hung``) or node-dead's loss of the node in ``facts``, for a scenario that
    set the cluster up itself."""
    return lose_node(sb, facts, hung=hung)


def adopt(sb: Stage, names: list[str]) -> None:
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
        kind = str(sb.options.get("node_group") or "managed-node-group")
        if kind in KARPENTER_KINDS:
            claim(sb.store, sb.ec2, node, kind=kind, now=sb.now_ts())
