"""node-dead-ngns judges its recovery per claim, not by counting pods: a Deployment's replacement,
a workload scaled to 0 and a finished Job's pod each end the run as the cluster really is."""

from __future__ import annotations

import pytest

from tests.rehearsals.conftest import assert_clean

pytestmark = pytest.mark.slow


def _app_pods(r):
    f = r.facts
    return [p for p in r.sandbox.list("Pod", f["namespace"])
            if p["metadata"].get("labels", {}).get("app") == f["deployment"]]


def _instance_of(r, node):
    return r.sandbox.get("Node", None, node)["spec"]["providerID"].rsplit("/", 1)[1]


def test_a_deployment_whose_replacement_waited_on_multi_attach_runs_on_the_other_node(rehearse):
    r = rehearse("node-dead-deployment")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    [pod] = _app_pods(r)
    assert pod["metadata"]["name"] == f["new_pod"] and pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] not in (None, f["dead_node"])
    assert r.sandbox.ec2.attachments()[f["volume_id"]] == [
        (_instance_of(r, pod["spec"]["nodeName"]), "attached")]
    [claim] = st.steps["pods_running"].result["items"]
    assert claim["claim"] == f"{f['namespace']}/{f['pvc']}" and claim["running_elsewhere"]
    assert_clean(r, st.run_id)


def test_a_deployment_scaled_to_zero_succeeds_with_nothing_running_and_the_volume_free(rehearse):
    r = rehearse("node-dead-deployment", scaled_to_zero=True)
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    assert _app_pods(r) == []
    assert r.sandbox.ec2.attachments().get(f["volume_id"], []) == []
    [claim] = st.steps["pods_running"].result["items"]
    assert (claim["wanted"], claim["running_elsewhere"], claim["satisfied"]) == (False, False, True)
    assert st.steps["volumes_moved"].status == "succeeded"
    assert_clean(r, st.run_id)


def test_a_finished_jobs_pod_on_the_same_claim_does_not_hold_the_recovery(rehearse):
    r = rehearse("node-dead-deployment", finished_job=True)
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    [pod] = _app_pods(r)
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] != f["dead_node"]
    assert_clean(r, st.run_id)


def test_a_claim_whose_replacement_stays_pending_fails_the_check(rehearse):
    r = rehearse("node-dead-deployment")
    f = r.facts
    sb = r.sandbox
    # the only other node of the volume's zone is cordoned and the waiting replacement deleted:
    # the next one cannot be scheduled anywhere its EBS volume can follow
    sb.store.mutate("Node", None, f["new_node"], lambda n: n["spec"].update(unschedulable=True))
    sb.store.delete(sb.res("Pod"), f["namespace"], f["new_pod"])
    sb.advance(5)
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "failed"
    assert st.steps["pods_running"].status == "failed"
    assert st.steps["taint"].status == "succeeded"
    [pod] = _app_pods(r)
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    assert sb.ec2.attachments().get(f["volume_id"], []) == []  # freed, but no one runs with it
    assert_clean(r, st.run_id)
