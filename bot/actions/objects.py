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
from datetime import UTC, datetime
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


def pv_zone(pv: Obj) -> str | None:
    affinity = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    for term in affinity.get("nodeSelectorTerms") or ():
        for expr in term.get("matchExpressions") or ():
            if expr.get("key") in ZONE_KEYS and expr.get("values"):
                return str(expr["values"][0])
    legacy = str(((pv.get("spec") or {}).get("awsElasticBlockStore") or {}).get("volumeID") or "")
    m = re.match(r"^aws://(?P<zone>[a-z0-9-]+)/", legacy)
    if m:
        return m.group("zone")
    labels = meta(pv).get("labels") or {}
    return next((str(labels[k]) for k in ZONE_KEYS if labels.get(k)), None)


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


def set_taint(obj: Obj, *, key: str, value: str, effect: str, now: str) -> Obj:
    """``obj`` (a Node) with the taint added, or its value replaced for the same key and effect.

    The out-of-service taint records, in the same write, when it went on and the boot it went on
    (``TAINT_AT``, ``TAINT_BOOT_ID``), which the untaint interlock must see gone."""
    spec = obj.setdefault("spec", {})
    kept = [t for t in spec.get("taints") or ()
            if not (t.get("key") == key and t.get("effect") == effect)]
    spec["taints"] = [*kept, {"key": key, "value": value, "effect": effect}]
    if key == OUT_OF_SERVICE_TAINT:
        notes = obj.setdefault("metadata", {}).setdefault("annotations", {})
        notes[TAINT_AT] = now
        boot = boot_id_of(obj)
        if boot:
            notes[TAINT_BOOT_ID] = boot
        else:
            notes.pop(TAINT_BOOT_ID, None)
    return obj


def va_node(va: Obj) -> str | None:
    return (va.get("spec") or {}).get("nodeName")


