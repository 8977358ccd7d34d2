"""Jobs in the sandbox, run by the Job controller as on EKS: a pod runs to completion, the Job is
Complete, its pods are tracked with a finalizer, and deleting a batch/v1 Job without a policy
orphans its pods. Jobs are created and deleted through the kubernetes client."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from bot.sim.controllers.jobs import TRACKING
from tests.sim.kit import kube_for


def _batch(sb: Any) -> Any:
    return k8s.BatchV1Api(kube_for(sb))


def _job(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "work", "image": "public.ecr.aws/docker/library/busybox:1.36"}]}},
                     **spec}}


def _pods_of(sb: Any, job: str) -> list[dict[str, Any]]:
    return [p for p in sb.list("Pod", "shop") if p["metadata"].get("labels", {}).get("job-name") == job]


def test_a_job_runs_its_pod_to_completion(pool):
    sb = pool.fresh("node-dead-deployment")
    _batch(sb).create_namespaced_job("shop", _job("report"))
    sb.advance(10)
    [pod] = _pods_of(sb, "report")
    assert pod["status"]["phase"] == "Running" and pod["metadata"]["finalizers"] == [TRACKING]
    [owner] = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["controller"], owner["blockOwnerDeletion"]) == ("Job", True, True)
    assert sb.get("Job", "shop", "report")["status"]["active"] == 1
    sb.advance(30)  # job_run_seconds: the container exits 0
    pod = sb.get("Pod", "shop", pod["metadata"]["name"])
    assert pod["status"]["phase"] == "Succeeded" and not pod["metadata"].get("finalizers")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    job = _batch(sb).read_namespaced_job("report", "shop")
    assert job.status.succeeded == 1 and not job.status.active and job.status.completion_time
    conds = {c.type: (c.status, c.reason) for c in job.status.conditions}
    assert conds == {"SuccessCriteriaMet": ("True", "CompletionsReached"),
                     "Complete": ("True", "CompletionsReached")}
    sb.advance(60)
    assert len(_pods_of(sb, "report")) == 1  # a finished Job runs nothing more; its pod stays


def test_a_job_pod_deleted_before_it_finished_counts_as_failed_and_is_replaced(pool):
    sb = pool.fresh("node-dead-deployment")
    _batch(sb).create_namespaced_job("shop", _job("report"))
    sb.advance(10)
    [first] = _pods_of(sb, "report")
    k8s.CoreV1Api(_batch(sb).api_client).delete_namespaced_pod(
        first["metadata"]["name"], "shop", grace_period_seconds=0)
    sb.advance(5)
    assert sb.find("Pod", "shop", first["metadata"]["name"]) is None  # counted, then let go
    [second] = _pods_of(sb, "report")
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert sb.get("Job", "shop", "report")["status"]["failed"] == 1
    sb.advance(35)
    assert sb.get("Job", "shop", "report")["status"]["succeeded"] == 1


def test_backoff_limit_zero_fails_the_job_on_its_first_lost_pod(pool):
    sb = pool.fresh("node-dead-deployment")
    _batch(sb).create_namespaced_job("shop", _job("report", backoffLimit=0))
    sb.advance(10)
    [pod] = _pods_of(sb, "report")
    k8s.CoreV1Api(_batch(sb).api_client).delete_namespaced_pod(
        pod["metadata"]["name"], "shop", grace_period_seconds=0)
    sb.advance(5)
    job = sb.get("Job", "shop", "report")
    assert {c["type"]: c["reason"] for c in job["status"]["conditions"]} == {
        "FailureTarget": "BackoffLimitExceeded", "Failed": "BackoffLimitExceeded"}
    assert _pods_of(sb, "report") == []


def test_deleting_a_batch_v1_job_without_a_policy_orphans_its_pods(pool):
    sb = pool.fresh("node-dead-deployment")
    batch = _batch(sb)
    batch.create_namespaced_job("shop", _job("orphaned"))
    batch.create_namespaced_job("shop", _job("cascaded"))
    sb.advance(10)
    batch.delete_namespaced_job("orphaned", "shop")  # what a client sends without kubectl's default
    batch.delete_namespaced_job("cascaded", "shop", propagation_policy="Background")  # kubectl's
    sb.advance(40, step=10)  # the cascaded pod's grace period (30 s), then its kubelet confirms
    assert sb.find("Job", "shop", "orphaned") is None and sb.find("Job", "shop", "cascaded") is None
    [kept] = _pods_of(sb, "orphaned")
    assert "ownerReferences" not in kept["metadata"] and not kept["metadata"].get("deletionTimestamp")
    assert not kept["metadata"].get("finalizers")  # nobody tracks it any more
    assert _pods_of(sb, "cascaded") == []


def test_the_staged_finished_job_was_run_by_the_controller(pool):
    sb = pool.get("node-dead-deployment", finished_job=True)
    f = sb.facts
    job = sb.get("Job", "shop", "cart-migrate")
    assert job["status"]["succeeded"] == 1 and job["status"]["completionTime"]
    pod = sb.get("Pod", "shop", f["job_pod"])
    assert pod["status"]["phase"] == "Succeeded" and pod["spec"]["nodeName"] == f["dead_node"]
    assert not pod["metadata"].get("finalizers")
