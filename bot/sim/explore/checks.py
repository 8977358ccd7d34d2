"""What must hold on every timeline, beyond the sandbox's own safety invariants: each one a
function over the finished (or crashed and resumed) run, with its name and why it matters.

The sandbox's invariants (``bot.sim.invariants``: no double attach, no out-of-service taint on a
running machine, no detach from or fence of a live one) are checked after every controller pass;
a violation explained by a recorded two-person override is ``overridden``, not a failure
(``bot.sim.verdict``). The checks here read the run's audit trail, the sandbox's record of the
writes that reached the API server and EC2, and the cluster as it is at the end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.sim.controllers.context import ebs_source, instance_id, pod_pvcs
from bot.sim.sandbox import Sandbox
from bot.sim.verdict import Overridden, at, judge

BOT_KEY = "testing"  # the bot's EC2 access key in the sandbox
BOT_USER = ":serviceaccount:"  # the bot's API identity is a ServiceAccount
K8S_WRITE = ("patch_", "create_", "delete_", "replace_")
EC2_READ = ("Describe", "Get", "List")
WIRE_VERB = {"PATCH": "update", "PUT": "update", "POST": "create", "DELETE": "delete"}


@dataclass(frozen=True)
class Found:
    invariant: str
    details: str


@dataclass
class Evidence:
    """What the checks read: the run, its audit events, the sandbox, and the driver's notes."""

    sandbox: Sandbox
    status: str
    events: Sequence[Any]
    requester: str
    group: frozenset[str]
    hung: str = ""  # why the driver gave up waiting on the run, if it did
    audit_ok: bool = True
    audit_problem: str = ""
    actions: dict[str, str] | None = None  # step id -> action name
    world_caused: Sequence[Any] = ()  # sandbox violations a world event itself brought about
    world_deleted: frozenset[str] = frozenset()  # Nodes a world event deleted (kubectl delete)
    world_started: Sequence[tuple[str, datetime]] = ()  # (instance, when) someone started it


def _calls(events: Sequence[Any]) -> list[dict[str, Any]]:
    return [c for e in events for c in e.payload.get("calls") or () if isinstance(c, dict)]


def is_write(service: str, operation: str) -> bool:
    if service == "kubernetes":
        return operation.startswith(K8S_WRITE)
    return service == "ec2" and not operation.startswith(EC2_READ)


def _after_world_deletion(v: Any, deleted: frozenset[str]) -> bool:
    """A timeout detach from a live machine that the attach/detach controller made because
    someone deleted its Node (the world's ``kubectl delete node``, minutes before): Kubernetes'
    answer to that deletion, not the run's. The bot deletes no Node, and its own detaches (a
    VolumeAttachment it deletes, a DetachVolume at EC2) are never attributed so."""
    return v.kind == "detach-from-live" and "after the Node was deleted" in v.details and any(
        f"while node {n} " in v.details for n in deleted)


def _after_world_start(v: Any, world_caused: Sequence[Any]) -> bool:
    """A detach from a live machine that the out-of-service taint brought about, on a node
    whose machine the world started again after the run tainted it (someone starts a tainted
    node's machine: a violation of the world's, recorded when it did): Kubernetes detaches at
    once from a tainted node it stops hearing from, as the taint says it may. The bot's own
    detaches (a VolumeAttachment it deletes, a DetachVolume at EC2) are never attributed so."""
    return v.kind == "detach-from-live" and "for the out-of-service taint" in v.details and any(
        w.kind == "oos-taint-on-running" and f"while node {w.details.split()[1]} " in v.details
        for w in world_caused)


def _timeout_detach_of_others_pod(v: Any, ev: Evidence) -> bool:
    """A timeout detach from a live machine: the attach/detach controller's, six minutes after a
    pod left an unhealthy node, when the bot deleted no pod (someone force-deleted it, before the
    run or during it). Only a fence in time prevents it, and a fence waits for its approvers; the
    run's ``urgent`` step says so. A bot that deleted a pod is never excused so."""
    return v.kind == "detach-from-live" and "timeout detach after the pod left" in v.details and \
        not any(w.startswith("DELETE ") and "/pods/" in w and BOT_USER in w
                for w in ev.sandbox.api_writes)


