"""Actions over the dead nodes of one availability zone, in batches, with one outcome per node.

When a zone fails, tens of nodes die at once. These actions take a list of nodes and read the
world once for all of them (one node list, one DescribeInstances, one VolumeAttachment list per
poll), so the reads do not grow with the number of nodes, and one approval covers a whole batch.

- ``k8s.zone.survey`` finds the NotReady nodes of the zone (or checks the ones named) and what each
  one holds; nodes already out of service are reported done, so a re-run picks up what is left,
  and a node whose kubelet is alive (its Lease renewed: rule 8's "sick") is left alone.
- ``k8s.zone.fence_taint`` (``bot.actions.zone_fence``) fences a batch and taints each node
  out-of-service as soon as its own machine is off, each node on its own clock.
- ``k8s.zone.wait_detached`` waits for the VolumeAttachments of all the nodes together.
- ``k8s.zone.held_volumes`` lists the data volumes EC2 still attaches to their instances although
  Kubernetes let go of them: what a forced detach (``aws.ec2.volumes.detach``) may free.
- ``k8s.zone.placement`` says, per claim, whether its pod runs again, or why it cannot: an EBS
  volume lives in one zone, so its pod needs a node in that zone; a local volume lives on one
  node, so its pod needs that node back (``bot.actions.zone_local``).

The interlocks are the shipped ones, fed by the batch's reads: zone-scope (9) for every node,
fence-live (8) for every instance stopped (one list of the node Leases and one
DescribeInstanceStatus for the batch), oos-taint (1) for every node tainted, and blast-radius
(5) for the whole batch, whose break-glass names how many nodes it allows. What EC2 and the
deleted nodes leave behind is released in batches too: ``aws.ec2.volumes.detach`` and
``k8s.volumeattachments.delete`` (rules 2 and 10, for every volume on one set of reads).

The waits poll every 15 s for their first two minutes, then every 30 s (``bot.actions.polling``).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from bot.actions import interlocks as il
from bot.actions import zone_local
from bot.actions.authoring import (
    FENCED_STATES,
    OUT_OF_SERVICE_TAINT,
    ActionSpec,
    Env,
    Obj,
    PermanentError,
    Plan,
    Result,
    action,
    canonical_json,
    ebs_volume_id_of_pv,
    ec2_tags,
    has_taint,
    instance_id_of,
    instance_state,
    meta,
    pod_claims,
    poll_interval,
    pv_named_by_tags,
    pv_zone,
    ready_condition,
    terminating,
    va_node,
    zone_of_node,
)
from bot.actions.declarations import (
    ZoneHeldParams,
    ZoneLeftoverParams,
    ZonePlacementParams,
    ZoneSurveyParams,
    ZoneWaitParams,
)
from bot.actions.liveness import SICK, classify
from bot.actions.local_data import local_kind

TAINT_VALUE = "nodeshutdown"
TAINT_EFFECT = "NoExecute"
GROUP_LABELS = (("eks.amazonaws.com/nodegroup", "node group"), ("karpenter.sh/nodepool", "NodePool"))
SPOT_LABELS = (("karpenter.sh/capacity-type", "spot"), ("eks.amazonaws.com/capacityType", "SPOT"))


def node_name(node: Obj) -> str:
    return str(meta(node)["name"])


def _labels(node: Obj) -> dict[str, str]:
    return dict(meta(node).get("labels") or {})


def groups_of(nodes: list[Obj]) -> list[str]:
    """The node groups and Karpenter NodePools these nodes belong to, e.g. ``node group general``."""
    out = {f"{word} {_labels(n)[key]}" for n in nodes for key, word in GROUP_LABELS
           if _labels(n).get(key)}
    return sorted(out)


def is_spot(node: Obj, inst: Obj | None) -> bool:
    """A Spot instance: EC2 says so, or the node's capacity-type label does."""
    if inst is not None and inst.get("InstanceLifecycle") == "spot":
        return True
    return any(_labels(node).get(k) == v for k, v in SPOT_LABELS)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:32]


# -- survey -----------------------------------------------------------------------------------

def plan_survey(p: ZoneSurveyParams, env: Env) -> Plan:
    return Plan(action="k8s.zone.survey", params={})


