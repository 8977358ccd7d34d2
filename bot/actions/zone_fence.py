"""One batch of a zone outage: each node's machine fenced and its node tainted on its own clock.

A zone outage fences tens of machines with one approval per batch, but the nodes of a batch do not
share a fate: on a failed host an instance can stay ``stopping`` for hours, the node group can
replace a stopped node within minutes, a Spot machine can only be terminated, and IAM can refuse
one untagged instance. So ``k8s.zone.fence_taint`` gives each node its own small state machine:

- **fence**, once, at the first apply: one ``StopInstances`` (force) for the machines still
  running and one ``TerminateInstances`` for those EC2 cannot stop (Spot, instance-store roots),
  each behind interlock 8 as read at that moment; a call EC2 or IAM refuses for one instance is
  made again per instance, so that one fails alone;
- **taint** a node as soon as its own instance reads ``stopped`` or ``terminated`` (interlock 1
  checked for it then), whatever its batch-mates do;
- **stuck**: an instance still stopping ``stop_timeout`` after the fence is its node's outcome
  ("stuck stopping: host failure?"), with what to do; the others go on. Tainting such a node
  without a confirmed stop is a separate step (``without_stop``) that interlock 1 refuses unless
  two people break glass;
- **held**: a node whose machine rule 8 holds (silent, but EC2 does not confirm it is down yet:
  a kernel hang reads ``running`` with its status checks still ``ok``) is left out of the batch so
  the others go on; a later batch with ``wait_held`` waits for it, planned again by itself every
  ``policy.hold_recheck_seconds``, and fences it once EC2 confirms it is down;
- **gone**: a node the batch named that no longer exists was deleted (its node group, Karpenter
  or the cloud controller replaced it): an outcome, never a zone-scope violation. Interlock 9
  still refuses a node that exists in another zone.

A machine whose pods' data lives on its own disks (instance store, local volumes) is left out of
the batch, named with what it holds (``bot.actions.zone_local``): its fence is one for
``node-dead-ngns``, where one more person reads what is lost. Every refusal of the batch as a whole
(blast radius) comes before its fence; once the apply has written anything, an error on one node
is that node's outcome (a throttled taint is tried again at the next check, until
``stop_timeout``), never an exception that would lose what the batch already did.

The plan gives each node its own hash (``data["batch"]``), so a node whose facts change before
apply is dropped from the batch and the rest apply as approved (``bot.engine.plan.narrowed``).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from bot.actions import interlocks as il
from bot.actions import zone_local
from bot.actions.authoring import (
    FENCED_STATES,
    OUT_OF_SERVICE_TAINT,
    ActionSpec,
    Change,
    Env,
    Fact,
    InterlockBlocked,
    Obj,
    PermanentError,
    Plan,
    Result,
    RetryableError,
    action,
    csi_instance_id_of,
    has_taint,
    instance_id_of,
    instance_state,
    nodes_of_instance,
    operator_of,
    poll_interval,
    ready_condition,
    set_taint,
)
from bot.actions.declarations import ZoneBatchParams
from bot.actions.ec2_views import must_terminate, started_since
from bot.actions.zone import TAINT_EFFECT, TAINT_VALUE, digest, is_spot, node_name

# EC2 (or IAM) answers that refuse a whole StopInstances/TerminateInstances call for one instance
ONE_REFUSES_ALL = frozenset({"UnsupportedOperation", "OperationNotPermitted",
                             "IncorrectInstanceState", "UnsupportedInstanceAttribute",
                             "UnauthorizedOperation"})
MOVING = frozenset({"stopping", "shutting-down"})
FINAL = ("tainted", "done", "dropped", "failed", "gone", "stuck", "held")


class _Batch:
    """One read of the batch's world: every node, and the batch's instances in one call. The
    status checks and Leases rule 8 needs are read only when a machine may be fenced now."""

    def __init__(self, env: Env, p: ZoneBatchParams, facts: list[Fact],
                 extra_ids: tuple[str, ...] = (), only: frozenset[str] | None = None) -> None:
        self.env = env
        self.nodes = env.kube.list_nodes()
        by_name = {node_name(n): n for n in self.nodes}
        # a named node that no longer exists was deleted (replaced): its outcome, not a refusal
        self.gone = [n for n in p.nodes if n not in by_name]
        il.check_zone(env, zone=p.zone, named=[n for n in p.nodes if n in by_name],
                      nodes=self.nodes, facts=facts)
        self.batch = [by_name[n] for n in p.nodes if n in by_name]
        # ``only``: a poll reads the instances of the nodes not settled yet, no others
        ids = sorted({i for i in (instance_id_of(n) for n in self.batch
                                  if only is None or node_name(n) in only) if i} | set(extra_ids))
        self.instances = env.ec2.describe_instances(ids) if ids else {}
        self._statuses: dict[str, Obj] | None = None
        self._leases: dict[str, Obj] | None = None
        self.local = zone_local.BatchLocalData(env, self.batch, self.instances)

    def statuses(self) -> dict[str, Obj]:
        if self._statuses is None:
            live = [i for i, inst in self.instances.items()
                    if instance_state(inst) not in FENCED_STATES]
            self._statuses = self.env.ec2.describe_instance_status(live) if live else {}
        return self._statuses

    def leases(self) -> dict[str, Obj]:
        if self._leases is None:
            self._leases = {node_name(lease): lease for lease in self.env.kube.list_node_leases()}
        return self._leases


class Held(str):
    """Why a node is left out of the batch for now: rule 8 holds its machine, which may be alive,
    until EC2 confirms it is down or the policy's ambiguity window ends (a later step fences it)."""


