"""The diagnosis rules: each turns the one read of a cluster (``World``) into findings.

Every rule is pure, over objects already read. Where an action already decides the same question
for a runbook (which volumes a force-deleted pod left attached, what keeps a PV Terminating, which
VolumeAttachments are zombies, which StorageClasses bind Immediate across zones), the rule calls
the action's own function, so a diagnosis and the runbook it names never disagree.

A rule yields ``Draft`` objects: a finding without its params and command line (the scan fills
those in from the runbook's declared params), plus what else it touches, for ``--node``,
``--pod`` and ``--namespace``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime

from bot.actions.kube import AFFINITY_CONFLICT, MULTI_ATTACH, detach_risk
from bot.actions.kube_storage import storage_class_audit
from bot.actions.liveness import AMBIGUOUS, DEAD, READY, SICK, Liveness
from bot.actions.objects import (
    Obj,
    ebs_volume_id_of_pv,
    ec2_tags,
    meta,
    pod_claims,
    pv_named_by_tags,
    pv_zone,
    ready_condition,
    terminating,
    zone_of_node,
)
from bot.actions.pv_blockers import blockers, claim_of, latest_failed_delete
from bot.actions.reports import classify
from bot.diagnose.draft import Draft
from bot.diagnose.machines import Machine, capacity_words, machine, zone_capacity
from bot.diagnose.model import Evidence, Severity
from bot.diagnose.node_health import deleted_nodes, ip_exhaustion, sick_nodes, tainted_ready
from bot.diagnose.world import (
    SRC_CLASSES,
    SRC_EVENTS,
    SRC_INSTANCES,
    SRC_LEASES,
    SRC_NODES,
    SRC_PODS,
    SRC_PVCS,
    SRC_PVS,
    SRC_STATUS,
    SRC_VAS,
    SRC_VOLUMES,
    World,
    claim_key,
)

# this many NotReady nodes holding volumes in one zone is a zone outage, fixed zone by zone
ZONE_OUTAGE_NODES = 3
ATTACH_REASONS = ("FailedAttachVolume", "FailedMount")


def _name(obj: Obj) -> str:
    return str(meta(obj).get("name"))


def _pod_ref(pod: Obj) -> str:
    return f"{meta(pod).get('namespace') or 'default'}/{_name(pod)}"


def _pod_related(pod: Obj) -> set[str]:
    return {f"pod:{_pod_ref(pod)}", f"namespace:{meta(pod).get('namespace') or 'default'}"}


def _pod_state(pod: Obj) -> str:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str(status.get("phase") or "Unknown")


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not terminating(pod)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def _owner_kind(pod: Obj) -> str | None:
    refs = meta(pod).get("ownerReferences") or ()
    return next((str(r.get("kind")) for r in refs if r.get("controller", True)), None)


def _event_line(ev: Obj) -> str:
    when = ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp") or "?"
    return f"{ev.get('reason')} at {when}: {str(ev.get('message') or '')[:300]}"


# -- dead nodes -------------------------------------------------------------------------------

def dead_nodes(world: World) -> list[Draft]:
    """NotReady nodes that still hold volumes or Terminating StatefulSet pods: node-dead-ngns."""
    out = []
    for node in world.nodes:
        status, since = ready_condition(node)
        if status == "True" or world.liveness(node).verdict in (SICK, READY):
            continue  # a live kubelet: node_health.sick_nodes says what it is, never a fence
        name = _name(node)
        held = [va for va in world.vas_on.get(name, []) if (va.get("status") or {}).get("attached")]
        on_node = world.pods_on.get(name, [])
        stuck_sts = [p for p in on_node if terminating(p) and _owner_kind(p) == "StatefulSet"]
        if not held and not stuck_sts:
            continue
        out.append(_dead_node(world, node, status, since, held, on_node, stuck_sts))
    return out


def _dead_node(world: World, node: Obj, status: str, since: str | None, held: list[Obj],
               on_node: list[Obj], stuck_sts: list[Obj]) -> Draft:
    name, now = _name(node), world.now
    m = machine(world, node)
    lv = world.liveness(node)
    ev = [Evidence(f"node {name} is Ready={status} since {since or '?'}", SRC_NODES, now),
          Evidence(f"{lv.verdict}: {lv.words()}", SRC_LEASES, now)]
    if m.instance_id:
        ev.append(Evidence(m.words(), SRC_STATUS if m.hung else SRC_INSTANCES, now))
    if held:
        ev.append(_held_evidence(name, held, now))
    waiting = _waiting_elsewhere(world, name, held, ev)
    for pod in stuck_sts:
        ev.append(Evidence(f"pod {_pod_ref(pod)} of a StatefulSet is Terminating on {name} since "
                           f"{meta(pod).get('deletionTimestamp')}: the StatefulSet creates no "
                           "replacement while it exists", SRC_PODS, now))
    using = [p for p in on_node if set(pod_claims(p)) and not terminating(p)]
    if using:
        ev.append(Evidence(f"{len(using)} pod(s) with volumes still bound to {name}: "
                           f"{', '.join(_pod_ref(p) for p in using[:5])}", SRC_PODS, now))
    risk = detach_risk(name, world.vas, world.pvs, world.pods, now)
    ev += [_force_deleted_evidence(name, item, now) for item in risk["items"]]
    related = {f"node:{name}"}
    for pod in [*waiting, *stuck_sts, *using]:
        related |= _pod_related(pod)
    kind, severity, summary = _dead_node_verdict(name, m, lv, held, stuck_sts, waiting, using, risk)
    zone = zone_of_node(node)
    subject = {"node": name, **({"zone": zone} if zone else {})}
    if m.instance_id is None:
        return Draft(kind, severity, summary + " It has no EC2 instance to fence, so node-dead-ngns "
                     "does not apply.", subject, ev, None, {},
                     command=f"kubectl describe node {name}", related=related)
    return Draft(kind, severity, summary, subject, ev, "node-dead-ngns", {"node": name},
                 related=related)


def _held_evidence(name: str, held: list[Obj], now: datetime) -> Evidence:
    """The VolumeAttachments a dead node still holds, and how many are being deleted."""
    names = sorted(_name(v) for v in held)
    deleting = sum(1 for v in held if terminating(v))
    return Evidence(
        f"{len(held)} VolumeAttachment(s) on {name} still attached: {', '.join(names[:5])}"
        + ("..." if len(names) > 5 else "")
        + (f" ({deleting} being deleted, EC2 has not let go)" if deleting else ""), SRC_VAS, now)


def _waiting_elsewhere(world: World, name: str, held: list[Obj], ev: list[Evidence]) -> list[Obj]:
    """The pods on other nodes, not running, whose volume node ``name`` holds; their evidence (and
    the latest attach event of each) is appended to ``ev``."""
    waiting: list[Obj] = []
    for va in held:
        pv = world.pv.get(str(((va.get("spec") or {}).get("source") or {}).get("persistentVolumeName")))
        ref = ((pv or {}).get("spec") or {}).get("claimRef") or {}
        claim = claim_key(ref.get("namespace"), ref.get("name")) if ref.get("name") else None
        for pod in world.users.get(claim or "", []):
            if (pod.get("spec") or {}).get("nodeName") != name and not _running(pod):
                waiting.append(pod)
                ev += _waiting_pod_evidence(world, pod, pv or {}, claim)
    return waiting


def _waiting_pod_evidence(world: World, pod: Obj, pv: Obj, claim: str | None) -> list[Evidence]:
    now = world.now
    where = (pod.get("spec") or {}).get("nodeName") or "no node yet"
    return [Evidence(f"pod {_pod_ref(pod)} on {where} is {_pod_state(pod)}, waiting "
                     f"for volume {_name(pv)} (claim {claim})", SRC_PODS, now),
            *[Evidence(f"event of {_pod_ref(pod)}: {_event_line(e)}", SRC_EVENTS, now)
              for e in world.pod_events(pod)[-3:] if _attach_trouble(e)][-1:]]


def _attach_trouble(event: Obj) -> bool:
    """An event saying a volume could not attach or mount, or is attached elsewhere."""
    return bool(MULTI_ATTACH.search(str(event.get("message") or ""))
                or event.get("reason") in ATTACH_REASONS)


def _force_deleted_evidence(name: str, item: Obj, now: datetime) -> Evidence:
    left = item["timeout_detach_in"]
    return Evidence(
        f"the pod of claim {item['claim']} was force-deleted while {item['pv']} is attached to "
        f"{name}: the attach/detach controller detaches it"
        + (f" in about {_minutes(left)}" if left is not None else "")
        + " without the kubelet's word", SRC_PODS, now)


def _dead_node_verdict(name: str, m: Machine, lv: Liveness, held: list[Obj], stuck_sts: list[Obj],
                       waiting: list[Obj], using: list[Obj], risk: Obj) -> tuple[str, Severity, str]:
    """The kind, severity and summary of a dead-node finding."""
    volumes = f"{len(held)} EBS volume(s)" if held else "no volume"
    if risk["count"] and m.may_run:
        left = risk["timeout_detach_in"]
        return ("pod-force-deleted-volume-attached", Severity.URGENT,
                f"URGENT: a pod on NotReady node {name} was force-deleted and its volume is "
                f"still attached; {m.words()}. The timeout detach"
                + (f" in about {_minutes(left)}" if left is not None else "")
                + " would free the volume while the machine may still write to it: fence now.")
    if held and lv.verdict == AMBIGUOUS:
        return ("node-silent-holding-volumes", Severity.HIGH,
                f"Node {name} is silent and holds {volumes}, but EC2 does not confirm its "
                f"machine is down ({m.words()}): it may be alive behind a partition. "
                f"{lv.advice()}.")
    if held:
        severity = Severity.HIGH if (waiting or stuck_sts or using or risk["count"]) else Severity.MEDIUM
        return ("node-dead-holding-volumes", severity,
                f"Node {name} is NotReady ({m.words()}) and still holds {volumes}"
                + (f"; {len(waiting)} pod(s) elsewhere wait for them" if waiting else "")
                + (f"; {len(using)} pod(s) are down with it" if using else "") + ".")
    return ("statefulset-pod-stuck-terminating", Severity.HIGH,
            f"{len(stuck_sts)} StatefulSet pod(s) are Terminating on NotReady node {name} "
            f"({m.words()}) and will not be replaced until the node is fenced and tainted.")


def zone_outages(world: World, nodes: list[Draft]) -> tuple[list[Draft], list[Draft]]:
    """Many dead nodes in one zone become one finding for the zone: (zone findings, the rest)."""
    by_zone: dict[str, list[Draft]] = {}
    for d in nodes:
        # only machines EC2 confirms are down are fenced together; a maybe-alive one is not
        if d.runbook and d.subject.get("zone") and d.kind != "node-silent-holding-volumes" \
                and world.liveness(world.node[d.subject["node"]]).verdict == DEAD:
            by_zone.setdefault(d.subject["zone"], []).append(d)
    grouped = {id(d) for members in by_zone.values() for d in members}
    zones, rest = [], [d for d in nodes if id(d) not in grouped]
    for zone, members in sorted(by_zone.items()):
        if len(members) < ZONE_OUTAGE_NODES:
            rest += members
            continue
        states = Counter(machine(world, world.node[d.subject["node"]]).state for d in members)
        names = sorted(d.subject["node"] for d in members)
        urgent = [d for d in members if d.severity is Severity.URGENT]
        held = sum(len([v for v in world.vas_on.get(n, []) if (v.get("status") or {}).get("attached")])
                   for n in names)
        ev = [Evidence(f"{len(members)} nodes of {zone} are NotReady and hold volumes or stuck "
                       f"pods: {', '.join(names[:10])}" + ("..." if len(names) > 10 else ""),
                       SRC_NODES, world.now),
              Evidence("their instances: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())),
                       SRC_INSTANCES, world.now),
              Evidence(f"{held} VolumeAttachment(s) still attached on them", SRC_VAS, world.now),
              Evidence(f"zone capacity: {capacity_words(world)}", SRC_NODES, world.now)]
        ev += [e for d in urgent for e in d.evidence if "force-deleted" in e.what][:5]
        related = set().union(*(d.related for d in members))
        severity = Severity.URGENT if urgent else Severity.HIGH
        summary = (f"Zone outage in {zone}: {len(members)} NotReady nodes hold {held} EBS "
                   f"volume(s)" + (f"; {len(urgent)} have force-deleted pods with volumes still "
                                   "attached to machines that may run" if urgent else "")
                   + ". Recover them together, in batches, rather than node by node.")
        zones.append(Draft("zone-outage", severity, summary, {"zone": zone}, ev, "zone-outage-ngns",
                           {"zone": zone}, related=related))
    return zones, rest


# -- pods waiting for a volume held elsewhere ---------------------------------------------------

def waiting_for_volumes(world: World) -> list[Draft]:
    """Scheduled pods not running because a volume of theirs is attached to another node (a
    Ready one, or one that no longer exists), or whose attach keeps failing: multi-attach-triage.
    A holder that is NotReady is the dead-node finding's."""
    out = []
    for pod in world.pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or terminating(pod) or (pod.get("status") or {}).get("phase") != "Pending":
            continue
        holders = _holders_elsewhere(world, pod, node)
        events = [e for e in world.pod_events(pod) if _attach_trouble(e)]
        holder_nodes = {str((va.get("spec") or {}).get("nodeName")) for va, _ in holders}
        if any(h in world.node and not world.ready(world.node[h]) for h in holder_nodes):
            continue  # a dead node holds it: dead_nodes() reports the node with this pod
        if holders or events:
            out.append(_waiting_draft(world, pod, node, holders, holder_nodes, events))
    return out