def _boot_after_override(o: Overridden, ev: Evidence) -> bool:
    """A fence an override let through, of a machine someone started again after that override
    was granted: the two people broke glass for the boot before, and saw nothing of this one."""
    v = o.violation
    if v.kind != "fence-of-live":
        return False
    when_v = at(v.time)
    granted = [t for e in ev.events if e.type == "interlock.override_granted"
               and e.payload.get("step") == o.step and e.payload.get("rule") == o.rule
               and (t := at(str(e.ts))) <= when_v]
    return bool(granted) and any(f" of {iid}," in v.details and max(granted) < when <= when_v
                                 for iid, when in ev.world_started)


def sandbox_invariants(ev: Evidence) -> list[Found]:
    """The sandbox's safety invariants, less what a recorded two-person override explains (an
    override never explains a fence of a boot that began after it was granted)."""
    mine = [v for v in ev.sandbox.violations if not any(v is w for w in ev.world_caused)
            and not _after_world_deletion(v, ev.world_deleted)
            and not _after_world_start(v, ev.world_caused)
            and not _timeout_detach_of_others_pod(v, ev)]
    verdict = judge(mine, ev.events)
    stale = [o.violation for o in verdict.overridden if _boot_after_override(o, ev)]
    return [Found(v.kind, v.details + (f" (after {v.cause})" if v.cause else ""))
            for v in verdict.violations] + [
        Found(v.kind, f"{v.details}, overridden for the boot before it: someone started the "
                      "machine after the break-glass") for v in stale]


def never_hangs(ev: Evidence) -> list[Found]:
    """A run ends, or waits for a named person, time or condition: never for nothing."""
    return [Found("hung", ev.hung)] if ev.hung else []


def audit_verifies(ev: Evidence) -> list[Found]:
    """The audit chain verifies after every crash and resume, and at the end."""
    return [] if ev.audit_ok else [Found("audit-broken", ev.audit_problem)]


def _unfinished_intents(events: Sequence[Any]) -> int:
    """How many writes the trail shows intended by applies that a dead worker left unrecorded:
    the changes planned by each apply that was resumed by another worker, or never finished."""
    plans: dict[str, int] = {}
    open_: dict[str, int] = {}
    slack = 0
    for e in events:
        step = str(e.payload.get("step") or "")
        if e.type == "step.planned":
            plans[step] = max(1, len((e.payload.get("plan") or {}).get("changes") or ()))
        elif e.type == "step.applying":
            if e.payload.get("resumed"):
                slack += plans.get(step, 1)
            else:
                open_[step] = plans.get(step, 1)
        elif e.type in ("step.applied", "step.failed", "step.retrying"):
            open_.pop(step, None)
    return slack + sum(open_.values())


def writes_audited(ev: Evidence) -> list[Found]:
    """Every write of the bot's that reached the API server or EC2 is in the audit trail: as a
    recorded call, or (when the worker died between the write and its record) as an apply the
    audit shows begun and not finished."""
    calls = [c for c in _calls(ev.events) if is_write(str(c.get("service")), str(c.get("operation")))]
    slack = _unfinished_intents(ev.events)
    found = []
    def mine(w: Any) -> bool:
        return (w.access_key == BOT_KEY and not w.dry_run and not w.action.startswith(EC2_READ)
                and w.action != "GetCallerIdentity")

    # a request the endpoint refused (throttled, not allowed) changed nothing
    ec2_wire = Counter(w.action for w in ev.sandbox.ec2.wire if mine(w))
    ec2_wire.subtract(w.action for w in ev.sandbox.ec2.answered_error if mine(w))
    ec2_audit = Counter(str(c["operation"]) for c in calls if c.get("service") == "ec2")
    for action, n in sorted(ec2_wire.items()):
        if n > ec2_audit[action] + slack:
            found.append(Found("unaudited-write", f"EC2 {action}: {n} on the wire, "
                               f"{ec2_audit[action]} in the audit trail"))
    k8s_wire = Counter(WIRE_VERB.get(w.split(" ", 1)[0], "?") for w in ev.sandbox.api_writes
                       if BOT_USER in w)
    k8s_audit = Counter({"patch": "update", "replace": "update", "create": "create",
                         "delete": "delete"}[str(c["operation"]).split("_", 1)[0]]
                        for c in calls if c.get("service") == "kubernetes")
    for verb, n in sorted(k8s_wire.items()):
        if n > k8s_audit[verb] + slack:
            found.append(Found("unaudited-write", f"Kubernetes {verb}: {n} by the bot on the "
                               f"wire, {k8s_audit[verb]} in the audit trail"))
    return found


