"""The attach/detach controller and the CSI external-attacher with the EBS driver behind it.

The AD controller decides, from the pods bound to nodes, which (volume, node) pairs should be
attached, and creates or deletes VolumeAttachments. Its fencing rule (DOMAIN.md §1): a volume that
is no longer wanted on a node is detached only if the node no longer reports it mounted
(``status.volumesInUse``), or the node has the out-of-service taint, or the node is unhealthy and
``maxWaitForUnmountDuration`` (6 min) has passed, unless ``disable_force_detach_on_timeout``. An RWO
volume attached to one node blocks attaching it to another: the new pod gets the Multi-Attach event,
once per volume and node (the real controller marks it reported and does not repeat it).

The timeout detach is on by default, as on EKS, which does not expose
``--disable-force-detach-on-timeout``; a scenario may turn it off only through that named option.

The attacher turns VolumeAttachments into EC2 AttachVolume/DetachVolume calls through the boto3
client, against the endpoint the product also uses, and reports errors in ``status.attachError`` /
``detachError`` as the real one does: a failed detach keeps ``attached: true`` and the finalizer.
It puts its finalizer on the PV before attaching, refuses to attach a PV being deleted
(``PersistentVolume "..." is marked for deletion``), and lifts its finalizer from a PV being
deleted once no VolumeAttachment names the PV. A VolumeAttachment whose PV is gone cannot be
detached: the attacher reports ``persistentvolume "..." not found`` and keeps its finalizer, try after try, as
the real external-attacher does; one whose node is gone, and whose instance it no longer knows,
is taken as detached. Only
VolumeAttachments listed in their node's ``status.volumesAttached`` are managed by the AD
controller; others (zombies) are left alone. Nothing of the attacher runs while the EBS CSI
controller is staged as uninstalled. In a large event the attacher's calls are rate-limited
(``attach_rate``), and a failed attach or detach is tried again only after a back-off that doubles
with each failure, up to 5 min (``attach_backoff``).

A deleted Node (``kubectl delete node``, or the cloud node lifecycle controller) leaves the AD
controller's actual state of the world as it was: the volumes it had attached there are still
attached, and the node, being gone, is unhealthy. Once pod GC has force-deleted the node's pods,
those volumes are no longer wanted there, and after ``maxWaitForUnmountDuration`` they are detached
without the kubelet's word, from a machine that may still run and write, as upstream does. The
controller remembers the last Node it saw (``ctx.state['deleted_nodes']``); a restart of
kube-controller-manager loses that memory (a test pops the key), and a VolumeAttachment left on
the deleted node is then in no one's state of the world and stays. The attacher still knows the
instance from that memory (the real one keeps the node ID on the VolumeAttachment), so its
DetachVolume reaches EC2.
"""

from __future__ import annotations

import hashlib
from typing import Any

from bot.sim.controllers import attach_backoff
from bot.sim.controllers.attach_rate import take
from bot.sim.controllers.context import (
    DRIVER,
    OOS_TAINT,
    Context,
    attacher_finalizer,
    boot_id_of,
    condition,
    ebs_source,
    has_taint,
    in_use_name,
    instance_id,
    node_ready,
    pod_pvcs,
    va_name,
)
from bot.sim.controllers.protection import csi_controller_up
from bot.sim.store import clone, ts

MAX_WAIT_FOR_UNMOUNT = 360.0
FINALIZER = attacher_finalizer(DRIVER)


def _pv_for_claim(ctx: Context, ns: str, claim: str) -> dict[str, Any] | None:
    pvc = ctx.find("PersistentVolumeClaim", ns, claim)
    if pvc is None or not pvc["spec"].get("volumeName"):
        return None
    pv = ctx.find("PersistentVolume", None, pvc["spec"]["volumeName"])
    return pv if ebs_source(pv) is not None else None


def _src(pv: dict[str, Any]) -> tuple[str, str]:
    src = ebs_source(pv)
    assert src is not None
    return src


