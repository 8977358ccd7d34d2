"""Diagnosis of nodes that are unwell but not dead: a live kubelet, and pods starved of IPs.

A NotReady node whose kubelet is alive (rule 8's ``sick``: its Lease fresh, ``Ready=False``)
gets a finding of its own, with its cause and ``node-not-ready-triage``, and never the dead-node
finding that names ``node-dead-ngns``: a fence of a live machine is the harm this product exists
to prevent. IP exhaustion (the VPC CNI cannot give a new pod an address) leaves the node Ready
and its new pods stuck in ContainerCreating, which reads like a storage fault; it is named too.

A node that is Ready again while it still carries the out-of-service taint (its machine repaired,
or started again by someone) takes no pods, and Kubernetes detaches its volumes at once, mounted or
not, the moment it stops hearing from it again: the taint says the machine is off. It is named with
``node-recovered``, which lifts the taint once the node's old boot is gone.

A Node deleted while its machine still runs (``kubectl delete node`` as a "fix") is the worst of
the three: pod GC force-deletes its pods and the attach/detach controller detaches its volumes
within minutes, from a machine that may still write. It is found from the VolumeAttachments that
name the missing node and the instance EC2 still attaches their volumes to, and is URGENT.
"""

from __future__ import annotations

from bot.actions.liveness import DEAD, SICK, classify
from bot.actions.node_health import IP_EXHAUSTION, SYSTEM_APPS, SYSTEM_NAMESPACE, container_view
from bot.actions.objects import (
    LIVE_STATES,
    OUT_OF_SERVICE_TAINT,
    Obj,
    has_taint,
    instance_id_of,
    instance_state,
    meta,
    ready_condition,
    va_node,
)
from bot.diagnose.draft import Draft
from bot.diagnose.model import Evidence, Severity
from bot.diagnose.world import (
    SRC_EVENTS,
    SRC_INSTANCES,
    SRC_LEASES,
    SRC_NODES,
    SRC_PODS,
    SRC_STATUS,
    SRC_VAS,
    SRC_VOLUMES,
    World,
)

TRIAGE = "node-not-ready-triage"
RECOVERED = "node-recovered"


def _ref(pod: Obj) -> str:
    return f"{meta(pod).get('namespace') or 'default'}/{meta(pod).get('name')}"


def _system_pods(world: World, node: str) -> list[Obj]:
    return [p for p in world.pods_on.get(node, []) if meta(p).get("namespace") == SYSTEM_NAMESPACE
            and (meta(p).get("labels") or {}).get("k8s-app") in SYSTEM_APPS]


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
        ev += [Evidence(f"{_ref(p)} is {'ready' if v['ready'] else 'NOT ready'}, "
                        f"{v['restarts']} restart(s)", SRC_PODS, world.now)
               for p in _system_pods(world, name) for v in [container_view(p)]]
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
        ev += [Evidence(f"{_ref(p)} has restarted {n} time(s)", SRC_PODS, world.now)
               for p in _system_pods(world, node) if (n := container_view(p)["restarts"])]
        summary = (f"{len(pods)} pod(s) on node {node} cannot start: the VPC CNI has no IP address "
                   "for them (IP exhaustion: the subnet or the node's ENIs are full). The node is "
                   "not dead and the volumes are not the problem; free IPs or enable prefix "
                   "delegation.")
        out.append(Draft("ip-exhaustion", Severity.HIGH, summary, {"node": node}, ev, TRIAGE,
                         {"node": node},
                         related={f"node:{node}", *(f"pod:{_ref(p)}" for p in pods)}))
    return out


def deleted_nodes(world: World) -> list[Draft]:
    """Nodes that are gone while EC2 still attaches their volumes to a machine that may run."""
    by_node: dict[str, dict[str, list[str]]] = {}  # node -> instance -> volumes
    waiting: dict[str, set[str]] = {}  # node -> the pods of its volumes' claims, waiting
    for va in world.vas:
        node = str(va_node(va))
        if node in world.node or not (va.get("status") or {}).get("attached"):
            continue
        vid = world.volume_of_va(va)
        pv = world.pv.get(str(((va.get("spec") or {}).get("source") or {})
                              .get("persistentVolumeName") or ""))
        ref = ((pv or {}).get("spec") or {}).get("claimRef") or {}
        users = world.users.get(f"{ref.get('namespace') or 'default'}/{ref.get('name')}", [])
        waiting.setdefault(node, set()).update(
            f"{p}:{x}" for u in users for p, x in (("pod", _ref(u)),
                                                   ("namespace", meta(u).get("namespace"))))
        for a in (world.orphan_volumes.get(vid or "") or {}).get("Attachments") or ():
            iid = str(a.get("InstanceId") or "")
            if iid and instance_state(world.instances.get(iid)) in LIVE_STATES:
                by_node.setdefault(node, {}).setdefault(iid, []).append(str(vid))
    out = []
    for node, machines in sorted(by_node.items()):
        for iid, vids in sorted(machines.items()):
            inst = world.instances.get(iid)
            lv = classify(node=None, lease=None, instance=inst, status=world.statuses.get(iid),
                          now=world.now, grace=world.grace)
            ev = [Evidence(f"Node {node} no longer exists, but {len(vids)} VolumeAttachment(s) "
                           "still name it", SRC_VAS, world.now),
                  Evidence(f"EC2 still attaches {', '.join(sorted(vids))} to {iid}, which is "
                           f"{instance_state(inst)}", SRC_VOLUMES, world.now),
                  Evidence(f"instance {iid}: {lv.words().split(': ', 1)[-1]}",
                           SRC_STATUS if lv.verdict == DEAD else SRC_INSTANCES, world.now)]
            may = ("EC2 confirms it is down: fence it now" if lv.verdict == DEAD else
                   "EC2 does not confirm it is down, so the fence is break-glass only")
            summary = (f"URGENT: node {node} was deleted while its machine {iid} is still "
                       f"{instance_state(inst)}: pod GC force-deletes its pods and the "
                       "attach/detach controller detaches its volumes within minutes from a "
                       f"machine that may still write to them. {may} (node-dead-ngns with "
                       "instance_id), before anything else.")
            out.append(Draft("node-deleted-machine-running", Severity.URGENT, summary,
                             {"node": node}, ev, "node-dead-ngns",
                             {"node": node, "instance_id": iid},
                             related={f"node:{node}", *waiting.get(node, set())}))
    return out


def tainted_ready(world: World) -> list[Draft]:
    """Ready nodes that still carry the out-of-service taint: lift it with node-recovered."""
    out = []
    for node in world.nodes:
        if not has_taint(node, OUT_OF_SERVICE_TAINT) or ready_condition(node)[0] != "True":
            continue
        name = str(meta(node).get("name"))
        iid = instance_id_of(node)
        ev = [Evidence(f"node {name} carries {OUT_OF_SERVICE_TAINT} and is Ready", SRC_NODES,
                       world.now)]
        if iid and iid in world.instances:  # described when the scan read its machine
            ev.append(Evidence(f"instance {iid} is {instance_state(world.instances.get(iid))}",
                               SRC_INSTANCES, world.now))
        summary = (f"Node {name} is Ready again but still carries {OUT_OF_SERVICE_TAINT}: it "
                   "takes no pods, and if Kubernetes stops hearing from it, its volumes are "
                   "detached at once, mounted or not. Lift the taint with node-recovered.")
        out.append(Draft("out-of-service-node-ready", Severity.MEDIUM, summary, {"node": name},
                         ev, RECOVERED, {"node": name}, related={f"node:{name}"}))
    return out
