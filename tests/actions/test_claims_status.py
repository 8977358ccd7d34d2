"""k8s.claims.status's judgement, claim by claim, on the workload shapes that fool a count."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bot.actions.claims import claims_status, workload_wants

DEAD, OTHER = "n-dead", "n-2"


def _pod(name: str, claim: str, *, node: str | None = OTHER, phase: str = "Running",
         terminating: bool = False, owner: str | None = "ReplicaSet",
         ready: bool | None = None) -> dict[str, Any]:
    """A pod; a Running one is Ready unless ``ready`` says otherwise."""
    meta: dict[str, Any] = {"name": name, "namespace": "shop"}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    ready = phase == "Running" if ready is None else ready
    return {"metadata": meta, "spec": {"nodeName": node, "volumes": [
        {"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}, "status": {
        "phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}}


def _workload(name: str, claim: str | None, *, replicas: int | None = 1, **extra: Any) -> dict[str, Any]:
    vols = [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    spec: dict[str, Any] = {"template": {"spec": {"volumes": vols}}, **extra}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": name, "namespace": "shop"}, "spec": spec}


def _node(name: str, ready: str = "True") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def _judge(pods: list[dict[str, Any]], claim: str = "data", *,
           nodes: list[dict[str, Any]] | None = None, **lists: list[dict[str, Any]]) -> Any:
    kube = SimpleNamespace(**{f"list_{k}": (lambda v: lambda namespace: v)(lists.get(k, []))
                              for k in ("deployments", "replica_sets", "stateful_sets", "jobs")})
    env: Any = SimpleNamespace(kube=kube)
    nodes = [_node(DEAD, "Unknown"), _node(OTHER)] if nodes is None else nodes
    data = claims_status((f"shop/{claim}",), DEAD, pods, [], nodes,
                         lambda ns: workload_wants(env, ns))
    [item] = data["items"]
    return item


def test_a_replacement_running_and_ready_on_a_node_that_is_not_ready_does_not_serve_the_claim():
    """The pod's own Ready is the kubelet's last word; a node posting Ready=False (its PLEG
    stuck) starts nothing, writes that word back, and its not-ready taint evicts the pod within
    minutes: the claim waits, and says on which node."""
    for ready in ("False", "Unknown"):
        pods = [_pod("old", "data", node=DEAD, terminating=True), _pod("new", "data")]
        item = _judge(pods, nodes=[_node(DEAD, "Unknown"), _node(OTHER, ready)])
        assert (item["running_elsewhere"], item["satisfied"]) == (False, False)
        assert item["held_by_node"] == f"pod new of shop/data runs on {OTHER}, which is not Ready"
        assert {p["name"]: p["node_ready"] for p in item["pods"]} == {"new": False, "old": False}
    # the node deleted meanwhile: nothing to read Ready from, so no serving either
    assert not _judge([_pod("new", "data")], nodes=[])["satisfied"]
    assert _judge([_pod("new", "data")], nodes=[_node(OTHER)])["satisfied"]


def test_an_old_pod_terminating_on_the_dead_node_and_a_new_one_running_elsewhere_is_satisfied():
    item = _judge([_pod("old", "data", node=DEAD, terminating=True), _pod("new", "data")])
    assert (item["running_elsewhere"], item["wanted"], item["satisfied"]) == (True, True, True)
    assert [p["name"] for p in item["pods"]] == ["new", "old"]


def test_a_replacement_running_but_not_ready_does_not_serve_the_claim_yet():
    """Running is not serving: until its readiness probes pass, the claim waits (a recovery is
    done when the pod is Running and Ready, which is when its users are served again)."""
    item = _judge([_pod("old", "data", node=DEAD, terminating=True),
                   _pod("new", "data", ready=False)])
    assert (item["running_elsewhere"], item["satisfied"]) == (False, False)
    assert {p["name"]: p["ready"] for p in item["pods"]}["new"] is False


def test_a_replacement_still_pending_is_wanted_and_not_satisfied():
    item = _judge([_pod("old", "data", node=DEAD, terminating=True),
                   _pod("new", "data", node=None, phase="Pending")])
    assert (item["satisfied"], item["wanted_by"]) == (False, "pod new is Pending on no node yet")


def test_a_pod_running_on_the_dead_node_itself_does_not_count():
    item = _judge([_pod("stuck", "data", node=DEAD)])
    assert not item["running_elsewhere"] and not item["satisfied"]


def test_a_deployment_scaled_to_zero_wants_no_consumer():
    item = _judge([_pod("old", "data", node=DEAD, terminating=True)],
                  deployments=[_workload("cart", "data", replicas=0)],
                  replica_sets=[_workload("cart-1", "data", replicas=0)])
    assert (item["wanted"], item["satisfied"]) == (False, True)


def test_a_deployment_that_still_wants_a_replica_keeps_the_claim_wanted_with_no_pod_left():
    item = _judge([], deployments=[_workload("cart", "data", replicas=None)])
    assert item["wanted_by"] == "Deployment cart wants 1 replica(s)" and not item["satisfied"]


def test_a_finished_jobs_pod_is_not_a_consumer_but_an_unfinished_job_is():
    done = _workload("migrate", "data", replicas=None)
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    finished = _pod("migrate-x", "data", node=DEAD, phase="Succeeded", owner="Job")
    assert _judge([finished], jobs=[done])["satisfied"]
    running_job = _workload("migrate", "data", replicas=None)
    assert _judge([finished], jobs=[running_job])["wanted_by"] == "Job migrate has not finished"


def test_a_statefulset_wants_the_claims_of_the_ordinals_it_keeps():
    sts = {"metadata": {"name": "es", "namespace": "shop"},
           "spec": {"replicas": 2, "template": {"spec": {}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}
    assert _judge([], "data-es-1", stateful_sets=[sts])["wanted"]
    assert not _judge([], "data-es-2", stateful_sets=[sts])["wanted"]  # scaled down past it


def test_a_terminating_pod_of_a_kind_it_cannot_judge_keeps_its_claim_wanted():
    item = _judge([_pod("db-0", "data", node=DEAD, terminating=True, owner="PostgresCluster")])
    assert item["wanted"] and "cannot judge" in item["wanted_by"]
