"""NotReady nodes that are not dead: the incidents where fencing the machine would be the harm.

- ``node-not-ready``: the Elasticsearch node's kubelet is alive but sick (option ``cause``, see
  ``controllers/node_status.py``): its Lease is fresh, its pod still runs and writes, and it posts
  ``Ready=False`` (or, for the pressure and storage causes, a failing condition with Ready True).
  Staged 60 s into it: the not-ready taints are there, the 300 s eviction is 4 minutes away.
- ``node-partitioned``: the instance runs (and writes), but its kubelet cannot reach the API server:
  the Lease goes stale, the node goes Unknown with the unreachable taints, and EC2's status checks
  stay ``ok``. From the API server it looks like a dead node; from EC2 like a healthy one.

Both accept ``scheduled_event=CODE`` (``instance-retirement``, ``system-reboot`` ...): the victim's
instance then has that scheduled event in DescribeInstanceStatus, and the facts its id.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.context import condition
from bot.sim.controllers.node_status import SICK_CAUSES
from bot.sim.staging import Scenario, Stage, es_cluster, lose_contact

SICK_FOR = 60.0  # how long the kubelet has been sick when the scenario is ready (eviction: 300 s)
# the condition each cause makes fail, besides Ready
FAILING = {"cni": "NetworkingReady", "pleg": "Ready", "runtime": "ContainerRuntimeReady",
           "disk-pressure": "DiskPressure", "memory-pressure": "MemoryPressure",
           "pid-pressure": "PIDPressure", "storage": "StorageReady"}


def _scheduled_event(sb: Stage, facts: dict[str, Any]) -> dict[str, Any]:
    code = sb.options.get("scheduled_event")
    if not code:
        return facts
    event_id = sb.ec2.schedule_event(facts["instance_id"], str(code))
    return {**facts, "scheduled_event": str(code), "scheduled_event_id": event_id}


def build_node_not_ready(sb: Stage) -> dict[str, Any]:
    cause = str(sb.options.get("cause") or "cni")
    if cause not in SICK_CAUSES:
        raise ValueError(f"option cause={cause!r}: expected one of {', '.join(SICK_CAUSES)}")
    facts = es_cluster(sb)
    sb.sicken_kubelet(facts["node"], cause)
    sb.advance(SICK_FOR)
    node = sb.get("Node", None, facts["node"])
    ready = condition(node, "Ready") or {}
    failing = condition(node, FAILING[cause]) or {}
    return _scheduled_event(sb, {
        **facts, "cause": cause, "ready": ready.get("status"), "ready_reason": ready.get("reason"),
        "ready_message": ready.get("message"), "condition": FAILING[cause],
        "condition_status": failing.get("status"), "condition_reason": failing.get("reason"),
        "condition_message": failing.get("message"),
        "taints": [f"{t['key']}:{t['effect']}" for t in node["spec"].get("taints") or []],
        "sick_for": SICK_FOR})


def build_node_partitioned(sb: Stage) -> dict[str, Any]:
    facts = es_cluster(sb)
    sb.partition(facts["node"])
    lose_contact(sb)  # Lease renewals stop reaching the API server: Unknown, unreachable taints
    sb.advance(30)  # the bot is called half a minute later; the pod still runs on the far side
    return _scheduled_event(sb, {**facts, "partitioned_node": facts["node"]})


NODE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("node-not-ready", "the Elasticsearch node's kubelet is alive but sick (option "
             f"cause={'|'.join(SICK_CAUSES)}, default cni): Lease fresh, pod Running, Ready=False "
             "KubeletNotReady (or a failing pressure/storage condition): fencing it would harm a live "
             "machine", 1, build_node_not_ready, {"cause": "cni"}),
    Scenario("node-partitioned", "the Elasticsearch node's instance runs but its kubelet is cut off "
             "from the API server: Lease stale, NotReady (Unknown), EC2 status checks ok: dead or "
             "alive cannot be told apart", 1, build_node_partitioned, {}),
)
