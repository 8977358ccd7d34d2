"""The named incidents the sandbox can stage, each seeded and parameterised.

A scenario builds a healthy cluster through the controllers (so every object looks as the real
controllers would have left it), then breaks it the way the incident did, and returns ``facts``:
the names a runbook or test needs (node, instance, pod, volume ...). Each scenario starts broken.

``SCENARIOS`` is the catalogue: the scenarios built here and those of the incident modules
(``incidents``, ``node_incidents``, ``zone_incidents`` ...), each built on the blocks of
``staging``. The incident modules import nothing of this one, so it lists them with plain imports.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bot.sim.controllers.attachdetach import MAX_WAIT_FOR_UNMOUNT
from bot.sim.controllers.context import AUTO_DRIVER, DRIVER, ZONE, ebs_source, va_name
from bot.sim.controllers.workloads import make_pv
from bot.sim.deleted_node import DELETED_NODE_SCENARIOS
from bot.sim.incidents import MORE
from bot.sim.local_storage import LOCAL_SCENARIOS
from bot.sim.multiattach_incidents import MULTI_ATTACH_SCENARIOS
from bot.sim.node_incidents import NODE_SCENARIOS
from bot.sim.staging import (
    NAMESPACE,
    ZONES,
    Scenario,
    Stage,
    add_nodes,
    es_cluster,
    lose_node,
    namespace,
    pod_facts,
    statefulset,
    storage_class,
)
from bot.sim.store import ts
from bot.sim.workload_incidents import WORKLOAD_SCENARIOS
from bot.sim.zone_incidents import ZONE_SCENARIOS, build_az_outage


def build_node_dead(sb: Stage) -> dict[str, Any]:
    return lose_node(sb, es_cluster(sb), hung=False)


def build_node_hung(sb: Stage) -> dict[str, Any]:
    return lose_node(sb, es_cluster(sb), hung=True)


def build_stuck_detach(sb: Stage) -> dict[str, Any]:
    """The real stuck detach: Kubernetes gave up the volume, EC2 would not let go.

    The node died with the EBS attachment stuck ``busy``. Six minutes after the pod was
    force-deleted the attach/detach controller deleted the VolumeAttachment (the timeout detach, on
    in EKS); the attacher's DetachVolume does not complete, so the VolumeAttachment stays, deleting,
    ``attached: true`` with a ``detachError``, its finalizer kept; the new pod gets Multi-Attach.
    """
    facts = es_cluster(sb)
    sb.ec2.mark_stuck(facts["volume_id"], "busy")
    facts = lose_node(sb, facts, hung=False)
    sb.advance(MAX_WAIT_FOR_UNMOUNT)
    va = sb.get("VolumeAttachment", None, facts["volume_attachment"])
    assert va["metadata"].get("deletionTimestamp") and va["status"].get("detachError"), va
    return facts


def build_az_capacity(sb: Stage) -> dict[str, Any]:
    """Seed 000: an Immediate class put the volume in a zone whose nodes are full."""
    namespace(sb, NAMESPACE)
    for zone in ZONES:
        add_nodes(sb, zone, 1 if zone == ZONES[2] else 7, cpu="1")
    storage_class(sb, "gp2-immediate", "Immediate", zones=[ZONES[2]])
    # A filler pod takes the only 1c node's CPU.
    node_c = next(n["metadata"]["name"] for n in sb.list("Node") if n["metadata"]["labels"][ZONE] == ZONES[2])
    sb.create("Pod", {"metadata": {"name": "batch-filler", "namespace": NAMESPACE},
                      "spec": {"nodeName": node_c, "containers": [
                          {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}},
              NAMESPACE)
    statefulset(sb, "es-data", 1, "gp2-immediate", cpu="500m")
    sb.advance(10)
    pvc = sb.get("PersistentVolumeClaim", NAMESPACE, "data-es-data-0")
    pv = sb.get("PersistentVolume", None, pvc["spec"]["volumeName"])
    return {"namespace": NAMESPACE, "pod": "es-data-0", "pvc": pvc["metadata"]["name"],
            "pv": pv["metadata"]["name"], "volume_id": (ebs_source(pv) or ("", ""))[1],
            "zone": ZONES[2], "storage_class": "gp2-immediate", "full_node": node_c}


def build_stuck_terminating(sb: Stage) -> dict[str, Any]:
    """The EBS CSI driver was uninstalled before its volumes were deleted.

    The StatefulSet was deleted and its pods force-deleted (their volumes detached), then the EBS
    CSI controller was removed, then both PVCs and PVs deleted. The claims went (no pod used them);
    the PVs stay Terminating behind the provisioner's and the attacher's finalizers, which only
    the missing controller would lift. One EBS volume still exists; the other was deleted by hand.
    """
    namespace(sb, NAMESPACE)
    add_nodes(sb, ZONES[0], 2)
    storage_class(sb, "gp3", "WaitForFirstConsumer", default=True)
    statefulset(sb, "es-data", 2, "gp3", anti_affinity=True)
    sb.advance(10)
    f0, f1 = pod_facts(sb, NAMESPACE, "es-data-0"), pod_facts(sb, NAMESPACE, "es-data-1")
    sb.store.remove(sb.res("StatefulSet"), NAMESPACE, "es-data")
    for f in (f0, f1):
        sb.store.remove(sb.res("Pod"), NAMESPACE, f["pod"])
    sb.advance(10)  # the kubelets unmount, the volumes detach
    assert sb.ctx is not None
    sb.ctx.state["csi_controller_down"] = True
    sb.seed_ec2.delete_volume(VolumeId=f1["volume_id"])
    for f in (f0, f1):
        sb.store.delete(sb.res("PersistentVolumeClaim"), NAMESPACE, f["pvc"])
        sb.store.delete(sb.res("PersistentVolume"), None, f["pv"])
    sb.advance(5)
    return {"namespace": NAMESPACE, "live": {k: f0[k] for k in ("pvc", "pv", "volume_id")},
            "gone": {k: f1[k] for k in ("pvc", "pv", "volume_id")},
            "pvcs": [f0["pvc"], f1["pvc"]], "pvs": [f0["pv"], f1["pv"]]}


def build_zombies(sb: Stage) -> dict[str, Any]:
    facts = es_cluster(sb)
    zombies = []
    # 1: a VolumeAttachment left on a node that was deleted.
    missing = "ip-10-0-1-250.ap-southeast-1.compute.internal"
    va = {"metadata": {"name": va_name("vol-0deadbeef0000001", missing),
                       "finalizers": ["external-attacher/ebs-csi-aws-com"]},
          "spec": {"attacher": DRIVER, "nodeName": "ip-10-0-1-250.ap-southeast-1.compute.internal",
                   "source": {"persistentVolumeName": "pvc-00000000-dead-0000-0000-000000000001"}},
          "status": {"attached": True}}
    zombies.append(sb.create("VolumeAttachment", va)["metadata"]["name"])
    # 2: attached: true on a live node, no pod uses it, and the AD controller does not track it.
    vid = sb.seed_ec2.create_volume(AvailabilityZone=ZONES[0], Size=10)["VolumeId"]
    node = facts["node"]
    sb.seed_ec2.attach_volume(VolumeId=vid, InstanceId=facts["instance_id"], Device="/dev/xvdz")
    pv_name = "pvc-00000000-0rph-0000-0000-000000000002"
    pv = make_pv(pv_name, vid, ZONES[0], "10Gi", NAMESPACE, "data-old-0", "", "gp3", ["ReadWriteOnce"])
    pv["spec"].pop("claimRef")
    pv["status"] = {"phase": "Available"}
    sb.create("PersistentVolume", pv)
    zombies.append(sb.create("VolumeAttachment", {
        "metadata": {"name": va_name(vid, node), "finalizers": ["external-attacher/ebs-csi-aws-com"]},
        "spec": {"attacher": DRIVER, "nodeName": node, "source": {"persistentVolumeName": pv_name}},
        "status": {"attached": True}})["metadata"]["name"])
    sb.advance(5)
    return {**facts, "zombies": zombies, "orphan_volume_id": vid, "orphan_pv": pv_name,
            "missing_node": "ip-10-0-1-250.ap-southeast-1.compute.internal"}


def build_node_recovers(sb: Stage) -> dict[str, Any]:
    """node-hung, whose guest comes back by itself ``recover_after`` seconds later (default 120)."""
    facts = lose_node(sb, es_cluster(sb), hung=True)
    after = float(sb.options.get("recover_after", 120))
    sb.at(after, lambda: sb.ec2.set_hung(facts["instance_id"], False))
    return {**facts, "recovers_at": ts(sb.clock.now() + timedelta(seconds=after))}


def build_auto_mode_node_hung(sb: Stage) -> dict[str, Any]:
    """An Auto Mode node's guest hangs; its pod stays Terminating there (option
    ``pod_force_deleted=true``: someone force-deleted it, as in node-hung)."""
    forced = str(sb.options.get("pod_force_deleted") or "").lower() in ("1", "true", "yes")
    return lose_node(sb, es_cluster(sb), hung=True, force_delete=forced)


def build_spot_node_dead(sb: Stage) -> dict[str, Any]:
    """A Karpenter Spot node's guest hangs: still running, and StopInstances is unsupported."""
    return lose_node(sb, es_cluster(sb), hung=True)