def _holders_elsewhere(world: World, pod: Obj, node: str) -> list[tuple[Obj, Obj]]:
    """The attached VolumeAttachments, on another node than ``node``, of the pod's volumes, each
    with its PV."""
    holders: list[tuple[Obj, Obj]] = []
    for claim in pod_claims(pod):
        pv = world.pv_of_claim.get(claim)
        for va in world.vas_of_pv.get(_name(pv or {}), []) if pv else ():
            other = (va.get("spec") or {}).get("nodeName")
            if other != node and (va.get("status") or {}).get("attached"):
                holders.append((va, pv or {}))
    return holders


def _waiting_draft(world: World, pod: Obj, node: str, holders: list[tuple[Obj, Obj]],
                   holder_nodes: set[str], events: list[Obj]) -> Draft:
    now = world.now
    ev = [Evidence(f"pod {_pod_ref(pod)} is scheduled on {node} and {_pod_state(pod)}",
                   SRC_PODS, now)]
    ev += [_holder_evidence(world, va, pv) for va, pv in holders]
    ev += [Evidence(f"event: {_event_line(e)}", SRC_EVENTS, now) for e in events[-2:]]
    if holders:
        summary = (f"Pod {_pod_ref(pod)} cannot start on {node}: its volume is attached to "
                   f"node {', '.join(sorted(holder_nodes))} (Multi-Attach).")
        kind, severity = "multi-attach", Severity.HIGH
    else:
        summary = (f"Pod {_pod_ref(pod)} cannot attach or mount its volume on {node} "
                   f"({events[-1].get('reason')}), and no other node's VolumeAttachment holds it.")
        kind, severity = "volume-attach-failing", Severity.HIGH
    ns = str(meta(pod).get("namespace") or "default")
    subject = {"pod": _name(pod), "namespace": ns, "node": str(node)}
    if holders:
        subject |= {"pv": _name(holders[0][1]), "volumeattachment": _name(holders[0][0])}
    return Draft(kind, severity, summary, subject, ev, "multi-attach-triage",
                 {"pod": _name(pod), "namespace": ns},
                 related=_pod_related(pod) | {f"node:{node}"} | {f"node:{h}" for h in holder_nodes})