def reconcile_attach_detach(ctx: Context) -> None:
    nodes = {n["metadata"]["name"]: n for n in ctx.items("Node")}
    gone = _remember_deleted(ctx, nodes)
    vas = {v["metadata"]["name"]: v for v in ctx.items("VolumeAttachment")}
    desired = _desired(ctx)
    _attach_wanted(ctx, desired, vas)
    _detach_unwanted(ctx, desired, vas, nodes, gone)


def _desired(ctx: Context) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    """VolumeAttachment name -> (node, PV, pod) of each EBS volume a pod bound to a node and not
    finished wants there."""
    desired: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
    for pod in ctx.items("Pod"):
        node = pod["spec"].get("nodeName")
        if not node or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for claim in pod_pvcs(pod):
            pv = _pv_for_claim(ctx, pod["metadata"]["namespace"], claim)
            if pv is not None:
                driver, handle = _src(pv)
                desired[va_name(handle, node, driver)] = (node, pv, pod)
    return desired


def _attach_wanted(ctx: Context, desired: dict[str, tuple[str, dict[str, Any], dict[str, Any]]],
                   vas: dict[str, dict[str, Any]]) -> None:
    """Attach what is wanted (new VolumeAttachments, added to ``vas``), unless an RWO volume is
    attached elsewhere: then the Multi-Attach event, once per volume and node."""
    reported: set[str] = ctx.state.setdefault("multi_attach_reported", set())
    reported &= {n for n in desired if n not in vas}
    for name, (node, pv, pod) in sorted(desired.items()):
        if name in vas:
            continue
        pv_name = pv["metadata"]["name"]
        elsewhere = [v for v in vas.values()
                     if v["spec"]["source"].get("persistentVolumeName") == pv_name
                     and v["spec"]["nodeName"] != node]
        rwo = "ReadWriteMany" not in (pv["spec"].get("accessModes") or [])
        if elsewhere and rwo:
            if name not in reported:  # reported once per volume and node, as upstream does
                reported.add(name)
                ctx.event(pod, type="Warning", reason="FailedAttachVolume",
                          message=f'Multi-Attach error for volume "{pv_name}" Volume is already '
                                  "exclusively attached to one node and can't be attached to another",
                          source="attachdetach-controller")
            continue
        ctx.store.create(ctx.store_res("VolumeAttachment"), {
            "metadata": {"name": name},
            "spec": {"attacher": _src(pv)[0], "nodeName": node,
                     "source": {"persistentVolumeName": pv_name}},
            "status": {"attached": False},
        })
        vas[name] = ctx.find("VolumeAttachment", None, name) or {}


def _detach_unwanted(ctx: Context, desired: dict[str, tuple[str, dict[str, Any], dict[str, Any]]],
                     vas: dict[str, dict[str, Any]], nodes: dict[str, dict[str, Any]],
                     gone: dict[str, dict[str, Any]]) -> None:
    """Detach what is no longer wanted, under the fencing rule (``_may_detach``)."""
    wait_since: dict[str, str] = ctx.state.setdefault("detach_requested", {})
    for name, va in sorted(vas.items()):
        if name in desired or va["metadata"].get("deletionTimestamp") or not va:
            wait_since.pop(name, None)
            continue
        # a node deleted while the controller ran: it still tracks what it had attached there
        node = nodes.get(va["spec"]["nodeName"]) or gone.get(va["spec"]["nodeName"])
        pv_name = va["spec"]["source"].get("persistentVolumeName", "")
        if node is None or pv_name not in _managed(node):
            continue  # not in the controller's actual state of the world: a zombie
        wait_since.setdefault(name, ts(ctx.now))
        if not _may_detach(ctx, node, pv_name, wait_since[name]):
            continue
        wait_since.pop(name, None)
        if va["spec"]["nodeName"] in gone:  # the detach a Node's deletion brings about
            ctx.state.setdefault("deleted_node_detaches", {})[name] = va["spec"]["nodeName"]
        elif has_taint(node, OOS_TAINT):  # the detach the out-of-service taint brings about
            ctx.state.setdefault("oos_taint_detaches", {})[name] = va["spec"]["nodeName"]
        else:  # unmounted, or (if the node still reports it mounted) the timeout detach
            ctx.state.setdefault("timeout_detaches", {})[name] = va["spec"]["nodeName"]
        ctx.store.delete(ctx.store_res("VolumeAttachment"), None, name)


