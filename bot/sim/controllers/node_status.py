"""What a live kubelet and EKS's node monitoring agent write into a Node's conditions.

A NotReady node is not always a dead one: the commonest NotReady on EKS is a kubelet that is alive,
renews its Lease, keeps its pods running, and posts ``Ready=False``. A scenario makes a kubelet
sick with ``ctx.state["kubelet_sick"][node name] = cause``; clearing the entry (a repair) makes it
post Ready again. The causes and what each posts (the kubelet's messages are those of
pkg/kubelet/nodestatus/setters.go and the runtime/PLEG health checks):

- ``cni``: Ready=False ``KubeletNotReady`` "container runtime network not ready: ...cni plugin not
  initialized"; the agent's NetworkingReady=False ``IPAMDNotReady``.
- ``pleg``: Ready=False ``KubeletNotReady`` "PLEG is not healthy: ...".
- ``runtime``: Ready=False "container runtime is down, PLEG is not healthy: ..."; the agent's
  ContainerRuntimeReady=False.
- ``disk-pressure``, ``memory-pressure``, ``pid-pressure``: Ready stays True (pressure never flips
  Ready); DiskPressure/MemoryPressure/PIDPressure=True (the lifecycle controller taints the node).
- ``storage``: Ready stays True; the agent's StorageReady=False (a hung I/O path).

The kubelet posts status at once when anything it reports changed and otherwise only every
``nodeStatusReportFrequency`` (5 min): a healthy node's ``lastHeartbeatTime`` may be 5 min old.
The agent's conditions (``KernelReady``, ``NetworkingReady``, ``StorageReady``,
``ContainerRuntimeReady``) are written only when they change, so their heartbeat is their
transition. Option ``node_monitoring_agent=false`` leaves them out (a cluster without the add-on).
"""

from __future__ import annotations

import functools
from typing import Any

REPORT_FREQUENCY = 300.0  # nodeStatusReportFrequency: 5 min since Kubernetes 1.13 with leases
UPDATE_FREQUENCY = 10.0  # nodeStatusUpdateFrequency: how often the kubelet checks for a change

SICK_CAUSES = ("cni", "pleg", "runtime", "disk-pressure", "memory-pressure", "pid-pressure",
               "storage")
PLEG = "PLEG is not healthy: pleg was last seen active 3m5s ago; threshold is 3m0s"
READY_FALSE: dict[str, str] = {
    "cni": "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
           "message:Network plugin returns error: cni plugin not initialized",
    "pleg": PLEG,
    "runtime": f"container runtime is down, {PLEG}",
}
READY_TRUE = ("KubeletReady", "kubelet is posting ready status")

# condition -> (healthy reason, message), (pressured reason, message), its sick cause
PRESSURE: dict[str, tuple[tuple[str, str], tuple[str, str], str]] = {
    "MemoryPressure": (("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                       ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
                       "memory-pressure"),
    "DiskPressure": (("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                     ("KubeletHasDiskPressure", "kubelet has disk pressure"), "disk-pressure"),
    "PIDPressure": (("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
                    "pid-pressure"),
}
KUBELET_CONDITIONS = (*PRESSURE, "Ready")

# The node monitoring agent's conditions: healthy (reason, message), and the cause that fails one
# with (reason, message). Healthy texts are what the agent writes; the failures are our best reading
# of its reasons catalogue (docs/sandbox.md says which).
AGENT: dict[str, tuple[tuple[str, str], str | None, tuple[str, str]]] = {
    "ContainerRuntimeReady": (
        ("ContainerRuntimeIsReady", "Monitoring for the ContainerRuntime system is active"),
        "runtime", ("ContainerdRepeatedRestart",
                    'Systemd unit "containerd.service" has restarted (NRestarts 3 -> 4)')),
    "StorageReady": (
        ("DiskIsReady", "Monitoring for the Disk system is active"),
        "storage", ("IODelays", "Process java (PID 4242) incurred 62.4 seconds of I/O delay")),
    "NetworkingReady": (
        ("NetworkingIsReady", "Monitoring for the Networking system is active"),
        "cni", ("IPAMDNotReady", "IPAM-D has failed to connect to API Server which could be an "
                                 "issue with IPTable rules or any other network configuration.")),
    "KernelReady": (
        ("KernelIsReady", "Monitoring for the Kernel system is active"), None, ("", "")),
}


@functools.cache
def kubelet_conditions(cause: str | None) -> list[dict[str, str]]:
    """The kubelet's conditions (type, status, reason, message) for a kubelet sick of ``cause``.
    One list per cause, shared by every caller: read it, never change it."""
    out = []
    for ctype, (ok, bad, which) in PRESSURE.items():
        status, (reason, message) = ("True", bad) if cause == which else ("False", ok)
        out.append({"type": ctype, "status": status, "reason": reason, "message": message})
    if cause in READY_FALSE:
        out.append({"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                    "message": READY_FALSE[cause]})
    else:
        out.append({"type": "Ready", "status": "True", "reason": READY_TRUE[0],
                    "message": READY_TRUE[1]})
    return out


@functools.cache
def agent_conditions(cause: str | None) -> list[dict[str, str]]:
    """The node monitoring agent's conditions; one list per cause: read it, never change it."""
    out = []
    for ctype, (ok, which, bad) in AGENT.items():
        status, (reason, message) = ("False", bad) if which and cause == which else ("True", ok)
        out.append({"type": ctype, "status": status, "reason": reason, "message": message})
    return out


def _key(c: dict[str, Any]) -> tuple[Any, ...]:
    return c.get("status"), c.get("reason"), c.get("message")


def differs(current: list[dict[str, Any]], wanted: list[dict[str, str]]) -> bool:
    """Whether posting ``wanted`` changes anything but heartbeat and transition times."""
    have = {c.get("type"): c for c in current}
    for w in wanted:  # every pass of every kubelet asks: no key tuples built
        c = have.get(w["type"])
        if c is None or c.get("status") != w.get("status") or c.get("reason") != w.get(
                "reason") or c.get("message") != w.get("message"):
            return True
    return False


def merge(current: list[dict[str, Any]], wanted: list[dict[str, str]], now: str, *,
          kubelet: bool) -> list[dict[str, Any]]:
    """``current`` with ``wanted`` posted at ``now``; a changed status gets a new transition time.

    The kubelet (``kubelet``) stamps every condition it posts with ``lastHeartbeatTime`` and puts
    its own first, in its order (MemoryPressure, DiskPressure, PIDPressure, Ready); the agent
    writes a heartbeat only with a change and leaves the order as it is. Other writers'
    conditions are kept."""
    have = {c.get("type"): c for c in current}
    posted = {w["type"]: _posted(have.get(w["type"]), w, now, heartbeat=kubelet) for w in wanted}
    if kubelet:
        return [*posted.values(), *(c for c in current if c.get("type") not in posted)]
    out = [posted.get(c.get("type", ""), c) for c in current]
    return out + [p for t, p in posted.items() if t not in have]


def _posted(c: dict[str, Any] | None, w: dict[str, str], now: str, *,
            heartbeat: bool) -> dict[str, Any]:
    if c is None or c.get("status") != w["status"]:
        return {**w, "lastHeartbeatTime": now, "lastTransitionTime": now}
    beat = now if heartbeat or _key(c) != _key(w) else c.get("lastHeartbeatTime", now)
    return {**w, "lastHeartbeatTime": beat,
            "lastTransitionTime": c.get("lastTransitionTime") or now}
