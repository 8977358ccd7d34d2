"""The fence's plan names the data a stop or terminate destroys, and asks one more person.

Before the plan read them, a fence of a node whose pods' claims are bound to local volumes, or
whose instance type has instance-store disks, planned as any other: one approver, no word of what
is lost. The API server and EC2 (moto) are reached over HTTP; the instance type's storage comes
from DescribeInstanceTypes.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.actions.local_data import local_kind
from bot.engine.approvals import RAISE_KEY

TYPE_LABEL = "node.kubernetes.io/instance-type"


def _dead(world, *, instance_type: str | None = None) -> tuple[str, str]:
    iid = world.instance()
    node = world.dead_node(iid)
    if instance_type:
        obj = world.kube.get("nodes", node)
        obj["metadata"]["labels"][TYPE_LABEL] = instance_type
        world.kube.put("nodes", obj)
    return iid, node


def _local_pv(world, name: str, *, node: str, claim: str | None, spec: dict[str, Any]) -> None:
    body: dict[str, Any] = {**spec, "storageClassName": "local", "nodeAffinity": {"required": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    if claim:
        body["claimRef"] = {"namespace": "default", "name": claim}
    world.kube.put("persistentvolumes", {"apiVersion": "v1", "kind": "PersistentVolume",
                                         "metadata": {"name": name}, "spec": body,
                                         "status": {"phase": "Bound"}})


def _facts(plan) -> dict[str, Any]:
    return {f.name: f.value for f in plan.facts}


def test_a_fence_of_a_node_whose_pod_is_on_a_topolvm_volume_asks_one_more_approver(world):
    iid, node = _dead(world, instance_type="m5.xlarge")  # no instance store: only the volume
    _local_pv(world, "pvc-lvm", node=node, claim="data-db-0",
              spec={"csi": {"driver": "topolvm.io", "volumeHandle": "b2c5"}})
    world.pod("db-0", node=node, pvc="data-db-0", terminating=True)
    plan, calls = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert plan.changes and plan.data[RAISE_KEY]["by"] == 1
    why = plan.data[RAISE_KEY]["why"]
    assert "claim default/data-db-0 on topolvm.io volume pvc-lvm, used by pod default/db-0" in why
    assert "Repairing the node in place" in why and "the instance store of" not in why
    assert _facts(plan)["local_volumes"] == [{"pv": "pvc-lvm", "kind": "topolvm.io",
                                              "claim": "default/data-db-0",
                                              "pods": ["default/db-0"], "path": None}]
    assert "instance_store" not in _facts(plan)
    assert "DescribeInstanceTypes" in [c.operation for c in calls]
    assert world.writes() == [] and world.instance_state(iid) == "running"


def test_the_instance_store_of_its_type_is_named_though_ec2_lists_no_such_device(world):
    iid, _ = _dead(world, instance_type="i3.large")
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    store = _facts(plan)["instance_store"]
    assert store == {"instance_type": "i3.large", "total_gb": 475,
                     "disks": [{"count": 1, "size_gb": 475, "type": "ssd"}]}
    assert "the instance store of i3.large (475 GB: 1 x 475 GB ssd)" in plan.data[RAISE_KEY]["why"]
    # DescribeInstances' block device mappings of the same instance list no instance store
    inst = world.ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
    assert not [m for m in inst.get("BlockDeviceMappings") or () if "Ebs" not in m]


def test_a_local_volume_whose_pod_was_force_deleted_is_still_on_the_machine(world):
    iid, node = _dead(world, instance_type="m5.xlarge")
    _local_pv(world, "local-pv-1", node=node, claim="cache-0",
              spec={"local": {"path": "/mnt/disks/nvme1n1"}})
    plan, _ = world.plan("aws.ec2.instance.terminate", instance_id=iid)
    assert _facts(plan)["local_volumes"][0]["pods"] == []  # no pod: the affinity pins it here
    assert plan.data[RAISE_KEY]["by"] == 1 and "/mnt/disks/nvme1n1" in plan.data[RAISE_KEY]["why"]


def test_a_fence_with_nothing_local_plans_as_before(world):
    """Nothing lost: no new fact, no data, so its plan hash is the one stored plans have."""
    iid, node = _dead(world, instance_type="m5.xlarge")
    vid = world.volume(attach_to=iid)
    world.pv("pvc-ebs", volume_id=vid, claim=("default", "data-es-0"))
    world.pod("es-0", node=node, pvc="data-es-0")
    # another node's local volume is not this machine's
    _local_pv(world, "local-elsewhere", node="ip-10-9-9-9.ec2.internal", claim="other",
              spec={"local": {"path": "/mnt/disks/ssd0"}})
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert plan.changes and plan.data == {}
    assert {f.name for f in plan.facts}.isdisjoint({"instance_store", "local_volumes"})


@pytest.mark.parametrize(("spec", "annotations", "kind"), [
    ({"local": {"path": "/mnt/disks/ssd0"}}, {}, "local"),
    ({"hostPath": {"path": "/var/lib/data"}}, {}, "hostPath"),
    ({"csi": {"driver": "local.csi.openebs.io", "volumeHandle": "v"}}, {}, "local.csi.openebs.io"),
    ({"hostPath": {"path": "/var/openebs/local/pvc-1"}}, {}, "hostPath"),
    ({"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}, {}, None),
    ({"nfs": {"server": "x", "path": "/"}}, {"pv.kubernetes.io/provisioned-by": "openebs.io/local"},
     "openebs.io/local"),
])
def test_which_volumes_live_on_one_machine(spec, annotations, kind):
    assert local_kind({"metadata": {"annotations": annotations}, "spec": spec}) == kind


# -- local volumes whose pod is gone: pinned by their driver's own topology key ---------------
# Before, only ``kubernetes.io/hostname`` in a PV's required node affinity tied it to the machine,
# so a TopoLVM or OpenEBS LVM/ZFS volume whose pod was force-deleted (the usual state of a dead
# node's pods) was not seen, and its fence asked for one approver, naming no data.

def _pinned_pv(world, name: str, *, driver: str, key: str, value: str) -> None:
    world.kube.put("persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"csi": {"driver": driver, "volumeHandle": f"{name}-h"},
                 "storageClassName": "local-fast",
                 "claimRef": {"namespace": "db", "name": f"data-{name}"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": key, "operator": "In", "values": [value]}]}]}}},
        "status": {"phase": "Bound"}})


def _label(world, node: str, **labels: str) -> None:
    obj = world.kube.get("nodes", node)
    obj["metadata"]["labels"].update(labels)
    world.kube.put("nodes", obj)


@pytest.mark.parametrize(("driver", "key", "label"), [
    ("topolvm.io", "topology.topolvm.io/node", None),
    ("topolvm.cybozu.com", "topology.topolvm.cybozu.com/node", None),  # TopoLVM before 0.18
    ("local.csi.openebs.io", "openebs.io/nodename", None),  # OpenEBS LocalPV LVM
    ("zfs.csi.openebs.io", "openebs.io/nodename", None),
    # OpenEBS LocalPV ZFS: its node id is the node's label, which need not be its name
    ("zfs.csi.openebs.io", "openebs.io/nodeid", "zfs-7f3a9c"),
    # any driver's key the node carries with that value
    ("topolvm.io", "topology.lvms.io/node", "worker-3"),
])
def test_a_local_volume_whose_pod_is_gone_is_found_by_its_drivers_topology_key(
        world, driver, key, label):
    iid, node = _dead(world, instance_type="m5.xlarge")
    if label is not None:
        _label(world, node, **{key: label})
    _pinned_pv(world, "pvc-local", driver=driver, key=key, value=label or node)
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert _facts(plan)["local_volumes"] == [{"pv": "pvc-local", "kind": driver,
                                              "claim": "db/data-pvc-local", "pods": [],
                                              "path": None}]
    assert plan.data[RAISE_KEY]["by"] == 1 and "pvc-local" in plan.data[RAISE_KEY]["why"]


@pytest.mark.parametrize(("key", "value", "labels"), [
    ("topology.topolvm.io/node", "ip-10-9-9-9.ec2.internal", {}),  # another node's volume
    ("openebs.io/nodeid", "zfs-other", {"openebs.io/nodeid": "zfs-7f3a9c"}),
    # a zone names many nodes, not this machine
    ("topology.kubernetes.io/zone", "ap-southeast-1a", {"topology.kubernetes.io/zone": "ap-southeast-1a"}),
])
def test_a_local_volume_pinned_elsewhere_or_only_to_a_zone_is_not_this_machines(
        world, key, value, labels):
    iid, node = _dead(world, instance_type="m5.xlarge")
    _label(world, node, **labels)
    _pinned_pv(world, "pvc-local", driver="topolvm.io", key=key, value=value)
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert plan.data == {} and "local_volumes" not in _facts(plan)


# -- a fence refused by interlock 8 shows what it would destroy -------------------------------

@pytest.mark.parametrize("action", ["aws.ec2.instance.stop", "aws.ec2.instance.terminate"])
def test_a_refused_fence_hands_its_plan_with_the_raise_to_the_refusal(world, action):
    """Rule 8 refuses a fence of a machine whose kubelet is alive; the refusal carries the plan the
    fence would have made, what it destroys and the approver it adds, for break-glass to read."""
    from datetime import timedelta

    from bot.errors import InterlockBlocked

    iid, node = _dead(world, instance_type="i3.large")
    world.lease(node, renewed=world.clock.now() - timedelta(seconds=3))  # the kubelet is alive
    _local_pv(world, "local-pv-1", node=node, claim="cache-0",
              spec={"local": {"path": "/mnt/disks/nvme1n1"}})
    params = {"force": True} if action.endswith("stop") else {}
    with pytest.raises(InterlockBlocked) as e:
        world.plan(action, instance_id=iid, **params)
    shown = e.value.plan
    assert shown is not None and shown["action"] == action
    assert [c["target"] for c in shown["changes"]] == [iid]
    assert shown["data"][RAISE_KEY]["by"] == 1
    assert "local-pv-1" in shown["data"][RAISE_KEY]["why"]
    assert "the instance store of i3.large" in shown["data"][RAISE_KEY]["why"]
    assert {f["name"] for f in shown["facts"]} >= {"local_volumes", "instance_store", "state"}
    assert world.writes() == [] and world.instance_state(iid) == "running"
