"""Actions over the dead nodes of one availability zone, in batches, with one outcome per node.

When a zone fails, tens of nodes die at once. These actions take a list of nodes and read the
world once for all of them (one node list, one DescribeInstances, one VolumeAttachment list per
poll), so the reads do not grow with the number of nodes, and one approval covers a whole batch.

- ``k8s.zone.survey`` finds the NotReady nodes of the zone (or checks the ones named) and what each
  one holds; nodes already out of service are reported done, so a re-run picks up what is left,
  and a node whose kubelet is alive (its Lease renewed: rule 8's "sick") is left alone.
- ``k8s.zone.fence_taint`` fences a batch (one ``StopInstances`` for the instances still running)
  and taints it out-of-service. Its plan lists every node, instance and change; each node has its
  own hash in ``data["batch"]``, so a node whose facts change before apply (it came back Ready,
  its instance was started) is dropped from the batch and the rest apply as approved
  (``bot.engine.plan.narrowed``). A node that cannot be fenced (a Spot instance) fails alone.
- ``k8s.zone.wait_detached`` waits for the VolumeAttachments of all the nodes together.
- ``k8s.zone.held_volumes`` lists the data volumes EC2 still attaches to their instances although
  Kubernetes let go of them: what a forced detach (``aws.ec2.volume.detach``) may free.
- ``k8s.zone.placement`` says, per claim, whether its pod runs again, or why it cannot: an EBS
  volume lives in one zone, so its pod needs a node in that zone.

The interlocks are the shipped ones, fed by the batch's reads: zone-scope (9) for every node,
fence-live (8) for every instance stopped (one list of the node Leases and one
DescribeInstanceStatus for the batch), oos-taint (1) for every node tainted, and blast-radius
(5) for the whole batch, whose break-glass names how many nodes it allows.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from datetime import datetime
from typing import Any

from bot.actions import interlocks as il
from bot.actions.declarations import (
    ZoneBatchParams,
    ZoneHeldParams,
    ZonePlacementParams,
    ZoneSurveyParams,
    ZoneWaitParams,
)
from bot.actions.env import Env
from bot.actions.liveness import SICK, classify
from bot.actions.objects import (
    FENCED_STATES,
    OUT_OF_SERVICE_TAINT,
    Obj,
    csi_instance_id_of,
    ebs_volume_id_of_pv,
    ec2_tags,
    has_taint,
    instance_id_of,
    instance_state,
    meta,
    nodes_of_instance,
    operator_of,
    pod_claims,
    pv_named_by_tags,
    pv_zone,
    ready_condition,
    set_taint,
    terminating,
    va_node,
    zone_of_node,
)
from bot.actions.registry import ActionSpec, action
from bot.engine.plan import Change, Fact, Plan, Result, canonical_json
from bot.errors import InterlockBlocked, PermanentError

POLL_SECONDS = 15.0
TAINT_VALUE = "nodeshutdown"
TAINT_EFFECT = "NoExecute"
GROUP_LABELS = (("eks.amazonaws.com/nodegroup", "node group"), ("karpenter.sh/nodepool", "NodePool"))
SPOT_LABELS = (("karpenter.sh/capacity-type", "spot"), ("eks.amazonaws.com/capacityType", "SPOT"))
# EC2 answers that refuse the whole StopInstances call for one instance in it
ONE_REFUSES_ALL = frozenset({"UnsupportedOperation", "OperationNotPermitted",
                             "IncorrectInstanceState", "UnsupportedInstanceAttribute"})


def _name(node: Obj) -> str:
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


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:32]


# -- survey -----------------------------------------------------------------------------------

def plan_survey(p: ZoneSurveyParams, env: Env) -> Plan:
    return Plan(action="k8s.zone.survey", params={})


def apply_survey(plan: Plan, p: ZoneSurveyParams, env: Env) -> Result:
    nodes = env.kube.list_nodes()
    if p.nodes:
        il.check_zone(env, zone=p.zone, named=p.nodes, nodes=nodes, facts=[])
    wanted = set(p.nodes or ())
    in_zone = [n for n in nodes if zone_of_node(n) == p.zone and (not wanted or _name(n) in wanted)]
    dead = [n for n in in_zone if ready_condition(n)[0] != "True"]
    ids = [i for i in (instance_id_of(n) for n in dead) if i]
    instances = env.ec2.describe_instances(ids) if ids else {}
    vas = env.kube.list_volume_attachments() if dead else []
    # a NotReady node whose kubelet is alive (rule 8's "sick") is no part of a zone outage
    leases = {_name(x): x for x in env.kube.list_node_leases()} if dead else {}
    now, grace = env.ctx.clock.now(), env.settings.policy.node_monitor_grace_period
    items: list[Obj] = []
    todo, done, skipped, pvs, todo_ids = [], [], [], [], []
    for n in sorted(in_zone, key=_name):
        name, iid = _name(n), instance_id_of(n)
        inst = instances.get(iid) if iid else None
        mine = sorted(str(pv) for v in vas if va_node(v) == name
                      if (pv := ((v.get("spec") or {}).get("source") or {}).get("persistentVolumeName")))
        item = {"node": name, "instance_id": iid, "state": instance_state(inst) if iid else None,
                "ready": ready_condition(n)[0] == "True", "spot": is_spot(n, inst),
                "out_of_service": has_taint(n, OUT_OF_SERVICE_TAINT),
                "volume_attachments": len(mine), "pvs": mine, "groups": groups_of([n])}
        if item["ready"]:
            item["outcome"], item["reason"] = "skipped", "the node is Ready"
            skipped.append(name)
        elif iid is None:
            item["outcome"], item["reason"] = "skipped", "no EC2 instance in its providerID (Fargate?)"
            skipped.append(name)
        elif (lv := classify(node=n, lease=leases.get(name), instance=inst, status=None,
                             now=now, grace=grace)).verdict == SICK:
            item["outcome"], item["reason"] = "skipped", f"not dead: {lv.words()}"
            skipped.append(name)
        elif item["out_of_service"] and item["state"] in FENCED_STATES:
            item["outcome"], item["reason"] = "done", "already out of service, instance " + str(item["state"])
            done.append(name)
        else:
            item["outcome"], item["reason"] = "to do", f"NotReady, instance {item['state']}"
            todo.append(name)
        if item["outcome"] != "skipped":
            pvs += mine
            todo_ids.append(iid)
        items.append(item)
    # instances still running first: they are fenced in as few batches (and stop waits) as can be
    running = {i["node"] for i in items if i["state"] not in FENCED_STATES}
    todo.sort(key=lambda name: (name not in running, name))
    if p.max_nodes is not None and len(todo) > p.max_nodes:
        raise PermanentError(
            f"{len(todo)} NotReady nodes in {p.zone} need recovery, more than max_nodes="
            f"{p.max_nodes}: a larger outage than expected. Check it is really one zone, then "
            f"start again with max_nodes={len(todo)} (or name the nodes)",
            service="kubernetes", operation="list_node", code="TooManyNodes")
    return Result(data={"zone": p.zone, "items": items, "todo": todo, "done": done,
                        "skipped": skipped, "pvs": sorted(set(pvs)),
                        "instance_ids": sorted(i for i in todo_ids if i), "count": len(todo)},
                  message=f"{len(todo)} node(s) of {p.zone} to recover, {len(done)} already out of "
                          f"service, {len(skipped)} left alone")


# -- fence and taint, one batch ---------------------------------------------------------------

class _Batch:
    """One read of the batch's world: every node, and the batch's instances in one call."""

    def __init__(self, env: Env, p: ZoneBatchParams, facts: list[Fact]) -> None:
        self.nodes = env.kube.list_nodes()
        il.check_zone(env, zone=p.zone, named=p.nodes, nodes=self.nodes, facts=facts)
        by_name = {_name(n): n for n in self.nodes}
        self.batch = [by_name[n] for n in p.nodes]
        ids = [i for i in (instance_id_of(n) for n in self.batch) if i]
        self.instances = env.ec2.describe_instances(ids) if ids else {}
        # rule 8's evidence for the machines a fence would stop: one read of each for the batch
        live = [i for i in ids if instance_state(self.instances.get(i)) not in FENCED_STATES
                and i in self.instances]
        self.statuses = env.ec2.describe_instance_status(live) if live else {}
        self.leases = {_name(lease): lease for lease in env.kube.list_node_leases()} if live else {}


def _assess(env: Env, b: _Batch, node: Obj, facts: list[Fact]) -> tuple[list[Change], str | None]:
    """The changes one node needs, or why it is left out of the batch."""
    name, iid = _name(node), instance_id_of(node)
    status, _ = ready_condition(node)
    inst = b.instances.get(iid) if iid else None
    state = instance_state(inst)
    tainted = has_taint(node, OUT_OF_SERVICE_TAINT)
    facts.append(env.fact(f"node {name}", "out_of_service", tainted))
    changes: list[Change] = []
    if iid is None:
        return [], "no EC2 instance in its providerID: the bot cannot confirm it is off"
    csi = csi_instance_id_of(node)
    if csi is not None and csi != iid:
        return [], f"its providerID names {iid} but its EBS CSI registration {csi}"
    if state in FENCED_STATES or state == "absent":
        facts.append(env.fact(f"node {name}", "ready", status))
        facts.append(env.fact(f"instance {iid}", "state", state))
        if status == "True":
            return [], "the node came back Ready"
        if state == "absent":
            return [], f"instance {iid} is unknown to EC2"
    else:
        mine = nodes_of_instance(b.nodes, iid)
        refusal = il.fence_problems(env, instance_id=iid, instance=inst,
                                    checks=b.statuses.get(iid) or {}, nodes=mine,
                                    leases={_name(n): b.leases.get(_name(n)) for n in mine},
                                    facts=facts)
        if refusal:
            return [], refusal.text()
        if state == "shutting-down":
            return [], f"instance {iid} is shutting down: re-run once it is terminated"
        if operator_of(inst):
            return [], (f"instance {iid} is an EKS Auto Mode machine ({operator_of(inst)} manages "
                        "it), which EC2 lets only EKS stop or terminate: fence it on its own "
                        "(node-dead-ngns deletes its NodeClaim)")
        if is_spot(node, inst):
            return [], (f"instance {iid} is a Spot instance, which StopInstances cannot stop: "
                        "fence it on its own (node-dead-ngns)")
        changes.append(Change(target_kind="Instance", target=iid, operation="force-stop",
                              before=state, after="stopped"))
    if not tainted:
        changes.append(Change(target_kind="Node", target=name, operation="taint", before="",
                              after=f"{OUT_OF_SERVICE_TAINT}={TAINT_VALUE}:{TAINT_EFFECT}"))
    return changes, None


def plan_fence_taint(p: ZoneBatchParams, env: Env) -> Plan:
    facts: list[Fact] = []
    b = _Batch(env, p, facts)
    changes: list[Change] = []
    items: dict[str, str] = {}
    dropped: dict[str, str] = {}
    nodes: dict[str, Obj] = {}
    for node in b.batch:
        mine: list[Fact] = []
        ch, problem = _assess(env, b, node, mine)
        facts += mine
        name = _name(node)
        if problem is not None:
            dropped[name] = problem
            continue
        changes += ch
        items[name] = _digest({"changes": [asdict(c) for c in ch],
                               "facts": [[f.subject, f.name, f.value] for f in mine]})
        nodes[name] = {"instance_id": instance_id_of(node),
                       "stop": any(c.operation == "force-stop" for c in ch),
                       "state": instance_state(b.instances.get(instance_id_of(node) or ""))}
    others = il.check_blast_radius(env, targets=list(items), nodes=b.nodes, facts=facts) \
        if items else []
    common = _digest({"zone": p.zone, "others": others})
    return Plan(action="k8s.zone.fence_taint", params={}, changes=tuple(changes),
                facts=tuple(facts),
                data={"batch": {"common": common, "items": items, "dropped": dropped},
                      "nodes": nodes})


def _stop(env: Env, ids: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """One StopInstances for all; when EC2 refuses the call for one of them, each alone, so one
    instance that cannot be stopped fails by itself. Returns (states now, failures)."""
    states: dict[str, str] = {}
    failed: dict[str, str] = {}

    def record(resp: Obj) -> None:
        for row in resp.get("StoppingInstances") or ():
            states[str(row.get("InstanceId"))] = str((row.get("CurrentState") or {}).get("Name"))

    try:
        record(env.ec2.stop_instances(ids, force=True))
        return states, failed
    except PermanentError as e:
        if e.code not in ONE_REFUSES_ALL or len(ids) == 1:
            if e.code in ONE_REFUSES_ALL:
                failed[ids[0]] = f"{e.code}: {e}"
                return states, failed
            raise
    for iid in ids:
        try:
            record(env.ec2.stop_instances([iid], force=True))
        except PermanentError as e:
            if e.code not in ONE_REFUSES_ALL:
                raise
            failed[iid] = f"{e.code}: {e}"
    return states, failed


def apply_fence_taint(plan: Plan, p: ZoneBatchParams, env: Env) -> Result:
    approved: dict[str, Obj] = dict(plan.data.get("nodes") or {})
    batch_info = plan.data.get("batch") or {}
    stopping = _stops_under_way(env, approved)
    if stopping is not None:
        return stopping
    outcomes: dict[str, Obj] = {
        n: {"node": n, "instance_id": None, "outcome": "dropped", "reason": why}
        for n, why in (batch_info.get("dropped") or {}).items()}
    # live reads, never the plan's facts: a node may have come back since approval
    b = _Batch(env, p, [])
    ok: list[Obj] = []
    for node in b.batch:
        name = _name(node)
        if name not in approved:
            continue
        _, problem = _assess(env, b, node, [])
        iid = instance_id_of(node)
        if problem is not None:
            outcomes[name] = {"node": name, "instance_id": iid, "outcome": "dropped",
                              "reason": f"changed since approval: {problem}"}
        else:
            ok.append(node)
    states = {i: instance_state(b.instances.get(i)) for i in (instance_id_of(n) for n in ok) if i}
    # a plain stop someone began on a hung guest never ends: 'stopping' is forced too. Polls
    # while this batch's own stops are under way never get here (_stops_under_way)
    planned = {str(v["instance_id"]) for v in approved.values() if v.get("stop")}
    to_stop = sorted(i for i, s in states.items()
                     if s == "running" or (s == "stopping" and i in planned))
    if to_stop:
        now, failed = _stop(env, to_stop)
        states.update(now)
        for node in list(ok):
            iid = instance_id_of(node)
            if iid in failed:
                ok.remove(node)
                outcomes[_name(node)] = {"node": _name(node), "instance_id": iid,
                                         "outcome": "failed",
                                         "reason": f"instance could not be stopped: {failed[iid]}"}
    waiting = [n for n in ok if states.get(instance_id_of(n) or "") not in FENCED_STATES]
    if waiting:
        fenced = len(ok) - len(waiting)
        progress = f"{fenced} of {len(ok)} instances stopped"
        env.ctx.progress = progress
        return Result(data=_summary(outcomes, ok, states), done=False, progress=progress,
                      retry_after=POLL_SECONDS)
    if ok:
        il.check_blast_radius(env, targets=[_name(n) for n in ok], nodes=b.nodes, facts=[])
    for node in ok:
        name, iid = _name(node), instance_id_of(node)
        if has_taint(node, OUT_OF_SERVICE_TAINT):
            outcomes[name] = {"node": name, "instance_id": iid, "outcome": "done",
                              "reason": f"already out of service, instance {states.get(iid or '')}"}
            continue
        outcomes[name] = _taint(env, node, b)
    changed = [o for o in outcomes.values() if o["outcome"] == "tainted"]
    data = _summary(outcomes, ok, states)
    if changed or any(o["outcome"] == "done" for o in outcomes.values()):
        data["compensation"] = (f"out-of-service taint and stopped instances stay on "
                                f"{len(data['out_of_service'])} node(s) of {p.zone}: run "
                                "node-recovered on each once it is repaired and Ready")
    counts = {k: sum(1 for o in outcomes.values() if o["outcome"] == k)
              for k in ("tainted", "done", "dropped", "failed")}
    return Result(data=data, already_done=not changed and not to_stop,
                  message=", ".join(f"{v} {k}" for k, v in counts.items() if v) or "nothing to do")


def _stops_under_way(env: Env, approved: dict[str, Obj]) -> Result | None:
    """While the stops this batch made are under way (an instance ``stopping``, none left
    ``running``), a poll reads the instances alone: nothing is written until they are stopped,
    and the taints then read everything live again."""
    ids = sorted(str(v["instance_id"]) for v in approved.values() if v.get("stop"))
    if not ids or any(v.get("state") == "stopping" for v in approved.values() if v.get("stop")):
        return None  # someone else's stop was under way at plan time: it is forced at every apply
    states = {i: instance_state(inst) for i, inst in env.ec2.describe_instances(ids).items()}
    if "stopping" not in states.values() or "running" in states.values() \
            or "pending" in states.values() or len(states) != len(ids):
        return None
    fenced = sum(1 for s in states.values() if s in FENCED_STATES)
    progress = f"{fenced} of {len(ids)} fenced instances stopped"
    env.ctx.progress = progress
    return Result(data={"items": [], "stopping": sorted(i for i, s in states.items()
                                                        if s == "stopping")},
                  done=False, progress=progress, retry_after=POLL_SECONDS)


def _taint(env: Env, node: Obj, b: _Batch) -> Obj:
    """Taint one node of the batch; a refusal or failure is that node's outcome alone."""
    name, iid = _name(node), instance_id_of(node)
    try:
        il.check_out_of_service_taint(env, node=node, facts=[], instances=b.instances)
        recheck = il.Rechecked(env, node, lambda live: il.check_out_of_service_taint(
            env, node=live, facts=[], instances=b.instances))

        def mutate(obj: Obj) -> Obj | None:
            if has_taint(obj, OUT_OF_SERVICE_TAINT):
                return None
            recheck(obj)
            return set_taint(obj, key=OUT_OF_SERVICE_TAINT, value=TAINT_VALUE,
                             effect=TAINT_EFFECT, now=env.now_iso())

        written, changed = env.kube.update(kind="Node", name=name, mutate=mutate, current=node)
    except InterlockBlocked as e:
        return {"node": name, "instance_id": iid, "outcome": "dropped",
                "reason": f"interlock {e.rule}: {e.message}"}
    except PermanentError as e:
        return {"node": name, "instance_id": iid, "outcome": "failed", "reason": str(e)}
    if not has_taint(written, OUT_OF_SERVICE_TAINT):
        return {"node": name, "instance_id": iid, "outcome": "failed",
                "reason": "the taint is not on the node after the write"}
    return {"node": name, "instance_id": iid, "outcome": "tainted" if changed else "done",
            "reason": "fenced and out of service" if changed else "already out of service"}


