"""Kubernetes actions: read what the runbooks diagnose, change only taints, cordon and finalizers.

Read-only actions do their reads in ``apply()`` (the engine calls it to get ``steps.<id>.result``)
and plan nothing, so a dry run costs no API calls; ``wait_gone`` is the exception, its plan records
which attachments it starts waiting for. Changing actions plan from a live read, re-read in apply,
and report ``already_done`` when the live object already has the desired state. Result shapes are
the contract in docs/actions.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.actions import interlocks as il
from bot.actions.declarations import (
    OUT_OF_SERVICE_TAINT,
    FinalizersRemoveParams,
    NodeParams,
    PodParams,
    PodsListParams,
    PvcParams,
    PvListParams,
    PvParams,
    StorageClassAuditParams,
    TaintParams,
    UntaintParams,
    VolumeAttachmentsListParams,
    WaitGoneParams,
)
from bot.actions.registry import registry
from bot.engine.plan import Change, Fact, Plan, Result
from bot.errors import ParamError, PermanentError

if TYPE_CHECKING:
    from bot.actions.catalog import Env

Obj = dict[str, Any]
MULTI_ATTACH = re.compile(r'Multi-Attach error for volume "(?P<volume>[^"]+)"')
AFFINITY_CONFLICT = ("volume node affinity conflict", "didn't match PersistentVolume's node affinity")


def _read_only(action: str) -> Plan:
    return Plan(action=action, params={})


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


# -- views (the result contract) --------------------------------------------------------------

def node_view(node: Obj | None, name: str) -> Obj:
    if node is None:
        return {"name": name, "exists": False, "ready": False, "ready_status": "Unknown",
                "ready_since": None, "taints": [], "out_of_service": False, "unschedulable": False,
                "instance_id": None, "zone": None}
    status, since = il.ready_condition(node)
    return {"name": name, "exists": True, "ready": status == "True", "ready_status": status,
            "ready_since": since, "taints": il.taints_of(node),
            "out_of_service": il.has_taint(node, OUT_OF_SERVICE_TAINT),
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
            "instance_id": il.instance_id_of(node), "zone": il.zone_of_node(node)}


def _pod_reason(pod: Obj) -> str | None:
    status = pod.get("status") or {}
    if status.get("reason"):
        return str(status["reason"])
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    for cond in status.get("conditions") or ():
        if cond.get("status") == "False" and cond.get("reason"):
            return str(cond["reason"])
    return None


def pod_view(pod: Obj) -> Obj:
    vols = (pod.get("spec") or {}).get("volumes") or ()
    return {"name": _meta(pod)["name"], "namespace": _meta(pod).get("namespace"),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "phase": (pod.get("status") or {}).get("phase"), "reason": _pod_reason(pod),
            "terminating": il.terminating(pod),
            "pvcs": [v["persistentVolumeClaim"]["claimName"] for v in vols
                     if v.get("persistentVolumeClaim")],
            # "namespace/claim", the form k8s.pv.get gives as ``claim``, to match the two
            "claims": [f"{_meta(pod).get('namespace')}/{v['persistentVolumeClaim']['claimName']}"
                       for v in vols if v.get("persistentVolumeClaim")]}


def _error_message(err: Obj | None) -> str | None:
    return None if not err else str(err.get("message") or "")


def va_view(va: Obj, volume_ids: dict[str, str | None]) -> Obj:
    spec, status = va.get("spec") or {}, va.get("status") or {}
    pv = (spec.get("source") or {}).get("persistentVolumeName")
    return {"name": _meta(va)["name"], "node": spec.get("nodeName"), "pv": pv,
            "attached": bool(status.get("attached")),
            "attach_error": _error_message(status.get("attachError")),
            "detach_error": _error_message(status.get("detachError")),
            "volume_id": volume_ids.get(pv) if pv else None}


def pv_zone(pv: Obj) -> str | None:
    affinity = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
    for term in affinity.get("nodeSelectorTerms") or ():
        for expr in term.get("matchExpressions") or ():
            if expr.get("key") in il.ZONE_KEYS and expr.get("values"):
                return str(expr["values"][0])
    legacy = str(((pv.get("spec") or {}).get("awsElasticBlockStore") or {}).get("volumeID") or "")
    m = re.match(r"^aws://(?P<zone>[a-z0-9-]+)/", legacy)
    if m:
        return m.group("zone")
    labels = _meta(pv).get("labels") or {}
    return next((str(labels[k]) for k in il.ZONE_KEYS if labels.get(k)), None)


def pv_view(pv: Obj | None, name: str) -> Obj:
    if pv is None:
        return {"name": name, "exists": False, "phase": None, "volume_id": None, "zone": None,
                "claim": None, "storage_class": None, "finalizers": [], "terminating": False}
    spec = pv.get("spec") or {}
    ref = spec.get("claimRef") or {}
    return {"name": name, "exists": True, "phase": (pv.get("status") or {}).get("phase"),
            "volume_id": il.volume_id_of_pv(pv), "zone": pv_zone(pv),
            "claim": f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else None,
            "storage_class": spec.get("storageClassName"),
            "finalizers": list(_meta(pv).get("finalizers") or ()), "terminating": il.terminating(pv)}


def pvc_view(pvc: Obj | None, *, name: str, namespace: str) -> Obj:
    if pvc is None:
        return {"name": name, "namespace": namespace, "exists": False, "phase": None,
                "volume_name": None, "storage_class": None, "finalizers": [], "terminating": False}
    spec = pvc.get("spec") or {}
    return {"name": name, "namespace": namespace, "exists": True,
            "phase": (pvc.get("status") or {}).get("phase"), "volume_name": spec.get("volumeName"),
            "storage_class": spec.get("storageClassName"),
            "finalizers": list(_meta(pvc).get("finalizers") or ()), "terminating": il.terminating(pvc)}


# -- nodes ------------------------------------------------------------------------------------

@registry.planner("k8s.node.get")
def plan_node_get(p: NodeParams, env: Env) -> Plan:
    return _read_only("k8s.node.get")


@registry.applier("k8s.node.get")
def apply_node_get(plan: Plan, p: NodeParams, env: Env) -> Result:
    k = env.kube
    return Result(data=node_view(k.find(lambda: k.get_node(p.node)), p.node))


class _Rechecked:
    """Runs an action's interlocks again for every newer version of the object it writes.

    ``KubeClient.update`` re-reads the object after a 409 Conflict; the write that caused the
    conflict may be the very change an interlock is about (the kubelet marking the node Ready
    again), so a re-read object is checked again before the change is re-applied to it.
    """

    def __init__(self, env: Env, checked: Obj | None, check: Callable[[Obj], None]) -> None:
        self.env, self.check = env, check
        self.version = _meta(checked or {}).get("resourceVersion")

    def __call__(self, live: Obj) -> None:
        version = _meta(live).get("resourceVersion")
        if version != self.version:
            self.check(live)
            self.version = version
            # one override is one audit event, however many versions it was checked against
            self.env.ctx.overridden[:] = list(dict.fromkeys(self.env.ctx.overridden))


def _taint_str(t: Obj) -> str:
    return f"{t['key']}={t.get('value') or ''}:{t['effect']}"


def _taint_change(node: Obj, p: TaintParams) -> Change | None:
    want = {"key": p.key, "value": p.value, "effect": p.effect}
    same = [t for t in il.taints_of(node) if t["key"] == p.key and t["effect"] == p.effect]
    if same and same[0]["value"] == p.value:
        return None
    return Change(target_kind="Node", target=p.node, operation="taint",
                  before=_taint_str(same[0]) if same else "", after=_taint_str(want))


def _taint_interlocks(env: Env, *, node: Obj, p: TaintParams, facts: list[Fact]) -> None:
    if p.key == OUT_OF_SERVICE_TAINT:
        il.check_out_of_service_taint(env, node=node, facts=facts)
        il.check_blast_radius(env, node_name=p.node, nodes=env.kube.list_nodes(), facts=facts)


@registry.planner("k8s.node.taint")
def plan_taint(p: TaintParams, env: Env) -> Plan:
    node = env.kube.get_node(p.node)
    change, facts = _taint_change(node, p), list[Fact]()
    if change is not None:
        _taint_interlocks(env, node=node, p=p, facts=facts)
    return Plan(action="k8s.node.taint", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


@registry.applier("k8s.node.taint")
def apply_taint(plan: Plan, p: TaintParams, env: Env) -> Result:
    k = env.kube
    node = k.get_node(p.node)
    if _taint_change(node, p) is not None:
        # live reads, never the plan's facts: the instance may have been started since approval
        _taint_interlocks(env, node=node, p=p, facts=[])
    recheck = _Rechecked(env, node, lambda live: _taint_interlocks(env, node=live, p=p, facts=[]))

    def mutate(obj: Obj) -> Obj | None:
        if _taint_change(obj, p) is None:
            return None
        recheck(obj)
        spec = obj.setdefault("spec", {})
        kept = [t for t in spec.get("taints") or ()
                if not (t.get("key") == p.key and t.get("effect") == p.effect)]
        spec["taints"] = [*kept, {"key": p.key, "value": p.value, "effect": p.effect}]
        return obj

    written, changed = k.update(kind="Node", name=p.node, mutate=mutate, current=node)
    if _taint_change(written, p) is not None:
        raise PermanentError(f"taint {p.key} is not on node {p.node} after the write",
                             service="kubernetes", operation="replace_node", code="PostCondition")
    data: Obj = {"node": p.node, "taints": il.taints_of(written)}
    if p.key == OUT_OF_SERVICE_TAINT:
        # what the run leaves in place on purpose; the run summary and its card name it
        data["compensation"] = (f"out-of-service taint still on {p.node}: run node-recovered "
                                "when it is repaired and Ready")
    return Result(data=data, already_done=not changed,
                  message=f"node {p.node} {'tainted' if changed else 'already tainted'} "
                          f"{p.key}={p.value}:{p.effect}")


def _untaint_matches(t: Obj, p: UntaintParams) -> bool:
    return bool(t.get("key") == p.key and (p.effect is None or t.get("effect") == p.effect))


def _untaint_change(node: Obj, p: UntaintParams) -> Change | None:
    gone = [_taint_str(t) for t in il.taints_of(node) if _untaint_matches(t, p)]
    if not gone:
        return None
    return Change(target_kind="Node", target=p.node, operation="untaint", before=", ".join(gone),
                  after="")


@registry.planner("k8s.node.untaint")
def plan_untaint(p: UntaintParams, env: Env) -> Plan:
    node = env.kube.get_node(p.node)
    change, facts = _untaint_change(node, p), list[Fact]()
    if change is not None and p.key == OUT_OF_SERVICE_TAINT:
        il.check_out_of_service_untaint(env, node=node, facts=facts)
    return Plan(action="k8s.node.untaint", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


@registry.applier("k8s.node.untaint")
def apply_untaint(plan: Plan, p: UntaintParams, env: Env) -> Result:
    k = env.kube
    node = k.get_node(p.node)
    oos = p.key == OUT_OF_SERVICE_TAINT
    if _untaint_change(node, p) is not None and oos:
        il.check_out_of_service_untaint(env, node=node, facts=[])
    recheck = _Rechecked(env, node, lambda live: il.check_out_of_service_untaint(
        env, node=live, facts=[]) if oos else None)

    def mutate(obj: Obj) -> Obj | None:
        if _untaint_change(obj, p) is None:
            return None
        recheck(obj)
        spec = obj.setdefault("spec", {})
        spec["taints"] = [t for t in spec.get("taints") or () if not _untaint_matches(t, p)]
        return obj

    written, changed = k.update(kind="Node", name=p.node, mutate=mutate, current=node)
    if _untaint_change(written, p) is not None:
        raise PermanentError(f"taint {p.key} is still on node {p.node} after the write",
                             service="kubernetes", operation="replace_node", code="PostCondition")
    return Result(data={"node": p.node, "taints": il.taints_of(written)}, already_done=not changed,
                  message=f"taint {p.key} {'removed from' if changed else 'already absent on'} "
                          f"node {p.node}")


def _cordon(action: str, unschedulable: bool) -> None:
    def change(node: Obj, name: str) -> Change | None:
        if bool((node.get("spec") or {}).get("unschedulable")) == unschedulable:
            return None
        return Change(target_kind="Node", target=name, operation=action.rsplit(".", 1)[1],
                      before=f"unschedulable={not unschedulable}",
                      after=f"unschedulable={unschedulable}")

    @registry.planner(action)
    def plan(p: NodeParams, env: Env) -> Plan:
        c = change(env.kube.get_node(p.node), p.node)
        return Plan(action=action, params={}, changes=(c,) if c else ())

    @registry.applier(action)
    def apply(plan: Plan, p: NodeParams, env: Env) -> Result:
        def mutate(obj: Obj) -> Obj | None:
            if change(obj, p.node) is None:
                return None
            obj.setdefault("spec", {})["unschedulable"] = unschedulable
            return obj

        written, changed = env.kube.update(kind="Node", name=p.node, mutate=mutate)
        if change(written, p.node) is not None:
            raise PermanentError(f"node {p.node} is not unschedulable={unschedulable} after the "
                                 "write", service="kubernetes", operation="replace_node",
                                 code="PostCondition")
        return Result(data={"node": p.node, "unschedulable": unschedulable},
                      already_done=not changed,
                      message=f"node {p.node} {'' if changed else 'already '}"
                              f"{'cordoned' if unschedulable else 'uncordoned'}")


_cordon("k8s.node.cordon", True)
_cordon("k8s.node.uncordon", False)


# -- pods and events --------------------------------------------------------------------------

@registry.planner("k8s.pods.list")
def plan_pods(p: PodsListParams, env: Env) -> Plan:
    return _read_only("k8s.pods.list")


@registry.applier("k8s.pods.list")
def apply_pods(plan: Plan, p: PodsListParams, env: Env) -> Result:
    items = [pod_view(x) for x in env.kube.list_pods(node=p.node, namespace=p.namespace,
                                                      label_selector=p.selector)]
    if p.claims is not None:
        wanted = set(p.claims)
        items = [i for i in items if wanted & set(i["claims"])]
    return Result(data={"items": items, "count": len(items)})


def _event_time(ev: Obj) -> str:
    return str(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or "")


@registry.planner("k8s.pod.events")
def plan_events(p: PodParams, env: Env) -> Plan:
    return _read_only("k8s.pod.events")


@registry.applier("k8s.pod.events")
def apply_events(plan: Plan, p: PodParams, env: Env) -> Result:
    events = sorted(env.kube.list_pod_events(namespace=p.namespace, pod=p.pod), key=_event_time)
    messages = [str(e.get("message") or "") for e in events]
    items = [{"type": e.get("type"), "reason": e.get("reason"), "message": msg,
              "count": int(e.get("count") or 1), "last_seen": _event_time(e) or None}
             for e, msg in zip(events, messages, strict=True)]
    multi = [m for m in (MULTI_ATTACH.search(msg) for msg in messages) if m]
    return Result(data={
        "items": items, "multi_attach": bool(multi),
        "multi_attach_volume": multi[-1].group("volume") if multi else None,
        "affinity_conflict": any(w in msg for msg in messages for w in AFFINITY_CONFLICT)})


# -- volume attachments -----------------------------------------------------------------------

def _volume_ids(env: Env, vas: list[Obj]) -> dict[str, str | None]:
    """PV name -> EBS volume id, with one PV list for all of them (none when nothing matched)."""
    if not vas:
        return {}
    return {_meta(pv)["name"]: il.volume_id_of_pv(pv) for pv in env.kube.list_pvs()}


@registry.planner("k8s.volumeattachments.list")
def plan_vas(p: VolumeAttachmentsListParams, env: Env) -> Plan:
    return _read_only("k8s.volumeattachments.list")


@registry.applier("k8s.volumeattachments.list")
def apply_vas(plan: Plan, p: VolumeAttachmentsListParams, env: Env) -> Result:
    vas = [v for v in env.kube.list_volume_attachments()
           if (p.node is None or il.va_node(v) == p.node)
           and (p.pv is None or ((v.get("spec") or {}).get("source") or {})
                .get("persistentVolumeName") == p.pv)]
    ids = _volume_ids(env, vas)
    items = [va_view(v, ids) for v in sorted(vas, key=lambda v: str(_meta(v)["name"]))]
    return Result(data={"items": items, "count": len(items)})


def _names_on(env: Env, node: str) -> list[str]:
    return sorted(_meta(v)["name"] for v in env.kube.list_volume_attachments()
                  if il.va_node(v) == node)


@registry.planner("k8s.volumeattachments.wait_gone")
def plan_wait_gone(p: WaitGoneParams, env: Env) -> Plan:
    # the starting set and time live in the plan, which the engine keeps for every poll
    return Plan(action="k8s.volumeattachments.wait_gone", params={},
                data={"initial": _names_on(env, p.node), "started_at": env.now_iso()})


@registry.applier("k8s.volumeattachments.wait_gone")
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

@registry.planner("k8s.pv.get")
def plan_pv(p: PvParams, env: Env) -> Plan:
    return _read_only("k8s.pv.get")


@registry.applier("k8s.pv.get")
def apply_pv(plan: Plan, p: PvParams, env: Env) -> Result:
    k = env.kube
    return Result(data=pv_view(k.find(lambda: k.get_pv(p.name)), p.name))


@registry.planner("k8s.pv.list")
def plan_pv_list(p: PvListParams, env: Env) -> Plan:
    return _read_only("k8s.pv.list")


@registry.applier("k8s.pv.list")
def apply_pv_list(plan: Plan, p: PvListParams, env: Env) -> Result:
    items = [pv_view(pv, _meta(pv)["name"]) for pv in env.kube.list_pvs()]
    items = [i for i in items
             if (p.storage_class is None or i["storage_class"] == p.storage_class)
             and (p.claim_namespace is None or str(i["claim"] or "").startswith(f"{p.claim_namespace}/"))]
    return Result(data={"items": items, "count": len(items)})


@registry.planner("k8s.pvc.get")
def plan_pvc(p: PvcParams, env: Env) -> Plan:
    return _read_only("k8s.pvc.get")


@registry.applier("k8s.pvc.get")
def apply_pvc(plan: Plan, p: PvcParams, env: Env) -> Result:
    k = env.kube
    pvc = k.find(lambda: k.get_pvc(namespace=p.namespace, name=p.name))
    return Result(data=pvc_view(pvc, name=p.name, namespace=p.namespace))


@registry.planner("k8s.storageclasses.audit")
def plan_sc_audit(p: StorageClassAuditParams, env: Env) -> Plan:
    return _read_only("k8s.storageclasses.audit")


@registry.applier("k8s.storageclasses.audit")
def apply_sc_audit(plan: Plan, p: StorageClassAuditParams, env: Env) -> Result:
    k = env.kube
    zones = sorted({z for n in k.list_nodes()
                    if not (n.get("spec") or {}).get("unschedulable")
                    and il.ready_condition(n)[0] == "True" and (z := il.zone_of_node(n))})
    items, problems = [], []
    for sc in sorted(k.list_storage_classes(), key=lambda s: str(_meta(s)["name"])):
        name, mode = _meta(sc)["name"], sc.get("volumeBindingMode") or "Immediate"
        allowed = sorted({v for t in sc.get("allowedTopologies") or ()
                          for e in t.get("matchLabelExpressions") or () for v in e.get("values") or ()})
        risky = mode == "Immediate" and len(zones) > 1 and len(allowed) != 1
        items.append({"name": name, "binding_mode": mode, "provisioner": sc.get("provisioner"),
                      "allowed_topologies": allowed, "risky": risky})
        if risky:
            problems.append(
                f"StorageClass {name} binds Immediate across {len(zones)} zones ({', '.join(zones)}): "
                "volumes are created before scheduling and can pin pods to a zone without capacity; "
                "create a WaitForFirstConsumer class (the field is immutable)")
    return Result(data={"items": items, "zones": zones, "problems": problems})


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
    current = list(_meta(obj).get("finalizers") or ()) if obj else []
    remove = [f for f in current if p.finalizers is None or f in p.finalizers]
    return remove, [f for f in current if f not in remove]


def _finalizer_change(obj: Obj | None, p: FinalizersRemoveParams) -> Change | None:
    remove, keep = _finalizer_split(obj, p)
    if not remove:
        return None
    target = f"{p.namespace}/{p.name}" if p.kind == "PersistentVolumeClaim" else p.name
    return Change(target_kind=p.kind, target=target, operation="remove-finalizers",
                  before=", ".join(remove + keep), after=", ".join(keep))


@registry.planner("k8s.finalizers.remove")
def plan_finalizers(p: FinalizersRemoveParams, env: Env) -> Plan:
    obj = _read_object(env, p)
    change, facts = _finalizer_change(obj, p), list[Fact]()
    if obj is not None and change is not None:
        il.check_finalizer_removal(env, kind=p.kind, obj=obj, facts=facts)
    return Plan(action="k8s.finalizers.remove", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


@registry.applier("k8s.finalizers.remove")
def apply_finalizers(plan: Plan, p: FinalizersRemoveParams, env: Env) -> Result:
    obj = _read_object(env, p)
    removed, _ = _finalizer_split(obj, p)
    if obj is None or not removed:
        return Result(data={"kind": p.kind, "name": p.name, "removed": [],
                            "remaining": _finalizer_split(obj, p)[1]}, already_done=True,
                      message=f"{p.kind} {p.name}: nothing to remove")
    il.check_finalizer_removal(env, kind=p.kind, obj=obj, facts=[])
    recheck = _Rechecked(env, obj, lambda live: il.check_finalizer_removal(
        env, kind=p.kind, obj=live, facts=[]))

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