def _assess(env: Env, b: _Batch, node: Obj, facts: list[Fact], *,
            without_stop: bool = False) -> tuple[list[Change], str | None]:
    """The changes one node needs, or why it is left out of the batch (a ``Held`` reason when
    only time stands in the way)."""
    name, iid = node_name(node), instance_id_of(node)
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
    if state in FENCED_STATES or state == "absent" or (without_stop and state in MOVING) \
            or state == "shutting-down":
        facts.append(env.fact(f"node {name}", "ready", status))
        facts.append(env.fact(f"instance {iid}", "state", state))
        if status == "True":
            return [], "the node came back Ready"
        if state == "absent":
            return [], f"instance {iid} is unknown to EC2"
        if state == "shutting-down":  # its node group terminates it: no fence, its own clock
            facts.append(env.fact(f"instance {iid}", "terminating", True))
    elif without_stop:
        return [], f"instance {iid} is {state}, not stuck stopping: fence it in a batch first"
    else:
        mine = nodes_of_instance(b.nodes, iid)
        refusal = il.fence_problems(env, instance_id=iid, instance=inst,
                                    checks=b.statuses().get(iid) or {}, nodes=mine,
                                    leases={node_name(n): b.leases().get(node_name(n)) for n in mine},
                                    facts=facts)
        if refusal:
            if refusal.hold is not None and not refusal.problems and refusal.foreign is None:
                return [], Held(refusal.hold)
            return [], refusal.text()
        if operator_of(inst):
            return [], (f"instance {iid} is an EKS Auto Mode machine ({operator_of(inst)} manages "
                        "it), which EC2 lets only EKS stop or terminate: fence it on its own "
                        "(node-dead-ngns deletes its NodeClaim)")
        lost = b.local.of(iid, inst)
        if lost:  # shown with the batch's plan; its fence is one for two people who read it
            facts.extend(lost.facts(env))
            return [], zone_local.left_out(lost)
        if is_spot(node, inst) or (inst is not None and must_terminate(inst)):
            why = "Spot" if is_spot(node, inst) else "instance-store root"
            changes.append(Change(target_kind="Instance", target=iid, operation="terminate",
                                  before=state, after=f"terminated ({why}: it cannot be stopped)"))
        else:
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
    # a node deleted before its batch is planned (a later batch of a large outage, after the node
    # group replaced it) is gone, as one deleted mid-batch is: never a node left to re-run for
    gone = {n: ("the Node was deleted before its batch (its node group, Karpenter or the cloud "
                "controller replaced it). Its pods go with it; its volumes detach once the "
                "machine is gone or after the attach/detach controller's 6-minute timeout, and a "
                "VolumeAttachment left after that is deleted later in the run") for n in b.gone}
    nodes: dict[str, Obj] = {}
    held: dict[str, str] = {}
    for node in b.batch:
        mine: list[Fact] = []
        ch, problem = _assess(env, b, node, mine, without_stop=p.without_stop)
        facts += mine
        name = node_name(node)
        if isinstance(problem, Held):
            held[name] = str(problem)
            continue
        if problem is not None:
            dropped[name] = problem
            continue
        changes += ch
        items[name] = digest({"changes": [asdict(c) for c in ch],
                               "facts": [[f.subject, f.name, f.value] for f in mine]})
        nodes[name] = {"instance_id": instance_id_of(node),
                       "stop": any(c.operation == "force-stop" for c in ch),
                       "terminate": any(c.operation == "terminate" for c in ch),
                       "state": instance_state(b.instances.get(instance_id_of(node) or ""))}
    if held and p.wait_held:
        _hold(env, held)
    others = il.check_blast_radius(env, targets=list(items), nodes=b.nodes, facts=facts) \
        if items else []
    common = digest({"zone": p.zone, "others": others})
    return Plan(action="k8s.zone.fence_taint", params={}, changes=tuple(changes),
                facts=tuple(facts),
                data={"batch": {"common": common, "items": items, "dropped": dropped,
                                "gone": gone, "held": held},
                      "nodes": nodes})


