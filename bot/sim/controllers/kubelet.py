"""The kubelets: on every node whose machine is up, the Lease, the Node status and the pods.

A kubelet runs where ``machine_up`` (``controllers/nodes.py``) holds: the instance is running, not
hung and not cut off from the API server. Each pass it renews its Lease when due
(``controllers/leases.py``), posts its Node status when something it reports changed or 5 min have
passed (``controllers/node_status.py``), starts pods whose volumes are attached (it reports them
in ``volumesInUse``), confirms graceful deletions, so their volumes unmount and detach, reports a
Job's pod ``Succeeded`` once it has run ``job_run_seconds`` (``controllers/jobs.py``), and leaves
finished pods as they are.

A sick kubelet (``ctx.state["kubelet_sick"][node] = cause``) is still alive: it renews its Lease,
keeps its running pods running (and writing), and confirms deletions; it posts what its cause
makes it post, and while the runtime or the pod network is broken (``cni``, ``pleg``, ``runtime``)
it starts no new pod.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bot.sim.controllers import daemonsets, jobs, leases
from bot.sim.controllers.context import (
    Context,
    boot_id_of,
    condition,
    ebs_source,
    in_use_name,
    instance_id,
    pod_pvcs,
    va_name,
)
from bot.sim.controllers.node_status import (
    REPORT_FREQUENCY,
    SICK_CAUSES,
    agent_conditions,
    differs,
    kubelet_conditions,
    merge,
)
from bot.sim.controllers.nodes import machine_up
from bot.sim.store import ts

NO_NEW_PODS = ("cni", "pleg", "runtime")  # no pod sandbox or container can be created


def sick_cause(ctx: Context, node: str) -> str | None:
    cause = (ctx.state.get("kubelet_sick") or {}).get(node)
    if cause is not None and cause not in SICK_CAUSES:
        raise ValueError(f"kubelet_sick[{node!r}] = {cause!r}: expected one of {', '.join(SICK_CAUSES)}")
    return cause


def _attached(ctx: Context, pod: dict[str, Any], node: str) -> list[str] | None:
    """Unique volume names mounted for the pod, or None while any volume is not yet attached."""
    names = []
    ns = pod["metadata"]["namespace"]
    for claim in pod_pvcs(pod):
        pvc = ctx.find("PersistentVolumeClaim", ns, claim)
        pv = ctx.find("PersistentVolume", None, pvc["spec"].get("volumeName", "")) if pvc else None
        if pv is not None and ((pv.get("spec") or {}).get("local") or pv["spec"].get("hostPath")):
            continue  # on the machine's own disks: mounted without an attach, not in volumesInUse
        src = ebs_source(pv)
        if src is None:
            return None
        driver, handle = src
        va = ctx.find("VolumeAttachment", None, va_name(handle, node, driver))
        if va is None or not va.get("status", {}).get("attached"):
            return None
        names.append(in_use_name(driver, handle))
    return names


def reconcile_kubelets(ctx: Context) -> None:
    """One pass of every kubelet whose machine is up."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for p in ctx.items("Pod"):
        by_node.setdefault(p["spec"].get("nodeName") or "", []).append(p)
    agent = ctx.options.get("node_monitoring_agent", True) not in (False, "false", "0")
    for node in ctx.items("Node"):
        name = node["metadata"]["name"]
        if not machine_up(ctx, node):
            continue
        cause = sick_cause(ctx, name)
        leases.renew(ctx, node)
        in_use = _run_pods(ctx, node, by_node.get(name, []), cause)
        _post_status(ctx, node, cause, sorted(set(in_use)))
        if agent:
            _post_agent(ctx, node, cause)


def _run_pods(ctx: Context, node: dict[str, Any], pods: list[dict[str, Any]],
              cause: str | None) -> list[str]:
    """Confirm deletions, start and keep running what can run; the volumes mounted for them."""
    in_use: list[str] = []
    name = node["metadata"]["name"]
    for pod in pods:
        pname, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        if pod["metadata"].get("deletionTimestamp"):
            # SIGTERM, then the pod's grace period (its containers run, and write, meanwhile);
            # option pod_exit_seconds: containers that exit sooner on SIGTERM
            grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            grace = min(grace, float(ctx.options.get("pod_exit_seconds", grace)))
            if ctx.seconds_since(pod["metadata"]["deletionTimestamp"]) >= grace:
                ctx.store.remove(ctx.store_res("Pod"), ns, pname)  # stopped: the volumes unmount
            else:
                in_use += _attached(ctx, pod, name) or []
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue  # finished (a Job's pod): its containers exited, its volumes are unmounted
        mounted = _attached(ctx, pod, name)
        running = pod.get("status", {}).get("phase") == "Running"
        # a broken runtime starts nothing; a broken pod network only what needs it
        blocked = cause in NO_NEW_PODS and not running and not (
            cause == "cni" and pod["spec"].get("hostNetwork"))
        if mounted is None or blocked:
            _set_pod(ctx, pod, running=False)
            continue
        if running and jobs.finished(ctx, pod):
            jobs.succeed(ctx, pod)  # its containers exited 0: the volumes unmount
            continue
        in_use += mounted
        if running and daemonsets.failing_cni(ctx, pod):
            daemonsets.crash_loop(ctx, pod)  # runs, never ready: ipamd cannot start
            continue
        _set_pod(ctx, pod, running=True, node=node)
    return in_use


