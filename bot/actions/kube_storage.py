"""Kubernetes storage actions: VolumeAttachments, PersistentVolumes and claims, StorageClasses,
and the removal of leftover finalizers.

Read-only actions do their reads in ``apply()`` and plan nothing, so a dry run costs no API calls;
``wait_gone`` is the exception, its plan records which attachments it starts waiting for. Finalizer
removal plans from a live read, re-reads in apply behind interlock 4, and reports ``already_done``
when the finalizers are already gone. Result shapes are the contract in docs/action-results.md.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.actions import interlocks as il
from bot.actions.authoring import (
    ActionSpec,
    Change,
    Env,
    Fact,
    Obj,
    ParamError,
    PermanentError,
    Plan,
    Result,
    action,
    ebs_driver_of_pv,
    ebs_volume_id_of_pv,
    meta,
    pv_zone,
    ready_condition,
    terminating,
    va_node,
    zone_of_node,
)
from bot.actions.declarations import (
    FinalizersRemoveParams,
    PvcParams,
    PvListParams,
    PvParams,
    StorageClassAuditParams,
    VolumeAttachmentDeleteParams,
    VolumeAttachmentsListParams,
    WaitGoneParams,
)


def _read_only(action: str) -> Plan:
    return Plan(action=action, params={})


# -- views (the result contract) --------------------------------------------------------------

def _error_message(err: Obj | None) -> str | None:
    return None if not err else str(err.get("message") or "")


def va_view(va: Obj, volume_ids: dict[str, str | None]) -> Obj:
    spec, status = va.get("spec") or {}, va.get("status") or {}
    pv = (spec.get("source") or {}).get("persistentVolumeName")
    return {"name": meta(va)["name"], "node": spec.get("nodeName"), "pv": pv,
            "attached": bool(status.get("attached")),
            "attach_error": _error_message(status.get("attachError")),
            "detach_error": _error_message(status.get("detachError")),
            # Kubernetes let go of the volume once its VolumeAttachment is being deleted, even
            # while the attacher still reports attached with a detachError
            "deleting": terminating(va),
            "volume_id": volume_ids.get(pv) if pv else None}


def pv_view(pv: Obj | None, name: str) -> Obj:
    if pv is None:
        return {"name": name, "exists": False, "phase": None, "volume_id": None, "zone": None,
                "driver": None, "reclaim_policy": None,
                "claim": None, "storage_class": None, "finalizers": [], "terminating": False}
    spec = pv.get("spec") or {}
    ref = spec.get("claimRef") or {}
    return {"name": name, "exists": True, "phase": (pv.get("status") or {}).get("phase"),
            "volume_id": ebs_volume_id_of_pv(pv), "zone": pv_zone(pv), "driver": ebs_driver_of_pv(pv),
            "reclaim_policy": spec.get("persistentVolumeReclaimPolicy"),
            "claim": f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else None,
            "storage_class": spec.get("storageClassName"),
            "finalizers": list(meta(pv).get("finalizers") or ()), "terminating": terminating(pv)}


def pvc_view(pvc: Obj | None, *, name: str, namespace: str) -> Obj:
    if pvc is None:
        return {"name": name, "namespace": namespace, "exists": False, "phase": None,
                "volume_name": None, "storage_class": None, "finalizers": [], "terminating": False}
    spec = pvc.get("spec") or {}
    return {"name": name, "namespace": namespace, "exists": True,
            "phase": (pvc.get("status") or {}).get("phase"), "volume_name": spec.get("volumeName"),
            "storage_class": spec.get("storageClassName"),
            "finalizers": list(meta(pvc).get("finalizers") or ()), "terminating": terminating(pvc)}


# -- volume attachments -----------------------------------------------------------------------

def _volume_ids(env: Env, vas: list[Obj]) -> dict[str, str | None]:
    """PV name -> EBS volume id, with one PV list for all of them (none when nothing matched)."""
    if not vas:
        return {}
    return {meta(pv)["name"]: ebs_volume_id_of_pv(pv) for pv in env.kube.list_pvs()}


def plan_vas(p: VolumeAttachmentsListParams, env: Env) -> Plan:
    return _read_only("k8s.volumeattachments.list")


def apply_vas(plan: Plan, p: VolumeAttachmentsListParams, env: Env) -> Result:
    vas = [v for v in env.kube.list_volume_attachments()
           if (p.node is None or va_node(v) == p.node)
           and (p.pv is None or ((v.get("spec") or {}).get("source") or {})
                .get("persistentVolumeName") == p.pv)]
    ids = _volume_ids(env, vas)
    items = [va_view(v, ids) for v in sorted(vas, key=lambda v: str(meta(v)["name"]))]
    return Result(data={"items": items, "count": len(items)})


def va_delete_change(va: Obj | None, name: str) -> Change | None:
    if va is None or terminating(va):
        return None  # gone, or already being deleted: its attacher finishes it
    # a DELETE marks it deleting; its attacher removes its finalizer once the detach is done
    return Change(target_kind="VolumeAttachment", target=name, operation="delete",
                  before="", after="deleting")


def plan_va_delete(p: VolumeAttachmentDeleteParams, env: Env) -> Plan:
    k = env.kube
    va = k.find(lambda: k.get_volume_attachment(p.name))
    change, facts = va_delete_change(va, p.name), list[Fact]()
    if change is not None and va is not None:
        il.check_va_delete(env, va=va, facts=facts)
    return Plan(action="k8s.volumeattachment.delete", params={},
                changes=(change,) if change else (), facts=tuple(facts))


def apply_va_delete(plan: Plan, p: VolumeAttachmentDeleteParams, env: Env) -> Result:
    k = env.kube
    va = k.find(lambda: k.get_volume_attachment(p.name))
    if va is None or va_delete_change(va, p.name) is None:
        return Result(data={"name": p.name, "deleted": False}, already_done=True,
                      message=f"VolumeAttachment {p.name} is already gone or being deleted")
    il.check_va_delete(env, va=va, facts=[])  # live reads, never the plan's
    k.delete_volume_attachment(name=p.name, uid=str(meta(va).get("uid") or ""))
    return Result(data={"name": p.name, "deleted": True},
                  message=f"deleted VolumeAttachment {p.name}")


def _names_on(env: Env, node: str) -> list[str]:
    return sorted(meta(v)["name"] for v in env.kube.list_volume_attachments()
                  if va_node(v) == node)


def plan_wait_gone(p: WaitGoneParams, env: Env) -> Plan:
    # the starting set and time live in the plan, which the engine keeps for every poll
    return Plan(action="k8s.volumeattachments.wait_gone", params={},
                data={"initial": _names_on(env, p.node), "started_at": env.now_iso()})


def apply_wait_gone(plan: Plan, p: WaitGoneParams, env: Env) -> Result:
    remaining = _names_on(env, p.node)
    initial = set(plan.data.get("initial") or ()) | set(remaining)
    detached = len(initial - set(remaining))
    data = {"remaining": remaining, "count": len(remaining), "detached": detached}
    progress = f"{detached} of {len(initial)} detached"
    if not remaining:
        return Result(data=data, progress=progress, message=f"no VolumeAttachment names {p.node}",
                      already_done=not plan.data.get("initial"))
    started = datetime.fromisoformat(str(plan.data.get("started_at") or env.now_iso()))
    left = p.timeout - (env.ctx.clock.now() - started).total_seconds()
    if left <= 0:
        raise PermanentError(
            f"{len(remaining)} VolumeAttachment(s) still name {p.node} after {p.timeout:.0f}s "
            f"({', '.join(remaining[:5])}): check their detachError (k8s.volumeattachments.list) "
            "and the EC2 attachment state; a force detach at EC2 is the last resort",
            service="kubernetes", operation="wait_gone", code="Timeout")
    env.ctx.progress = progress
    return Result(data=data, done=False, progress=progress, retry_after=min(10.0, left))


# -- persistent volumes, claims, storage classes ----------------------------------------------

def plan_pv(p: PvParams, env: Env) -> Plan:
    return _read_only("k8s.pv.get")


def apply_pv(plan: Plan, p: PvParams, env: Env) -> Result:
    k = env.kube
    return Result(data=pv_view(k.find(lambda: k.get_pv(p.name)), p.name))


def plan_pv_list(p: PvListParams, env: Env) -> Plan:
    return _read_only("k8s.pv.list")


def apply_pv_list(plan: Plan, p: PvListParams, env: Env) -> Result:
    items = [pv_view(pv, meta(pv)["name"]) for pv in env.kube.list_pvs()]
    items = [i for i in items
             if (p.storage_class is None or i["storage_class"] == p.storage_class)
             and (p.claim_namespace is None or str(i["claim"] or "").startswith(f"{p.claim_namespace}/"))]
    return Result(data={"items": items, "count": len(items)})


def plan_pvc(p: PvcParams, env: Env) -> Plan:
    return _read_only("k8s.pvc.get")


def apply_pvc(plan: Plan, p: PvcParams, env: Env) -> Result:
    k = env.kube
    pvc = k.find(lambda: k.get_pvc(namespace=p.namespace, name=p.name))
    return Result(data=pvc_view(pvc, name=p.name, namespace=p.namespace))


def plan_sc_audit(p: StorageClassAuditParams, env: Env) -> Plan:
    return _read_only("k8s.storageclasses.audit")


def storage_class_audit(nodes: list[Obj], classes: list[Obj]) -> Obj:
    """Each StorageClass's binding mode against the zones of Ready, schedulable nodes, from lists
    already read: an ``Immediate`` class across several zones without ``allowedTopologies``
    pinning one is ``risky``."""
    zones = sorted({z for n in nodes
                    if not (n.get("spec") or {}).get("unschedulable")
                    and ready_condition(n)[0] == "True" and (z := zone_of_node(n))})
    items, problems = [], []
    for sc in sorted(classes, key=lambda s: str(meta(s)["name"])):
        name, mode = meta(sc)["name"], sc.get("volumeBindingMode") or "Immediate"
        allowed = sorted({v for t in sc.get("allowedTopologies") or ()
                          for e in t.get("matchLabelExpressions") or () for v in e.get("values") or ()})
        risky = mode == "Immediate" and len(zones) > 1 and len(allowed) != 1
        items.append({"name": name, "binding_mode": mode, "provisioner": sc.get("provisioner"),
                      "allowed_topologies": allowed, "risky": risky,
                      # what a replacement class must keep (report.render storageclass-wffc)
                      "parameters": dict(sc.get("parameters") or {}),
                      "reclaim_policy": sc.get("reclaimPolicy") or "Delete",
                      "mount_options": list(sc.get("mountOptions") or ()),
                      "allow_volume_expansion": sc.get("allowVolumeExpansion"),
                      "topology_terms": list(sc.get("allowedTopologies") or ())})
        if risky:
            problems.append(
                f"StorageClass {name} binds Immediate across {len(zones)} zones ({', '.join(zones)}): "
                "volumes are created before scheduling and can pin pods to a zone without capacity; "
                "create a WaitForFirstConsumer class (the field is immutable)")
    return {"items": items, "zones": zones, "problems": problems}


def apply_sc_audit(plan: Plan, p: StorageClassAuditParams, env: Env) -> Result:
    k = env.kube
    return Result(data=storage_class_audit(k.list_nodes(), k.list_storage_classes()))


# -- finalizers -------------------------------------------------------------------------------

def _read_object(env: Env, p: FinalizersRemoveParams) -> Obj | None:
    k = env.kube
    if p.kind == "PersistentVolume":
        return k.find(lambda: k.get_pv(p.name))
    if p.kind == "VolumeAttachment":
        return k.find(lambda: k.get_volume_attachment(p.name))
    if p.namespace is None:
        raise ParamError("k8s.finalizers.remove: namespace: required for a PersistentVolumeClaim")
    ns = p.namespace
    return k.find(lambda: k.get_pvc(namespace=ns, name=p.name))


def _finalizer_split(obj: Obj | None, p: FinalizersRemoveParams) -> tuple[list[str], list[str]]:
    current = list(meta(obj).get("finalizers") or ()) if obj else []
    remove = [f for f in current if p.finalizers is None or f in p.finalizers]
    return remove, [f for f in current if f not in remove]


def _finalizer_change(obj: Obj | None, p: FinalizersRemoveParams) -> Change | None:
    remove, keep = _finalizer_split(obj, p)
    if not remove:
        return None
    target = f"{p.namespace}/{p.name}" if p.kind == "PersistentVolumeClaim" else p.name
    return Change(target_kind=p.kind, target=target, operation="remove-finalizers",
                  before=", ".join(remove + keep), after=", ".join(keep))


def _check(env: Env, p: FinalizersRemoveParams, obj: Obj, facts: list[Fact]) -> None:
    """Interlock 4 (no EBS volume left behind), then 6 (the object is being deleted and the
    reason for each protection finalizer removed no longer holds)."""
    il.check_finalizer_removal(env, kind=p.kind, obj=obj, facts=facts)
    il.check_finalizer_blocker(env, kind=p.kind, obj=obj, remove=_finalizer_split(obj, p)[0],
                               facts=facts)


def plan_finalizers(p: FinalizersRemoveParams, env: Env) -> Plan:
    obj = _read_object(env, p)
    change, facts = _finalizer_change(obj, p), list[Fact]()
    if obj is not None and change is not None:
        _check(env, p, obj, facts)
    return Plan(action="k8s.finalizers.remove", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


def apply_finalizers(plan: Plan, p: FinalizersRemoveParams, env: Env) -> Result:
    obj = _read_object(env, p)
    removed, _ = _finalizer_split(obj, p)
    if obj is None or not removed:
        return Result(data={"kind": p.kind, "name": p.name, "removed": [],
                            "remaining": _finalizer_split(obj, p)[1]}, already_done=True,
                      message=f"{p.kind} {p.name}: nothing to remove")
    _check(env, p, obj, [])
    recheck = il.Rechecked(env, obj, lambda live: _check(env, p, live, []))

    def mutate(live: Obj) -> Obj | None:
        gone, keep = _finalizer_split(live, p)
        if not gone:
            return None
        recheck(live)
        live["metadata"]["finalizers"] = keep
        return live

    try:
        written, changed = env.kube.update(kind=p.kind, name=p.name, namespace=p.namespace,
                                           mutate=mutate, current=obj)
    except PermanentError as e:
        if e.code != "NotFound":
            raise
        written, changed = {}, True  # clearing the last finalizer of a terminating object deletes it
    left, keep = _finalizer_split(written or None, p)
    if left:
        raise PermanentError(f"{p.kind} {p.name} still has {', '.join(left)} after the write",
                             service="kubernetes", operation="replace", code="PostCondition")
    if not changed:  # someone else removed them between our read and our write
        return Result(data={"kind": p.kind, "name": p.name, "removed": [], "remaining": keep},
                      already_done=True, message=f"{p.kind} {p.name}: nothing to remove")
    return Result(data={"kind": p.kind, "name": p.name, "removed": removed, "remaining": keep},
                  message=f"removed {', '.join(removed)} from {p.kind} {p.name}")


# -- the actions ------------------------------------------------------------------------------

VOLUMEATTACHMENTS_LIST = action(
    "k8s.volumeattachments.list", VolumeAttachmentsListParams, destructive=False,
    summary="List VolumeAttachments{% if node %} on {{ node }}{% endif %}",
    description="VolumeAttachments by node or PV, with attach/detach errors.",
    plan=plan_vas, apply=apply_vas)
VOLUMEATTACHMENTS_WAIT_GONE = action(
    "k8s.volumeattachments.wait_gone", WaitGoneParams, destructive=False,
    summary="Wait for VolumeAttachments on {{ node }} to go",
    description="Polls until no VolumeAttachment names the node, reporting progress.",
    plan=plan_wait_gone, apply=apply_wait_gone)
VOLUMEATTACHMENT_DELETE = action(
    "k8s.volumeattachment.delete", VolumeAttachmentDeleteParams, destructive=True,
    summary="Delete leftover VolumeAttachment {{ name }}",
    description="DELETE (never a finalizer edit) of a VolumeAttachment whose node is gone or "
                "whose instance is terminated, once EC2 no longer attaches the volume there "
                "(interlock 10).",
    plan=plan_va_delete, apply=apply_va_delete)
PV_GET = action(
    "k8s.pv.get", PvParams, destructive=False,
    summary="Read PersistentVolume {{ name }}",
    description="The EBS volume id (CSI or in-tree) and zone affinity.",
    plan=plan_pv, apply=apply_pv)
PV_LIST = action(
    "k8s.pv.list", PvListParams, destructive=False,
    summary="List PersistentVolumes", description="PVs with EBS volume ids and zones.",
    plan=plan_pv_list, apply=apply_pv_list)
PVC_GET = action(
    "k8s.pvc.get", PvcParams, destructive=False,
    summary="Read PersistentVolumeClaim {{ namespace }}/{{ name }}",
    description="The claim, its phase and its bound volume.",
    plan=plan_pvc, apply=apply_pvc)
STORAGECLASSES_AUDIT = action(
    "k8s.storageclasses.audit", StorageClassAuditParams, destructive=False,
    summary="Audit StorageClass binding modes",
    description="Binding mode against the zones in use.",
    plan=plan_sc_audit, apply=apply_sc_audit)
FINALIZERS_REMOVE = action(
    "k8s.finalizers.remove", FinalizersRemoveParams, destructive=True,
    summary="Remove finalizers from {{ kind }} {{ name }}",
    description="Clear finalizers of an object being deleted; refused while the PV's EBS "
                "volume still exists or while a protection finalizer's reason still holds.",
    plan=plan_finalizers, apply=apply_finalizers)

ACTIONS: tuple[ActionSpec[Any], ...] = (
    VOLUMEATTACHMENTS_LIST, VOLUMEATTACHMENTS_WAIT_GONE, VOLUMEATTACHMENT_DELETE, PV_GET, PV_LIST, PVC_GET,
    STORAGECLASSES_AUDIT, FINALIZERS_REMOVE)