def _holder_evidence(world: World, va: Obj, pv: Obj) -> Evidence:
    """A VolumeAttachment holding a waiting pod's volume, the state of its node, its detach error."""
    other = str((va.get("spec") or {}).get("nodeName"))
    where = ("Ready" if world.ready(world.node[other]) else "NotReady") \
        if other in world.node else "no longer exists"
    detach = ((va.get("status") or {}).get("detachError") or {}).get("message")
    return Evidence(f"VolumeAttachment {_name(va)} holds {_name(pv)} "
                    f"({ebs_volume_id_of_pv(pv) or 'no EBS id'}) on node {other}, which "
                    f"{'is ' + where if where != 'no longer exists' else where}"
                    + (f"; detach error: {detach}" if detach else ""), SRC_VAS, world.now)


# -- pods Pending on a volume's zone ----------------------------------------------------------

def affinity_conflicts(world: World) -> list[Draft]:
    out = []
    classes = {_name(c): c for c in world.classes}
    for pod in world.pods:
        if (pod.get("spec") or {}).get("nodeName") or terminating(pod) \
                or (pod.get("status") or {}).get("phase") != "Pending":
            continue
        said = _affinity_complaint(world, pod)
        if said is None:
            continue
        now, ns = world.now, str(meta(pod).get("namespace") or "default")
        ev = [Evidence(f"pod {_pod_ref(pod)} is Pending: {said[:300]}", SRC_PODS, now)]
        subject = {"pod": _name(pod), "namespace": ns}
        for claim in pod_claims(pod):
            pv = world.pv_of_claim.get(claim)
            if pv is not None:
                subject |= _bound_volume(world, classes, claim, pv, ev)
                break
        where = subject.get("zone", "its volume's zone")
        out.append(Draft("volume-affinity-conflict", Severity.HIGH,
                         f"Pod {_pod_ref(pod)} is Pending: its volume is in {where}, where no "
                         "schedulable node has room for it.", subject, ev,
                         "volume-affinity-conflict", {"pod": _name(pod), "namespace": ns},
                         related=_pod_related(pod)))
    return out