def _hold(env: Env, held: dict[str, str]) -> None:
    """``wait_held``: the batch waits, planned again by itself, while rule 8 holds one of its
    machines; once none is held, each is fenced or, past the ambiguity window, dropped."""
    names = sorted(held)
    raise InterlockBlocked(il.RULE_FENCE_WAIT, (
        f"refusing to fence yet: {len(names)} machine(s) may still be alive. "
        + "; ".join(held[n] for n in names[:3])
        + (f"; and {len(names) - 3} more" if len(names) > 3 else "")),
        recheck_after=env.settings.policy.hold_recheck_seconds,
        until="EC2 confirms each machine is down (then it is fenced), its kubelet is back, or it "
              "has been silent for policy.fence_ambiguous_after (then it is left for "
              "node-dead-ngns, where only break-glass fences it)")


def _fence(env: Env, ids: list[str], *, terminate: bool) -> tuple[dict[str, str], dict[str, str]]:
    """One StopInstances (force) or TerminateInstances for all; when EC2 or IAM refuses the call
    for one of them, each alone, so that one fails by itself. Returns (states now, failures)."""
    states: dict[str, str] = {}
    failed: dict[str, str] = {}
    key = "TerminatingInstances" if terminate else "StoppingInstances"

    def call(some: list[str]) -> None:
        resp = (env.ec2.terminate_instances(some) if terminate
                else env.ec2.stop_instances(some, force=True))
        for row in resp.get(key) or ():
            states[str(row.get("InstanceId"))] = str((row.get("CurrentState") or {}).get("Name"))

    try:
        call(ids)
        return states, failed
    except PermanentError as e:
        if e.code not in ONE_REFUSES_ALL:
            raise
        if len(ids) == 1:
            failed[ids[0]] = f"{e.code}: {e}"
            return states, failed
    for iid in ids:  # the others may be fenced already: whatever refuses one is its own outcome
        try:
            call([iid])
        except (PermanentError, RetryableError) as e:
            failed[iid] = f"{e.code or type(e).__name__}: {e}"
    return states, failed


def _outcome(name: str, iid: str | None, outcome: str, reason: str, **more: Any) -> Obj:
    return {"node": name, "instance_id": iid, "outcome": outcome, "reason": reason, **more}


