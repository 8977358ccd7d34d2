"""The triage and storage runbooks, each against its sandbox scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.sim.rehearsal import Rehearsal
from tests.rehearsals.conftest import assert_clean

pytestmark = pytest.mark.slow


def _message(st, key):
    return st.steps[key].result["message"]


def test_multi_attach_triage_finds_the_dead_holder_and_hands_over_to_node_dead(rehearse):
    r = rehearse("node-dead")
    f = r.facts
    st = r.run("multi-attach-triage", pod=f["pod"], namespace=f["namespace"])
    assert st.status == "succeeded", st.outcome
    assert st.steps["holder"].outputs["node"] == f["dead_node"]
    text = _message(st, "handoff")
    assert f"runbook-bot run node-dead-ngns -p node={f['dead_node']}" in text
    assert "NotReady" in text and "stopped" in text
    assert_clean(r, st.run_id)


def test_multi_attach_triage_says_it_does_not_apply_without_the_error(rehearse):
    r = rehearse("az-capacity-deadlock")
    f = r.facts
    st = r.run("multi-attach-triage", pod=f["pod"], namespace=f["namespace"])
    assert st.status == "failed"
    assert "volume-affinity-conflict" in st.steps["holder"].error


def test_volume_affinity_conflict_diagnoses_the_zone_and_renders_a_replacement_class(rehearse):
    r = rehearse("az-capacity-deadlock")
    f = r.facts
    st = r.run("volume-affinity-conflict", pod=f["pod"], namespace=f["namespace"])
    assert st.status == "succeeded", st.outcome
    assert st.steps["pv"].result["zone"] == f["zone"]
    manifest = st.steps["manifest"].result["text"]
    assert "volumeBindingMode: WaitForFirstConsumer" in manifest
    assert f"name: {f['storage_class']}-wffc" in manifest
    text = _message(st, "diagnosis")
    assert f["zone"] in text and "Immediate" in text
    # read-only: the cluster is as it was
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Pending"
    assert_clean(r, st.run_id)


def test_stuck_terminating_deletes_a_live_volume_before_the_finalizers(rehearse):
    r = rehearse("stuck-terminating")
    live = r.facts["live"]
    st = r.run("stuck-terminating-volume", pv=live["pv"])
    assert st.status == "succeeded", st.outcome
    assert r.sandbox.find("PersistentVolume", None, live["pv"]) is None
    assert r.sandbox.find("PersistentVolumeClaim", r.facts["namespace"], live["pvc"]) is None
    assert live["volume_id"] not in r.sandbox.ec2.attachments()  # deleted, not leaked
    order = [(e.type, e.payload.get("step")) for e in r.events(st.run_id)]
    assert order.index(("step.succeeded", "delete_volume")) < order.index(
        ("step.applying", "pv_finalizers"))
    assert_clean(r, st.run_id)


def test_stuck_terminating_with_the_volume_already_gone_only_removes_finalizers(rehearse):
    r = rehearse("stuck-terminating")
    gone = r.facts["gone"]
    st = r.run("stuck-terminating-volume", pv=gone["pv"])
    assert st.status == "succeeded", st.outcome
    assert st.steps["delete_volume"].status == "skipped"
    assert r.sandbox.find("PersistentVolume", None, gone["pv"]) is None
    assert_clean(r, st.run_id)


def test_zombie_volumeattachments_lists_each_with_the_next_runbook(rehearse):
    r = rehearse("zombie-attachments")
    f = r.facts
    st = r.run("zombie-volumeattachments")
    assert st.status == "succeeded", st.outcome
    found = {i["name"]: i for i in st.steps["audit"].result["items"]}
    assert set(f["zombies"]) <= set(found)
    missing = next(i for i in found.values() if i["node"] == f["missing_node"])
    assert "no longer exists" in missing["reason"]
    orphan = next(i for i in found.values() if i["pv"] == f["orphan_pv"])
    assert "no running pod" in orphan["reason"] and orphan["next"]
    assert str(len(found)) in _message(st, "report")
    assert_clean(r, st.run_id)


def test_stuck_terminating_snapshots_the_volume_before_the_approved_delete(rehearse):
    r = rehearse("stuck-terminating")
    live = r.facts["live"]
    st = r.run("stuck-terminating-volume", pv=live["pv"])
    assert st.status == "succeeded", st.outcome
    snap_id = st.steps["snapshot"].result["snapshot_id"]
    snap = r.sandbox.ec2.backend.snapshots[snap_id]
    assert snap.volume.id == live["volume_id"]
    order = [(e.type, e.payload.get("step")) for e in r.events(st.run_id)]
    assert order.index(("step.succeeded", "snapshot")) < order.index(("step.applying", "delete_volume"))
    # the snapshot was pending for a while, as on EC2: the step waited for it, showing its progress
    polls = [e.payload for e in r.events(st.run_id)
             if e.type == "step.polled" and e.payload.get("step") == "snapshot"]
    assert polls and any("pending (" in (p.get("progress") or "") for p in polls)
    assert st.steps["snapshot"].result["state"] == "completed"
    assert st.steps["pv"].result["verdict"] == "csi-delete-failing"
    assert "EBS CSI controller running" in st.steps["pv"].result["why"]
    assert_clean(r, st.run_id)


def test_stuck_terminating_without_a_snapshot_only_when_asked(rehearse):
    r = rehearse("stuck-terminating")
    live = r.facts["live"]
    st = r.run("stuck-terminating-volume", pv=live["pv"], snapshot=False)
    assert st.status == "succeeded", st.outcome
    assert st.steps["snapshot"].status == "skipped"
    assert r.sandbox.ec2.backend.snapshots == {} or all(
        s.volume.id != live["volume_id"] for s in r.sandbox.ec2.backend.snapshots.values())


def _bound_and_idle(r):
    """bound-pv-deleted, then its pod stopped: the volume detaches and reads ``available`` while
    the PV stays Terminating, Bound to a claim that still exists (Retain)."""
    f = r.facts
    r.sandbox.store.remove(r.sandbox.res("StatefulSet"), f["namespace"], "es-data")
    r.sandbox.store.delete(r.sandbox.res("Pod"), f["namespace"], f["pod"])
    r.sandbox.advance(150, step=30)  # its kubelet stops it within its grace period (120 s)
    assert r.sandbox.ec2.attachments()[f["volume_id"]] == []
    return f


def test_a_run_on_the_runbook_text_of_an_older_release_is_held_by_the_interlocks(rehearse, tmp_path):
    """Runs keep the runbook text they started with; the interlocks live in code and protect them.
    The old text deleted an available volume of any Terminating PV: now the delete is refused."""
    old = tmp_path / "runbooks"
    old.mkdir()
    (old / "stuck-terminating-volume.yaml").write_text(
        (Path(__file__).parent / "stuck-terminating-volume.v0.yaml").read_text())
    with Rehearsal("bound-pv-deleted", runbooks_dir=str(old), workdir=tmp_path / "r") as r:
        f = _bound_and_idle(r)
        st = r.run("stuck-terminating-volume", pv=f["pv"])
        assert st.status != "succeeded"
        blocked = st.steps["delete_volume"].blocked
        assert blocked and blocked["rule"] == "volume-delete", st.steps["delete_volume"]
        assert "Retain" in blocked["message"] and f["pvc"] in blocked["message"]
        assert r.sandbox.ec2.volume(f["volume_id"]) is not None
        claim = r.sandbox.get("PersistentVolumeClaim", f["namespace"], f["pvc"])
        assert claim["status"]["phase"] == "Bound"
        assert r.sandbox.find("PersistentVolume", None, f["pv"]) is not None
        assert r.verified(st.run_id)


def test_the_current_runbook_stops_on_a_bound_pv_before_any_snapshot_or_delete(rehearse):
    r = rehearse("bound-pv-deleted")
    f = _bound_and_idle(r)
    st = r.run("stuck-terminating-volume", pv=f["pv"])
    assert st.status == "failed"
    assert "Bound" in st.steps["volume"].error and f["pvc"] in st.steps["volume"].error
    assert all(k not in st.steps or st.steps[k].status in ("pending", "skipped")
               for k in ("snapshot", "delete_volume"))
    assert r.sandbox.ec2.volume(f["volume_id"]) is not None
    assert_clean(r, st.run_id)


def test_the_replacement_class_keeps_what_the_old_class_asked_for(rehearse):
    import yaml

    r = rehearse("az-capacity-deadlock")
    f = r.facts
    keep = {"type": "io2", "iops": "4000", "throughput": "250", "encrypted": "true",
            "kmsKeyId": "arn:aws:kms:ap-southeast-1:123456789012:key/0b1c"}

    def harden(sc):
        sc.update(parameters=keep, reclaimPolicy="Retain", mountOptions=["noatime"],
                  allowVolumeExpansion=True)
    r.sandbox.store.mutate("StorageClass", None, f["storage_class"], harden)
    st = r.run("volume-affinity-conflict", pod=f["pod"], namespace=f["namespace"])
    assert st.status == "succeeded", st.outcome
    new = yaml.safe_load(st.steps["manifest"].result["text"])
    assert new["volumeBindingMode"] == "WaitForFirstConsumer"
    assert new["parameters"] == keep and new["reclaimPolicy"] == "Retain"
    assert new["mountOptions"] == ["noatime"] and new["allowVolumeExpansion"] is True
    old = r.sandbox.get("StorageClass", None, f["storage_class"])
    assert new["allowedTopologies"] == old["allowedTopologies"]  # it had them: kept, nothing added
    text = _message(st, "diagnosis")
    assert "Cluster Autoscaler" in text and "Karpenter" in text and f["zone"] in text


def test_the_replacement_class_adds_no_topology_the_old_class_did_not_have(rehearse):
    import yaml

    r = rehearse("az-capacity-deadlock")
    f = r.facts
    r.sandbox.store.mutate("StorageClass", None, f["storage_class"],
                           lambda sc: sc.pop("allowedTopologies", None))
    st = r.run("volume-affinity-conflict", pod=f["pod"], namespace=f["namespace"])
    assert st.status == "succeeded", st.outcome
    assert "allowedTopologies" not in yaml.safe_load(st.steps["manifest"].result["text"])


def test_an_auto_mode_pv_whose_disk_is_still_attached_is_explained_and_left_alone(rehearse):
    r = rehearse("auto-mode-leak")
    f = r.facts
    st = r.run("stuck-terminating-volume", pv=f["pv"])
    assert st.status == "failed"
    pv = st.steps["pv"].result
    assert pv["driver"] == "ebs.csi.eks.amazonaws.com" and pv["volume_id"] == f["volume_id"]
    assert pv["verdict"] == "csi-delete-failing" and "VolumeInUse" in pv["failed_delete"]
    assert st.steps["delete_volume"].status == "failed" and "in-use" in st.steps["delete_volume"].error
    assert r.sandbox.ec2.volume(f["volume_id"]) is not None
    assert r.sandbox.find("PersistentVolume", None, f["pv"]) is not None
    assert_clean(r, st.run_id)
