"""Rehearsals of the runbook that applies to each newer incident. Where the runbook is wrong, the
rehearsal says what it should do and is marked as failing for that named defect; a second test
shows the run at least broke nothing."""

from __future__ import annotations

import pytest

from bot.engine.commands import BreakGlass, Reject
from bot.sim.rehearsal import APPROVERS
from tests.rehearsals.conftest import assert_clean, assert_overridden, types

pytestmark = pytest.mark.slow



def _unchanged_bound_pv(r):
    f = r.facts
    sb = r.sandbox
    assert sb.find("PersistentVolume", None, f["pv"]) is not None
    assert sb.get("PersistentVolumeClaim", f["namespace"], f["pvc"])["status"]["phase"] == "Bound"
    assert sb.ec2.attachments()[f["volume_id"]] == [(f["instance_id"], "attached")]
    assert sb.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"


def test_stuck_terminating_on_a_bound_pv_changes_nothing(rehearse):
    r = rehearse("bound-pv-deleted")
    st = r.run("stuck-terminating-volume", pv=r.facts["pv"])
    assert st.status != "succeeded"
    _unchanged_bound_pv(r)
    writes = ("delete_volume", "pv_finalizers", "claim_finalizers", "clear_leftovers")
    assert not [k for t, k in types(r, st.run_id) if t == "step.succeeded" and k.startswith(writes)]
    assert_clean(r, st.run_id)


def test_stuck_terminating_on_a_bound_pv_says_the_claim_is_in_use_before_touching_the_disk(rehearse):
    r = rehearse("bound-pv-deleted")
    f = r.facts
    st = r.run("stuck-terminating-volume", pv=f["pv"])
    why = " ".join(str(s.error or s.message or "") for s in st.steps.values())
    assert f["pvc"] in why and "Bound" in why and "detach it first" not in why
    assert "delete_volume" not in st.steps or st.steps["delete_volume"].status in ("pending", "skipped")


def test_a_pod_tolerating_every_taint_is_never_forced_off_its_volume(rehearse):
    r = rehearse("tolerating-pod")
    f = r.facts

    def reject_release(state, s):
        if s.key.startswith("release"):
            return Reject(run_id=state.run_id, actor="bob", reason="not this pod, it is ours",
                          step=s.key)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["dead_node"], decide=reject_release)
    assert st.status != "succeeded"
    assert not [k for t, k in types(r, st.run_id) if t == "step.applying" and k.startswith("force_detach")]
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["spec"]["nodeName"] == f["dead_node"]
    assert_clean(r, st.run_id)


def test_node_dead_names_the_pod_that_tolerates_the_out_of_service_taint(rehearse):
    r = rehearse("tolerating-pod")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["dead_node"])
    why = " ".join(str(s.error or s.message or "") for s in st.steps.values())
    assert f["pod"] in why and "tolerat" in why
    assert st.status == "succeeded", st.outcome
    pod = r.sandbox.get("Pod", f["namespace"], f["pod"])
    assert pod["spec"]["nodeName"] != f["dead_node"] and pod["status"]["phase"] == "Running"
    assert r.sandbox.ec2.attachments()[f["volume_id"]][0][0] != f["instance_id"]
    assert not [k for t, k in types(r, st.run_id) if t == "step.applying" and k.startswith("force_detach")]
    assert_clean(r, st.run_id)


def test_a_partitioned_node_is_fenced_only_by_break_glass_before_the_timeout_detach(rehearse):
    """EC2 passes the machine (it runs, cut off from the API server): it may be alive, so only
    two people breaking glass fence it, and then before the taint and the timeout detach."""
    r = rehearse("pod-force-deleted")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["dead_node"], decide=lambda state, s: (
        None if s.blocked else r.approve_all(state, s)))
    fence = st.steps["fence"]
    assert st.status == "awaiting_approval" and fence.blocked["rule"] == "fence-live"
    assert "MAY BE ALIVE" in fence.blocked["message"], fence.blocked
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    for who in APPROVERS:
        r.submit(BreakGlass(run_id=st.run_id, actor=who, step="fence",
                            reason="serial console dead, no SSM, its pod force-deleted"))
    st = r.play(st.run_id)
    assert st.status == "succeeded", st.outcome
    seq = types(r, st.run_id)
    assert seq.index(("step.succeeded", "fence")) < seq.index(("step.applying", "taint"))
    pod = r.sandbox.get("Pod", f["namespace"], f["pod"])
    assert pod["spec"]["nodeName"] == f["new_node"] and pod["status"]["phase"] == "Running"
    # the stop of a machine that still ran is reported as overridden, by the two people who
    # broke glass; nothing else was broken (no volume pulled from the running machine)
    [said] = assert_overridden(r, st.run_id, rule="fence-live")
    assert "fence-of-live" in said and "bob and carol" in said and "serial console" in said


def test_auto_mode_pv_finalizers_are_never_removed_while_its_ebs_volume_exists(rehearse):
    r = rehearse("auto-mode-leak")
    f = r.facts
    r.run("stuck-terminating-volume", pv=f["pv"])
    pv_gone = r.sandbox.find("PersistentVolume", None, f["pv"]) is None
    assert not (pv_gone and r.sandbox.ec2.volume(f["volume_id"]) is not None), "EBS volume leaked"


def test_node_dead_recovers_an_incident_older_than_the_event_ttl(rehearse):
    r = rehearse("old-incident")
    f = r.facts
    assert [e for e in r.sandbox.list("Event", f["namespace"])
            if e["involvedObject"]["name"] == f["pod"]] == []
    st = r.run("node-dead-ngns", node=f["dead_node"])
    assert st.status == "succeeded", st.outcome
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert_clean(r, st.run_id)


def test_multi_attach_triage_finds_the_holder_of_an_incident_older_than_the_event_ttl(rehearse):
    r = rehearse("old-incident")
    f = r.facts
    st = r.run("multi-attach-triage", pod=f["pod"], namespace=f["namespace"])
    assert st.status == "succeeded", st.outcome
    assert st.steps["holder"].outputs["node"] == f["dead_node"]


@pytest.mark.parametrize("driver", ["ebs.csi.eks.amazonaws.com", "kubernetes.io/aws-ebs"])
def test_node_dead_recovers_auto_mode_and_in_tree_volumes(rehearse, driver):
    r = rehearse("node-dead", volume_driver=driver)
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    pod = r.sandbox.get("Pod", f["namespace"], f["pod"])
    assert pod["spec"]["nodeName"] != f["node"] and pod["status"]["phase"] == "Running"
    assert_clean(r, st.run_id)


def test_node_dead_checks_that_an_in_tree_volume_moved(rehearse):
    r = rehearse("node-dead", volume_driver="kubernetes.io/aws-ebs")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert f["volume_id"] in st.steps["volumes"].outputs["ebs"]
    assert st.steps["volumes_moved"].status == "succeeded"


def test_node_dead_checks_that_an_auto_mode_volume_moved(rehearse):
    r = rehearse("node-dead", volume_driver="ebs.csi.eks.amazonaws.com")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert f["volume_id"] in st.steps["volumes"].outputs["ebs"]
    assert st.steps["volumes_moved"].status == "succeeded"


@pytest.mark.parametrize("scenario", ["node-dead", "node-hung"])
def test_node_dead_recovers_with_controllers_lagging_behind_the_api(rehearse, scenario):
    r = rehearse(scenario, informer_lag=5)
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    pod = r.sandbox.get("Pod", f["namespace"], f["pod"])
    assert pod["spec"]["nodeName"] != f["node"] and pod["status"]["phase"] == "Running"
    assert_clean(r, st.run_id)
