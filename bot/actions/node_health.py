"""Read-only node health: ``k8s.node.liveness`` and ``k8s.node.triage``.

The same classifier interlock 8 applies (``bot.actions.liveness``), offered to runbooks: the first
steps of ``node-dead-ngns`` refuse a node whose kubelet is alive, and ``node-not-ready-triage``
answers ``KubeNodeNotReady`` with the case it is (dead, sick with a named cause, or a machine
that may be alive) and what to do. ``triage`` adds what a person looks at next on EKS: the
``aws-node`` and ``kube-proxy`` pods of the node, and pods stuck because the VPC CNI could not give
them an IP address (IP exhaustion, which leaves the node Ready and is often taken for a storage
fault).
"""

from __future__ import annotations

import re
from typing import Any

from bot.actions.authoring import (
    FENCED_STATES,
    ActionSpec,
    Env,
    Obj,
    Plan,
    Result,
    action,
    instance_id_of,
    instance_state,
    meta,
)
from bot.actions.declarations import LivenessParams
from bot.actions.liveness import CAUSES, DEAD, Liveness, classify

SYSTEM_NAMESPACE = "kube-system"
SYSTEM_APPS = ("aws-node", "kube-proxy")  # the k8s-app label of the VPC CNI and kube-proxy
# the VPC CNI's words when ipamd has no address for a new pod (subnet or ENI limits)
IP_EXHAUSTION = re.compile(r"failed to assign an IP address to container|"
                           r"add cmd: failed to assign an IP", re.I)
MAX_EVENT_READS = 5  # stuck pods whose events triage reads, at most


def read_liveness(env: Env, name: str, *, instance_id: str | None = None
                  ) -> tuple[Obj | None, Liveness]:
    """The node (from the node list), its Lease, its instance and status checks: the verdict.
    ``instance_id``: the machine of a Node already deleted, judged by EC2 alone."""
    node = next((n for n in env.kube.list_nodes() if meta(n).get("name") == name), None)
    iid = instance_id_of(node) if node is not None else instance_id
    lease = env.kube.get_node_lease(name) if node is not None else None
    # the reads aws.ec2.instance.get makes after it, so a runbook's next step gets them served
    instance = env.ec2.describe_instances([iid]).get(iid) if iid else None
    live = instance is not None and instance_state(instance) not in FENCED_STATES
    status = env.ec2.describe_instance_status([iid]).get(iid) if iid and live else None
    lv = classify(node=node, lease=lease, instance=instance if iid else None, status=status,
                  now=env.ctx.clock.now(), grace=env.settings.policy.node_monitor_grace_period)
    return node, lv


def liveness_view(name: str, node: Obj | None, lv: Liveness, *,
                  instance_id: str | None = None) -> dict[str, Any]:
    e = lv.evidence
    return {
        "node": name, "exists": node is not None, "verdict": lv.verdict, "cause": lv.cause,
        "cause_words": CAUSES[lv.cause][0] if lv.cause else None,
        "kubelet_alive": lv.kubelet_alive, "words": lv.words(), "advice": lv.advice(),
        "ready_status": e.ready, "ready_reason": e.reason, "ready_message": e.message,
        "lease_age": _round(e.lease_age), "heartbeat_age": _round(e.heartbeat_age),
        "silent_for": _round(e.silent_for),
        "instance_id": instance_id_of(node) if node is not None else instance_id,
        "instance_state": e.instance_state, "system_status": e.system_status,
        "instance_status": e.instance_status, "scheduled_events": list(e.events),
        "conditions": dict(e.conditions),
        "next": ({"runbook": "node-dead-ngns", "params": {
            "node": name, **({"instance_id": instance_id} if node is None and instance_id else {})}}
            if lv.verdict == DEAD else None),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def plan_liveness(p: LivenessParams, env: Env) -> Plan:
    return Plan(action="k8s.node.liveness", params={})


def apply_liveness(plan: Plan, p: LivenessParams, env: Env) -> Result:
    node, lv = read_liveness(env, p.node, instance_id=p.instance_id)
    return Result(data=liveness_view(p.node, node, lv, instance_id=p.instance_id))


def plan_triage(p: LivenessParams, env: Env) -> Plan:
    return Plan(action="k8s.node.triage", params={})


def container_view(pod: Obj) -> dict[str, Any]:
    """A pod's containers in one line: ready, restarts, the reason one waits (shared with diagnose)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    waiting = next((str((cs.get("state") or {}).get("waiting", {}).get("reason"))
                    for cs in statuses if (cs.get("state") or {}).get("waiting")), None)
    return {"name": meta(pod).get("name"), "app": (meta(pod).get("labels") or {}).get("k8s-app"),
            "phase": (pod.get("status") or {}).get("phase"),
            "ready": bool(statuses) and all(cs.get("ready") for cs in statuses),
            "restarts": sum(int(cs.get("restartCount") or 0) for cs in statuses),
            "waiting": waiting}


def apply_triage(plan: Plan, p: LivenessParams, env: Env) -> Result:
    node, lv = read_liveness(env, p.node, instance_id=p.instance_id)
    data = liveness_view(p.node, node, lv, instance_id=p.instance_id)
    pods = env.kube.list_pods(node=p.node) if node is not None else []
    system = [container_view(x) for x in pods if meta(x).get("namespace") == SYSTEM_NAMESPACE
              and (meta(x).get("labels") or {}).get("k8s-app") in SYSTEM_APPS]
    creating = [x for x in pods if meta(x).get("namespace") != SYSTEM_NAMESPACE
                and container_view(x)["waiting"] == "ContainerCreating"]
    starved: list[str] = []
    for pod in creating[:MAX_EVENT_READS]:
        ns, name = str(meta(pod).get("namespace")), str(meta(pod).get("name"))
        if any(IP_EXHAUSTION.search(str(ev.get("message") or ""))
               for ev in env.kube.list_pod_events(namespace=ns, pod=name)):
            starved.append(f"{ns}/{name}")
    data["system_pods"] = system
    data["ip_exhaustion"] = {
        "pods": starved,
        "advice": ("the VPC CNI has no IP address for new pods on this node: the subnet is out of "
                   "addresses or the node's ENIs are full. Check the subnet's free IPs and "
                   "aws-node's WARM_IP_TARGET/MINIMUM_IP_TARGET; prefix delegation "
                   "(ENABLE_PREFIX_DELEGATION) or a larger subnet fixes it. The volumes are not "
                   "the problem"),
    } if starved else None
    return Result(data=data)


NODE_LIVENESS = action(
    "k8s.node.liveness", LivenessParams, destructive=False,
    summary="Tell whether node {{ node }} is dead, sick or may be alive",
    description="The node's Lease, Ready reason and EC2 status checks, and the verdict rule 8 "
                "applies: ready, sick (kubelet alive), dead or ambiguous.",
    plan=plan_liveness, apply=apply_liveness)
NODE_TRIAGE = action(
    "k8s.node.triage", LivenessParams, destructive=False,
    summary="Triage NotReady node {{ node }}",
    description="k8s.node.liveness, plus the node's aws-node and kube-proxy pods and pods stuck "
                "without an IP address.",
    plan=plan_triage, apply=apply_triage)

ACTIONS: tuple[ActionSpec[Any], ...] = (NODE_LIVENESS, NODE_TRIAGE)