def approvals_hold(ev: Evidence) -> list[Found]:
    """A step that asked for approval applies only with the plan its approvers approved, by as
    many distinct people as it needs, none of them the requester, all of the approvers' groups."""
    found: list[Found] = []
    asked: dict[str, dict[str, Any]] = {}
    granted: dict[str, str] = {}
    plans: dict[str, dict[str, Any]] = {}
    for e in ev.events:
        p, step = e.payload, str(e.payload.get("step") or "")
        if e.type == "step.planned":
            old, plans[step] = plans.get(step), p.get("plan") or {}
            if p.get("narrowed_from") and granted.get(step) == p.get("narrowed_from"):
                # an approval carried to a narrower batch: only if it really is one
                if old is not None and not _narrower(plans[step], old):
                    found.append(Found("approval-bypassed", f"step {step}: an approval of plan "
                                       f"{str(p['narrowed_from'])[:12]} was carried to a plan "
                                       "that changes more than it did"))
                granted[step] = str(p.get("plan_hash"))
        elif e.type == "approval.requested":
            asked[step] = p
            # the votes already given for this very plan still count (a re-plan that changed
            # nothing after a transient error)
            if len(set(p.get("already") or ())) >= int(p.get("min_approvers") or 1):
                granted[step] = str(p.get("plan_hash"))
            else:
                granted.pop(step, None)
        elif e.type == "approval.granted":
            granted[step] = str(p.get("plan_hash"))
        elif e.type in ("approval.invalidated", "approval.expired", "approval.rejected"):
            granted.pop(step, None)
        elif e.type == "step.applying" and step in asked:
            approvers = [str(a) for a in p.get("approvers") or ()]
            need = int(asked[step].get("min_approvers") or 1)
            why = []
            if step not in granted:
                why.append("no approval was granted")
            elif granted[step] != p.get("plan_hash"):
                why.append(f"it applies plan {str(p.get('plan_hash'))[:12]} but plan "
                           f"{granted[step][:12]} was approved")
            if len(set(approvers)) < need:
                why.append(f"{len(set(approvers))} approver(s), {need} needed")
            if ev.requester in approvers:
                why.append(f"the requester {ev.requester} is among its approvers")
            if outside := sorted(set(approvers) - ev.group):
                why.append(f"{', '.join(outside)} may not approve")
            if why:
                found.append(Found("approval-bypassed", f"step {step}: " + "; ".join(why)))
    return found


def _narrower(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """``new`` is ``old``'s batch less some items, changing nothing ``old`` did not."""
    nb, ob = (new.get("data") or {}).get("batch"), (old.get("data") or {}).get("batch")
    if not isinstance(nb, dict) or not isinstance(ob, dict):
        return False
    old_items = ob.get("items") or {}
    kept = all(old_items.get(k) == h for k, h in (nb.get("items") or {}).items())
    return kept and nb.get("common") == ob.get("common") and _changes(new) <= _changes(old)


def _changes(plan: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(str(c.get("target_kind")), str(c.get("target")), str(c.get("operation")))
            for c in plan.get("changes") or () if isinstance(c, dict)}


def _claims_named(events: Sequence[Any]) -> set[str]:
    out: set[str] = set()
    for e in events:
        if e.type == "step.succeeded":
            for claim in (e.payload.get("outputs") or {}).get("claims") or ():
                if isinstance(claim, str) and "/" in claim:
                    out.add(claim)
    return out


def _served(sb: Sandbox, claim: str) -> bool:
    ns, _, name = claim.partition("/")
    pvc = sb.find("PersistentVolumeClaim", ns, name)
    if pvc is None:
        return True  # deleted: nothing left to recover
    pv = sb.find("PersistentVolume", None, pvc.get("spec", {}).get("volumeName") or "")
    src = ebs_source(pv)
    nodes = {n["metadata"]["name"]: n for n in sb.list("Node")}
    for pod in sb.list("Pod", ns):
        if name not in pod_pvcs(pod) or pod.get("status", {}).get("phase") != "Running":
            continue
        node = nodes.get(pod["spec"].get("nodeName") or "")
        ready = node is not None and any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in node.get("status", {}).get("conditions") or ())
        if not ready:
            continue
        if src is None:
            return True
        mine = instance_id(node)
        # 'busy': attached, a detach waiting on the device (EC2); the pod's I/O still flows
        if any(iid == mine and state in ("attached", "busy")
               for iid, state in sb.ec2.attachments().get(src[1], [])):
            return True
    return False