def _may_detach(ctx: Context, node: dict[str, Any], pv_name: str, since: str) -> bool:
    """The fencing rule: the node no longer reports the volume mounted, or has the out-of-service
    taint, or is unhealthy and ``maxWaitForUnmountDuration`` has passed since the detach was
    first wanted (unless ``disable_force_detach_on_timeout``)."""
    src = ebs_source(ctx.find("PersistentVolume", None, pv_name))
    mounted = src is not None and in_use_name(*src) in (
        node.get("status", {}).get("volumesInUse") or [])
    timed_out = ctx.seconds_since(since) >= MAX_WAIT_FOR_UNMOUNT
    allow_timeout = not ctx.options.get("disable_force_detach_on_timeout")
    return not (mounted and not has_taint(node, OOS_TAINT) and not (
        timed_out and allow_timeout and not node_ready(node)))


def _mounted_on_this_boot(ctx: Context, node: dict[str, Any], handle: str, iid: str) -> bool:
    """The node last reported the volume mounted, and that report came from the machine's
    current boot. A kubelet reports a volume in use before it mounts it, and a boot ends with
    its mounts: what an earlier boot reported (a machine stopped and started since, whose kubelet
    has not reported again) is not mounted now. A node that names no boot is taken at its word."""
    st = node.get("status", {})
    if not any(u.endswith(f"^{handle}") for u in st.get("volumesInUse") or []):
        return False
    reported = (st.get("nodeInfo") or {}).get("bootID")
    current = boot_id_of(ctx, iid)
    return not reported or current is None or reported == current