def _affinity_complaint(world: World, pod: Obj) -> str | None:
    """The scheduler's message (its PodScheduled condition or a FailedScheduling event) saying a
    pending pod's volume affinity conflicts, if any."""
    cond: Obj = next((c for c in (pod.get("status") or {}).get("conditions") or ()
                      if c.get("type") == "PodScheduled"), {})
    messages = [str(cond.get("message") or "")] + [
        str(e.get("message") or "") for e in world.pod_events(pod)
        if e.get("reason") == "FailedScheduling"]
    return next((m for m in messages if any(w in m for w in AFFINITY_CONFLICT)), None)


def _bound_volume(world: World, classes: dict[str, Obj], claim: str, pv: Obj,
                  ev: list[Evidence]) -> dict[str, str]:
    """Appends to ``ev`` where the claim's volume is, how its class binds and the capacity there;
    returns what it adds to the finding's subject."""
    now = world.now
    zone = pv_zone(pv)
    sc_name = str((pv.get("spec") or {}).get("storageClassName") or "")
    sc = classes.get(sc_name)
    mode = (sc or {}).get("volumeBindingMode") or "Immediate"
    ready_there = sum(zone_capacity(world).get(zone or "", Counter()).values())
    ev.append(Evidence(f"claim {claim} is bound to {_name(pv)} "
                       f"({ebs_volume_id_of_pv(pv) or 'no EBS id'}) in zone {zone}", SRC_PVS, now))
    if sc is not None:
        ev.append(Evidence(f"StorageClass {sc_name} binds {mode}"
                           + (": the volume was created before the pod was scheduled"
                              if mode == "Immediate" else ""), SRC_CLASSES, now))
    ev.append(Evidence(f"{ready_there} Ready, schedulable node(s) in {zone}; zone "
                       f"capacity: {capacity_words(world)}", SRC_NODES, now))
    return {"pv": _name(pv), "pvc": claim.split("/", 1)[1], **({"zone": zone} if zone else {}),
            **({"storageclass": sc_name} if sc_name else {})}


