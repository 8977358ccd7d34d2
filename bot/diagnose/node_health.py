"""Diagnosis of nodes that are unwell but not dead: a live kubelet, and pods starved of IPs.

A NotReady node whose kubelet is alive (rule 8's ``sick``: its Lease fresh, ``Ready=False``)
gets a finding of its own, with its cause and ``node-not-ready-triage``, and never the dead-node
finding that names ``node-dead-ngns``: a fence of a live machine is the harm this product exists
to prevent. IP exhaustion (the VPC CNI cannot give a new pod an address) leaves the node Ready
and its new pods stuck in ContainerCreating, which reads like a storage fault; it is named too.
"""

from __future__ import annotations

from bot.actions.liveness import SICK
from bot.actions.node_health import IP_EXHAUSTION, SYSTEM_APPS, SYSTEM_NAMESPACE
from bot.actions.objects import Obj, meta, ready_condition
from bot.diagnose.draft import Draft
from bot.diagnose.model import Evidence, Severity
from bot.diagnose.world import SRC_EVENTS, SRC_LEASES, SRC_NODES, SRC_PODS, World

TRIAGE = "node-not-ready-triage"


def _ref(pod: Obj) -> str:
    return f"{meta(pod).get('namespace') or 'default'}/{meta(pod).get('name')}"


def _system_pods(world: World, node: str) -> list[Obj]:
    return [p for p in world.pods_on.get(node, []) if meta(p).get("namespace") == SYSTEM_NAMESPACE
            and (meta(p).get("labels") or {}).get("k8s-app") in SYSTEM_APPS]


def _restarts(pod: Obj) -> int:
    return sum(int(cs.get("restartCount") or 0)
               for cs in (pod.get("status") or {}).get("containerStatuses") or ())


def sick_nodes(world: World) -> list[Draft]:
    """NotReady nodes whose kubelet is alive: the cause, what to do, and no fence."""
    out = []
    for node in world.nodes:
        if ready_condition(node)[0] == "True":
            continue
        lv = world.liveness(node)
        if lv.verdict != SICK:
            continue
        name = str(meta(node).get("name"))
        ev = [Evidence(lv.words(), SRC_LEASES, world.now),
              Evidence(f"node {name}: Ready={lv.evidence.ready} ({lv.evidence.reason}: "
                       f"{lv.evidence.message})", SRC_NODES, world.now)]
        ev += [Evidence(f"{_ref(p)} is {'ready' if _ready(p) else 'NOT ready'}, "
                        f"{_restarts(p)} restart(s)", SRC_PODS, world.now)
               for p in _system_pods(world, name)]
        running = [p for p in world.pods_on.get(name, [])
                   if (p.get("status") or {}).get("phase") == "Running"
                   and meta(p).get("namespace") != SYSTEM_NAMESPACE]
        if running:
            ev.append(Evidence(f"{len(running)} pod(s) still run on it: "
                               + ", ".join(_ref(p) for p in running[:5]), SRC_PODS, world.now))
        summary = (f"Node {name} is NotReady but its kubelet is alive: {lv.words()}. Do not "
                   f"fence it. {lv.advice()}.")
        out.append(Draft("node-sick-kubelet-alive", Severity.HIGH, summary, {"node": name}, ev,
                         TRIAGE, {"node": name},
                         related={f"node:{name}", *(f"pod:{_ref(p)}" for p in running)}))
    return out


def _ready(pod: Obj) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return bool(statuses) and all(cs.get("ready") for cs in statuses)


def ip_exhaustion(world: World) -> list[Draft]:
    """Pods stuck creating because the VPC CNI had no IP address for them, by node."""
    by_node: dict[str, list[tuple[Obj, Obj]]] = {}
    for pod in world.pods:
        if (pod.get("status") or {}).get("phase") != "Pending":
            continue
        hit = next((e for e in reversed(world.pod_events(pod))
                    if IP_EXHAUSTION.search(str(e.get("message") or ""))), None)
        node = (pod.get("spec") or {}).get("nodeName")
        if hit is not None and node:
            by_node.setdefault(str(node), []).append((pod, hit))
    out = []
    for node, stuck in sorted(by_node.items()):
        pods = [p for p, _ in stuck]
        ev = [Evidence(f"event of {_ref(p)}: {e.get('reason')}: {str(e.get('message'))[:300]}",
                       SRC_EVENTS, world.now) for p, e in stuck[:3]]
        ev += [Evidence(f"{_ref(p)} has restarted {_restarts(p)} time(s)", SRC_PODS, world.now)
               for p in _system_pods(world, node) if _restarts(p)]
        summary = (f"{len(pods)} pod(s) on node {node} cannot start: the VPC CNI has no IP address "
                   "for them (IP exhaustion: the subnet or the node's ENIs are full). The node is "
                   "not dead and the volumes are not the problem; free IPs or enable prefix "
                   "delegation.")
        out.append(Draft("ip-exhaustion", Severity.HIGH, summary, {"node": node}, ev, TRIAGE,
                         {"node": node},
                         related={f"node:{node}", *(f"pod:{_ref(p)}" for p in pods)}))
    return out
