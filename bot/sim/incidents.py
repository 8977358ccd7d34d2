"""More named incidents, each staged the way it happens on EKS (registered in ``bot.sim.scenarios``).

- ``bound-pv-deleted``: someone ran ``kubectl delete pv`` on a Retain PV still Bound to a live claim.
- ``tolerating-pod``: the dead node's pod tolerates every taint, so neither eviction nor the
  out-of-service taint moves it, and it keeps its volume.
- ``pod-force-deleted``: a node cut off by a network partition (its instance runs on and writes);
  someone force-deleted its pod before calling the bot, so the 6-minute timeout detach is running
  against a machine that is alive.
- ``auto-mode-leak``: an EKS Auto Mode PV (``ebs.csi.eks.amazonaws.com``) stuck Terminating while
  its EBS volume still exists, held at EC2 by a detach that does not complete.
- ``old-incident``: a Multi-Attach incident older than the event TTL: the hung node still holds the
  volume, but the events that explained it have expired.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.attachdetach import MAX_WAIT_FOR_UNMOUNT
from bot.sim.controllers.context import AUTO_DRIVER
from bot.sim.controllers.events import EVENT_TTL
from bot.sim.staging import NAMESPACE, Scenario, Stage, es_cluster, lose_contact, lose_node


def build_bound_pv_deleted(sb: Stage) -> dict[str, Any]:
    facts = es_cluster(sb)
    sb.store.mutate("PersistentVolume", None, facts["pv"],
                    lambda p: p["spec"].update(persistentVolumeReclaimPolicy="Retain"))
    sb.store.delete(sb.res("PersistentVolume"), None, facts["pv"])
    sb.advance(30)
    return facts


def build_tolerating_pod(sb: Stage) -> dict[str, Any]:
    facts = es_cluster(sb)
    # The StatefulSet's pods tolerate every taint (a blanket `operator: Exists`), as some charts do.
    for pod in ("es-data-0", "es-data-1", "es-data-2"):
        sb.store.mutate("Pod", NAMESPACE, pod, lambda p: p["spec"].update(
            tolerations=[{"operator": "Exists"}]))
    sb.store.mutate("StatefulSet", NAMESPACE, "es-data", lambda s: s["spec"]["template"]["spec"].update(
        tolerations=[{"operator": "Exists"}]))
    sb.ec2.set_state(facts["instance_id"], "stopped", reason_code="Server.InternalError",
                     reason_message="Server.InternalError: Internal error on the host")
    lose_contact(sb)
    sb.advance(300)  # no eviction: the pod tolerates the unreachable taint for good
    return {**facts, "dead_node": facts["node"]}


def build_pod_force_deleted(sb: Stage) -> dict[str, Any]:
    facts = es_cluster(sb)
    sb.partition(facts["node"])
    return _lose_node_partitioned(sb, facts)


def _lose_node_partitioned(sb: Stage, facts: dict[str, Any]) -> dict[str, Any]:
    lose_contact(sb)  # Lease renewals stop reaching the API server: NotReady, unreachable taints
    sb.advance(300)  # the pod is evicted and stays Terminating: its kubelet cannot confirm
    sb.store.remove(sb.res("Pod"), facts["namespace"], facts["pod"])  # the force delete
    sb.advance(60)  # a minute later the bot is called; five minutes of the clock are left
    new = sb.get("Pod", facts["namespace"], facts["pod"])
    return {**facts, "dead_node": facts["node"], "new_node": new["spec"]["nodeName"],
            "force_deleted_at": sb.now_ts(), "timeout_detach_in": MAX_WAIT_FOR_UNMOUNT - 60}


def build_auto_mode_leak(sb: Stage) -> dict[str, Any]:
    facts = es_cluster(sb)
    sb.ec2.mark_stuck(facts["volume_id"], "busy")  # the detach will not complete at EC2
    sb.store.remove(sb.res("StatefulSet"), NAMESPACE, "es-data")
    sb.store.remove(sb.res("Pod"), NAMESPACE, facts["pod"])
    sb.advance(10)  # the kubelet unmounts, the attacher's DetachVolume hangs: detachError
    sb.store.delete(sb.res("PersistentVolumeClaim"), NAMESPACE, facts["pvc"])
    sb.store.delete(sb.res("PersistentVolume"), None, facts["pv"])
    # the StatefulSet's other pods, collected with it, stop within their grace period (120 s)
    sb.advance(150, step=30)
    return {**facts, "driver": AUTO_DRIVER}


def build_old_incident(sb: Stage) -> dict[str, Any]:
    facts = lose_node(sb, es_cluster(sb), hung=True)
    ttl = float(sb.options.get("event_ttl", EVENT_TTL))
    sb.advance(ttl + 600, step=30)  # the incident is older than the events that explained it
    return facts


MORE: tuple[Scenario, ...] = (
    Scenario("bound-pv-deleted", "someone ran kubectl delete pv on a Retain PV still Bound to a live "
             "claim: it stays Terminating behind pv-protection while the pod runs", 1,
             build_bound_pv_deleted, {}),
    Scenario("tolerating-pod", "the dead node's pod tolerates every taint: not evicted, and it keeps "
             "its volume after the out-of-service taint", 1, build_tolerating_pod, {}),
    Scenario("pod-force-deleted", "a partitioned node (instance running); its pod was force-deleted "
             "before the bot was called: the 6-minute timeout detach runs against a live machine",
             1, build_pod_force_deleted, {}),
    Scenario("auto-mode-leak", "an EKS Auto Mode PV (ebs.csi.eks.amazonaws.com) stuck Terminating "
             "whose EBS volume still exists, held by a detach that does not complete", 1,
             build_auto_mode_leak, {"volume_driver": AUTO_DRIVER}),
    Scenario("old-incident", "a Multi-Attach incident on a hung node, older than the event TTL: the "
             "events that explained it are gone", 1, build_old_incident, {}),
)