def _summary(outcomes: dict[str, Obj], ok: list[Obj], states: dict[str, str]) -> Obj:
    for node in ok:
        outcomes.setdefault(_name(node), {"node": _name(node), "instance_id": instance_id_of(node),
                                          "outcome": "fencing",
                                          "reason": f"instance {states.get(instance_id_of(node) or '')}"})
    for o in outcomes.values():
        if o.get("instance_id") in states:
            o["state"] = states[o["instance_id"]]
    items = [outcomes[k] for k in sorted(outcomes)]
    return {"items": items,
            "out_of_service": [o["node"] for o in items if o["outcome"] in ("tainted", "done")],
            "stopped": sorted(o["instance_id"] for o in items
                              if o["outcome"] in ("tainted", "done") and o.get("instance_id")),
            "dropped": [o["node"] for o in items if o["outcome"] == "dropped"],
            "failed": [o["node"] for o in items if o["outcome"] == "failed"]}


# -- waiting for all the nodes' attachments together ------------------------------------------

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
    wait = p.timeout - (env.ctx.clock.now() - started).total_seconds()
    if wait <= 0:
        raise PermanentError(
            f"{remaining} VolumeAttachment(s) on {len(left)} node(s) remain after {p.timeout:.0f}s "
            f"({', '.join(sorted(left)[:5])}): the EC2 check decides whether a forced detach is "
            "needed", service="kubernetes", operation="wait_detached", code="Timeout")
    env.ctx.progress = progress
    return Result(data=data, done=False, progress=progress, retry_after=min(10.0, wait))


