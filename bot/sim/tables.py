"""Server-side printing: the ``meta.k8s.io/v1 Table`` that ``kubectl get`` asks for.

kubectl prints whatever columns the server sends, so these mirror the real columns for the resources
an on-call engineer looks at (nodes, pods, volumeattachments, PVs, PVCs, leases); others get NAME
and AGE.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bot.sim.resources import Resource

Row = Callable[[dict[str, Any], datetime], list[Any]]


def age(obj: dict[str, Any], now: datetime) -> str:
    created = obj.get("metadata", {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=now.tzinfo)
    secs = max(0, int((now - then).total_seconds()))
    if secs < 120:
        return f"{secs}s"
    if secs < 3600 * 3:
        return f"{secs // 60}m"
    if secs < 86400 * 2:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def node_status(node: dict[str, Any]) -> str:
    ready = next((c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"),
                 None)
    state = "Ready" if ready and ready.get("status") == "True" else (
        "NotReady" if ready else "Unknown")
    if node.get("spec", {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    return state


def pod_status(pod: dict[str, Any]) -> str:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status", {})
    for cs in status.get("containerStatuses") or []:
        waiting = cs.get("state", {}).get("waiting")
        if waiting:
            return str(waiting.get("reason", "Waiting"))
    return str(status.get("phase", "Pending"))


def pod_ready(pod: dict[str, Any]) -> str:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    total = len(pod.get("spec", {}).get("containers") or []) or len(statuses)
    ready = sum(1 for cs in statuses if cs.get("ready"))
    return f"{ready}/{total}"


COLUMNS: dict[str, list[tuple[str, str, int]]] = {
    "nodes": [("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0),
              ("Age", "string", 0), ("Version", "string", 0), ("Internal-IP", "string", 1),
              ("External-IP", "string", 1), ("OS-Image", "string", 1)],
    "pods": [("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
             ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1),
             ("Node", "string", 1), ("Nominated Node", "string", 1),
             ("Readiness Gates", "string", 1)],
    "volumeattachments": [("Name", "string", 0), ("Attacher", "string", 0), ("PV", "string", 0),
                          ("Node", "string", 0), ("Attached", "boolean", 0), ("Age", "string", 0)],
    "persistentvolumes": [("Name", "string", 0), ("Capacity", "string", 0),
                          ("Access Modes", "string", 0), ("Reclaim Policy", "string", 0),
                          ("Status", "string", 0), ("Claim", "string", 0),
                          ("StorageClass", "string", 0), ("Age", "string", 0)],
    "persistentvolumeclaims": [("Name", "string", 0), ("Status", "string", 0),
                               ("Volume", "string", 0), ("Capacity", "string", 0),
                               ("Access Modes", "string", 0), ("StorageClass", "string", 0),
                               ("Age", "string", 0)],
    "storageclasses": [("Name", "string", 0), ("Provisioner", "string", 0),
                       ("ReclaimPolicy", "string", 0), ("VolumeBindingMode", "string", 0),
                       ("Age", "string", 0)],
    "daemonsets": [("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                   ("Ready", "integer", 0), ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                   ("Node Selector", "string", 0), ("Age", "string", 0)],
    "leases": [("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
    "events": [("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
               ("Object", "string", 0), ("Message", "string", 0)],
}

_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX",
          "ReadWriteOncePod": "RWOP"}


def _row(res: Resource, o: dict[str, Any], now: datetime) -> list[Any]:
    m, spec, st = o.get("metadata", {}), o.get("spec", {}), o.get("status", {})
    name = m.get("name", "")
    if res.plural == "nodes":
        addrs = {a.get("type"): a.get("address") for a in st.get("addresses", [])}
        return [name, node_status(o), "<none>", age(o, now),
                st.get("nodeInfo", {}).get("kubeletVersion", ""), addrs.get("InternalIP", "<none>"),
                addrs.get("ExternalIP", "<none>"), st.get("nodeInfo", {}).get("osImage", "")]
    if res.plural == "pods":
        restarts = sum(int(cs.get("restartCount") or 0) for cs in st.get("containerStatuses") or [])
        return [name, pod_ready(o), pod_status(o), str(restarts), age(o, now), st.get("podIP") or "<none>",
                spec.get("nodeName") or "<none>", "<none>", "<none>"]
    if res.plural == "volumeattachments":
        return [name, spec.get("attacher", ""), spec.get("source", {}).get("persistentVolumeName", ""),
                spec.get("nodeName", ""), bool(st.get("attached")), age(o, now)]
    if res.plural == "persistentvolumes":
        ref = spec.get("claimRef") or {}
        claim = f"{ref.get('namespace')}/{ref.get('name')}" if ref else ""
        phase = "Terminating" if m.get("deletionTimestamp") else st.get("phase", "")
        return [name, spec.get("capacity", {}).get("storage", ""),
                ",".join(_MODES.get(x, x) for x in spec.get("accessModes", [])),
                spec.get("persistentVolumeReclaimPolicy", ""), phase, claim,
                spec.get("storageClassName", ""), age(o, now)]
    if res.plural == "persistentvolumeclaims":
        phase = "Terminating" if m.get("deletionTimestamp") else st.get("phase", "")
        return [name, phase, spec.get("volumeName", ""), st.get("capacity", {}).get("storage", ""),
                ",".join(_MODES.get(x, x) for x in st.get("accessModes", [])),
                spec.get("storageClassName", ""), age(o, now)]
    if res.plural == "storageclasses":
        return [name, o.get("provisioner", ""), o.get("reclaimPolicy", "Delete"),
                o.get("volumeBindingMode", "Immediate"), age(o, now)]
    if res.plural == "daemonsets":
        sel = spec.get("template", {}).get("spec", {}).get("nodeSelector") or {}
        return [name, st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
                st.get("numberReady", 0), st.get("updatedNumberScheduled", 0),
                st.get("numberAvailable", 0),
                ",".join(f"{k}={v}" for k, v in sel.items()) or "<none>", age(o, now)]
    if res.plural == "leases":
        return [name, spec.get("holderIdentity") or "", age(o, now)]
    if res.plural == "events":
        inv = o.get("involvedObject") or o.get("regarding") or {}  # core/v1 or events.k8s.io
        return [age(o, now), o.get("type", ""), o.get("reason", ""),
                f"{str(inv.get('kind', '')).lower()}/{inv.get('name', '')}",
                o.get("message") or o.get("note") or ""]
    return [name, age(o, now)]


def table(res: Resource, items: list[dict[str, Any]], *, now: datetime,
          list_meta: dict[str, Any]) -> dict[str, Any]:
    cols = COLUMNS.get(res.plural, [("Name", "string", 0), ("Age", "string", 0)])
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" else "",
                               "description": n, "priority": p} for n, t, p in cols],
        "rows": [{"cells": _row(res, o, now),
                  "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": o.get("metadata", {})}} for o in items],
    }
