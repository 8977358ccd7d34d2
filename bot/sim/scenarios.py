"""The named incidents the sandbox can stage, each seeded and parameterised.

A scenario builds a healthy cluster through the controllers (so every object looks as the real
controllers would have left it), then breaks it the way the incident did, and returns ``facts``:
the names a runbook or test needs (node, instance, pod, volume ...). Each scenario starts broken.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot.sim.controllers.attachdetach import MAX_WAIT_FOR_UNMOUNT
from bot.sim.controllers.context import (
    AUTO_DRIVER,
    DRIVER,
    EBS_ZONE,
    IN_TREE,
    ZONE,
    ebs_source,
    instance_id,
    va_name,
)
from bot.sim.controllers.nodes import grace_period
from bot.sim.nodegroups import adopt
from bot.sim.store import ts

if TYPE_CHECKING:
    from bot.sim.sandbox import Sandbox

REGION = "ap-southeast-1"
ZONES = ("ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c")
NAMESPACE = "search"

ES_DATA_PATH = "/usr/share/elasticsearch/data"
VOLUME_DRIVERS = (DRIVER, AUTO_DRIVER, IN_TREE)


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    seed: int
    build: Callable[[Sandbox], dict[str, Any]]
    defaults: dict[str, Any]


# -- building blocks --------------------------------------------------------------------------

def add_nodes(sb: Sandbox, zone: str, count: int, *, pods: int = 29, cpu: str = "4",
              attach: int = 25) -> list[str]:
    ids = sb.seed_ec2.run_instances(ImageId="ami-12c6146b", MinCount=count, MaxCount=count,
                                    InstanceType="m5.xlarge",
                                    Placement={"AvailabilityZone": zone})["Instances"]
    names = []
    octet = ZONES.index(zone) + 1 if zone in ZONES else 9
    for inst in sorted(ids, key=lambda i: i["AmiLaunchIndex"]):
        iid = inst["InstanceId"]
        host = sb.next_host(octet)
        name = f"ip-10-0-{octet}-{host}.{REGION}.compute.internal"
        node = sb.create("Node", {
            "metadata": {"name": name, "labels": {
                ZONE: zone, EBS_ZONE: zone, "kubernetes.io/hostname": name,
                "topology.kubernetes.io/region": REGION, "node.kubernetes.io/instance-type": "m5.xlarge",
                "kubernetes.io/os": "linux"},
                "annotations": {"csi.volume.kubernetes.io/nodeid": f'{{"{DRIVER}":"{iid}"}}'}},
            "spec": {"providerID": f"aws:///{zone}/{iid}"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": sb.now_ts()}],
                       "allocatable": {"pods": str(pods), "cpu": cpu, "memory": "15Gi"},
                       "capacity": {"pods": str(pods), "cpu": cpu, "memory": "16Gi"},
                       "addresses": [{"type": "InternalIP", "address": f"10.0.{octet}.{host}"},
                                     {"type": "Hostname", "address": name}],
                       "nodeInfo": node_info(iid)}})
        # the kubelet writes its CSINode owned by the Node: the garbage collector deletes it with it
        sb.create("CSINode", {"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}]},
            "spec": {"drivers": [
            {"name": DRIVER, "nodeID": iid, "topologyKeys": [EBS_ZONE],
             "allocatable": {"count": attach}}]}})
        names.append(name)
    adopt(sb, names)
    return names


def node_info(instance: str) -> dict[str, str]:
    """Every field the API marks required: typed clients refuse a Node without them."""
    digest = hashlib.sha256(instance.encode()).hexdigest()
    return {"architecture": "amd64", "bootID": str(uuid.UUID(digest[:32])),
            "containerRuntimeVersion": "containerd://1.7.22",
            "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
            "kubeProxyVersion": "v1.32.0-eks", "kubeletVersion": "v1.32.0-eks",
            "machineID": f"ec2{digest[:29]}", "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023.6.20241031", "systemUUID": str(uuid.UUID(digest[32:]))}


def storage_class(sb: Sandbox, name: str, mode: str, zones: list[str] | None = None,
                  default: bool = False, provisioner: str | None = None) -> None:
    """``provisioner`` defaults to the option ``volume_driver``: ``ebs.csi.aws.com``,
    ``ebs.csi.eks.amazonaws.com`` (EKS Auto Mode) or ``kubernetes.io/aws-ebs`` (in-tree, migrated)."""
    provisioner = provisioner or str(sb.options.get("volume_driver") or DRIVER)
    if provisioner not in VOLUME_DRIVERS:
        raise ValueError(f"option volume_driver={provisioner!r}: expected one of "
                         f"{', '.join(VOLUME_DRIVERS)}")
    sc: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner, "reclaimPolicy": "Delete",
                          "volumeBindingMode": mode, "parameters": {"type": "gp3"}}
    if default:
        sc["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": EBS_ZONE, "values": zones}]}]
    sb.create("StorageClass", sc)


def statefulset(sb: Sandbox, name: str, replicas: int, sc: str, *, ns: str = NAMESPACE,
                anti_affinity: bool = True, cpu: str = "500m") -> None:
    labels = {"app": name}
    spec: dict[str, Any] = {"containers": [{"name": "elasticsearch",
                                            "image": "docker.elastic.co/elasticsearch/elasticsearch:8.15.0",
                                            "resources": {"requests": {"cpu": cpu}},
                                            "volumeMounts": [{"name": "data",
                                                              "mountPath": ES_DATA_PATH}]}],
                            "terminationGracePeriodSeconds": 120}
    if anti_affinity:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}}
    sb.create("StatefulSet", {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": spec},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                     "resources": {"requests": {"storage": "100Gi"}}}}]}}, ns)


def namespace(sb: Sandbox, name: str) -> None:
    sb.create("Namespace", {"metadata": {"name": name}, "status": {"phase": "Active"}})


def pod_facts(sb: Sandbox, ns: str, pod: str) -> dict[str, Any]:
    p = sb.get("Pod", ns, pod)
    node = p["spec"]["nodeName"]
    pvc = sb.get("PersistentVolumeClaim", ns, f"data-{pod}")
    pv = sb.get("PersistentVolume", None, pvc["spec"]["volumeName"])
    src = ebs_source(pv)
    assert src is not None, pv
    driver, vid = src
    return {"namespace": ns, "pod": pod, "node": node, "instance_id": instance_id(sb.get("Node", None, node)),
            "pvc": pvc["metadata"]["name"], "pv": pv["metadata"]["name"], "volume_id": vid,
            "zone": sb.get("Node", None, node)["metadata"]["labels"][ZONE],
            "volume_attachment": va_name(vid, node, driver)}


def es_cluster(sb: Sandbox, *, per_zone: int = 2) -> dict[str, Any]:
    """Six nodes over three zones, an Elasticsearch StatefulSet of three, all Running."""
    namespace(sb, NAMESPACE)
    for zone in ZONES:
        add_nodes(sb, zone, per_zone)
    storage_class(sb, "gp3", "WaitForFirstConsumer", default=True)
    statefulset(sb, "es-data", 3, "gp3")
    sb.advance(10)
    pods = [f"es-data-{i}" for i in range(3)]
    victim = next(p for p in pods if sb.get("Pod", NAMESPACE, p)["spec"]["nodeName"].startswith("ip-10-0-1-"))
    return pod_facts(sb, NAMESPACE, victim)


def lose_contact(sb: Sandbox) -> None:
    """Advance until a node whose kubelet just went silent is marked: its last Lease renewal and
    status post are no later than now, so after node-monitor-grace-period (50 s) the lifecycle
    controller sets it Unknown (NotReady) with the unreachable taints."""
    assert sb.ctx is not None
    sb.advance(grace_period(sb.ctx))


def _lose_node(sb: Sandbox, facts: dict[str, Any], *, hung: bool,
               force_delete: bool = True) -> dict[str, Any]:
    iid = facts["instance_id"]
    if hung:
        sb.ec2.set_hung(iid)  # kernel panic: EC2 still says running, status checks fail
    else:
        sb.ec2.set_state(iid, "stopped", reason_code="Server.InternalError",
                         reason_message="Server.InternalError: Internal error on the host")
    lose_contact(sb)
    sb.advance(300)  # tolerationSeconds of the unreachable taint: the pod is evicted, Terminating
    if not force_delete:
        return {**facts, "dead_node": facts["node"], "new_node": None}
    # The usual first reaction, and a wrong fix: force-delete the stuck pod.
    sb.store.remove(sb.res("Pod"), facts["namespace"], facts["pod"])
    sb.advance(5)
    new = sb.get("Pod", facts["namespace"], facts["pod"])
    return {**facts, "dead_node": facts["node"], "new_node": new["spec"]["nodeName"]}


def build_node_dead(sb: Sandbox) -> dict[str, Any]:
    return _lose_node(sb, es_cluster(sb), hung=False)


def build_node_hung(sb: Sandbox) -> dict[str, Any]:
    return _lose_node(sb, es_cluster(sb), hung=True)


def lose_node_of(sb: Sandbox, facts: dict[str, Any], *, hung: bool) -> dict[str, Any]:
    """node-hung's (``hung``) or node-dead's loss of the node in ``facts``, for a scenario that
    set the cluster up itself."""
    return _lose_node(sb, facts, hung=hung)


def build_stuck_detach(sb: Sandbox) -> dict[str, Any]:
    """The real stuck detach: Kubernetes gave up the volume, EC2 would not let go.

    The node died with the EBS attachment stuck ``busy``. Six minutes after the pod was
    force-deleted the attach/detach controller deleted the VolumeAttachment (the timeout detach, on
    in EKS); the attacher's DetachVolume does not complete, so the VolumeAttachment stays, deleting,
    ``attached: true`` with a ``detachError``, its finalizer kept; the new pod gets Multi-Attach.
    """
    facts = es_cluster(sb)
    sb.ec2.mark_stuck(facts["volume_id"], "busy")
    facts = _lose_node(sb, facts, hung=False)
    sb.advance(MAX_WAIT_FOR_UNMOUNT)
    va = sb.get("VolumeAttachment", None, facts["volume_attachment"])
    assert va["metadata"].get("deletionTimestamp") and va["status"].get("detachError"), va
    return facts


def build_az_capacity(sb: Sandbox) -> dict[str, Any]:
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


def build_stuck_terminating(sb: Sandbox) -> dict[str, Any]:
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


def build_zombies(sb: Sandbox) -> dict[str, Any]:
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
    from bot.sim.controllers.workloads import make_pv
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


def build_az_outage(sb: Sandbox) -> dict[str, Any]:
    from bot.sim import zone_incidents as worst  # the worst day's options: stuck, spare, ...

    n = int(sb.options.get("nodes", 10))
    per = int(sb.options.get("volumes_per_node", 5))
    namespace(sb, NAMESPACE)
    dead = add_nodes(sb, ZONES[0], n, pods=per + 5)
    for zone in ZONES[1:]:
        add_nodes(sb, zone, max(1, n // 5), pods=per + 5)
    # room in the zone for every pod that must move: pods, and EBS attachments (40 per node)
    spares = worst.spare_nodes(sb.options, n, per)
    spare = add_nodes(sb, ZONES[0], spares, pods=45, attach=40) if spares else []
    for name in spare:
        sb.store.mutate("Node", None, name, lambda o: o["spec"].update(unschedulable=True))
    storage_class(sb, "gp3", "WaitForFirstConsumer", default=True)
    for i, node in enumerate(dead):
        statefulset(sb, f"shard-{i:03d}", per, "gp3", anti_affinity=False, cpu="10m")
        sts = sb.get("StatefulSet", NAMESPACE, f"shard-{i:03d}")
        sts["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        sb.store.update(sb.res("StatefulSet"), sts, namespace=NAMESPACE, check_rv=False)
    sb.advance(10)
    for i in range(n):  # placed; a replacement pod may go to any node of the zone
        sb.store.mutate("StatefulSet", NAMESPACE, f"shard-{i:03d}",
                        lambda o: o["spec"]["template"]["spec"].pop("nodeSelector", None))
    for name in spare:
        sb.store.mutate("Node", None, name, lambda o: o["spec"].update(unschedulable=False))
    instances = [instance_id(sb.get("Node", None, d)) for d in dead]
    # options hung=K: the first K dead instances still run (hung guests: they must be fenced);
    # spot=J: the first J of those are one-time Spot instances (StopInstances refuses them)
    hung = worst.hung_count(sb.options, n)
    spot = min(hung, int(sb.options.get("spot", 0)))
    for i, iid in enumerate(instances):
        assert iid
        if i < hung:
            sb.ec2.set_hung(iid)
        else:
            sb.ec2.set_state(iid, "stopped", reason_code="Server.InternalError",
                             reason_message="Server.InternalError: Internal error on the host")
        if i < spot:
            inst = sb.ec2.instance(iid)
            assert inst is not None
            inst.lifecycle = "spot"
            sb.store.mutate("Node", None, dead[i], lambda o: o["metadata"]["labels"].update(
                {"karpenter.sh/capacity-type": "spot"}))
    held = worst.fail_hosts(sb, [i for i in instances if i], hung)
    failure = worst.fail_zone(sb, ZONES[0], [i for i in instances if i], spares)
    lose_contact(sb)
    return {"zone": ZONES[0], "dead_nodes": dead, "instance_ids": instances, "namespace": NAMESPACE,
            "spare_nodes": spare, "volumes": n * per, "hung": dead[:hung], "spot": dead[:spot],
            "stuck": [dead[instances.index(i)] for i in held], **failure,
            "other_zone_nodes": [x["metadata"]["name"] for x in sb.list("Node")
                                 if x["metadata"]["labels"].get(ZONE) != ZONES[0]]}


def build_node_recovers(sb: Sandbox) -> dict[str, Any]:
    """node-hung, whose guest comes back by itself ``recover_after`` seconds later (default 120)."""
    facts = _lose_node(sb, es_cluster(sb), hung=True)
    after = float(sb.options.get("recover_after", 120))
    sb.at(after, lambda: sb.ec2.set_hung(facts["instance_id"], False))
    return {**facts, "recovers_at": ts(sb.clock.now() + timedelta(seconds=after))}


def build_auto_mode_node_hung(sb: Sandbox) -> dict[str, Any]:
    """An Auto Mode node's guest hangs; its pod stays Terminating there (option
    ``pod_force_deleted=true``: someone force-deleted it, as in node-hung)."""
    forced = str(sb.options.get("pod_force_deleted") or "").lower() in ("1", "true", "yes")
    return _lose_node(sb, es_cluster(sb), hung=True, force_delete=forced)


def build_spot_node_dead(sb: Sandbox) -> dict[str, Any]:
    """A Karpenter Spot node's guest hangs: still running, and StopInstances is unsupported."""
    return _lose_node(sb, es_cluster(sb), hung=True)


def build_node_replaced(sb: Sandbox) -> dict[str, Any]:
    """node-dead in a managed node group whose health check replaces the stopped instance."""
    died = sb.clock.now()
    facts = _lose_node(sb, es_cluster(sb), hung=False)
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


def _register_more() -> None:
    from bot.sim.deleted_node import DELETED_NODE_SCENARIOS
    from bot.sim.incidents import MORE
    from bot.sim.local_storage import LOCAL_SCENARIOS
    from bot.sim.multiattach_incidents import MULTI_ATTACH_SCENARIOS
    from bot.sim.node_incidents import NODE_SCENARIOS
    from bot.sim.workload_incidents import WORKLOAD_SCENARIOS
    from bot.sim.zone_incidents import ZONE_SCENARIOS

    SCENARIOS.update({s.name: s for s in (*MORE, *NODE_SCENARIOS, *WORKLOAD_SCENARIOS,
                                          *DELETED_NODE_SCENARIOS, *LOCAL_SCENARIOS, *ZONE_SCENARIOS,
                                          *MULTI_ATTACH_SCENARIOS)})


_register_more()