def apply_survey(plan: Plan, p: ZoneSurveyParams, env: Env) -> Result:
    in_zone, instances, vas, leases = _survey_reads(env, p)
    now, grace = env.ctx.clock.now(), env.settings.policy.node_monitor_grace_period
    ordered = sorted(in_zone, key=node_name)
    items = [_survey_item(n, instances, vas, leases.get(node_name(n)), now=now, grace=grace)
             for n in ordered]
    kept = [n for n, item in zip(ordered, items, strict=True) if item["outcome"] != "skipped"]
    # claims on local volumes of these nodes: no VolumeAttachment names them, their affinity does
    local = zone_local.pinned(env.kube.list_pvs(), kept) if kept else {}
    for item in items:
        item["local_pvs"] = sorted(pv for pv, node in local.items() if node == item["node"])
    todo, done, skipped = (_named(items, outcome) for outcome in ("to do", "done", "skipped"))
    # instances still running first: they are fenced in as few batches (and stop waits) as can be
    running = {i["node"] for i in items if i["state"] not in FENCED_STATES}
    todo.sort(key=lambda name: (name not in running, name))
    _check_max_nodes(p, todo)
    pvs = [pv for i in items if i["outcome"] != "skipped" for pv in i["pvs"]]
    todo_ids = [i["instance_id"] for i in items if i["outcome"] != "skipped"]
    return Result(data={"zone": p.zone, "items": items, "todo": todo, "done": done,
                        "skipped": skipped, "pvs": sorted(set(pvs) | set(local)),
                        "local_pvs": sorted(local),
                        "instance_ids": sorted(i for i in todo_ids if i), "count": len(todo)},
                  message=f"{len(todo)} node(s) of {p.zone} to recover, {len(done)} already out of "
                          f"service, {len(skipped)} left alone")


def _survey_reads(env: Env, p: ZoneSurveyParams) -> tuple[list[Obj], dict[str, Obj], list[Obj],
                                                          dict[str, Obj]]:
    """The zone's nodes (or those named), and for its NotReady ones their instances, the
    VolumeAttachments and the Leases: one call each, made only when a node is NotReady."""
    nodes = env.kube.list_nodes()
    if p.nodes:
        il.check_zone(env, zone=p.zone, named=p.nodes, nodes=nodes, facts=[])
    wanted = set(p.nodes or ())
    in_zone = [n for n in nodes if zone_of_node(n) == p.zone and (not wanted or node_name(n) in wanted)]
    dead = [n for n in in_zone if ready_condition(n)[0] != "True"]
    ids = [i for i in (instance_id_of(n) for n in dead) if i]
    instances = env.ec2.describe_instances(ids) if ids else {}
    vas = env.kube.list_volume_attachments() if dead else []
    # a NotReady node whose kubelet is alive (rule 8's "sick") is no part of a zone outage
    leases = {node_name(x): x for x in env.kube.list_node_leases()} if dead else {}
    return in_zone, instances, vas, leases


def _survey_item(n: Obj, instances: dict[str, Obj], vas: list[Obj], lease: Obj | None, *,
                 now: datetime, grace: float) -> Obj:
    """One node of the survey: what was read of it, and its outcome (to do, done or skipped)."""
    name, iid = node_name(n), instance_id_of(n)
    inst = instances.get(iid) if iid else None
    mine = sorted(str(pv) for v in vas if va_node(v) == name
                  if (pv := ((v.get("spec") or {}).get("source") or {}).get("persistentVolumeName")))
    item = {"node": name, "instance_id": iid, "state": instance_state(inst) if iid else None,
            "ready": ready_condition(n)[0] == "True", "spot": is_spot(n, inst),
            "out_of_service": has_taint(n, OUT_OF_SERVICE_TAINT),
            "volume_attachments": len(mine), "pvs": mine, "groups": groups_of([n])}
    item["outcome"], item["reason"] = _survey_outcome(n, item, inst, lease, now=now, grace=grace)
    return item


def _survey_outcome(n: Obj, item: Obj, inst: Obj | None, lease: Obj | None, *, now: datetime,
                    grace: float) -> tuple[str, str]:
    if item["ready"]:
        return "skipped", "the node is Ready"
    if item["instance_id"] is None:
        return "skipped", "no EC2 instance in its providerID (Fargate?)"
    lv = classify(node=n, lease=lease, instance=inst, status=None, now=now, grace=grace)
    if lv.verdict == SICK:
        return "skipped", f"not dead: {lv.words()}"
    if item["out_of_service"] and item["state"] in FENCED_STATES:
        return "done", "already out of service, instance " + str(item["state"])
    return "to do", f"NotReady, instance {item['state']}"


