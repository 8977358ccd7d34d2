"""A dead node whose machine holds data no other machine has: the fence destroys it.

``node-hung-local-data`` is ``node-hung`` on an instance type with instance-store disks
(``m5d.xlarge``: one 150 GB NVMe SSD, wiped by any stop or terminate), running besides the
Elasticsearch pod a cache pod whose claim is bound to a local PersistentVolume on those disks, as
the local static provisioner makes them: ``spec.local`` with a path under ``/mnt/disks`` and a
required node affinity on ``kubernetes.io/hostname``. Such a pod can never run on another node.
Option ``local_pv=false`` leaves the local volume out (only the instance store is at stake).
"""

from __future__ import annotations

import hashlib
from typing import Any

from bot.sim.staging import NAMESPACE, Scenario, Stage, es_cluster, lose_node_of

INSTANCE_TYPE = "m5d.xlarge"
LOCAL_CLASS = "local-storage"
CACHE_POD = "cache-0"
CACHE_CLAIM = "cache-data"


def _on(sb: Stage, name: str, default: bool = True) -> bool:
    value = sb.options.get(name)
    return default if value is None else str(value).lower() in ("1", "true", "yes")


def _instance_store_node(sb: Stage, node: str, iid: str) -> None:
    """The victim runs on an instance type with instance-store disks (EC2 and its Node say so)."""
    inst = sb.ec2.instance(iid)
    assert inst is not None, iid
    inst.instance_type = INSTANCE_TYPE
    sb.store.mutate("Node", None, node, lambda n: n["metadata"]["labels"].update(
        {"node.kubernetes.io/instance-type": INSTANCE_TYPE}))


def add_local_cache(sb: Stage, node: str) -> dict[str, str]:
    """A claim bound to a local PV on ``node``'s NVMe disk, and a Running pod that mounts it."""
    pv = "local-pv-" + hashlib.sha256(node.encode()).hexdigest()[:8]
    sb.create("StorageClass", {"metadata": {"name": LOCAL_CLASS},
                               "provisioner": "kubernetes.io/no-provisioner",
                               "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"})
    sb.create("PersistentVolume", {
        "metadata": {"name": pv, "annotations": {
            "pv.kubernetes.io/provisioned-by": "local-volume-provisioner-" + node}},
        "spec": {"capacity": {"storage": "139Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": LOCAL_CLASS,
                 "volumeMode": "Filesystem", "local": {"path": "/mnt/disks/nvme1n1"},
                 "claimRef": {"kind": "PersistentVolumeClaim", "namespace": NAMESPACE,
                              "name": CACHE_CLAIM},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
        "status": {"phase": "Bound"}})
    sb.create("PersistentVolumeClaim", {
        "metadata": {"name": CACHE_CLAIM, "namespace": NAMESPACE, "annotations": {
            "pv.kubernetes.io/bind-completed": "yes", "volume.kubernetes.io/selected-node": node}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": LOCAL_CLASS,
                 "resources": {"requests": {"storage": "100Gi"}}, "volumeName": pv},
        "status": {"phase": "Bound", "capacity": {"storage": "139Gi"}}}, NAMESPACE)
    sb.create("Pod", {"metadata": {"name": CACHE_POD, "namespace": NAMESPACE,
                                   "labels": {"app": "cache"}},
                      "spec": {"nodeName": node, "containers": [
                          {"name": "cache", "image": "redis:7.4",
                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                          "volumes": [{"name": "data", "persistentVolumeClaim": {
                              "claimName": CACHE_CLAIM}}]}}, NAMESPACE)
    return {"local_pv": pv, "local_pod": CACHE_POD, "local_pvc": CACHE_CLAIM}


def build_node_hung_local_data(sb: Stage) -> dict[str, Any]:
    def prepare(facts: dict[str, Any]) -> dict[str, Any]:
        _instance_store_node(sb, facts["node"], facts["instance_id"])
        extra = add_local_cache(sb, facts["node"]) if _on(sb, "local_pv") else {}
        sb.advance(5)  # the kubelet starts the cache pod: its volume is on the machine, no attach
        return {**facts, **extra, "instance_type": INSTANCE_TYPE}

    return lose_node_of(sb, prepare(es_cluster(sb)), hung=True)


LOCAL_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("node-hung-local-data", "like node-hung, on an m5d.xlarge (instance-store NVMe) "
             "whose cache pod's claim is bound to a local PV on that disk: the fence destroys data "
             "no other machine holds (option local_pv=false: only the instance store)", 1,
             build_node_hung_local_data, {}),
)