def _post_status(ctx: Context, node: dict[str, Any], cause: str | None, in_use: list[str]) -> None:
    """Post the Node's status if anything reported changed, or the report is 5 minutes old."""
    name = node["metadata"]["name"]
    st = node.get("status", {})
    wanted = kubelet_conditions(cause)
    boot = boot_id_of(ctx, instance_id(node))
    changed = differs(st.get("conditions") or [], wanted) or st.get("volumesInUse") != in_use or \
        bool(boot and st.get("nodeInfo", {}).get("bootID") != boot)
    last = (condition(node, "Ready") or {}).get("lastHeartbeatTime")
    if not changed and last and ctx.seconds_since(last) < REPORT_FREQUENCY:
        return  # nothing new to report, and the last report is recent
    before = {t: (condition(node, t) or {}).get("status") for t in ("Ready", *_PRESSURE_EVENTS)}
    now = ts(ctx.now)

    def post(n: dict[str, Any]) -> None:
        s = n.setdefault("status", {})
        if boot:
            s.setdefault("nodeInfo", {})["bootID"] = boot
        s["conditions"] = merge(s.get("conditions") or [], wanted, now, kubelet=True)
        s["volumesInUse"] = in_use
    reported = st.get("nodeInfo", {}).get("bootID")
    ctx.store.mutate("Node", None, name, post)
    if boot and reported and reported != boot:  # the machine booted again: a new kernel
        ctx.event(node, type="Warning", reason="Rebooted",
                  message=f"Node {name} has been rebooted, boot id: {boot}", source="kubelet")
    _status_events(ctx, node, before, {w["type"]: w["status"] for w in wanted})


# pressure condition -> (event reason when it starts, when it ends), as the kubelet records them
_PRESSURE_EVENTS = {"MemoryPressure": ("NodeHasInsufficientMemory", "NodeHasSufficientMemory"),
                    "DiskPressure": ("NodeHasDiskPressure", "NodeHasNoDiskPressure"),
                    "PIDPressure": ("NodeHasInsufficientPID", "NodeHasSufficientPID")}


def _status_events(ctx: Context, node: dict[str, Any], before: dict[str, str | None],
                   after: dict[str, str]) -> None:
    name = node["metadata"]["name"]

    def record(reason: str) -> None:
        ctx.event(node, type="Normal", reason=reason, message=f"Node {name} status is now: {reason}",
                  source="kubelet")
    if after["Ready"] != before["Ready"]:
        record("NodeReady" if after["Ready"] == "True" else "NodeNotReady")
    for ctype, (starts, ends) in _PRESSURE_EVENTS.items():
        if before[ctype] is not None and before[ctype] != after[ctype]:
            record(starts if after[ctype] == "True" else ends)


def _post_agent(ctx: Context, node: dict[str, Any], cause: str | None) -> None:
    """The node monitoring agent's conditions, written only when one of them changes."""
    wanted = agent_conditions(cause)
    if not differs(node.get("status", {}).get("conditions") or [], wanted):
        return
    now = ts(ctx.now)

    def post(n: dict[str, Any]) -> None:
        s = n.setdefault("status", {})
        s["conditions"] = merge(s.get("conditions") or [], wanted, now, kubelet=False)
    ctx.store.mutate("Node", None, node["metadata"]["name"], post)


def _host_ip(node: dict[str, Any] | None) -> str | None:
    """The node's InternalIP: a hostNetwork pod's IP."""
    return next((a.get("address") for a in (node or {}).get("status", {}).get("addresses") or []
                 if a.get("type") == "InternalIP"), None)


def _set_pod(ctx: Context, pod: dict[str, Any], *, running: bool,
             node: dict[str, Any] | None = None) -> None:
    st = pod.get("status", {})
    statuses = st.get("containerStatuses") or []
    ready = next((c.get("status") for c in st.get("conditions") or () if c.get("type") == "Ready"),
                 None)
    if st.get("phase") == ("Running" if running else "Pending") and \
            len(statuses) == len(pod["spec"].get("containers") or []) and \
            all(bool(cs.get("ready")) == running for cs in statuses) and \
            ready == ("True" if running else "False"):
        return  # already reported (a Ready the node controller turned False is reported again)
    def apply(p: dict[str, Any]) -> None:
        st = p.setdefault("status", {})
        images = {c["name"]: c.get("image", "") for c in p["spec"].get("containers") or []}
        containers = list(images)
        if running:
            started = {cs.get("name"): cs["state"]["running"]["startedAt"]
                       for cs in st.get("containerStatuses") or []
                       if cs.get("state", {}).get("running")}
            restarts = {cs.get("name"): int(cs.get("restartCount", 0))
                        for cs in st.get("containerStatuses") or []}
            st["phase"] = "Running"
            st["containerStatuses"] = [{"name": c, "ready": True, "restartCount": restarts.get(c, 0),
                                        "image": images[c],
                                        "imageID": _image_id(images[c]), "started": True,
                                        "state": {"running": {"startedAt": started.get(c, ts(ctx.now))}}}
                                       for c in containers]
            uid = p["metadata"]["uid"]
            host_ip = _host_ip(node) if p["spec"].get("hostNetwork") else None
            st["podIP"] = host_ip if host_ip else f"10.1.{int(uid[:2], 16)}.{int(uid[2:4], 16)}"
            st["conditions"] = [{"type": "Ready", "status": "True"},
                                {"type": "PodScheduled", "status": "True"}]
        else:
            st["phase"] = "Pending"
            st["containerStatuses"] = [{"name": c, "ready": False, "restartCount": 0, "image": images[c],
                                        "imageID": "", "started": False,
                                        "state": {"waiting": {"reason": "ContainerCreating"}}}
                                       for c in containers]
            st["conditions"] = [{"type": "Ready", "status": "False"},
                                {"type": "PodScheduled", "status": "True"}]
    ctx.store.mutate("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], apply)


def _image_id(image: str) -> str:
    return f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"