def _named(items: list[Obj], outcome: str) -> list[str]:
    return [str(i["node"]) for i in items if i["outcome"] == outcome]


def _check_max_nodes(p: ZoneSurveyParams, todo: list[str]) -> None:
    if p.max_nodes is not None and len(todo) > p.max_nodes:
        raise PermanentError(
            f"{len(todo)} NotReady nodes in {p.zone} need recovery, more than max_nodes="
            f"{p.max_nodes}: a larger outage than expected. Check it is really one zone, then "
            f"start again with max_nodes={len(todo)} (or name the nodes)",
            service="kubernetes", operation="list_node", code="TooManyNodes")


# -- waiting for all the nodes' attachments together ------------------------------------------

# Attachments left only on nodes deleted during the run go when the attach/detach controller's
# wait ends: pod garbage collection removes a deleted node's pods after a 40 s quarantine, then
# the controller detaches after maxWaitForUnmountDuration (6 min). The wait gives them that long
# from the moment it first sees only such attachments left (the node was deleted before), so
# Kubernetes removes them itself and nobody is asked to approve deleting them; it checks on them
# every two minutes, since nothing makes them go sooner.
GONE_WAIT_SECONDS = 450.0
GONE_POLL_SECONDS = 120.0

def _attachments(env: Env, nodes: set[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in env.kube.list_volume_attachments():
        node = va_node(v)
        if node in nodes:
            out.setdefault(node, []).append(str(meta(v)["name"]))
    return out


def plan_wait_detached(p: ZoneWaitParams, env: Env) -> Plan:
    # the start time lives in the plan, which the engine keeps for every poll
    return Plan(action="k8s.zone.wait_detached", params={}, data={"started_at": env.now_iso()})


def apply_wait_detached(plan: Plan, p: ZoneWaitParams, env: Env) -> Result:
    left = _attachments(env, set(p.nodes)) if p.nodes else {}
    remaining = sum(len(v) for v in left.values())
    data = {"remaining": {k: sorted(v) for k, v in sorted(left.items())}, "count": remaining,
            "nodes_left": sorted(left)}
    progress = f"{remaining} VolumeAttachment(s) left on {len(left)} node(s)"
    if not remaining:
        return Result(data=data, progress=progress,
                      message=f"no VolumeAttachment names any of the {len(p.nodes)} nodes")
    started = datetime.fromisoformat(str(plan.data.get("started_at") or env.now_iso()))
    now = env.ctx.clock.now()
    deadline = started + timedelta(seconds=p.timeout)
    gone_only = set(left) <= set(p.gone)
    if gone_only:
        since = (env.ctx.last_result or {}).get("gone_only_since") if env.ctx.poll else None
        first = str(since or now.isoformat())
        data["gone_only_since"] = first
        deadline = max(deadline, datetime.fromisoformat(first) + timedelta(seconds=GONE_WAIT_SECONDS))
    if now >= deadline:
        raise PermanentError(
            f"{remaining} VolumeAttachment(s) on {len(left)} node(s) remain after "
            f"{(now - started).total_seconds():.0f}s ({', '.join(sorted(left)[:5])}): the EC2 "
            "check decides whether a forced detach is needed", service="kubernetes",
            operation="wait_detached", code="Timeout")
    if gone_only:
        progress += (" on nodes deleted during the run: the attach/detach controller detaches "
                     "them after its 6-minute wait")
        retry = min(GONE_POLL_SECONDS, max(1.0, (deadline - now).total_seconds()))
    else:
        retry = poll_interval(started=started, now=now, deadline=deadline)
    env.ctx.progress = progress
    return Result(data=data, done=False, progress=progress, retry_after=retry)


# -- what EC2 still holds ---------------------------------------------------------------------

def plan_held(p: ZoneHeldParams, env: Env) -> Plan:
    return Plan(action="k8s.zone.held_volumes", params={})


def apply_held(plan: Plan, p: ZoneHeldParams, env: Env) -> Result:
    if not p.instance_ids:
        return Result(data={"items": [], "volume_ids": [], "count": 0, "instance_ids": []})
    vols = env.ec2.describe_volumes(filters=[{"Name": "attachment.instance-id",
                                              "Values": sorted(p.instance_ids)}])
    wanted = set(p.nodes)
    held_pvs = {str(((v.get("spec") or {}).get("source") or {}).get("persistentVolumeName"))
                for v in env.kube.list_volume_attachments()
                if va_node(v) in wanted and not terminating(v)}
    items = []
    for vid, vol in sorted(vols.items()):
        pv = pv_named_by_tags(ec2_tags(vol))
        if pv is None or pv in held_pvs:  # the root volume, or Kubernetes still holds it
            continue
        for a in vol.get("Attachments") or ():
            if a.get("InstanceId") in p.instance_ids:
                items.append({"volume_id": vid, "instance_id": a.get("InstanceId"), "pv": pv,
                              "state": a.get("State")})
    return Result(data={"items": items, "volume_ids": [i["volume_id"] for i in items],
                        "count": len(items), "instance_ids": sorted(p.instance_ids)})


# -- what the nodes deleted during the run left behind -----------------------------------------

def plan_leftover(p: ZoneLeftoverParams, env: Env) -> Plan:
    return Plan(action="k8s.zone.leftover_attachments", params={})


def apply_leftover(plan: Plan, p: ZoneLeftoverParams, env: Env) -> Result:
    """VolumeAttachments still naming nodes that no longer exist, and not being deleted: what the
    attach/detach controller did not let go of after its timeout (``k8s.volumeattachment.delete``,
    behind interlock 10, may DELETE them; never a finalizer edit)."""
    present = {node_name(n) for n in env.kube.list_nodes()} if p.nodes else set()
    gone = set(p.nodes) - present
    items = [{"name": str(meta(v)["name"]), "node": va_node(v)}
             for v in (env.kube.list_volume_attachments() if gone else [])
             if va_node(v) in gone and not terminating(v)]
    return Result(data={"items": items, "names": [i["name"] for i in items], "count": len(items)},
                  message=f"{len(items)} VolumeAttachment(s) left on {len(gone)} deleted node(s)")


# -- did the pods come back, and if not, why --------------------------------------------------

def plan_placement(p: ZonePlacementParams, env: Env) -> Plan:
    return Plan(action="k8s.zone.placement", params={})


def apply_placement(plan: Plan, p: ZonePlacementParams, env: Env) -> Result:
    dead = set(p.nodes)
    # the nodes, read once a claim has a pod (is its node Ready?) or has none (why not?)
    nodes = _NodesOnDemand(env)
    pods = env.kube.list_pods() if p.pvs else []
    by_claim = _claims_of(env.kube.list_pvs() if p.pvs else [], set(p.pvs))
    users: dict[str, list[Obj]] = {}
    for each in pods:
        for c in pod_claims(each):
            users.setdefault(c, []).append(each)
    items = [_placement_item(claim, by_claim.get(claim), users.get(claim, []), dead=dead,
                             left=set(p.left), nodes=nodes) for claim in sorted(by_claim)]
    _check_volumes(env, items)
    waiting = [i["claim"] for i in items if i["outcome"] != "running"]
    blocked = [i["claim"] for i in items if i["outcome"] == "blocked"]
    return Result(data={"items": items, "total": len(items), "running": len(items) - len(waiting),
                        "waiting": waiting, "blocked": blocked},
                  progress=f"{len(items) - len(waiting)} of {len(items)} claims in use again")


class _NodesOnDemand:
    """The list of nodes, read the first time it is asked for, and only then."""

    def __init__(self, env: Env) -> None:
        self._env = env
        self._nodes: list[Obj] | None = None

    def __call__(self) -> list[Obj]:
        if self._nodes is None:
            self._nodes = self._env.kube.list_nodes()
        return self._nodes


def _claims_of(pvs: list[Obj], wanted: set[str]) -> dict[str, Obj]:
    """The wanted PVs by the claim bound to each (namespace/name)."""
    by_claim: dict[str, Obj] = {}
    for one in pvs:
        ref = (one.get("spec") or {}).get("claimRef") or {}
        if ref.get("name") and node_name(one) in wanted:
            by_claim[f"{ref.get('namespace')}/{ref['name']}"] = one
    return by_claim


def _placement_item(claim: str, pv: Obj | None, users: list[Obj], *, dead: set[str],
                    left: set[str], nodes: _NodesOnDemand) -> Obj:
    """One claim: its pod runs on a live node, or why not (a local volume: on its node alone)."""
    zone = pv_zone(pv) if pv else None
    live = [q for q in users if not terminating(q)]
    pod = live[0] if live else None
    where = (pod or {}).get("spec", {}).get("nodeName")
    phase = ((pod or {}).get("status") or {}).get("phase")
    item = {"claim": claim, "pod": f"{meta(pod).get('namespace')}/{node_name(pod)}" if pod else None,
            "node": where, "phase": phase, "volume_zone": zone,
            "volume_id": ebs_volume_id_of_pv(pv) if pv else None, "local": None}
    kind = local_kind(pv) if pv is not None else None
    on_node = None
    if pv is not None and kind is not None:  # its pod can run on one node alone
        on_node = zone_local.placement(pv, pod=pod, dead=dead, nodes=nodes())
    if on_node is not None:
        item["local"] = kind
        item["outcome"], item["reason"] = on_node
    elif pod is not None and where in left:
        item["outcome"], item["reason"] = _on_left_node(str(where), phase, nodes())
    elif pod is not None and phase == "Running" and where not in dead:
        item["outcome"], item["reason"] = _on_live_node(pod, str(where), nodes())
    else:
        item["outcome"], item["reason"] = _why_not(claim, zone, pod, nodes(), dead)
    return item


def _on_live_node(pod: Obj, where: str, nodes: list[Obj]) -> tuple[str, str]:
    """A claim whose pod runs on a node outside the outage: in use again once the pod is Ready
    on a node that is Ready. A node posting Ready=False starts nothing new, and its not-ready
    taint evicts the pod within minutes; a pod not Ready yet serves no one."""
    node = next((n for n in nodes if node_name(n) == where), None)
    if node is None or ready_condition(node)[0] != "True":
        return "waiting", f"its pod runs on {where}, which is not Ready"
    if ready_condition(pod)[0] != "True":
        return "waiting", f"its pod runs on {where} but is not Ready yet (its readiness probes)"
    return "running", f"running on {where}"


def _on_left_node(where: str, phase: str | None, nodes: list[Obj]) -> tuple[str, str]:
    """A claim whose pod is on a node the run left as it was: running if that node is Ready
    again, else blocked on the node (never a wait that can only time out)."""
    node = next((n for n in nodes if node_name(n) == where), None)
    if phase == "Running" and node is not None and ready_condition(node)[0] == "True":
        return "running", f"running on {where}, which is Ready again"
    return "blocked", (
        f"its pod is on {where}, which this run did not put out of service (its outcome is in "
        "the summary): the volume stays there until that node comes back or is fenced (re-run "
        "this runbook, or node-dead-ngns for it)")


def _check_volumes(env: Env, items: list[Obj]) -> None:
    """What EC2 says of the claims' volumes, before a claim is called recovered: EBS's status
    checks (one DescribeVolumeStatus; ``impaired``, its ``io-enabled`` check failed, means EBS
    disabled its I/O after a host failure: blocked until someone checks the data), and, for the
    claims not running yet, who holds each volume (one DescribeVolumes, one DescribeInstances): a
    volume still attached to a machine stuck ``stopping`` waits for that machine, not for time."""
    vids = sorted({str(i["volume_id"]) for i in items if i.get("volume_id")})
    if not vids:
        return
    status = env.ec2.describe_volume_status(vids)
    for i in items:
        st = status.get(str(i.get("volume_id"))) or {}
        vs = st.get("VolumeStatus") or {}
        i["volume_status"] = vs.get("Status")
        if vs.get("Status") == "impaired":
            failed = [d.get("Name") for d in vs.get("Details") or () if d.get("Status") == "failed"]
            i["outcome"], i["reason"] = "blocked", (
                f"its EBS volume {i['volume_id']} is impaired ({', '.join(failed) or 'status check'}"
                " failed): EBS disabled its I/O because its data may be inconsistent after the "
                "host failure. Check the data (a file-system check from the pod, or a snapshot), "
                "then enable I/O (aws ec2 enable-volume-io) before trusting it")
    late = sorted({str(i["volume_id"]) for i in items
                   if i["outcome"] != "running" and i.get("volume_id")})
    vols = env.ec2.describe_volumes(late) if late else {}
    holders = sorted({str(a.get("InstanceId")) for v in vols.values()
                      for a in v.get("Attachments") or () if a.get("InstanceId")})
    states = {k: instance_state(v) for k, v in env.ec2.describe_instances(holders).items()} \
        if holders else {}
    for i in items:
        if i["outcome"] == "running" or i.get("volume_status") == "impaired":
            continue
        for a in (vols.get(str(i.get("volume_id"))) or {}).get("Attachments") or ():
            iid = str(a.get("InstanceId"))
            if states.get(iid) == "stopping":
                i["outcome"], i["reason"] = "blocked", (
                    f"its EBS volume {i['volume_id']} is held by instance {iid}, stuck stopping "
                    "(a failed host keeps its volumes attached): ask AWS to complete the stop, or "
                    "have two people break glass on tainting the stuck node, then on a forced "
                    "detach")


def _why_not(claim: str, zone: str | None, pod: Obj | None, nodes: list[Obj],
             dead: set[str]) -> tuple[str, str]:
    """Why the pod of ``claim`` does not run yet: waiting (on its way) or blocked (needs a person)."""
    in_zone = [n for n in nodes if zone_of_node(n) == zone] if zone else []
    usable = [n for n in in_zone if node_name(n) not in dead and ready_condition(n)[0] == "True"
              and not (n.get("spec") or {}).get("unschedulable")]
    groups = groups_of(in_zone)
    if pod is None:
        return "waiting", "no pod uses the claim yet (its controller recreates it)"
    if zone and not usable:
        add = (f"add capacity in {zone}: scale {', '.join(groups)}" if groups
               else f"add a node in {zone} (no node group or NodePool is labelled there)")
        return "blocked", (
            f"its EBS volume is in {zone}, where no Ready, schedulable node is left: an EBS "
            f"volume cannot leave its zone. {add}; or snapshot the volume (aws.ec2.volume.snapshot) "
            "and restore it as a new volume in another zone, then bind the claim to it")
    reason = ((pod.get("status") or {}).get("reason")
              or next((c.get("message") for c in (pod.get("status") or {}).get("conditions") or ()
                       if c.get("type") == "PodScheduled" and c.get("status") == "False"), None))
    where = (pod.get("spec") or {}).get("nodeName")
    text = f"{((pod.get('status') or {}).get('phase') or 'Pending')}"
    text += f" on {where}" if where else ", not scheduled yet"
    return "waiting", text + (f": {reason}" if reason else "") + (
        f" ({len(usable)} node(s) in {zone} can take it)" if zone else "")


ACTIONS: tuple[ActionSpec[Any], ...] = (
    action("k8s.zone.survey", ZoneSurveyParams, destructive=False,
           summary="Find the NotReady nodes of zone {{ zone }}",
           description="The NotReady nodes of one zone (or the ones named, all of which must be in "
                       "it), each instance's state in one DescribeInstances, their "
                       "VolumeAttachments and claims; nodes already out of service are done.",
           plan=plan_survey, apply=apply_survey),
    action("k8s.zone.wait_detached", ZoneWaitParams, destructive=False,
           summary="Wait for the VolumeAttachments of {{ nodes | length }} node(s) to go",
           description="Waits for all the nodes' VolumeAttachments together, one list per poll.",
           plan=plan_wait_detached, apply=apply_wait_detached),
    action("k8s.zone.held_volumes", ZoneHeldParams, destructive=False,
           summary="List data volumes EC2 still attaches to {{ instance_ids | length }} instance(s)",
           description="EBS volumes of PVs (by the driver's tags) that EC2 still attaches to the "
                       "instances though no VolumeAttachment on their nodes holds them: one "
                       "DescribeVolumes for all.",
           plan=plan_held, apply=apply_held),
    action("k8s.zone.leftover_attachments", ZoneLeftoverParams, destructive=False,
           summary="List the VolumeAttachments left on {{ nodes | length }} deleted node(s)",
           description="VolumeAttachments that still name nodes deleted during the run (replaced "
                       "by their node group) and are not being deleted: one node list and one "
                       "VolumeAttachment list.",
           plan=plan_leftover, apply=apply_leftover),
    action("k8s.zone.placement", ZonePlacementParams, destructive=False,
           summary="Check the pods of the claims of {{ pvs | length }} volume(s) run again",
           description="Per claim: its pod runs on a live node, or why not, naming the node groups "
                       "or NodePools that can add capacity in the volume's zone, or the snapshot "
                       "path to another zone.",
           plan=plan_placement, apply=apply_placement),
)