def apply_fence_taint(plan: Plan, p: ZoneBatchParams, env: Env) -> Result:
    approved: dict[str, Obj] = dict(plan.data.get("nodes") or {})
    # a poll follows an apply that returned; an apply the engine tries again after a transient
    # error (a poll with nothing returned before) is still the first: it has not fenced yet
    polling = env.ctx.poll and env.ctx.last_result is not None
    outcomes = _settled(env, plan, polling=polling)
    if polling and not p.without_stop:
        quick = _still_stopping(env, p, approved, outcomes)
        if quick is not None:
            return quick
    unsettled = _unsettled(approved, outcomes, polling=polling)
    # live reads, never the plan's facts: a node may have come back, or gone, since approval. A
    # poll reads only the instances still open, which its quick check above may just have read
    # (then served from this pass, not asked twice)
    b = _Batch(env, p, [], extra_ids=tuple(sorted(set(unsettled.values()))),
               only=frozenset(unsettled) if polling else None)
    _record_gone(b, approved, outcomes)
    now = env.ctx.clock.now()
    deadline = (env.ctx.applying_since or now) + timedelta(seconds=p.stop_timeout)
    pending = _pending(env, p, b, approved, outcomes, polling=polling)
    states = {i: instance_state(b.instances.get(i)) for i in (instance_id_of(n) for n in pending)
              if i}
    first = not polling and not p.without_stop
    fenced = first and _fence_batch(env, b, pending, approved, states, outcomes)
    again = _taint_fenced(env, p, b, pending, states, outcomes, first=first,
                          in_time=now < deadline)
    # one override is one audit event, however many nodes and checks it let through
    env.ctx.overridden[:] = list(dict.fromkeys(env.ctx.overridden))
    if now >= deadline:
        _mark_stuck(p, pending, states, outcomes, again)
    waiting = [n for n in pending if node_name(n) not in outcomes]
    data = _summary(outcomes, waiting, states, again)
    if waiting:
        return _waiting(env, data, waiting, again, now=now, deadline=deadline)
    return _finished(p, data, outcomes, fenced=fenced, polling=polling)


def _unsettled(approved: dict[str, Obj], outcomes: dict[str, Obj], *,
               polling: bool) -> dict[str, str]:
    """Node -> instance of the approved nodes still open (all of them at the first apply)."""
    return {n: str(v["instance_id"]) for n, v in approved.items()
            if v.get("instance_id") and (not polling or n not in outcomes)}


def _fence_batch(env: Env, b: _Batch, pending: list[Obj], approved: dict[str, Obj],
                 states: dict[str, str], outcomes: dict[str, Obj]) -> bool:
    """The first apply's fence, after the blast radius of the whole batch: a refusal of the batch
    never follows StopInstances. Whether anything was sent."""
    if pending:
        il.check_blast_radius(env, targets=[node_name(n) for n in pending], nodes=b.nodes, facts=[])
    return _fence_first(env, pending, approved, states, outcomes)


def _finished(p: ZoneBatchParams, data: Obj, outcomes: dict[str, Obj], *, fenced: bool,
              polling: bool) -> Result:
    """Every node settled: the batch's result, with its compensation when a node is tainted."""
    changed = [o for o in outcomes.values() if o["outcome"] == "tainted"]
    if changed or data["out_of_service"]:
        data["compensation"] = (f"out-of-service taint and stopped instances stay on "
                                f"{len(data['out_of_service'])} node(s) of {p.zone}: run "
                                "node-recovered on each once it is repaired and Ready")
    counts = {k: sum(1 for o in outcomes.values() if o["outcome"] == k) for k in FINAL}
    return Result(data=data, already_done=not changed and not fenced and not polling,
                  message=", ".join(f"{v} {k}" for k, v in counts.items() if v) or "nothing to do")


