"""The resource types the fake API server serves, described once for routing and discovery.

Discovery documents, URL routing, field-selector checks and the Table columns kubectl prints all come
from this one table, so adding a resource is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group: str  # "" is the core group
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    singular: str = ""
    status: bool = True  # has a /status subresource
    fields: tuple[str, ...] = ()  # field-selector labels beyond metadata.name/namespace
    view: bool = False  # another group's view of a stored kind: read-only, converted on the way out

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version


RESOURCES: tuple[Resource, ...] = (
    Resource("namespaces", "Namespace", "", "v1", False, ("ns",), "namespace",
             fields=("status.phase",)),
    Resource("nodes", "Node", "", "v1", False, ("no",), "node", fields=("spec.unschedulable",)),
    Resource("pods", "Pod", "", "v1", True, ("po",), "pod",
             fields=("spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName",
                     "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName",
                     "spec.hostNetwork")),
    Resource("events", "Event", "", "v1", True, ("ev",), "event", status=False,
             fields=("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                     "involvedObject.uid", "involvedObject.apiVersion",
                     "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                     "reportingComponent", "source", "type")),
    Resource("persistentvolumes", "PersistentVolume", "", "v1", False, ("pv",),
             "persistentvolume"),
    Resource("persistentvolumeclaims", "PersistentVolumeClaim", "", "v1", True, ("pvc",),
             "persistentvolumeclaim"),
    Resource("statefulsets", "StatefulSet", "apps", "v1", True, ("sts",), "statefulset"),
    # only as much as a Deployment with one RWO claim needs (bot.sim.controllers.deployments)
    Resource("deployments", "Deployment", "apps", "v1", True, ("deploy",), "deployment"),
    Resource("replicasets", "ReplicaSet", "apps", "v1", True, ("rs",), "replicaset"),
    # run to completion by the Job controller (bot.sim.controllers.jobs)
    Resource("jobs", "Job", "batch", "v1", True, (), "job"),
    # only the node agents' (aws-node, kube-proxy: bot.sim.controllers.daemonsets)
    Resource("daemonsets", "DaemonSet", "apps", "v1", True, ("ds",), "daemonset"),
    Resource("storageclasses", "StorageClass", "storage.k8s.io", "v1", False, ("sc",),
             "storageclass", status=False),
    Resource("volumeattachments", "VolumeAttachment", "storage.k8s.io", "v1", False, (),
             "volumeattachment"),
    Resource("csinodes", "CSINode", "storage.k8s.io", "v1", False, (), "csinode", status=False),
    # Karpenter's (and EKS Auto Mode's) machines: one per node it launched (bot.sim.controllers.karpenter)
    Resource("nodeclaims", "NodeClaim", "karpenter.sh", "v1", False, (), "nodeclaim"),
    # The kubelets' heartbeats in kube-node-lease (bot.sim.controllers.leases).
    Resource("leases", "Lease", "coordination.k8s.io", "v1", True, (), "lease", status=False),
    # The same Event objects in their events.k8s.io shape (bot.sim.eventsview), read-only.
    Resource("events", "Event", "events.k8s.io", "v1", True, ("ev",), "event", status=False,
             fields=("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                     "reason", "reportingController", "type"), view=True),
)

BY_PATH: dict[tuple[str, str], Resource] = {(r.group_version, r.plural): r for r in RESOURCES}
BY_KIND: dict[str, Resource] = {r.kind: r for r in RESOURCES if not r.view}


def group_versions() -> list[tuple[str, str]]:
    """(group, version) pairs of the named API groups, in a stable order."""
    seen: list[tuple[str, str]] = []
    for r in RESOURCES:
        if r.group and (r.group, r.version) not in seen:
            seen.append((r.group, r.version))
    return seen