def immediate_classes(world: World) -> list[Draft]:
    audit = storage_class_audit(world.nodes, world.classes)
    out = []
    for item in audit["items"]:
        if not item["risky"]:
            continue
        zones = ", ".join(audit["zones"])
        out.append(Draft(
            "immediate-storageclass-multi-zone", Severity.LOW,
            f"StorageClass {item['name']} binds Immediate across zones ({zones}): a new claim's "
            "volume may land in a zone where its pod cannot run. Use a WaitForFirstConsumer class "
            "for new claims.", {"storageclass": item["name"]},
            [Evidence(f"StorageClass {item['name']}: volumeBindingMode Immediate, no "
                      "allowedTopologies pinning one zone", SRC_CLASSES, world.now),
             Evidence(f"Ready, schedulable nodes in {zones}", SRC_NODES, world.now)],
            None, {}, command=f"kubectl get storageclass {item['name']} -o yaml"))
    return out


# -- stuck deletions --------------------------------------------------------------------------

def stuck_terminating(world: World) -> list[Draft]:
    out = []
    now = world.now
    for pv in world.pvs:
        if not terminating(pv):
            continue
        name = _name(pv)
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        live = world.pvc.get(claim_key(ref.get("namespace"), ref.get("name"))) \
            if ref.get("name") else None
        found = blockers(pv, claim_of(pv, live, world.pods), world.vas,
                         latest_failed_delete(world.pv_events(name)))
        volume = found["volume_id"]
        ev = [Evidence(f"PV {name} is Terminating since {meta(pv).get('deletionTimestamp')}, "
                       f"phase {found['phase']}, finalizers {', '.join(found['finalizers']) or 'none'}",
                       SRC_PVS, now),
              Evidence(f"why: {found['why']}", SRC_PVCS if found["claim"] else SRC_PVS, now)]
        if volume:
            ev.append(Evidence(f"EBS volume {volume} "
                               + ("still exists, available" if volume in world.available
                                  else "is not among the available volumes (attached, or gone)"),
                               SRC_VOLUMES, now))
        subject = {"pv": name, **({"volume": volume} if volume else {})}
        related = {f"pv:{name}"}
        if found["claim"]:
            ns, claim = found["claim"].split("/", 1)
            subject |= {"pvc": claim, "namespace": ns}
            related |= {f"namespace:{ns}"}
        if found["verdict"] == "bound":
            out.append(Draft("pv-deleted-while-bound", Severity.MEDIUM,
                             f"PV {name} was deleted while Bound to {found['claim']}: nothing is "
                             "stuck and the disk must stay; the runbook confirms it and stops.",
                             subject, ev, "stuck-terminating-volume", {"pv": name}, related=related))
        else:
            blocking = ", ".join(b["finalizer"] for b in found["blockers"]) or "none"
            out.append(Draft("pv-stuck-terminating", Severity.MEDIUM,
                             f"PV {name} is stuck Terminating ({found['verdict']}; blocked by "
                             f"{blocking}).", subject, ev, "stuck-terminating-volume",
                             {"pv": name}, related=related))
    for pvc in world.pvcs:
        if not terminating(pvc):
            continue
        ns, name = str(meta(pvc).get("namespace") or "default"), _name(pvc)
        bound = str((pvc.get("spec") or {}).get("volumeName") or "")
        if bound and terminating(world.pv.get(bound) or {}):
            continue  # the PV's finding covers its claim
        users = [_pod_ref(p) for p in world.users.get(f"{ns}/{name}", [])]
        finalizers = list(meta(pvc).get("finalizers") or ())
        ev = [Evidence(f"claim {ns}/{name} is Terminating since {meta(pvc).get('deletionTimestamp')}"
                       f", finalizers {', '.join(finalizers) or 'none'}", SRC_PVCS, now),
              Evidence("mounted by " + (", ".join(users[:5]) if users else "no pod that has not "
                                        "finished"), SRC_PODS, now)]
        out.append(Draft("pvc-stuck-terminating", Severity.MEDIUM,
                         f"Claim {ns}/{name} is stuck Terminating"
                         + (f": pods {', '.join(users[:3])} still use it (kubernetes.io/pvc-protection);"
                            " it goes when they finish or are deleted." if users else "."),
                         {"pvc": name, "namespace": ns, **({"pv": bound} if bound else {})}, ev,
                         None, {}, command=f"kubectl get pvc -n {ns} {name} -o yaml",
                         related={f"namespace:{ns}"}))
    return out


