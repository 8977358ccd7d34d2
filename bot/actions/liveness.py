"""Is the machine behind a NotReady node dead, sick, or cut off? One answer, from EKS's evidence.

A NotReady node is not a dead node. The commonest NotReady on EKS is a kubelet that is alive and
posts ``Ready=False`` (``KubeletNotReady``: the VPC CNI not initialised, PLEG unhealthy, the
container runtime down); its pods keep running and writing to their EBS volumes, and fencing its
machine is exactly the harm this product exists to prevent. So every caller that must tell the
cases apart (interlock 8 before a stop or terminate, ``diagnose``, the alert cards, the triage
runbook, ``node-dead-ngns``'s first guard) asks ``classify`` and nothing else.

The evidence, all of it read live by the caller:

- the node's Lease in ``kube-node-lease`` (``spec.renewTime``): a live kubelet renews it about
  every 10 s whatever its Ready status, so a fresh Lease means a live kubelet;
- the Ready condition: ``False`` is posted by a live kubelet, ``Unknown`` (``NodeStatusUnknown``)
  by the node lifecycle controller once the kubelet stopped posting for the grace period.
  ``lastHeartbeatTime`` alone is not liveness: a healthy kubelet may leave it 5 minutes old
  (``nodeStatusReportFrequency``); it counts only when it is fresher than the grace period;
- EC2: the instance's state, and the status checks and scheduled events of DescribeInstanceStatus.

Verdicts: ``ready``; ``sick`` (the kubelet is alive but the node is not Ready: a named cause, no
fence); ``dead`` (silent past the grace period and EC2 confirms: stopped, terminated, gone, going
down, or a status check ``impaired``); ``ambiguous`` (silent, but EC2's checks do not confirm it:
a partition, or a hang the checks have not caught yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.actions.authoring import Obj, instance_state, parse_time

READY, SICK, DEAD, AMBIGUOUS = "ready", "sick", "dead", "ambiguous"
# EC2 states that confirm the machine is off or on its way off
DOWN_STATES = frozenset({"stopped", "terminated", "stopping", "shutting-down", "absent"})
# the conditions EKS's node monitoring agent adds, and the kubelet's pressure conditions
AGENT_CONDITIONS = ("KernelReady", "NetworkingReady", "StorageReady", "ContainerRuntimeReady",
                    "AcceleratedHardwareReady")
PRESSURE_CONDITIONS = ("DiskPressure", "MemoryPressure", "PIDPressure")

# cause -> (what it is, what to do), in the words the triage and the refusals use
CAUSES: Mapping[str, tuple[str, str]] = {
    "cni": ("the pod network is not ready (VPC CNI / aws-node not initialised)",
            "check the aws-node pod on the node (kubectl -n kube-system logs <aws-node pod> -c "
            "aws-node), ipamd's log (/var/log/aws-routed-eni/ipamd.log) and the node's ENI and "
            "IP capacity; restarting aws-node or repairing its IAM role usually brings it back"),
    "pleg": ("the kubelet's pod lifecycle (PLEG) is not healthy: the container runtime is hung "
             "or overloaded",
             "look at containerd and the kubelet on the node (SSM: systemctl status containerd; "
             "journalctl -u kubelet), and at disk I/O and the number of containers"),
    "runtime": ("the container runtime is down",
                "restart containerd on the node (SSM: systemctl restart containerd) and read "
                "journalctl -u containerd"),
    "disk-pressure": ("the node is out of disk (DiskPressure)",
                      "free space on the node: images (crictl rmi --prune), logs, emptyDir; the "
                      "kubelet evicts pods by itself"),
    "memory-pressure": ("the node is out of memory (MemoryPressure)",
                        "find the pods without memory limits; the kubelet evicts by itself"),
    "pid-pressure": ("the node is out of process ids (PIDPressure)",
                     "find the pod forking without bound; set pod PID limits"),
    "storage": ("the node's storage stack is not healthy (StorageReady=False)",
                "a hung EBS volume or file system: if pods are stuck in D state, a fence by "
                "break-glass may be the only way out"),
    "kernel": ("the node's kernel is not healthy (KernelReady=False)",
               "read the node's console output (aws ec2 get-console-output) and dmesg"),
    "networking": ("the node's networking is not healthy (NetworkingReady=False)",
                   "check aws-node, kube-proxy and the node's ENIs"),
    "unknown": ("the kubelet reports the node not Ready for a reason the bot does not recognise",
                "read kubectl describe node and the kubelet's log (journalctl -u kubelet)"),
}


@dataclass(frozen=True)
class Evidence:
    """What one classification rested on, as read (every field is shown to approvers)."""

    ready: str  # True | False | Unknown
    reason: str | None
    message: str | None
    heartbeat_age: float | None  # seconds since lastHeartbeatTime
    lease_age: float | None  # seconds since the Lease's renewTime; None without a Lease
    silent_for: float | None  # seconds since the last sign of life (Lease or fresh heartbeat)
    instance_state: str | None
    system_status: str | None
    instance_status: str | None
    events: tuple[str, ...] = ()  # scheduled events: "code (description)"
    conditions: Mapping[str, str] = field(default_factory=dict)  # other condition -> status


@dataclass(frozen=True)
class Liveness:
    verdict: str  # ready | sick | dead | ambiguous
    cause: str | None  # a CAUSES key for a sick (or pressured) node
    evidence: Evidence

    @property
    def kubelet_alive(self) -> bool:
        return self.verdict in (READY, SICK)

    def words(self) -> str:
        """One sentence a person at 3 a.m. can act on."""
        e = self.evidence
        lease = ("no Lease" if e.lease_age is None
                 else f"Lease renewed {_ago(e.lease_age)}")
        ready = f"Ready={e.ready}" + (f" ({e.reason}: {e.message})" if e.reason and e.message
                                      else f" ({e.reason})" if e.reason else "")
        checks = _checks_words(e)
        if self.verdict == READY:
            return f"the node is Ready; {lease}"
        if self.verdict == SICK:
            what = CAUSES[self.cause or "unknown"][0]
            return (f"the kubelet is ALIVE ({lease}) and reports {ready}: {what}. Its pods may "
                    f"still run and write to their volumes; {checks}")
        if self.verdict == DEAD:
            return (f"the kubelet is silent ({lease}, {ready}) and EC2 confirms the machine is "
                    f"down: {checks}")
        return (f"the kubelet is silent ({lease}, {ready}) but EC2 does not confirm the machine "
                f"is down: {checks}. It may be alive behind a network partition, or hung in a way "
                "the status checks have not caught yet")

    def advice(self) -> str:
        if self.verdict == SICK:
            return CAUSES[self.cause or "unknown"][1]
        if self.verdict == AMBIGUOUS:
            return ("check whether the machine is alive from another path (SSM Session Manager, "
                    "the EC2 serial console, its pods' traffic); a partitioned machine keeps "
                    "writing. Fence it only by break-glass, once it has been silent long enough")
        if self.verdict == DEAD:
            return "fence and recover it with node-dead-ngns"
        return "nothing to do for the node itself"


def classify(*, node: Obj | None, lease: Obj | None, instance: Obj | None,
             status: Obj | None, now: datetime, grace: float) -> Liveness:
    """The verdict on one node (``node`` None: a machine whose Node was deleted; EC2 alone)."""
    conds = {str(c.get("type")): c for c in ((node or {}).get("status") or {}).get("conditions") or ()}
    ev = _evidence(conds, has_node=node is not None, lease=lease, instance=instance,
                   status=status or {}, now=now, grace=grace)
    return _verdict(ev, conds, has_node=node is not None, grace=grace)


def _evidence(conds: Mapping[str, Obj], *, has_node: bool, lease: Obj | None,
              instance: Obj | None, status: Obj, now: datetime, grace: float) -> Evidence:
    """Everything ``classify`` rests on, read out of the node's conditions, its Lease and EC2."""
    ready = conds.get("Ready") or {}
    beat = _age(now, ready.get("lastHeartbeatTime"))
    renewed = _age(now, ((lease or {}).get("spec") or {}).get("renewTime"))
    return Evidence(ready=str(ready.get("status") or "Unknown"), reason=ready.get("reason"),
                    message=ready.get("message"), heartbeat_age=beat, lease_age=renewed,
                    silent_for=_silent_for(ready, beat=beat, renewed=renewed, has_node=has_node,
                                           now=now, grace=grace),
                    instance_state=instance_state(instance) if instance is not None else None,
                    system_status=(status.get("SystemStatus") or {}).get("Status"),
                    instance_status=(status.get("InstanceStatus") or {}).get("Status"),
                    events=_scheduled_events(status),
                    conditions={k: str(c.get("status")) for k, c in conds.items()
                                if k in AGENT_CONDITIONS + PRESSURE_CONDITIONS})