def terminating(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def operator_of(inst: Obj | None) -> str | None:
    """Who manages an EC2 managed instance (``eks.amazonaws.com`` for EKS Auto Mode, which alone
    may stop or terminate it); None for an ordinary instance."""
    op = (inst or {}).get("Operator") or {}
    return str(op.get("Principal") or "a service") if op.get("Managed") else None


def instance_state(inst: Obj | None) -> str:
    return "absent" if inst is None else str((inst.get("State") or {}).get("Name") or "unknown")


# -- EBS drivers ------------------------------------------------------------------------------
# Three names stand for an EBS volume: the EBS CSI driver, EKS Auto Mode's driver, and the in-tree
# plugin (PVs with ``awsElasticBlockStore``, served by the CSI driver through CSI migration).
AUTO_MODE_EBS_DRIVER = "ebs.csi.eks.amazonaws.com"
IN_TREE_EBS_PLUGIN = "kubernetes.io/aws-ebs"
EBS_DRIVERS = frozenset({EBS_DRIVER, AUTO_MODE_EBS_DRIVER, IN_TREE_EBS_PLUGIN})
# the tags the EBS CSI driver (and the external-provisioner's extra metadata) put on a volume
TAG_CSI_VOLUME_NAME = "CSIVolumeName"
TAG_CSI_CLUSTER = "ebs.csi.aws.com/cluster"
TAG_CREATED_FOR_PV = "kubernetes.io/created-for/pv/name"
TAG_CREATED_FOR_PVC = "kubernetes.io/created-for/pvc/name"
TAG_CREATED_FOR_NAMESPACE = "kubernetes.io/created-for/pvc/namespace"


def is_ebs_driver(name: object) -> bool:
    """True for a CSI driver, attacher or provisioner name that means an EBS volume: the EBS CSI
    driver, EKS Auto Mode's ``ebs.csi.eks.amazonaws.com`` or the in-tree ``kubernetes.io/aws-ebs``."""
    return isinstance(name, str) and name in EBS_DRIVERS


def ebs_driver_of_pv(pv: Obj) -> str | None:
    """The EBS driver behind a PV (its CSI driver, or the in-tree plugin); None if it is not EBS."""
    spec = pv.get("spec") or {}
    driver = (spec.get("csi") or {}).get("driver")
    if is_ebs_driver(driver):
        return str(driver)
    if spec.get("awsElasticBlockStore") is not None:
        return IN_TREE_EBS_PLUGIN
    return None


def ebs_volume_id_of_pv(pv: Obj) -> str | None:
    """The EBS volume id of a PV of any EBS driver; None when it is not EBS or cannot be read."""
    driver = ebs_driver_of_pv(pv)
    if driver is None:
        return None
    spec = pv.get("spec") or {}
    raw = ((spec.get("csi") or {}).get("volumeHandle") if driver != IN_TREE_EBS_PLUGIN
           else (spec.get("awsElasticBlockStore") or {}).get("volumeID"))
    m = _VOLUME_ID.search(str(raw or ""))
    return m.group(1) if m else None


def ec2_tags(resource: Obj | None) -> dict[str, str]:
    """An EC2 resource's ``Tags`` list as a dict."""
    return {str(t.get("Key")): str(t.get("Value")) for t in (resource or {}).get("Tags") or ()}


def pv_named_by_tags(tags: dict[str, str]) -> str | None:
    """The PV an EBS volume was created for, from the driver's tags; None when untagged."""
    return tags.get(TAG_CREATED_FOR_PV) or tags.get(TAG_CSI_VOLUME_NAME) or None


def pod_claims(pod: Obj) -> list[str]:
    """``namespace/name`` of every claim a pod mounts."""
    ns = meta(pod).get("namespace") or "default"
    return [f"{ns}/{v['persistentVolumeClaim'].get('claimName')}"
            for v in (pod.get("spec") or {}).get("volumes") or () if v.get("persistentVolumeClaim")]


def pod_finished(pod: Obj) -> bool:
    """A pod in a terminal phase (Succeeded, Failed) no longer uses its volumes."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


# -- node liveness, boot and the records the bot keeps on a node --------------------------------

# What the out-of-service taint's action records on the node, in the same write as the taint: the
# boot the node was on and when. node-recovered may remove the taint only once that boot is gone.
TAINT_BOOT_ID = "runbook-bot.io/out-of-service-boot-id"
TAINT_AT = "runbook-bot.io/out-of-service-at"
# The run that cordoned a node: only such a cordon is lifted by the bot.
CORDONED_BY = "runbook-bot.io/cordoned-by-run"
LIVE_STATES = frozenset({"pending", "running", "stopping", "shutting-down"})


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def heartbeat_of(node: Obj) -> str | None:
    """The Ready condition's ``lastHeartbeatTime``: when the kubelet last posted its status."""
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            beat = cond.get("lastHeartbeatTime")
            return str(beat) if beat else None
    return None


def boot_id_of(node: Obj) -> str | None:
    """``status.nodeInfo.bootID``: the kubelet reports the kernel's boot id; a reboot changes it."""
    value = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")
    return str(value) if value else None


def parse_time(value: Any) -> datetime | None:
    """An API timestamp (``2026-01-01T00:00:00Z``, or an ISO datetime) as an aware datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def nodes_of_instance(nodes: list[Obj], instance_id: str) -> list[Obj]:
    """The Nodes whose providerID (or EBS CSI registration) names the instance."""
    return [n for n in nodes if instance_id in (instance_id_of(n), csi_instance_id_of(n))]


def tolerates(pod: Obj, *, key: str, value: str, effect: str) -> bool:
    """Whether one of the pod's tolerations matches the taint ``key=value:effect``."""
    for t in (pod.get("spec") or {}).get("tolerations") or ():
        if t.get("effect") not in (None, "", effect):
            continue
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") == key and (t.get("operator") == "Exists"
                                     or (t.get("value") or "") == value):
            return True
    return False