def zombies(world: World) -> list[Draft]:
    """Attached VolumeAttachments that no dead node, waiting pod or deleted PV explains."""
    out = []
    urgent = {d.subject["node"] for d in deleted_nodes(world)}
    for item in classify(world.vas, world.nodes, world.pods, world.pvs):
        if item["next"] in ("node-dead-ngns", "multi-attach-triage", "stuck-terminating-volume"):
            continue  # the dead-node, waiting-pod and stuck-PV findings say it, with their runbook
        if item["node"] in urgent:
            continue  # its machine still runs: the deleted-node finding, URGENT, says it
        subject = {"volumeattachment": str(item["name"]), "node": str(item["node"]),
                   **({"pv": str(item["pv"])} if item["pv"] else {})}
        out.append(Draft("zombie-volumeattachment", Severity.MEDIUM,
                         f"VolumeAttachment {item['name']} is attached but {item['reason']}.",
                         subject, [Evidence(f"VolumeAttachment {item['name']} ({item['pv'] or 'no PV'}"
                                            f" on {item['node']}): {item['reason']}", SRC_VAS,
                                            world.now)],
                         "zombie-volumeattachments", {}, related={f"node:{item['node']}"}))
    return out


def leaked_volumes(world: World) -> list[Draft]:
    """Available EBS volumes tagged for this cluster (the name its instances are tagged with) that
    no PersistentVolume names."""
    names = world.cluster_names()
    out = []
    for vid, vol in sorted(world.available.items()):
        tags = ec2_tags(vol)
        mine = any(f"kubernetes.io/cluster/{n}" in tags for n in names) \
            or tags.get("eks:eks-cluster-name") in names
        if not mine or vid in world.pv_of_volume:
            continue
        pv = pv_named_by_tags(tags)
        ns = tags.get("kubernetes.io/created-for/pvc/namespace")
        claim = tags.get("kubernetes.io/created-for/pvc/name")
        zone = str(vol.get("AvailabilityZone") or "")
        subject = {"volume": vid, **({"zone": zone} if zone else {}), **({"pv": pv} if pv else {}),
                   **({"pvc": claim, "namespace": ns} if claim and ns else {})}
        out.append(Draft(
            "ebs-volume-leaked", Severity.LOW,
            f"EBS volume {vid} ({vol.get('Size')} GiB, {zone}) is available, tagged for this "
            f"cluster, and no PersistentVolume names it" + (f" (it was created for PV {pv})"
                                                            if pv else "") + ": it costs money "
            "and holds data nobody tracks.", subject,
            [Evidence(f"volume {vid} is available, created {vol.get('CreateTime')}, tags "
                      + ", ".join(f"{k}={v}" for k, v in sorted(tags.items())), SRC_VOLUMES, world.now),
             Evidence(f"no PV of the {len(world.pvs)} in the cluster uses {vid}", SRC_PVS, world.now)],
            None, {}, command=f"aws ec2 describe-volumes --volume-ids {vid}",
            related={f"namespace:{ns}"} if ns else set()))
    return out


RULES = (waiting_for_volumes, affinity_conflicts, immediate_classes, stuck_terminating, zombies,
         leaked_volumes, sick_nodes, ip_exhaustion, deleted_nodes, tainted_ready)


def findings(world: World) -> Iterator[Draft]:
    zones, nodes = zone_outages(world, dead_nodes(world))
    yield from zones
    yield from nodes
    for rule in RULES:
        yield from rule(world)