def _settled(env: Env, plan: Plan, *, polling: bool) -> dict[str, Obj]:
    """The nodes already settled: dropped or gone at the plan, and, on a poll, what earlier
    applies settled (a failed stop, a stuck host), which stays settled."""
    batch_info = plan.data.get("batch") or {}
    outcomes: dict[str, Obj] = {n: _outcome(n, None, "dropped", why)
                                for n, why in (batch_info.get("dropped") or {}).items()}
    outcomes |= {n: _outcome(n, None, "gone", why)
                 for n, why in (batch_info.get("gone") or {}).items()}
    outcomes |= {n: _outcome(n, None, "held", f"{why}; the step that fences held machines "
                                              "takes it once EC2 confirms it is down")
                 for n, why in (batch_info.get("held") or {}).items()}
    if polling:
        outcomes |= {str(o["node"]): dict(o) for o in (env.ctx.last_result or {}).get("items") or ()
                     if o.get("outcome") in FINAL}
    return outcomes


def _record_gone(b: _Batch, approved: dict[str, Obj], outcomes: dict[str, Obj]) -> None:
    """An approved node deleted since (replaced by its node group...) is gone: its outcome."""
    for name in b.gone:
        if name in approved and name not in outcomes:
            iid = approved[name].get("instance_id")
            state = instance_state(b.instances.get(str(iid or "")))
            outcomes[name] = _outcome(name, iid, "gone", (
                f"the Node was deleted during the run (its node group, Karpenter or the cloud "
                f"controller replaced it); instance {iid} is {state}. Its pods go with it; its "
                "volumes detach once the machine is gone or after the attach/detach controller's "
                "6-minute timeout, and a VolumeAttachment left after that is deleted later in "
                "the run"), state=state)


def _pending(env: Env, p: ZoneBatchParams, b: _Batch, approved: dict[str, Obj],
             outcomes: dict[str, Obj], *, polling: bool) -> list[Obj]:
    """The nodes of the batch still to fence or to taint, in batch order. A node that changed
    since approval (assessed again), or whose instance runs again after the fence, is dropped."""
    pending: list[Obj] = []
    for node in b.batch:
        name, iid = node_name(node), instance_id_of(node)
        if name not in approved or name in outcomes:
            continue
        state = instance_state(b.instances.get(iid or ""))
        started = started_since(b.instances.get(iid or ""), env.ctx.applying_since)
        if started and not p.without_stop:  # a worker resuming the batch after one died
            outcomes[name] = _outcome(name, iid, "dropped", (
                f"its instance was started again at {started} (its LaunchTime), after this batch "
                "began fencing it (someone started it?): not fenced again"), state=state)
            continue
        if polling and state in ("running", "pending") and not p.without_stop:
            outcomes[name] = _outcome(name, iid, "dropped", (
                f"its instance is {state} again after the fence (someone started it?): not "
                "tainted"), state=state)
            continue
        if polling and state in MOVING and not p.without_stop:
            pending.append(node)  # fenced at the first apply: only its state is read now
            continue
        _, problem = _assess(env, b, node, [], without_stop=p.without_stop)
        if problem is not None:
            outcomes[name] = _outcome(name, iid, "dropped", f"changed since approval: {problem}")
        else:
            pending.append(node)
    return pending


def _taint_fenced(env: Env, p: ZoneBatchParams, b: _Batch, pending: list[Obj],
                  states: dict[str, str], outcomes: dict[str, Obj], *, first: bool,
                  in_time: bool) -> dict[str, str]:
    """Taint each pending node whose instance is now off (or stopping, ``without_stop``); returns
    the taints that met a transient error, tried again at the next check while ``in_time``."""
    taint_now = [n for n in pending if node_name(n) not in outcomes
                 and (states.get(instance_id_of(n) or "") in FENCED_STATES
                      or (p.without_stop and states.get(instance_id_of(n) or "") in MOVING))]
    if taint_now:
        if p.without_stop:  # refused here, blocking the step, unless two people broke glass
            for node in taint_now:
                il.check_out_of_service_taint(env, node=node, facts=[], instances=b.instances)
        if not first:  # the first apply checked the whole batch before its fence
            il.check_blast_radius(env, targets=[node_name(n) for n in taint_now], nodes=b.nodes,
                                  facts=[])
    again: dict[str, str] = {}  # taints that met a transient error: tried again at the next check
    for node in taint_now:
        done = _taint(env, node, b)
        if done["outcome"] == "again" and in_time:
            again[node_name(node)] = done["reason"]
            continue
        if done["outcome"] == "again":  # tried at every check since the batch began: give up
            done["outcome"] = "failed"
            done["reason"] += (f", still {p.stop_timeout:.0f} s after its batch began: re-run "
                               "this runbook for it")
        outcomes[node_name(node)] = done
    return again


