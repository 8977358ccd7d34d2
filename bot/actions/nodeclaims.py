"""The fence of an EKS Auto Mode machine: delete its NodeClaim and let EKS terminate the instance.

EKS Auto Mode's instances are EC2 *managed instances*: EKS owns them, and EC2 refuses anyone
else's StopInstances or TerminateInstances. The one way to take such a machine away is to delete
its NodeClaim (``karpenter.sh/v1``), which Auto Mode's Karpenter answers with its termination
flow: taint the node ``karpenter.sh/disrupted``, drain it (a pod on a silent kubelet stays
Terminating; Karpenter stops waiting for it a minute past its grace period), wait for the
VolumeAttachments of the pods it drained (until the NodePool's ``terminationGracePeriod``), then
terminate the instance and let the Node and the NodeClaim go.

``k8s.nodeclaim.delete`` is held to the same rule as a stop or a terminate (interlock 8, read live
at plan and again just before the DELETE): only a machine whose kubelet is silent and that EC2
confirms is down is fenced. The termination destroys what a stop or terminate does, so its plan
reads the same way what is lost for good (``bot.actions.local_data``: the instance store, the
node's local volumes), before the interlock, so that a refusal shows it too: found, it is in the
plan's facts and asks for one more approver. It sends one DELETE of exactly the NodeClaim that
was approved (``preconditions.uid``) and then polls until EC2 says the instance is
``terminated``, showing which stage Karpenter is in, so the out-of-service taint only ever
follows a terminated machine.
"""

from __future__ import annotations

from typing import Any

from bot.actions import interlocks as il
from bot.actions import local_data
from bot.actions.authoring import (
    ActionSpec,
    Change,
    Env,
    Fact,
    InterlockBlocked,
    Obj,
    PermanentError,
    Plan,
    Result,
    action,
    instance_state,
    meta,
    operator_of,
)
from bot.actions.declarations import NodeClaimDeleteParams

POLL_SECONDS = 15.0
GONE = frozenset({"shutting-down", "terminated"})
STAGES = (("Drained", "draining the node"), ("VolumesDetached", "waiting for its volumes to detach"),
          ("InstanceTerminating", "terminating the instance"))


def claim_of(claims: list[Obj], *, node: str, instance_id: str) -> Obj | None:
    """The NodeClaim that launched this node: by the Node's name, else by the instance."""
    for nc in claims:
        st = nc.get("status") or {}
        if st.get("nodeName") == node or str(st.get("providerID", "")).endswith("/" + instance_id):
            return nc
    return None


def _read(env: Env, p: NodeClaimDeleteParams) -> tuple[Obj | None, Obj | None]:
    inst = env.ec2.describe_instances([p.instance_id]).get(p.instance_id)
    nc = claim_of(env.kube.list_nodeclaims(), node=p.node, instance_id=p.instance_id)
    return inst, nc


def plan_delete(p: NodeClaimDeleteParams, env: Env) -> Plan:
    inst, nc = _read(env, p)
    state = instance_state(inst)
    subject = f"instance {p.instance_id}"
    facts: list[Fact] = [env.fact(subject, "operator", operator_of(inst))]
    if nc is None:
        if state in GONE or inst is None:
            facts.append(env.fact(subject, "state", state))
            return Plan(action="k8s.nodeclaim.delete", params={}, facts=tuple(facts))
        raise PermanentError(
            f"no NodeClaim names node {p.node} or instance {p.instance_id}, so Karpenter cannot "
            "be asked to terminate it: check `kubectl get nodeclaims` (EKS Auto Mode and Karpenter "
            "nodes each have one)", service="kubernetes", operation="list_nodeclaims",
            code="NotFound")
    name, uid = meta(nc)["name"], meta(nc).get("uid", "")
    facts.append(env.fact(f"nodeclaim {name}", "nodepool",
                          (meta(nc).get("labels") or {}).get("karpenter.sh/nodepool")))
    if meta(nc).get("deletionTimestamp") or state in GONE:
        facts.append(env.fact(subject, "state", state))
        facts.append(env.fact(f"nodeclaim {name}", "deleting", bool(meta(nc).get("deletionTimestamp"))))
        return Plan(action="k8s.nodeclaim.delete", params={}, facts=tuple(facts),
                    data={"nodeclaim": name, "uid": uid})
    change = Change(target_kind="NodeClaim", target=name, operation="delete",
                    before=f"instance {p.instance_id} {state}",
                    after="EKS drains the node and terminates the instance")
    # what the termination wipes for good, read before the interlock: a refusal shows it too
    lost = local_data.find(env, instance_id=p.instance_id, instance=inst)
    data = {"nodeclaim": name, "uid": uid, **lost.raise_data()}
    try:
        il.check_fence(env, instance_id=p.instance_id, instance=inst, facts=facts)
    except InterlockBlocked as e:
        e.plan = Plan(action="k8s.nodeclaim.delete", params={}, changes=(change,),
                      facts=(*facts, *lost.facts(env)), data=data).to_dict()
        raise
    facts.extend(lost.facts(env))
    return Plan(action="k8s.nodeclaim.delete", params={}, changes=(change,), facts=tuple(facts),
                data=data)


