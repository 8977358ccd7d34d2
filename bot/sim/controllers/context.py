"""What every controller is handed: the store, EC2, the clock, options and the event recorder."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from bot.sim.controllers.events import record
from bot.sim.ec2 import Ec2Sim
from bot.sim.resources import BY_KIND
from bot.sim.store import Store, ts

OOS_TAINT = "node.kubernetes.io/out-of-service"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
ZONE = "topology.kubernetes.io/zone"
EBS_ZONE = "topology.ebs.csi.aws.com/zone"
DRIVER = "ebs.csi.aws.com"
AUTO_DRIVER = "ebs.csi.eks.amazonaws.com"  # EKS Auto Mode's EBS driver
IN_TREE = "kubernetes.io/aws-ebs"  # the in-tree plugin, migrated to the EBS CSI driver


@dataclass(frozen=True)
class SimEvent:
    """One Kubernetes Event as the sandbox emitted it (the determinism tests compare these)."""

    time: str
    type: str
    reason: str
    object: str  # Kind/namespace/name (Kind/name when cluster-scoped)
    message: str
    source: str


@dataclass
class Context:
    store: Store
    ec2: Ec2Sim
    ec2_client: Any  # a botocore client to the proxy endpoint (what the CSI driver would use)
    options: dict[str, Any] = field(default_factory=dict)
    events: list[SimEvent] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)  # controllers' private memory

    @property
    def now(self) -> datetime:
        return self.store.now()

    def seconds_since(self, stamp: str | None) -> float:
        if not stamp:
            return 0.0
        now = self.store.now()  # every pass asks this hundreds of times: no property in between
        return (now - _parse_in(stamp, now.tzinfo)).total_seconds()

    def store_res(self, kind: str) -> Any:
        return BY_KIND[kind]

    # Controllers read stored snapshots without copying them; they change objects only through
    # the store's writes (``mutate``, ``create``, ``delete``), never in place.

    def items(self, kind: str) -> list[dict[str, Any]]:
        return self.store.scan(BY_KIND[kind])

    def find(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.store.peek(BY_KIND[kind], namespace, name)

    def event(self, obj: dict[str, Any], *, type: str, reason: str, message: str,
              source: str, repeat_after: float = 60.0) -> None:
        """Record an Event as its source's recorder would (see ``bot.sim.controllers.events``)."""
        if record(self, obj, type=type, reason=reason, message=message, source=source,
                  repeat_after=repeat_after):
            self.events.append(SimEvent(ts(self.now), type, reason, _ref(obj), message, source))


@lru_cache(maxsize=8192)
def _parse(stamp: str) -> datetime:
    """A Time or MicroTime stamp. Every pass compares hundreds of them (heartbeats, Leases, event
    ages), and the same few recur: parsed once each, not with strptime every time."""
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if "." in stamp else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.strptime(stamp, fmt)


@lru_cache(maxsize=8192)
def _parse_in(stamp: str, tz: Any) -> datetime:
    """``_parse(stamp)`` in the clock's time zone, kept as such too (``seconds_since``)."""
    return _parse(stamp).replace(tzinfo=tz)


def _ref(obj: dict[str, Any]) -> str:
    """Kind/namespace/name, or Kind/name for a cluster-scoped object."""
    meta = obj["metadata"]
    if meta.get("namespace"):
        return f"{obj['kind']}/{meta['namespace']}/{meta['name']}"
    return f"{obj['kind']}/{meta['name']}"


def seconds_option(ctx: Context, option: str, default: float, *, positive: bool = False) -> float:
    """Scenario option ``option`` in seconds, ``default`` when unset; a value that is not a
    number (or, with ``positive``, not above 0) is refused with the option's name."""
    value = ctx.options.get(option, default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"option {option}={value!r}: expected seconds") from None
    if positive and seconds <= 0:
        raise ValueError(f"option {option}={value!r}: expected seconds > 0")
    return seconds


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions") or ():
        if c.get("type") == ctype:
            return c
    return None


def node_ready(node: dict[str, Any]) -> bool:
    c = condition(node, "Ready")
    return bool(c and c.get("status") == "True")


def has_taint(node: dict[str, Any], key: str) -> bool:
    return any(t.get("key") == key for t in node.get("spec", {}).get("taints") or [])


def instance_id(node: dict[str, Any] | None) -> str | None:
    if node is None:
        return None
    return _instance_of(node.get("spec", {}).get("providerID", ""))


@lru_cache(maxsize=8192)  # every pass asks it of every node, many times
def _instance_of(provider_id: str) -> str | None:
    tail = provider_id.rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else None


def boot_id_of(ctx: Context, iid: str | None) -> str | None:
    """The instance's current boot id, when the EC2 model tracks one (it changes on stop/start):
    what its kubelet reports in ``status.nodeInfo.bootID``."""
    lookup = getattr(ctx.ec2, "boot_id", None)
    value = lookup(iid) if callable(lookup) and iid else None
    return str(value) if value else None


@lru_cache(maxsize=8192)  # every pass names the attachments of every mounted volume
def va_name(volume_handle: str, node_name: str, driver: str = DRIVER) -> str:
    return "csi-" + hashlib.sha256(f"{volume_handle}{driver}{node_name}".encode()).hexdigest()


def ebs_source(pv: dict[str, Any] | None) -> tuple[str, str] | None:
    """(CSI driver, EBS volume id) of a PV: a CSI volume of either EBS driver, or an in-tree
    ``awsElasticBlockStore`` volume, which CSI migration hands to ``ebs.csi.aws.com``."""
    if pv is None:
        return None
    spec = pv.get("spec") or {}
    csi = spec.get("csi")
    if csi and csi.get("driver") in (DRIVER, AUTO_DRIVER):
        return str(csi["driver"]), str(csi.get("volumeHandle", ""))
    aws = spec.get("awsElasticBlockStore")
    if aws and aws.get("volumeID"):
        return DRIVER, str(aws["volumeID"]).rsplit("/", 1)[-1]
    return None


def attacher_finalizer(driver: str) -> str:
    return "external-attacher/" + driver.replace(".", "-")


def in_use_name(driver: str, handle: str) -> str:
    """How a kubelet reports a mounted CSI volume in ``status.volumesInUse``."""
    return f"kubernetes.io/csi/{driver}^{handle}"


def pod_pvcs(pod: dict[str, Any]) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"] for v in pod.get("spec", {}).get("volumes") or []
            if v.get("persistentVolumeClaim")]