def success_is_true(ev: Evidence) -> list[Found]:
    """A run that changed something and ends ``succeeded`` has done what it says at that
    moment: every claim it names is served again (a Running pod on a Ready node, its EBS
    volume attached there)."""
    if ev.status != "succeeded":
        return []
    wrote = any(is_write(str(c.get("service")), str(c.get("operation")))
                and c.get("outcome") in ("ok", None) for c in _calls(ev.events))
    if not wrote:
        return []
    stale = sorted(c for c in _claims_named(ev.events) if not _served(ev.sandbox, c))
    return [Found("false-success", f"the run says succeeded but claim {c} is not served")
            for c in stale]


def writes_once_per_approval(ev: Evidence) -> list[Found]:
    """A step that needed approval writes at most once for each approval it was given: a
    resumed or re-planned apply finds its own write done, it does not write again."""
    granted: Counter[str] = Counter()
    wrote: Counter[str] = Counter()
    for e in ev.events:
        step = str(e.payload.get("step") or "")
        if e.type == "approval.granted" or (
                e.type == "approval.requested"
                and len(set(e.payload.get("already") or ())) >= int(e.payload.get("min_approvers") or 1)):
            granted[step] += 1
        elif e.type == "step.applied" and not e.payload.get("already_done") and any(
                is_write(str(c.get("service")), str(c.get("operation"))) and c.get("outcome") == "ok"
                for c in e.payload.get("calls") or ()):
            wrote[step] += 1
    return [Found("written-twice", f"step {step}: {n} applies that wrote, {granted[step]} "
                  "approval(s)") for step, n in sorted(wrote.items())
            if step in granted and n > granted[step]]


def volumes_kept_while_referenced(ev: Evidence) -> list[Found]:
    """No EBS volume the bot deleted is still named by a PersistentVolume."""
    deleted = {str(t) for c in _calls(ev.events) if c.get("operation") == "DeleteVolume"
               and c.get("outcome") == "ok" for t in c.get("targets") or ()}
    found = []
    for pv in ev.sandbox.list("PersistentVolume") if deleted else ():
        src = ebs_source(pv)
        if src is not None and src[1] in deleted and ev.sandbox.ec2.volume(src[1]) is None:
            found.append(Found("volume-deleted-under-pv", f"PV {pv['metadata']['name']} still "
                               f"names EBS volume {src[1]}, which was deleted"))
    return found


TRANSIENT = ("429", "TooManyRequests", "Throttl", "RequestLimitExceeded", "HTTP 5",
             "Conflict", "timed out talking", "cannot reach")


def transient_is_retried(ev: Evidence) -> list[Found]:
    """A step does not fail on an error its client called transient (throttling, 5xx, a
    conflict, no answer) without trying again first."""
    retried = {str(e.payload.get("step")) for e in ev.events if e.type == "step.retrying"}
    return [Found("gave-up-on-transient", f"step {e.payload.get('step')}: "
                  f"{str(e.payload.get('error'))[:200]}")
            for e in ev.events if e.type == "step.failed"
            and str(e.payload.get("step")) not in retried
            and any(t in str(e.payload.get("error")) for t in TRANSIENT)]


CHECKS: tuple[Callable[[Evidence], list[Found]], ...] = (
    sandbox_invariants, never_hangs, audit_verifies, writes_audited, approvals_hold,
    success_is_true, transient_is_retried, writes_once_per_approval,
    volumes_kept_while_referenced)


def check_all(ev: Evidence) -> list[Found]:
    return [f for check in CHECKS for f in check(ev)]