def _mark_stuck(p: ZoneBatchParams, pending: list[Obj], states: dict[str, str],
                outcomes: dict[str, Obj], again: dict[str, str]) -> None:
    """Past the deadline, an instance still on its way down is its node's outcome: stuck."""
    for node in pending:
        name, iid = node_name(node), instance_id_of(node)
        if name in outcomes or name in again:
            continue
        state = states.get(iid or "", "unknown")
        if state in MOVING:
            outcomes[name] = _outcome(name, iid, "stuck", (
                f"instance {iid} is still {state} {p.stop_timeout:.0f} s after its batch began: "
                "a machine on a failed host can stay stopping for hours. Ask AWS (the host may "
                "have failed), or, if the zone outage is declared, have two people break glass "
                "on the step that taints stuck nodes without a confirmed stop"), state=state)


def _waiting(env: Env, data: Obj, waiting: list[Obj], again: dict[str, str], *, now: datetime,
             deadline: datetime) -> Result:
    """Not done yet: how many nodes are out of service, and what the others wait for."""
    left = (deadline - now).total_seconds()
    progress = f"{len(data['out_of_service'])} node(s) out of service"
    if len(waiting) > len(again):
        progress += (f", {len(waiting) - len(again)} instance(s) still stopping (each called "
                     f"stuck {max(0.0, left):.0f} s from now)")
    if again:
        progress += f", {len(again)} taint(s) to try again after a transient error"
    env.ctx.progress = progress
    return Result(data=data, done=False, progress=progress, retry_after=poll_interval(
        started=env.ctx.applying_since, now=now, deadline=deadline))


def _still_stopping(env: Env, p: ZoneBatchParams, approved: dict[str, Obj],
                    outcomes: dict[str, Obj]) -> Result | None:
    """A poll while every unsettled instance is still on its way down and none is past its
    deadline reads those instances alone (one DescribeInstances): nothing is to be tainted yet.
    Anything else (one stopped, terminated, running again, or late) needs the full read."""
    open_ = {n: str(v["instance_id"]) for n, v in approved.items()
             if n not in outcomes and v.get("instance_id")}
    if not open_:
        return None
    now = env.ctx.clock.now()
    deadline = (env.ctx.applying_since or now) + timedelta(seconds=p.stop_timeout)
    if now >= deadline:
        return None
    states = {i: instance_state(inst) for i, inst in env.ec2.describe_instances(
        sorted(set(open_.values()))).items()}
    if len(states) != len(set(open_.values())) or any(s not in MOVING for s in states.values()):
        return None
    items = [dict(o) for o in (env.ctx.last_result or {}).get("items") or ()]
    for o in items:
        if o.get("instance_id") in states and o.get("outcome") == "fencing":
            o["state"] = states[o["instance_id"]]
    data = {**(env.ctx.last_result or {}), "items": items}
    left = (deadline - now).total_seconds()
    done = sum(1 for o in items if o.get("outcome") in ("tainted", "done"))
    progress = (f"{done} node(s) out of service, {len(open_)} instance(s) still stopping "
                f"(each called stuck {left:.0f} s from now)")
    env.ctx.progress = progress
    return Result(data=data, done=False, progress=progress, retry_after=poll_interval(
        started=env.ctx.applying_since, now=now, deadline=deadline))