def apply_delete(plan: Plan, p: NodeClaimDeleteParams, env: Env) -> Result:
    inst, nc = _read(env, p)
    state = instance_state(inst)
    data: dict[str, Any] = {"instance_id": p.instance_id, "state": state,
                            "nodeclaim": plan.data.get("nodeclaim")}
    if state == "terminated":
        return Result(data=data, already_done=True, message=f"instance {p.instance_id} is terminated")
    if nc is not None and not meta(nc).get("deletionTimestamp") and plan.changes:
        if meta(nc).get("uid") != plan.data.get("uid") or meta(nc)["name"] != plan.data.get("nodeclaim"):
            raise PermanentError(
                f"NodeClaim {meta(nc)['name']} is not the one approved ({plan.data.get('nodeclaim')}):"
                " node group changes happened meanwhile; retry the step to plan it again",
                service="kubernetes", operation="delete_cluster_custom_object", code="Conflict")
        # a live read, never the plan's facts: the node may have come back during the approval
        il.check_fence(env, instance_id=p.instance_id, instance=inst, facts=[])
        env.kube.delete_nodeclaim(name=meta(nc)["name"], uid=str(meta(nc).get("uid", "")))
        nc = claim_of(env.kube.list_nodeclaims(), node=p.node, instance_id=p.instance_id)
    progress = stage_words(nc, instance_id=p.instance_id, state=state)
    env.ctx.progress = progress
    return Result(data=data, done=False, progress=progress, retry_after=POLL_SECONDS)


def stage_words(nc: Obj | None, *, instance_id: str, state: str) -> str:
    """Where Karpenter is in its termination, in words, from the NodeClaim's conditions."""
    if nc is None:
        return f"the NodeClaim is gone; instance {instance_id} is {state}, waiting for terminated"
    conds = {c.get("type"): c for c in (nc.get("status") or {}).get("conditions") or ()}
    name = meta(nc)["name"]
    for ctype, words in STAGES:
        c = conds.get(ctype)
        if c is None or c.get("status") == "True":
            continue
        detail = f": {c['message']}" if c.get("message") else ""
        tail = (" (Karpenter waits for these until the NodePool's terminationGracePeriod; a "
                "detach from a hung machine can hang at EC2)" if ctype == "VolumesDetached" else
                " (a pod on a silent kubelet is let go a minute past its grace period)"
                if ctype == "Drained" else "")
        return (f"EKS is {words} of NodeClaim {name}{detail}{tail}; instance {instance_id} is "
                f"{state}")
    return f"EKS is terminating NodeClaim {name}'s instance {instance_id} ({state})"


NODECLAIM_DELETE = action(
    "k8s.nodeclaim.delete", NodeClaimDeleteParams, destructive=True,
    summary="Fence: delete NodeClaim of {{ node }} so EKS terminates instance {{ instance_id }}",
    description="The fence for an EKS Auto Mode machine, which EC2 lets only EKS stop or terminate: "
                "deletes its NodeClaim (same interlock as the stop), then polls until the "
                "instance is terminated, saying which stage of Karpenter's termination it is in.",
    plan=plan_delete, apply=apply_delete)

ACTIONS: tuple[ActionSpec[Any], ...] = (NODECLAIM_DELETE,)