# -- what EC2 still holds ---------------------------------------------------------------------

def plan_held(p: ZoneHeldParams, env: Env) -> Plan:
    return Plan(action="k8s.zone.held_volumes", params={})


def apply_held(plan: Plan, p: ZoneHeldParams, env: Env) -> Result:
    if not p.instance_ids:
        return Result(data={"items": [], "volume_ids": [], "count": 0})
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
                        "count": len(items)})


# -- did the pods come back, and if not, why --------------------------------------------------

def plan_placement(p: ZonePlacementParams, env: Env) -> Plan:
    return Plan(action="k8s.zone.placement", params={})


def apply_placement(plan: Plan, p: ZonePlacementParams, env: Env) -> Result:
    dead = set(p.nodes)
    nodes = env.kube.list_nodes()
    pods = env.kube.list_pods() if p.pvs else []
    wanted = set(p.pvs)
    by_claim: dict[str, Obj] = {}
    for one in env.kube.list_pvs() if p.pvs else []:
        ref = (one.get("spec") or {}).get("claimRef") or {}
        if ref.get("name") and _name(one) in wanted:
            by_claim[f"{ref.get('namespace')}/{ref['name']}"] = one
    users: dict[str, list[Obj]] = {}
    for each in pods:
        for c in pod_claims(each):
            users.setdefault(c, []).append(each)
    items = []
    for claim in sorted(by_claim):
        pv = by_claim.get(claim)
        zone = pv_zone(pv) if pv else None
        live = [q for q in users.get(claim, []) if not terminating(q)]
        pod = live[0] if live else None
        where = (pod or {}).get("spec", {}).get("nodeName")
        phase = ((pod or {}).get("status") or {}).get("phase")
        item = {"claim": claim, "pod": f"{meta(pod).get('namespace')}/{_name(pod)}" if pod else None,
                "node": where, "phase": phase, "volume_zone": zone,
                "volume_id": ebs_volume_id_of_pv(pv) if pv else None}
        if pod is not None and phase == "Running" and where not in dead:
            item["outcome"], item["reason"] = "running", f"running on {where}"
        else:
            item["outcome"], item["reason"] = _why_not(claim, zone, pod, nodes, dead)
        items.append(item)
    waiting = [i["claim"] for i in items if i["outcome"] != "running"]
    blocked = [i["claim"] for i in items if i["outcome"] == "blocked"]
    return Result(data={"items": items, "total": len(items), "running": len(items) - len(waiting),
                        "waiting": waiting, "blocked": blocked},
                  progress=f"{len(items) - len(waiting)} of {len(items)} claims in use again")