def build_node_replaced(sb: Stage) -> dict[str, Any]:
    """node-dead in a managed node group whose health check replaces the stopped instance."""
    died = sb.clock.now()
    facts = lose_node(sb, es_cluster(sb), hung=False)
    after = float(sb.options.get("replace_after") or 600)
    return {**facts, "replaced_at": ts(died + timedelta(seconds=after))}


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("node-dead", "seed 001: a node in ap-southeast-1a died (instance stopped); its "
             "Elasticsearch pod, rescheduled, sticks on Multi-Attach", 1, build_node_dead, {}),
    Scenario("node-hung", "like node-dead, but the instance still runs (hung): fence it first",
             1, build_node_hung, {}),
    Scenario("stuck-detach", "the timeout detach started but the EBS attachment is stuck busy: the "
             "VolumeAttachment stays deleting, attached, with a detach error; only DetachVolume "
             "Force=true clears it", 1, build_stuck_detach, {}),
    Scenario("az-capacity-deadlock", "seed 000: an Immediate StorageClass put the volume in a full "
             "zone; the pod is Pending with a volume node affinity conflict", 0, build_az_capacity, {}),
    Scenario("stuck-terminating", "the EBS CSI driver was uninstalled first: PVs Terminating behind "
             "its finalizers; one EBS volume live, one already gone", 1, build_stuck_terminating, {}),
    Scenario("zombie-attachments", "VolumeAttachments attached: true with no consumer or on a node "
             "that no longer exists", 1, build_zombies, {}),
    Scenario("az-outage", "N nodes of ap-southeast-1a die at once (options nodes=N up to 100, "
             "volumes_per_node=5; hung=K of them still running, spot=J of those Spot; the worst "
             "day's stuck=K, spare=N, impaired_volumes=K, attacher_rate=N)", 1,
             build_az_outage, {}),
    Scenario("node-recovers-during-approval", "like node-hung, but the guest recovers by itself "
             "(Ready again, same boot) 120 s later (option recover_after), while a fence waits for "
             "approval", 1, build_node_recovers, {}),
    Scenario("spot-node-dead", "a Karpenter Spot node in ap-southeast-1a hung; StopInstances answers "
             "UnsupportedOperation", 1, build_spot_node_dead,
             {"node_group": "karpenter", "capacity": "spot"}),
    Scenario("auto-mode-node-hung", "an EKS Auto Mode node's guest hung (instance running), its "
             "pod Terminating there: EC2 refuses anyone but EKS a stop or terminate of the managed "
             "instance, so it is fenced by deleting its NodeClaim, which Karpenter drains and "
             "terminates (option pod_force_deleted=true: the pod was force-deleted, and Karpenter "
             "waits on its VolumeAttachment)", 1, build_auto_mode_node_hung,
             {"node_group": "auto-mode", "volume_driver": AUTO_DRIVER}),
    Scenario("node-replaced", "like node-dead, in a managed node group whose health check terminates "
             "and replaces the stopped instance 600 s after it died (option replace_after): the Node "
             "disappears mid-run and a new one joins", 1, build_node_replaced,
             {"replacement": True, "replace_after": 600}),
)}


SCENARIOS.update({s.name: s for s in (*MORE, *NODE_SCENARIOS, *WORKLOAD_SCENARIOS,
                                      *DELETED_NODE_SCENARIOS, *LOCAL_SCENARIOS, *ZONE_SCENARIOS,
                                      *MULTI_ATTACH_SCENARIOS)})
