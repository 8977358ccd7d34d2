"""Node lifecycle and the kubelets: how a machine's health becomes Node conditions and taints.

A kubelet runs on every node whose instance is ``running``, not hung and not cut off from the API
server (``ctx.state["partitioned"]``, a network partition: the machine runs on and writes): it
posts a heartbeat,
starts pods whose volumes are attached (``volumesInUse``), and confirms graceful deletions. The
node lifecycle controller marks a node ``Unknown`` (NotReady) with the ``unreachable`` taints once
heartbeats stop for ``node-monitor-grace-period`` (40 s), and clears them when heartbeats resume.
A kubelet posts its status every 10 s, or at once when something it reports changed.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bot.sim.controllers.context import (
    NOT_READY,
    UNREACHABLE,
    Context,
    condition,
    ebs_source,
    in_use_name,
    instance_id,
    pod_pvcs,
    va_name,
)
from bot.sim.store import ts

GRACE_PERIOD = 40.0  # node-monitor-grace-period
STATUS_UPDATE_FREQUENCY = 10.0  # the kubelet's nodeStatusUpdateFrequency


def machine_up(ctx: Context, node: dict[str, Any]) -> bool:
    """The kubelet reaches the API server: the instance runs, is not hung, and not partitioned."""
    iid = instance_id(node)
    return iid is not None and ctx.ec2.instance_state(iid) == "running" and \
        iid not in ctx.ec2.hung and iid not in ctx.state.get("partitioned", ())


def _attached(ctx: Context, pod: dict[str, Any], node: str) -> list[str] | None:
    """Unique volume names mounted for the pod, or None while any volume is not yet attached."""
    names = []
    ns = pod["metadata"]["namespace"]
    for claim in pod_pvcs(pod):
        pvc = ctx.find("PersistentVolumeClaim", ns, claim)
        pv = ctx.find("PersistentVolume", None, pvc["spec"].get("volumeName", "")) if pvc else None
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
    now = ts(ctx.now)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for p in ctx.items("Pod"):
        by_node.setdefault(p["spec"].get("nodeName") or "", []).append(p)
    for node in ctx.items("Node"):
        name = node["metadata"]["name"]
        if not machine_up(ctx, node):
            continue
        in_use: list[str] = []
        for pod in by_node.get(name, []):
            pname, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
            if pod["metadata"].get("deletionTimestamp"):
                ctx.store.remove(ctx.store_res("Pod"), ns, pname)
                continue
            mounted = _attached(ctx, pod, name)
            if mounted is None:
                _set_pod(ctx, pod, running=False)
                continue
            in_use += mounted
            _set_pod(ctx, pod, running=True)

        boot = _boot_id(ctx, node)

        def beat(n: dict[str, Any], in_use: list[str] = in_use, boot: str | None = boot) -> None:
            ready = condition(n, "Ready")
            st = n.setdefault("status", {})
            if boot:
                st.setdefault("nodeInfo", {})["bootID"] = boot
            if ready is None:
                st.setdefault("conditions", []).append({"type": "Ready"})
                ready = condition(n, "Ready")
            assert ready is not None
            if ready.get("status") != "True":
                ready.update({"status": "True", "reason": "KubeletReady",
                              "message": "kubelet is posting ready status",
                              "lastTransitionTime": now})
            ready["lastHeartbeatTime"] = now
            st["volumesInUse"] = sorted(set(in_use))
        before = condition(node, "Ready")
        was_ready = bool(before and before.get("status") == "True")
        if was_ready and before is not None and \
                ctx.seconds_since(before.get("lastHeartbeatTime")) < STATUS_UPDATE_FREQUENCY and \
                node.get("status", {}).get("volumesInUse") == sorted(set(in_use)) and \
                (not boot or node.get("status", {}).get("nodeInfo", {}).get("bootID") == boot):
            continue  # nothing new to report, and the last heartbeat is recent
        reported = node.get("status", {}).get("nodeInfo", {}).get("bootID")
        ctx.store.mutate("Node", None, name, beat)
        if boot and reported and reported != boot:  # the machine booted again: a new kernel
            ctx.event(node, type="Warning", reason="Rebooted",
                      message=f"Node {name} has been rebooted, boot id: {boot}", source="kubelet")
        if not was_ready:
            ctx.event(node, type="Normal", reason="NodeReady",
                      message=f"Node {name} status is now: NodeReady", source="kubelet")


def _boot_id(ctx: Context, node: dict[str, Any]) -> str | None:
    """The instance's current boot id, when the EC2 model tracks one (it changes on stop/start):
    the kubelet reports it in ``status.nodeInfo.bootID``."""
    lookup = getattr(ctx.ec2, "boot_id", None)
    iid = instance_id(node)
    value = lookup(iid) if callable(lookup) and iid else None
    return str(value) if value else None


def _set_pod(ctx: Context, pod: dict[str, Any], *, running: bool) -> None:
    st = pod.get("status", {})
    statuses = st.get("containerStatuses") or []
    if st.get("phase") == ("Running" if running else "Pending") and \
            len(statuses) == len(pod["spec"].get("containers") or []) and \
            all(bool(cs.get("ready")) == running for cs in statuses):
        return  # already reported
    def apply(p: dict[str, Any]) -> None:
        st = p.setdefault("status", {})
        images = {c["name"]: c.get("image", "") for c in p["spec"].get("containers") or []}
        containers = list(images)
        if running:
            started = {cs.get("name"): cs["state"]["running"]["startedAt"]
                       for cs in st.get("containerStatuses") or []
                       if cs.get("state", {}).get("running")}
            st["phase"] = "Running"
            st["containerStatuses"] = [{"name": c, "ready": True, "restartCount": 0, "image": images[c],
                                        "imageID": _image_id(images[c]), "started": True,
                                        "state": {"running": {"startedAt": started.get(c, ts(ctx.now))}}}
                                       for c in containers]
            st["podIP"] = "10.1." + str(int(p["metadata"]["uid"][:2], 16)) + "." + str(
                int(p["metadata"]["uid"][2:4], 16))
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


def reconcile_node_lifecycle(ctx: Context) -> None:
    now = ts(ctx.now)
    for node in ctx.items("Node"):
        name = node["metadata"]["name"]
        ready = condition(node, "Ready")
        if ready is None:
            continue
        beat_age = ctx.seconds_since(ready.get("lastHeartbeatTime"))
        stale = beat_age >= GRACE_PERIOD and not machine_up(ctx, node)
        if stale and ready.get("status") == "True":
            def down(n: dict[str, Any]) -> None:
                c = condition(n, "Ready")
                assert c is not None
                c.update({"status": "Unknown", "reason": "NodeStatusUnknown",
                          "message": "Kubelet stopped posting node status.",
                          "lastTransitionTime": now})
                taints = [t for t in n["spec"].get("taints") or []
                          if t.get("key") not in (UNREACHABLE, NOT_READY)]
                taints += [{"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now},
                           {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now}]
                n["spec"]["taints"] = taints
            ctx.store.mutate("Node", None, name, down)
            ctx.event(node, type="Normal", reason="NodeNotReady",
                      message=f"Node {name} status is now: NodeNotReady", source="node-controller")
        elif ready.get("status") == "True" and any(
                t.get("key") in (UNREACHABLE, NOT_READY) for t in node["spec"].get("taints") or []):
            def up(n: dict[str, Any]) -> None:
                n["spec"]["taints"] = [t for t in n["spec"].get("taints") or []
                                       if t.get("key") not in (UNREACHABLE, NOT_READY)]
            ctx.store.mutate("Node", None, name, up)