def _fence_first(env: Env, pending: list[Obj], approved: dict[str, Obj], states: dict[str, str],
                 outcomes: dict[str, Obj]) -> bool:
    """The batch's one fence: stop the machines that still run (a plain stop someone began on a
    hung guest never ends, so a planned stop of a ``stopping`` one is forced too), terminate the
    ones EC2 cannot stop."""
    planned_stop = {str(v["instance_id"]) for v in approved.values() if v.get("stop")}
    planned_term = {str(v["instance_id"]) for v in approved.values() if v.get("terminate")}
    to_stop = sorted(i for i, s in states.items() if i in planned_stop
                     and (s == "running" or s == "stopping"))
    to_term = sorted(i for i, s in states.items() if i in planned_term
                     and s in ("running", "stopping", "stopped", "pending"))
    failed: dict[str, str] = {}
    wrote = False
    for ids, terminate in ((to_stop, False), (to_term, True)):
        if ids:
            try:
                now, bad = _fence(env, ids, terminate=terminate)
            except (PermanentError, RetryableError) as e:
                if not wrote:
                    raise  # nothing written yet: the engine tries the apply again, or fails it
                now, bad = {}, {i: f"{e.code or type(e).__name__}: {e}" for i in ids}
            wrote = wrote or len(bad) < len(ids)
            states.update(now)
            failed.update(bad)
    for node in pending:
        iid = instance_id_of(node)
        if iid in failed:
            verb = "terminated" if iid in planned_term else "stopped"
            outcomes[node_name(node)] = _outcome(node_name(node), iid, "failed",
                                             f"instance could not be {verb}: {failed[iid]}")
    return bool(to_stop or to_term)


def _taint(env: Env, node: Obj, b: _Batch) -> Obj:
    """Taint one node of the batch; a refusal or failure is that node's outcome alone."""
    name, iid = node_name(node), instance_id_of(node)
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
        return _outcome(name, iid, "dropped", f"interlock {e.rule}: {e.message}")
    except PermanentError as e:
        if e.code == "NotFound":  # deleted between the read and the write
            return _outcome(name, iid, "gone", "the Node was deleted before its taint")
        return _outcome(name, iid, "failed", str(e))
    except RetryableError as e:  # throttled, a server error, conflicts past their retries
        return _outcome(name, iid, "again", f"its taint met a transient error "
                                            f"({e.code or type(e).__name__}: {e})")
    if not has_taint(written, OUT_OF_SERVICE_TAINT):
        return _outcome(name, iid, "failed", "the taint is not on the node after the write")
    return _outcome(name, iid, "tainted" if changed else "done",
                    "fenced and out of service" if changed else "already out of service")


def _summary(outcomes: dict[str, Obj], waiting: list[Obj], states: dict[str, str],
             again: dict[str, str]) -> Obj:
    for node in waiting:
        name = node_name(node)
        outcomes.setdefault(name, _outcome(
            name, instance_id_of(node), "fencing",
            f"{again[name]}: tried again at the next check" if name in again
            else f"instance {states.get(instance_id_of(node) or '')}"))
    for o in outcomes.values():
        if o.get("instance_id") in states:
            o["state"] = states[o["instance_id"]]
    items = [outcomes[k] for k in sorted(outcomes)]

    def named(*kinds: str) -> list[str]:
        return [o["node"] for o in items if o["outcome"] in kinds]

    return {"items": items, "out_of_service": named("tainted", "done"),
            "stopped": sorted(o["instance_id"] for o in items
                              if o["outcome"] in ("tainted", "done") and o.get("instance_id")),
            "dropped": named("dropped"), "failed": named("failed"), "gone": named("gone"),
            "stuck": named("stuck"), "held": named("held"),
            "gone_instances": sorted(str(o["instance_id"]) for o in items
                                     if o["outcome"] == "gone" and o.get("instance_id"))}


FENCE_TAINT = action(
    "k8s.zone.fence_taint", ZoneBatchParams, destructive=True,
    summary="Fence and taint out-of-service {{ nodes | length }} node(s) of {{ zone }}",
    description="One batch, each node on its own clock: one StopInstances (force) for the "
                "machines still running and one TerminateInstances for those EC2 cannot stop, "
                "then each node tainted out-of-service as soon as its own instance is stopped; "
                "an instance still stopping after stop_timeout is called stuck, a node deleted "
                "meanwhile gone, and the others go on.",
    plan=plan_fence_taint, apply=apply_fence_taint)

ACTIONS: tuple[ActionSpec[Any], ...] = (FENCE_TAINT,)
