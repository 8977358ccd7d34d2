"""Storage protection and the PV controller: why a PV or PVC stays Terminating, and when it goes.

- ``kubernetes.io/pvc-protection`` (added at creation by the StorageObjectInUseProtection
  admission plugin) is removed from a claim being deleted only once no pod uses it; a pod that has
  not finished counts, even Terminating on a dead node.
- ``kubernetes.io/pv-protection`` is removed from a PV being deleted only once it is not Bound.
- The PV controller marks a PV ``Released`` when its claim is gone, and honours the reclaim
  policy: ``Retain`` keeps the PV and the disk; ``Delete`` has the EBS CSI controller (the
  external-provisioner) delete the EBS volume, then the PV. With HonorPVReclaimPolicy (on since
  Kubernetes 1.31) the provisioner keeps ``external-provisioner.volume.kubernetes.io/finalizer`` on
  a ``Delete`` PV until the disk is gone, so deleting such a PV never leaks its volume. A claim
  whose PV vanished is ``Lost``.

The EBS CSI controller may be staged as uninstalled (``ctx.state["csi_controller_down"]``): then
nothing deletes disks or lifts the provisioner's and attacher's finalizers.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.context import Context, ebs_source, pod_pvcs

PV_PROTECTION = "kubernetes.io/pv-protection"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PROVISIONER_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"


def _without(fin: str) -> Any:
    def apply(o: dict[str, Any]) -> None:
        o["metadata"]["finalizers"] = [f for f in o["metadata"].get("finalizers") or [] if f != fin]
    return apply


def csi_controller_up(ctx: Context) -> bool:
    return not ctx.state.get("csi_controller_down")


def reconcile_pvc_protection(ctx: Context) -> None:
    doomed = [pvc["metadata"] for pvc in ctx.items("PersistentVolumeClaim")
              if pvc["metadata"].get("deletionTimestamp")
              and PVC_PROTECTION in (pvc["metadata"].get("finalizers") or [])]
    if not doomed:
        return  # most passes: no protected claim is being deleted, no pod needs looking at
    in_use: set[tuple[str, str]] = set()
    for pod in ctx.items("Pod"):
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        in_use.update((pod["metadata"]["namespace"], c) for c in pod_pvcs(pod))
    for meta in doomed:
        if (meta["namespace"], meta["name"]) not in in_use:
            ctx.store.mutate("PersistentVolumeClaim", meta["namespace"], meta["name"],
                             _without(PVC_PROTECTION))


def reconcile_pv_protection(ctx: Context) -> None:
    for pv in ctx.items("PersistentVolume"):
        meta = pv["metadata"]
        if meta.get("deletionTimestamp") and PV_PROTECTION in (meta.get("finalizers") or []) and \
                pv.get("status", {}).get("phase") != "Bound":
            ctx.store.mutate("PersistentVolume", None, meta["name"], _without(PV_PROTECTION))


def _claim_gone(ctx: Context, ref: dict[str, Any]) -> bool:
    pvc = ctx.find("PersistentVolumeClaim", ref.get("namespace", ""), ref.get("name", ""))
    return pvc is None or bool(ref.get("uid") and ref["uid"] != pvc["metadata"]["uid"])


def _set_phase(ctx: Context, kind: str, ns: str | None, name: str, phase: str) -> None:
    def apply(o: dict[str, Any]) -> None:
        o.setdefault("status", {})["phase"] = phase
    ctx.store.mutate(kind, ns, name, apply)


def reconcile_pv_controller(ctx: Context) -> None:
    for pv in ctx.items("PersistentVolume"):
        name, ref = pv["metadata"]["name"], pv["spec"].get("claimRef")
        phase = pv.get("status", {}).get("phase")
        if ref and phase == "Bound" and _claim_gone(ctx, ref):
            _set_phase(ctx, "PersistentVolume", None, name, "Released")
            phase = "Released"
        if phase == "Released" and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
            _reclaim(ctx, pv)
        elif pv["metadata"].get("deletionTimestamp") and \
                pv["spec"].get("persistentVolumeReclaimPolicy") != "Delete" and \
                PROVISIONER_FINALIZER in (pv["metadata"].get("finalizers") or []) and \
                csi_controller_up(ctx):
            ctx.store.mutate("PersistentVolume", None, name, _without(PROVISIONER_FINALIZER))
    for pvc in ctx.items("PersistentVolumeClaim"):
        vol = pvc["spec"].get("volumeName")
        if vol and pvc.get("status", {}).get("phase") == "Bound" and \
                ctx.find("PersistentVolume", None, vol) is None:
            _set_phase(ctx, "PersistentVolumeClaim", pvc["metadata"]["namespace"],
                       pvc["metadata"]["name"], "Lost")
            ctx.event(pvc, type="Warning", reason="ClaimLost",
                      message="Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                      source="persistentvolume-controller")


def _reclaim(ctx: Context, pv: dict[str, Any]) -> None:
    """The external-provisioner's delete: the EBS volume first, then the PV and its finalizer."""
    src = ebs_source(pv)
    if src is None or not csi_controller_up(ctx):
        return
    name, (driver, handle) = pv["metadata"]["name"], src
    if ctx.ec2.volume(handle) is not None:
        try:
            ctx.ec2_client.delete_volume(VolumeId=handle)
        except Exception as e:  # VolumeInUse mostly: reported, tried again on the next pass
            err = (getattr(e, "response", None) or {}).get("Error", {})
            ctx.event(pv, type="Warning", reason="VolumeFailedDelete",
                      message=f"rpc error: code = Internal desc = Could not delete volume ID "
                              f'"{handle}": {err.get("Code", type(e).__name__)}: '
                              f"{err.get('Message', str(e))}",
                      source=f"{driver}_ebs-csi-controller")
            return
    ctx.store.mutate("PersistentVolume", None, name, _without(PROVISIONER_FINALIZER))
    if ctx.find("PersistentVolume", None, name) is not None:
        ctx.store.delete(ctx.store_res("PersistentVolume"), None, name)