def _remember_deleted(ctx: Context, nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The deleted nodes whose attachments the controller still tracks, by name.

    A Node seen on the last pass and gone now is remembered as it was last seen, with what it had
    attached, and unhealthy (Ready ``Unknown``: upstream's ``nodeIsHealthy`` fails for a node it
    cannot find). A node that registers again under the same name is a new Node."""
    gone: dict[str, dict[str, Any]] = ctx.state.setdefault("deleted_nodes", {})
    seen: dict[str, dict[str, Any]] = ctx.state.get("ad_nodes", {})
    for name in sorted(seen.keys() - nodes.keys()):
        if name not in gone and _managed(seen[name]):
            gone[name] = _unhealthy(seen[name])
    for name in sorted(gone.keys() & nodes.keys()):
        del gone[name]
    ctx.state["ad_nodes"] = nodes  # stored snapshots, never changed in place: no copy needed
    return gone


def _unhealthy(node: dict[str, Any]) -> dict[str, Any]:
    copy = clone(node)
    ready = condition(copy, "Ready")
    if ready is None:
        copy.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "Ready", "status": "Unknown"})
    else:
        ready["status"] = "Unknown"
    return copy


def _deleted_node(ctx: Context, name: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = ctx.state.get("deleted_nodes", {}).get(name)
    return node


def _managed(node: dict[str, Any]) -> set[str]:
    return {v.get("name", "") for v in node.get("status", {}).get("volumesAttached") or []}


def _slot(va_name: str) -> int:
    """Where a VolumeAttachment's device name search starts: from the hash in a name the
    attach/detach controller gave it (``csi-<sha256>``), else from a hash of the name (anyone
    may create one, named as they like)."""
    head = va_name[4:6]
    if va_name.startswith("csi-") and len(head) == 2 and all(c in "0123456789abcdef" for c in head):
        return int(head, 16)
    return hashlib.sha256(va_name.encode()).digest()[0]


def _free_device(ctx: Context, iid: str, *, preferred: int) -> str:
    """A device name no volume on the instance uses, starting from a stable per-attachment one
    (EC2 refuses a second attachment on a device in use, as the CSI driver's allocator knows)."""
    used = {v.attachment.device for v in ctx.ec2.backend.volumes.values()
            if v.attachment is not None and v.attachment.instance.id == iid}
    for i in range(26 * 26):
        k = (preferred + i) % (26 * 26)
        device = f"/dev/xvd{chr(ord('a') + k // 26)}{chr(ord('a') + k % 26)}"
        if device not in used:
            return device
    raise RuntimeError(f"no free device name on {iid}")


def _set_volumes_attached(ctx: Context, node_name: str, pv_name: str, device: str, *, add: bool) -> None:
    def apply(n: dict[str, Any]) -> None:
        st = n.setdefault("status", {})
        rows = [v for v in st.get("volumesAttached") or [] if v.get("name") != pv_name]
        if add:
            rows.append({"name": pv_name, "devicePath": device})
        st["volumesAttached"] = sorted(rows, key=lambda v: v["name"])
    if ctx.store.mutate("Node", None, node_name, apply) is None:
        gone = _deleted_node(ctx, node_name)
        if gone is not None:  # the controller's own copy of a deleted node
            apply(gone)


def _no_node_id(ctx: Context, node_name: str, driver: str) -> str:
    """Why the attacher finds no node id for ``node_name`` (it reads it from the CSINode)."""
    if ctx.find("CSINode", None, node_name) is None:
        return f'csinode.storage.k8s.io "{node_name}" not found'
    return f"CSINode {node_name} does not contain driver {driver}"


def _node_instance(ctx: Context, node_name: str, driver: str, *, detach: bool) -> str | None:
    """The instance behind ``node_name``: its Node's, else its CSINode's node id; for a detach
    also a deleted node's (the real attacher keeps the id on the VolumeAttachment for that)."""
    iid = instance_id(ctx.find("Node", None, node_name))
    if iid:
        return iid
    csinode = ctx.find("CSINode", None, node_name)
    for d in (csinode or {}).get("spec", {}).get("drivers") or []:
        if d.get("name") == driver:
            return str(d.get("nodeID"))
    return instance_id(_deleted_node(ctx, node_name)) if detach else None


def _err(e: Exception) -> str:
    resp = getattr(e, "response", None) or {}
    err = resp.get("Error", {}) if isinstance(resp, dict) else {}
    return f"{err.get('Code', type(e).__name__)}: {err.get('Message', str(e))}"


def reconcile_attacher(ctx: Context) -> None:
    if not csi_controller_up(ctx):
        return
    for va in ctx.items("VolumeAttachment"):
        if attach_backoff.waiting(ctx, va):
            continue  # it failed: tried again once its back-off is over
        name, node_name = va["metadata"]["name"], va["spec"]["nodeName"]
        driver = va["spec"].get("attacher", DRIVER)
        fin = attacher_finalizer(driver)
        pv_name = va["spec"]["source"].get("persistentVolumeName", "")
        pv = ctx.find("PersistentVolume", None, pv_name)
        src = ebs_source(pv)
        handle = src[1] if src else None
        deleting = bool(va["metadata"].get("deletionTimestamp"))
        iid = _node_instance(ctx, node_name, driver, detach=deleting)
        if deleting:
            if fin not in (va["metadata"].get("finalizers") or []):
                continue
            if pv is None and pv_name:
                # no PV, no volume handle: the real attacher cannot detach, and says so each try
                _detach_failed(ctx, va, f'persistentvolume "{pv_name}" not found')
            elif handle and iid:
                _detach(ctx, va, handle, iid, node_name, pv_name)
            else:
                ctx.store.mutate("VolumeAttachment", None, name, _drop_finalizer(fin))
                attach_backoff.succeeded(ctx, name)
            continue
        if va.get("status", {}).get("attached"):
            continue
        if pv is None:
            if pv_name:  # the attacher reads the PV first: refused before anything is written
                _attach_failed(ctx, va, pv_name, node_name, f'persistentvolume "{pv_name}" not found')
            continue
        if not handle:
            continue
        if pv["metadata"].get("deletionTimestamp"):  # refused before anything is written
            _attach_failed(ctx, va, pv_name, node_name,
                           f'PersistentVolume "{pv_name}" is marked for deletion')
            continue
        ctx.store.mutate("PersistentVolume", None, pv_name, _add_finalizer(fin))
        if not iid:  # the PV's finalizer is on; the node's id is looked up next, in its CSINode
            _attach_failed(ctx, va, pv_name, node_name, _no_node_id(ctx, node_name, driver))
            continue
        ctx.store.mutate("VolumeAttachment", None, name, _add_finalizer(fin))
        device = _free_device(ctx, iid, preferred=_slot(name))
        vol = ctx.ec2.volume(handle)
        if vol is not None and vol.attachment is not None and vol.attachment.instance.id == iid:
            device = vol.attachment.device
        elif not take(ctx):
            continue  # throttled in a large event: attached on a later pass
        else:
            try:
                ctx.ec2_client.attach_volume(VolumeId=handle, InstanceId=iid, Device=device)
            except Exception as e:  # every EC2 refusal becomes attachError, as the attacher reports
                _attach_failed(ctx, va, pv_name, node_name,
                               f'rpc error: code = Internal desc = Could not attach volume '
                               f'"{handle}" to node "{iid}": {_err(e)}')
                continue
        if _in_flight(ctx, "attach", name):
            continue  # EC2's attachment is still attaching (option ebs_attach_seconds)
        _status(ctx, name, {"attached": True, "attachmentMetadata": {"devicePath": device}})
        attach_backoff.succeeded(ctx, name)
        _set_volumes_attached(ctx, node_name, pv_name, device, add=True)
        pod = _consumer(ctx, pv_name, node_name)
        if pod is not None:
            ctx.event(pod, type="Normal", reason="SuccessfulAttachVolume",
                      message=f'AttachVolume.Attach succeeded for volume "{pv_name}" ',
                      source="attachdetach-controller")
    _release_pvs(ctx)


def _attach_failed(ctx: Context, va: dict[str, Any], pv_name: str, node_name: str,
                   msg: str) -> None:
    """An attach refused: ``attachError`` on the VolumeAttachment, the attach/detach
    controller's event on the pod waiting for it, and the attacher's back-off."""
    name = va["metadata"]["name"]
    _status(ctx, name, {"attached": False, "attachError": {"time": ts(ctx.now), "message": msg}})
    attach_backoff.failed(ctx, name)
    pod = _consumer(ctx, pv_name, node_name)
    if pod is not None:
        ctx.event(pod, type="Warning", reason="FailedAttachVolume",
                  message=f'AttachVolume.Attach failed for volume "{pv_name}" : {msg}',
                  source="attachdetach-controller")


def _detach_failed(ctx: Context, va: dict[str, Any], msg: str) -> None:
    """A detach refused: ``detachError`` on the VolumeAttachment, which stays attached (its
    status is otherwise kept), and the attacher's back-off."""
    name = va["metadata"]["name"]
    _status(ctx, name, {**va.get("status", {}), "detachError": {"time": ts(ctx.now), "message": msg}})
    attach_backoff.failed(ctx, name)


def _in_flight(ctx: Context, kind: str, name: str) -> bool:
    """Options ``ebs_attach_seconds`` and ``ebs_detach_seconds`` (default 0: at once, as moto
    does): how long the EBS CSI driver waits, after its call, for EC2 to report the attachment
    ``attached`` (or gone) before it marks the VolumeAttachment. True while that is under way."""
    seconds = float(ctx.options.get(f"ebs_{kind}_seconds") or 0)
    if seconds <= 0:
        return False
    started: dict[str, Any] = ctx.state.setdefault(f"ebs_{kind}_started", {})
    if (ctx.now - started.setdefault(name, ctx.now)).total_seconds() < seconds:
        return True
    started.pop(name, None)
    return False


def _release_pvs(ctx: Context) -> None:
    """Lift the attacher's finalizer from PVs being deleted that no VolumeAttachment names."""
    named = {v["spec"]["source"].get("persistentVolumeName") for v in ctx.items("VolumeAttachment")}
    for pv in ctx.items("PersistentVolume"):
        meta = pv["metadata"]
        if not meta.get("deletionTimestamp") or meta["name"] in named:
            continue
        for fin in meta.get("finalizers") or []:
            if fin.startswith("external-attacher/"):
                ctx.store.mutate("PersistentVolume", None, meta["name"], _drop_finalizer(fin))


def _detach(ctx: Context, va: dict[str, Any], handle: str, iid: str, node_name: str,
            pv_name: str) -> None:
    name = va["metadata"]["name"]
    vol = ctx.ec2.volume(handle)
    if vol is not None and vol.attachment is not None and vol.attachment.instance.id == iid:
        if not take(ctx):
            return  # throttled in a large event: still attached, no error, detached later
        node = ctx.find("Node", None, node_name) or _deleted_node(ctx, node_name) or {}
        if _mounted_on_this_boot(ctx, node, handle, iid) and iid not in ctx.ec2.hung and \
                ctx.ec2.instance_state(iid) == "running":
            # the machine runs and, as far as anyone knows, still has the file system mounted
            why = (" (the attach/detach controller's timeout detach after the Node was deleted)"
                   if name in ctx.state.get("deleted_node_detaches", {}) else
                   " (the attach/detach controller's detach for the out-of-service taint)"
                   if name in ctx.state.get("oos_taint_detaches", {}) else
                   " (the attach/detach controller's timeout detach after the pod left the "
                   "unhealthy node)" if name in ctx.state.get("timeout_detaches", {}) else "")
            ctx.state.setdefault("live_detaches", []).append(
                (ts(ctx.now), f"{handle} detached from running {iid} while node {node_name} "
                              f"last reported it mounted{why}"))
        try:
            resp = ctx.ec2_client.detach_volume(VolumeId=handle, InstanceId=iid)
            state = resp.get("State", "detached")
        except Exception as e:
            state, message = "error", _err(e)
        else:
            message = f"volume {handle} is still {state}"
        vol = ctx.ec2.volume(handle)
        if vol is not None and vol.attachment is not None and vol.attachment.instance.id == iid:
            _detach_failed(ctx, va, f'rpc error: code = Internal desc = Could not detach volume '
                                    f'"{handle}" from node "{iid}": {message}')
            return
    if _in_flight(ctx, "detach", name):
        return  # EC2's attachment is still detaching (option ebs_detach_seconds)
    _set_volumes_attached(ctx, node_name, pv_name, "", add=False)
    ctx.store.mutate("VolumeAttachment", None, name,
                     _drop_finalizer(attacher_finalizer(va["spec"].get("attacher", DRIVER))))
    attach_backoff.succeeded(ctx, name)


def _status(ctx: Context, name: str, status: dict[str, Any]) -> None:
    def apply(v: dict[str, Any]) -> None:
        v["status"] = status
    ctx.store.mutate("VolumeAttachment", None, name, apply)


def _add_finalizer(fin: str) -> Any:
    def apply(v: dict[str, Any]) -> None:
        fins = v["metadata"].setdefault("finalizers", [])
        if fin not in fins:
            fins.append(fin)
    return apply


def _drop_finalizer(fin: str) -> Any:
    def apply(v: dict[str, Any]) -> None:
        v["metadata"]["finalizers"] = [f for f in v["metadata"].get("finalizers") or [] if f != fin]
    return apply


def _consumer(ctx: Context, pv_name: str, node_name: str) -> dict[str, Any] | None:
    for pod in ctx.items("Pod"):
        if pod["spec"].get("nodeName") != node_name:
            continue
        for claim in pod_pvcs(pod):
            pv = _pv_for_claim(ctx, pod["metadata"]["namespace"], claim)
            if pv is not None and pv["metadata"]["name"] == pv_name:
                return pod
    return None