def _silent_for(ready: Obj, *, beat: float | None, renewed: float | None, has_node: bool,
                now: datetime, grace: float) -> float | None:
    """Seconds since the last sign of life: the Lease, or a heartbeat fresher than the grace."""
    signs = [a for a in (renewed, beat if beat is not None and beat < grace else None)
             if a is not None]
    if signs:
        return min(signs)
    if not has_node:
        return None
    # without a Lease or a heartbeat time, the move to Unknown (a grace period after the last
    # heartbeat) bounds the silence from below
    if beat is not None:
        return beat
    return _age(now, ready.get("lastTransitionTime")) if ready.get("status") == "Unknown" else None


def _scheduled_events(status: Obj) -> tuple[str, ...]:
    """DescribeInstanceStatus's scheduled events not yet completed, as "code (description)"."""
    return tuple(f"{e.get('Code')} ({e.get('Description') or 'scheduled'})"
                 for e in status.get("Events") or ()
                 if not str(e.get("Description") or "").startswith("[Completed]"))


def _verdict(ev: Evidence, conds: Mapping[str, Obj], *, has_node: bool, grace: float) -> Liveness:
    alive = has_node and ((ev.lease_age is not None and ev.lease_age < grace)
                          or (ev.ready == "False" and ev.heartbeat_age is not None
                              and ev.heartbeat_age < grace))
    if alive and ev.ready == "True":
        return Liveness(READY, _cause(ev, conds) if _pressured(conds) else None, ev)
    if alive:
        return Liveness(SICK, _cause(ev, conds), ev)
    if has_node and ev.ready == "True":
        return Liveness(READY, None, ev)  # the controller has not marked it yet
    confirmed = ev.instance_state in DOWN_STATES or "impaired" in (ev.system_status,
                                                                   ev.instance_status)
    return Liveness(DEAD if confirmed else AMBIGUOUS, None, ev)