def _why_not(claim: str, zone: str | None, pod: Obj | None, nodes: list[Obj],
             dead: set[str]) -> tuple[str, str]:
    """Why the pod of ``claim`` does not run yet: waiting (on its way) or blocked (needs a person)."""
    in_zone = [n for n in nodes if zone_of_node(n) == zone] if zone else []
    usable = [n for n in in_zone if _name(n) not in dead and ready_condition(n)[0] == "True"
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
    action("k8s.zone.fence_taint", ZoneBatchParams, destructive=True,
           summary="Fence and taint out-of-service {{ nodes | length }} node(s) of {{ zone }}",
           description="One batch: one StopInstances (force) for the instances still running, then "
                       "the out-of-service taint on every node. Nodes whose facts changed since "
                       "approval are dropped; a node that cannot be fenced fails alone.",
           plan=plan_fence_taint, apply=apply_fence_taint),
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
    action("k8s.zone.placement", ZonePlacementParams, destructive=False,
           summary="Check the pods of the claims of {{ pvs | length }} volume(s) run again",
           description="Per claim: its pod runs on a live node, or why not, naming the node groups "
                       "or NodePools that can add capacity in the volume's zone, or the snapshot "
                       "path to another zone.",
           plan=plan_placement, apply=apply_placement),
)
