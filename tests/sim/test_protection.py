"""Storage protection as Kubernetes enforces it: a claim in use, a Bound PV, the reclaim policy,
and the attacher's finalizers, each seen through the store after the controllers reacted."""

from __future__ import annotations

from typing import Any

from tests.sim.kit import ec2_attachments

NS = "search"
PV_PROT, PVC_PROT = "kubernetes.io/pv-protection", "kubernetes.io/pvc-protection"
ATTACHER = "external-attacher/ebs-csi-aws-com"
PROVISIONER = "external-provisioner.volume.kubernetes.io/finalizer"


def _facts(sb: Any, pod: str) -> dict[str, Any]:
    from bot.sim.scenarios import pod_facts
    return pod_facts(sb, NS, pod)


def test_a_claim_in_use_stays_terminating_until_its_pod_is_gone(pool):
    sb = pool.fresh("zombie-attachments")
    f = _facts(sb, "es-data-1")
    sb.store.delete(sb.res("PersistentVolumeClaim"), NS, f["pvc"])
    sb.advance(30)
    pvc = sb.get("PersistentVolumeClaim", NS, f["pvc"])
    assert pvc["metadata"]["deletionTimestamp"] and pvc["metadata"]["finalizers"] == [PVC_PROT]
    sb.store.remove(sb.res("StatefulSet"), NS, "es-data")
    sb.store.remove(sb.res("Pod"), NS, f["pod"])
    sb.advance(10)
    assert sb.find("PersistentVolumeClaim", NS, f["pvc"]) is None
    # the claim went, so its Delete-policy PV was reclaimed: the EBS volume first, then the PV
    assert sb.find("PersistentVolume", None, f["pv"]) is None
    assert sb.ec2.volume(f["volume_id"]) is None


def test_a_bound_pv_deleted_stays_terminating_behind_pv_protection_and_its_disk_survives(pool):
    sb = pool.fresh("zombie-attachments")
    f = _facts(sb, "es-data-2")
    sb.store.delete(sb.res("PersistentVolume"), None, f["pv"])
    sb.advance(600, step=30)
    pv = sb.get("PersistentVolume", None, f["pv"])
    assert pv["metadata"]["deletionTimestamp"] and pv["status"]["phase"] == "Bound"
    assert PV_PROT in pv["metadata"]["finalizers"]
    assert sb.get("Pod", NS, f["pod"])["status"]["phase"] == "Running"
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "attached")]


def test_a_retain_pv_is_released_with_its_disk_kept_when_the_claim_goes(pool):
    sb = pool.fresh("zombie-attachments")
    f = _facts(sb, "es-data-0")
    sb.store.mutate("PersistentVolume", None, f["pv"],
                    lambda p: p["spec"].update(persistentVolumeReclaimPolicy="Retain"))
    sb.store.remove(sb.res("StatefulSet"), NS, "es-data")
    sb.store.remove(sb.res("Pod"), NS, f["pod"])
    sb.store.delete(sb.res("PersistentVolumeClaim"), NS, f["pvc"])
    sb.advance(30)
    pv = sb.get("PersistentVolume", None, f["pv"])
    assert pv["status"]["phase"] == "Released" and sb.ec2.volume(f["volume_id"]) is not None


def test_the_attacher_finalizer_holds_a_pv_only_while_a_volumeattachment_names_it(pool):
    sb = pool.fresh("zombie-attachments")
    orphan = sb.get("PersistentVolume", None, sb.facts["orphan_pv"])
    assert ATTACHER not in orphan["metadata"]["finalizers"]  # never attached through the attacher
    f = _facts(sb, "es-data-1")
    pv = sb.get("PersistentVolume", None, f["pv"])
    assert set(pv["metadata"]["finalizers"]) == {PV_PROT, PROVISIONER, ATTACHER}
    sb.store.mutate("PersistentVolume", None, f["pv"],
                    lambda p: p["spec"].update(persistentVolumeReclaimPolicy="Retain"))
    sb.store.delete(sb.res("PersistentVolume"), None, f["pv"])
    sb.store.remove(sb.res("StatefulSet"), NS, "es-data")
    sb.store.remove(sb.res("Pod"), NS, f["pod"])
    sb.store.delete(sb.res("PersistentVolumeClaim"), NS, f["pvc"])
    sb.advance(30)  # the pod's gone, the volume detaches, the claim goes, the PV is released
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
    assert sb.find("PersistentVolume", None, f["pv"]) is None
    assert sb.ec2.volume(f["volume_id"]) is not None  # Retain: the disk stays


def test_a_volumeattachment_whose_pv_is_gone_loops_on_not_found_and_keeps_its_finalizer(pool):
    sb = pool.fresh("zombie-attachments")
    f = _facts(sb, "es-data-1")
    # someone cleared the PV's finalizers and deleted it under a live attachment
    sb.store.mutate("PersistentVolume", None, f["pv"], lambda p: p["metadata"].update(finalizers=[]))
    sb.store.delete(sb.res("PersistentVolume"), None, f["pv"])
    assert sb.find("PersistentVolume", None, f["pv"]) is None
    sb.store.delete(sb.res("VolumeAttachment"), None, f["volume_attachment"])
    for _ in range(3):
        sb.advance(60)
        va = sb.get("VolumeAttachment", None, f["volume_attachment"])
        assert va["metadata"]["finalizers"] == [ATTACHER] and va["status"]["attached"] is True
        assert va["status"]["detachError"]["message"] == f'persistentvolume "{f["pv"]}" not found'
    assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "attached")]