def _pressured(conds: Mapping[str, Obj]) -> bool:
    return any(str(conds.get(k, {}).get("status")) == "True" for k in PRESSURE_CONDITIONS) or any(
        str(conds.get(k, {}).get("status")) == "False" for k in AGENT_CONDITIONS)


def _cause(ev: Evidence, conds: Mapping[str, Obj]) -> str:
    text = f"{ev.reason or ''} {ev.message or ''}".lower()
    def false(kind: str) -> bool:
        return str(conds.get(kind, {}).get("status")) == "False"
    if "networkpluginnotready" in text or "cni" in text or "network plugin" in text:
        return "cni"
    if "container runtime is down" in text or false("ContainerRuntimeReady"):
        return "runtime"
    if "pleg" in text:
        return "pleg"
    for kind, cause in (("DiskPressure", "disk-pressure"), ("MemoryPressure", "memory-pressure"),
                        ("PIDPressure", "pid-pressure")):
        if str(conds.get(kind, {}).get("status")) == "True":
            return cause
    for kind, cause in (("StorageReady", "storage"), ("KernelReady", "kernel"),
                        ("NetworkingReady", "networking")):
        if false(kind):
            return cause
    return "unknown"


def _age(now: datetime, value: Any) -> float | None:
    at = parse_time(value)
    return None if at is None else max(0.0, (now - at).total_seconds())


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def _checks_words(e: Evidence) -> str:
    if e.instance_state is None:
        return "EC2 was not read"
    if e.instance_state in ("stopped", "terminated", "absent"):
        return f"the instance is {e.instance_state}"
    text = (f"the instance is {e.instance_state}, status checks system "
            f"{e.system_status or 'not reported'}, instance {e.instance_status or 'not reported'}")
    return text + (f", scheduled events: {', '.join(e.events)}" if e.events else "")
