"""Kubernetes node and pod actions: read nodes, pods and events; taint, untaint, cordon.

Read-only actions do their reads in ``apply()`` (the engine calls it to get ``steps.<id>.result``)
and plan nothing, so a dry run costs no API calls. Changing actions plan from a live read, re-read
in apply, and report ``already_done`` when the live object already has the desired state. Result
shapes are the contract in docs/action-results.md. Storage objects are in ``kube_storage.py``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from bot.actions import interlocks as il
from bot.actions.authoring import (
    CORDONED_BY,
    OUT_OF_SERVICE_TAINT,
    TAINT_AT,
    TAINT_BOOT_ID,
    ActionSpec,
    Change,
    Env,
    Fact,
    NodeParams,
    Obj,
    PermanentError,
    Plan,
    Result,
    action,
    annotations_of,
    boot_id_of,
    has_taint,
    instance_id_of,
    meta,
    parse_time,
    ready_condition,
    set_taint,
    taints_of,
    terminating,
    tolerates,
    va_node,
    zone_of_node,
)
from bot.actions.declarations import (
    NodeGetParams,
    PodDeleteParams,
    PodParams,
    PodsListParams,
    TaintParams,
    UntaintParams,
)
from bot.engine.provenance import out_of_service_hold

MULTI_ATTACH = re.compile(r'Multi-Attach error for volume "(?P<volume>[^"]+)"')
AFFINITY_CONFLICT = ("volume node affinity conflict", "didn't match PersistentVolume's node affinity",
                     "had no available volume zone")  # the VolumeZone filter's wording


def _read_only(action: str) -> Plan:
    return Plan(action=action, params={})


# -- views (the result contract) --------------------------------------------------------------

def node_view(node: Obj | None, name: str) -> Obj:
    if node is None:
        return {"name": name, "exists": False, "ready": False, "ready_status": "Unknown",
                "ready_since": None, "taints": [], "out_of_service": False, "unschedulable": False,
                "instance_id": None, "zone": None, "boot_id": None, "boot_id_at_taint": None,
                "cordoned_by_run": None}
    status, since = ready_condition(node)
    notes = annotations_of(node)
    return {"name": name, "exists": True, "ready": status == "True", "ready_status": status,
            "ready_since": since, "taints": taints_of(node),
            "out_of_service": has_taint(node, OUT_OF_SERVICE_TAINT),
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
            "instance_id": instance_id_of(node), "zone": zone_of_node(node),
            "boot_id": boot_id_of(node), "boot_id_at_taint": notes.get(TAINT_BOOT_ID),
            "cordoned_by_run": notes.get(CORDONED_BY)}


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
    return {"name": meta(pod)["name"], "namespace": meta(pod).get("namespace"),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "phase": (pod.get("status") or {}).get("phase"), "reason": _pod_reason(pod),
            "terminating": terminating(pod),
            "pvcs": [v["persistentVolumeClaim"]["claimName"] for v in vols
                     if v.get("persistentVolumeClaim")],
            # "namespace/claim", the form k8s.pv.get gives as ``claim``, to match the two
            "claims": [f"{meta(pod).get('namespace')}/{v['persistentVolumeClaim']['claimName']}"
                       for v in vols if v.get("persistentVolumeClaim")],
            # neither the out-of-service taint nor pod GC moves such a pod off a dead node
            "tolerates_out_of_service": tolerates(pod, key=OUT_OF_SERVICE_TAINT,
                                                  value="nodeshutdown", effect="NoExecute")}


# -- nodes ------------------------------------------------------------------------------------

def plan_node_get(p: NodeGetParams, env: Env) -> Plan:
    return _read_only("k8s.node.get")


def apply_node_get(plan: Plan, p: NodeGetParams, env: Env) -> Result:
    k = env.kube
    if p.from_list:
        found = next((n for n in k.list_nodes() if meta(n).get("name") == p.node), None)
        return Result(data=node_view(found, p.node))
    return Result(data=node_view(k.find(lambda: k.get_node(p.node)), p.node))


def _taint_str(t: Obj) -> str:
    return f"{t['key']}={t.get('value') or ''}:{t['effect']}"


def _taint_change(node: Obj, p: TaintParams) -> Change | None:
    want = {"key": p.key, "value": p.value, "effect": p.effect}
    same = [t for t in taints_of(node) if t["key"] == p.key and t["effect"] == p.effect]
    if same and same[0]["value"] == p.value:
        return None
    return Change(target_kind="Node", target=p.node, operation="taint",
                  before=_taint_str(same[0]) if same else "", after=_taint_str(want))


def _taint_interlocks(env: Env, *, node: Obj, p: TaintParams, facts: list[Fact],
                      fresh: bool = False) -> None:
    if p.key == OUT_OF_SERVICE_TAINT:
        il.check_out_of_service_taint(env, node=node, facts=facts, fresh=fresh)
        il.check_blast_radius(env, targets=[p.node], nodes=env.kube.list_nodes(), facts=facts)


def _taint_target(env: Env, p: TaintParams) -> Obj:
    """The node, read from the list of all nodes when the blast-radius rule needs that list anyway
    (one request for both)."""
    if p.key == OUT_OF_SERVICE_TAINT:
        env.kube.list_nodes()
    return env.kube.get_node(p.node)


def _gone(p: TaintParams) -> Result:
    # the node group, Karpenter or the cloud controller deleted the Node after the fence: there
    # is nothing left to taint, and its pods are garbage-collected with it
    return Result(data={"node": p.node, "exists": False, "taints": []}, already_done=True,
                  message=f"node {p.node} no longer exists: nothing to taint")


def plan_taint(p: TaintParams, env: Env) -> Plan:
    k = env.kube
    found = k.find(lambda: _taint_target(env, p))
    if found is None:
        return Plan(action="k8s.node.taint", params={},
                    facts=(env.fact(f"node {p.node}", "exists", False),))
    node = found
    change, facts = _taint_change(node, p), list[Fact]()
    if change is not None:
        _taint_interlocks(env, node=node, p=p, facts=facts)
    return Plan(action="k8s.node.taint", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


def apply_taint(plan: Plan, p: TaintParams, env: Env) -> Result:
    k = env.kube
    found = k.find(lambda: _taint_target(env, p))
    if found is None:
        return _gone(p)
    node = found
    if _taint_change(node, p) is not None:
        # live reads, never the plan's facts: the instance may have been started since approval,
        # or since this pass's plan read it
        _taint_interlocks(env, node=node, p=p, facts=[], fresh=True)
    recheck = il.Rechecked(env, node, lambda live: _taint_interlocks(env, node=live, p=p, facts=[],
                                                                     fresh=True))

    def mutate(obj: Obj) -> Obj | None:
        if _taint_change(obj, p) is None:
            return None
        recheck(obj)
        return set_taint(obj, key=p.key, value=p.value, effect=p.effect, now=env.now_iso())

    written, changed = k.update(kind="Node", name=p.node, mutate=mutate, current=node)
    if _taint_change(written, p) is not None:
        raise PermanentError(f"taint {p.key} is not on node {p.node} after the write",
                             service="kubernetes", operation="replace_node", code="PostCondition")
    data: Obj = {"node": p.node, "exists": True, "taints": taints_of(written)}
    if p.key == OUT_OF_SERVICE_TAINT:
        # what the run leaves in place on purpose; the run summary and its card name it
        data["compensation"] = out_of_service_hold(p.node)
    return Result(data=data, already_done=not changed,
                  message=f"node {p.node} {'tainted' if changed else 'already tainted'} "
                          f"{p.key}={p.value}:{p.effect}")


def _untaint_matches(t: Obj, p: UntaintParams) -> bool:
    return bool(t.get("key") == p.key and (p.effect is None or t.get("effect") == p.effect))


def _untaint_change(node: Obj, p: UntaintParams) -> Change | None:
    gone = [_taint_str(t) for t in taints_of(node) if _untaint_matches(t, p)]
    if not gone:
        return None
    return Change(target_kind="Node", target=p.node, operation="untaint", before=", ".join(gone),
                  after="")


def plan_untaint(p: UntaintParams, env: Env) -> Plan:
    node = env.kube.get_node(p.node)
    change, facts = _untaint_change(node, p), list[Fact]()
    if change is not None and p.key == OUT_OF_SERVICE_TAINT:
        il.check_out_of_service_untaint(env, node=node, facts=facts)
    return Plan(action="k8s.node.untaint", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


def apply_untaint(plan: Plan, p: UntaintParams, env: Env) -> Result:
    k = env.kube
    node = k.get_node(p.node)
    oos = p.key == OUT_OF_SERVICE_TAINT
    if _untaint_change(node, p) is not None and oos:
        il.check_out_of_service_untaint(env, node=node, facts=[])
    recheck = il.Rechecked(env, node, lambda live: il.check_out_of_service_untaint(
        env, node=live, facts=[]) if oos else None)

    def mutate(obj: Obj) -> Obj | None:
        if _untaint_change(obj, p) is None:
            return None
        recheck(obj)
        spec = obj.setdefault("spec", {})
        spec["taints"] = [t for t in spec.get("taints") or () if not _untaint_matches(t, p)]
        if oos:
            notes = obj.get("metadata", {}).get("annotations") or {}
            for key in (TAINT_AT, TAINT_BOOT_ID):
                notes.pop(key, None)
        return obj

    written, changed = k.update(kind="Node", name=p.node, mutate=mutate, current=node)
    if _untaint_change(written, p) is not None:
        raise PermanentError(f"taint {p.key} is still on node {p.node} after the write",
                             service="kubernetes", operation="replace_node", code="PostCondition")
    return Result(data={"node": p.node, "taints": taints_of(written)}, already_done=not changed,
                  message=f"taint {p.key} {'removed from' if changed else 'already absent on'} "
                          f"node {p.node}")


def _cordon(name: str, unschedulable: bool) -> ActionSpec[NodeParams]:
    """Cordon records the run on the node; uncordon lifts only a cordon a bot run recorded, so a
    node a person cordoned for their own reasons stays cordoned."""

    def change(node: Obj, node_name: str) -> Change | None:
        if bool((node.get("spec") or {}).get("unschedulable")) == unschedulable:
            return None
        if not unschedulable and not annotations_of(node).get(CORDONED_BY):
            return None  # cordoned by someone else: not the bot's to undo
        return Change(target_kind="Node", target=node_name, operation=name.rsplit(".", 1)[1],
                      before=f"unschedulable={not unschedulable}",
                      after=f"unschedulable={unschedulable}")

    def plan(p: NodeParams, env: Env) -> Plan:
        c = change(env.kube.get_node(p.node), p.node)
        return Plan(action=name, params={}, changes=(c,) if c else ())

    def apply(plan: Plan, p: NodeParams, env: Env) -> Result:
        def mutate(obj: Obj) -> Obj | None:
            if change(obj, p.node) is None:
                return None
            obj.setdefault("spec", {})["unschedulable"] = unschedulable
            notes = obj.setdefault("metadata", {}).setdefault("annotations", {})
            if unschedulable:
                notes[CORDONED_BY] = env.ctx.run_id
            else:
                notes.pop(CORDONED_BY, None)
            return obj

        written, changed = env.kube.update(kind="Node", name=p.node, mutate=mutate)
        if change(written, p.node) is not None:
            raise PermanentError(f"node {p.node} is not unschedulable={unschedulable} after the "
                                 "write", service="kubernetes", operation="replace_node",
                                 code="PostCondition")
        now = bool((written.get("spec") or {}).get("unschedulable"))
        data: Obj = {"node": p.node, "unschedulable": now}
        if unschedulable and changed:
            data["compensation"] = (f"node {p.node} cordoned by run {env.ctx.run_id}: "
                                    "node-recovered uncordons it")
        if not unschedulable and now:
            return Result(data=data, already_done=True,
                          message=f"node {p.node} was cordoned by someone else, not by a bot run: "
                                  "left cordoned")
        return Result(data=data, already_done=not changed,
                      message=f"node {p.node} {'' if changed else 'already '}"
                              f"{'cordoned' if unschedulable else 'uncordoned'}")

    verb = "Cordon" if unschedulable else "Uncordon"
    return action(name, NodeParams, destructive=False, summary=f"{verb} node {{{{ node }}}}",
                  description="Mark the node unschedulable." if unschedulable
                  else "Mark the node schedulable again.",
                  plan=plan, apply=apply)


# -- pods and events --------------------------------------------------------------------------

def plan_pods(p: PodsListParams, env: Env) -> Plan:
    return _read_only("k8s.pods.list")


def apply_pods(plan: Plan, p: PodsListParams, env: Env) -> Result:
    items = [pod_view(x) for x in env.kube.list_pods(node=p.node, namespace=p.namespace,
                                                      label_selector=p.selector)]
    if p.claims is not None:
        wanted = set(p.claims)
        items = [i for i in items if wanted & set(i["claims"])]
    return Result(data={"items": items, "count": len(items)})


def _event_time(ev: Obj) -> str:
    return str(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or "")


def plan_events(p: PodParams, env: Env) -> Plan:
    return _read_only("k8s.pod.events")


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
        # the kubelet's side of the same wait: "Unable to attach or mount volumes ... timed out"
        "failed_mount": any(e.get("reason") == "FailedMount" for e in events),
        "affinity_conflict": any(w in msg for msg in messages for w in AFFINITY_CONFLICT)})


def _pod_delete_change(pod: Obj | None, p: PodDeleteParams) -> Change | None:
    if pod is None or terminating(pod):
        return None  # gone, or already being deleted
    on = (pod.get("spec") or {}).get("nodeName")
    if on != p.node:
        # the pod asked about was replaced, or is somewhere else: never delete it there
        raise PermanentError(f"pod {p.namespace}/{p.pod} runs on {on}, not on {p.node}; refusing "
                             "to delete it", service="kubernetes", operation="delete_namespaced_pod",
                             code="WrongNode")
    return Change(target_kind="Pod", target=f"{p.namespace}/{p.pod}", operation="delete",
                  before=f"on {p.node}", after="deleted gracefully")


# kube-controller-manager's maxWaitForUnmountDuration: not configurable on EKS
TIMEOUT_DETACH_SECONDS = 360.0


def plan_detach_risk(p: NodeParams, env: Env) -> Plan:
    return _read_only("k8s.node.detach_risk")


def detach_risk(node: str, vas: list[Obj], pvs: list[Obj], pods: list[Obj],
                now: datetime) -> Obj:
    """Volumes attached on ``node`` whose pods are gone from it, from lists already read.

    Once no pod on a NotReady node uses a volume (its pod was force-deleted), the attach/detach
    controller detaches it 6 minutes later without the kubelet's word, from a machine that may
    still run and write: the window in which the node must be fenced."""
    on_node = [v for v in vas if va_node(v) == node and not terminating(v)]
    if not on_node:
        return {"items": [], "count": 0, "timeout_detach_in": None}
    claims = {meta(pv)["name"]: f"{(pv['spec'].get('claimRef') or {}).get('namespace')}/"
                                f"{(pv['spec'].get('claimRef') or {}).get('name')}"
              for pv in pvs if (pv.get("spec") or {}).get("claimRef")}
    users: dict[str, list[Obj]] = {}
    for pod in pods:
        for claim in pod_view(pod)["claims"]:
            users.setdefault(claim, []).append(pod)
    items = []
    for va in sorted(on_node, key=lambda v: str(meta(v)["name"])):
        pv = ((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
        claim = claims.get(str(pv))
        used = users.get(claim or "", [])
        if claim is None or any((x.get("spec") or {}).get("nodeName") == node for x in used):
            continue  # still used there (or not a claimed volume): the controller waits
        # the replacement was created when the old pod object went: the controller's clock
        born = [t for x in used if (t := parse_time(meta(x).get("creationTimestamp")))]
        left = (max(0.0, TIMEOUT_DETACH_SECONDS - (now - min(born)).total_seconds())
                if born else None)
        items.append({"volume_attachment": meta(va)["name"], "pv": pv, "claim": claim,
                      "timeout_detach_in": left})
    lefts = [i["timeout_detach_in"] for i in items if i["timeout_detach_in"] is not None]
    return {"items": items, "count": len(items),
            "timeout_detach_in": min(lefts) if lefts else
            (TIMEOUT_DETACH_SECONDS if items else None)}


def apply_detach_risk(plan: Plan, p: NodeParams, env: Env) -> Result:
    k = env.kube
    vas = k.list_volume_attachments()
    if not any(va_node(v) == p.node and not terminating(v) for v in vas):
        return Result(data=detach_risk(p.node, [], [], [], env.ctx.clock.now()))
    return Result(data=detach_risk(p.node, vas, k.list_pvs(), k.list_pods(), env.ctx.clock.now()))


def plan_pod_get(p: PodParams, env: Env) -> Plan:
    return _read_only("k8s.pod.get")


def apply_pod_get(plan: Plan, p: PodParams, env: Env) -> Result:
    k = env.kube
    pod = k.find(lambda: k.get_pod(namespace=p.namespace, name=p.pod))
    if pod is None:
        return Result(data={"name": p.pod, "namespace": p.namespace, "exists": False,
                            "node": None, "phase": None, "reason": None, "terminating": False,
                            "pvcs": [], "claims": [], "tolerates_out_of_service": False,
                            "scheduled": False, "scheduling_message": None})
    sched: Obj = next((c for c in (pod.get("status") or {}).get("conditions") or ()
                  if c.get("type") == "PodScheduled"), {})
    # the condition outlives the one-shot, expiring events that explained the wait
    return Result(data={**pod_view(pod), "exists": True,
                        "scheduled": sched.get("status") == "True" or bool(pod_view(pod)["node"]),
                        "scheduling_message": sched.get("message")})


def plan_pod_delete(p: PodDeleteParams, env: Env) -> Plan:
    k = env.kube
    pod = k.find(lambda: k.get_pod(namespace=p.namespace, name=p.pod))
    change = _pod_delete_change(pod, p)
    facts = [env.fact(f"pod {p.namespace}/{p.pod}", "node", (pod or {}).get("spec", {}).get("nodeName")),
             env.fact(f"pod {p.namespace}/{p.pod}", "tolerates_out_of_service",
                      pod_view(pod)["tolerates_out_of_service"] if pod else None)]
    return Plan(action="k8s.pod.delete", params={}, changes=(change,) if change else (),
                facts=tuple(facts), data={"uid": meta(pod or {}).get("uid")})


def apply_pod_delete(plan: Plan, p: PodDeleteParams, env: Env) -> Result:
    k = env.kube
    pod = k.find(lambda: k.get_pod(namespace=p.namespace, name=p.pod))
    uid = meta(pod or {}).get("uid")
    name = f"{p.namespace}/{p.pod}"
    if pod is None or uid != plan.data.get("uid") or _pod_delete_change(pod, p) is None:
        return Result(data={"pod": name, "deleted": True}, already_done=True,
                      message=f"pod {name} is already gone or being deleted")
    try:
        k.delete_pod(namespace=p.namespace, name=p.pod, uid=str(uid),
                     grace_period_seconds=p.grace_period_seconds)
    except PermanentError as e:
        if e.code != "NotFound":
            raise
    why = (f"pod {name} tolerates {OUT_OF_SERVICE_TAINT}, so the taint would never move it: "
           if pod_view(pod)["tolerates_out_of_service"] else f"pod {name}: ")
    return Result(data={"pod": name, "deleted": True},
                  message=why + f"deleted gracefully from {p.node}; pod GC removes it from the "
                                "out-of-service node and its controller recreates it elsewhere")


# -- the actions ------------------------------------------------------------------------------

NODE_GET = action(
    "k8s.node.get", NodeGetParams, destructive=False,
    summary="Read node {{ node }}", description="Ready condition, taints, instance id and zone.",
    plan=plan_node_get, apply=apply_node_get)
NODE_TAINT = action(
    "k8s.node.taint", TaintParams, destructive=True,
    summary="Taint node {{ node }} with {{ key }}={{ value }}:{{ effect }}",
    description="Add a taint, read-modify-write checked by resourceVersion.",
    plan=plan_taint, apply=apply_taint)
NODE_UNTAINT = action(
    "k8s.node.untaint", UntaintParams, destructive=True,
    summary="Remove taint {{ key }} from node {{ node }}",
    description="Remove a taint, read-modify-write checked by resourceVersion.",
    plan=plan_untaint, apply=apply_untaint)
NODE_CORDON = _cordon("k8s.node.cordon", True)
NODE_UNCORDON = _cordon("k8s.node.uncordon", False)
PODS_LIST = action(
    "k8s.pods.list", PodsListParams, destructive=False,
    summary="List pods{% if node %} on {{ node }}{% endif %}",
    description="Pods by node or selector, with their status reasons.",
    plan=plan_pods, apply=apply_pods)
POD_EVENTS = action(
    "k8s.pod.events", PodParams, destructive=False,
    summary="Read events of pod {{ namespace }}/{{ pod }}",
    description="Event reasons and messages; detects Multi-Attach and affinity conflicts.",
    plan=plan_events, apply=apply_events)

POD_DELETE = action(
    "k8s.pod.delete", PodDeleteParams, destructive=True,
    summary="Delete pod {{ namespace }}/{{ pod }} gracefully",
    description="A graceful delete of a pod still bound to the given node; never a force delete.",
    plan=plan_pod_delete, apply=apply_pod_delete)

NODE_DETACH_RISK = action(
    "k8s.node.detach_risk", NodeParams, destructive=False,
    summary="Find volumes on {{ node }} whose pods were deleted",
    description="Volumes the attach/detach controller will detach after its 6-minute timeout.",
    plan=plan_detach_risk, apply=apply_detach_risk)
POD_GET = action(
    "k8s.pod.get", PodParams, destructive=False,
    summary="Read pod {{ namespace }}/{{ pod }}",
    description="Node, phase, claims and the PodScheduled condition.",
    plan=plan_pod_get, apply=apply_pod_get)

ACTIONS: tuple[ActionSpec[Any], ...] = (NODE_GET, NODE_TAINT, NODE_UNTAINT, NODE_CORDON,
                                        NODE_UNCORDON, NODE_DETACH_RISK, PODS_LIST, POD_GET,
                                        POD_EVENTS, POD_DELETE)
