"""Reading Kubernetes and EC2 objects: the small parsers every action and interlock shares.

Which EC2 instance a node runs on (``spec.providerID``, or the EBS CSI driver's registration),
its zone and Ready condition, the EBS volume behind a PersistentVolume, an instance's state. Both
the actions (what a runbook sees in ``steps.<id>.result``) and the interlock rules (what is
refused) read objects through these functions, so the two can never disagree.

Pure functions over the dicts the clients return: no client, no SDK, no policy.
"""

from __future__ import annotations

import json
import re
from typing import Any

Obj = dict[str, Any]

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
FENCED_STATES = frozenset({"stopped", "terminated"})  # EC2 states in which an instance runs nothing
ZONE_KEYS = ("topology.ebs.csi.aws.com/zone", "topology.kubernetes.io/zone",
             "failure-domain.beta.kubernetes.io/zone")
CSI_NODE_ID = "csi.volume.kubernetes.io/nodeid"
EBS_DRIVER = "ebs.csi.aws.com"
_PROVIDER_ID = re.compile(r"^(?:aws://(?:/(?P<zone>[a-z0-9-]*))?/)?(?P<id>i-[0-9a-f]{8,17})$")
_VOLUME_ID = re.compile(r"(vol-[0-9a-f]{8,17})$")


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def instance_id_of(node: Obj) -> str | None:
    """The EC2 instance id in ``spec.providerID`` (``aws:///zone/i-..``, ``aws:////i-..``, bare
    ``i-..``); None for Fargate (``aws:///zone/fargate-ip``) and non-AWS nodes."""
    pid = str((node.get("spec") or {}).get("providerID") or "")
    m = _PROVIDER_ID.match(pid)
    return m.group("id") if m else None


def csi_instance_id_of(node: Obj) -> str | None:
    """The instance id the EBS CSI driver registered for the node (annotation
    ``csi.volume.kubernetes.io/nodeid``, JSON ``{"ebs.csi.aws.com": "i-.."}``), if any."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(CSI_NODE_ID)
    try:
        value = json.loads(raw)[EBS_DRIVER] if raw else None
    except (ValueError, TypeError, KeyError):
        return None
    return str(value) if value else None


def zone_of_node(node: Obj) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key in ZONE_KEYS:
        if labels.get(key):
            return str(labels[key])
    pid = str((node.get("spec") or {}).get("providerID") or "")
    m = re.match(r"^aws:///(?P<zone>[a-z]{2}-[a-z]+-\d[a-z])/", pid)
    return m.group("zone") if m else None


def ready_condition(node: Obj) -> tuple[str, str | None]:
    """(status, lastTransitionTime) of the Ready condition; ``Unknown`` when it is missing."""
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return str(cond.get("status") or "Unknown"), cond.get("lastTransitionTime")
    return "Unknown", None


def taints_of(node: Obj) -> list[Obj]:
    return [{"key": t.get("key"), "value": t.get("value") or "", "effect": t.get("effect")}
            for t in (node.get("spec") or {}).get("taints") or ()]


def has_taint(node: Obj, key: str) -> bool:
    return any(t.get("key") == key for t in (node.get("spec") or {}).get("taints") or ())


def volume_id_of_pv(pv: Obj) -> str | None:
    """The EBS volume id from CSI ``volumeHandle`` or legacy ``awsElasticBlockStore.volumeID``."""
    spec = pv.get("spec") or {}
    csi = spec.get("csi") or {}
    raw = csi.get("volumeHandle") if csi.get("driver") == EBS_DRIVER else None
    raw = raw or (spec.get("awsElasticBlockStore") or {}).get("volumeID")
    m = _VOLUME_ID.search(str(raw or ""))
    return m.group(1) if m else None


def va_node(va: Obj) -> str | None:
    return (va.get("spec") or {}).get("nodeName")


def terminating(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def instance_state(inst: Obj | None) -> str:
    return "absent" if inst is None else str((inst.get("State") or {}).get("Name") or "unknown")
