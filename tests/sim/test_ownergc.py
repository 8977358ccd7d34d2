"""Owners and dependents in the sandbox, as kube-controller-manager's garbage collector and pod GC
treat them: deleting a Deployment takes its ReplicaSets and pods (or orphans them, or waits for
them), a deleted Node takes its CSINode and Lease, and pod GC waits out its 40 s quarantine before
it force-deletes the pods of a node that is gone. Every delete goes through the kubernetes client."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from bot.sim.controllers.leases import NAMESPACE as LEASES
from tests.sim.kit import api_for, kube_for


def _apps(sb: Any) -> Any:
    return k8s.AppsV1Api(kube_for(sb))


def _cart_pods(sb: Any) -> list[dict[str, Any]]:
    return [p for p in sb.list("Pod", "shop") if p["metadata"].get("labels", {}).get("app") == "cart"]


def _cart_replica_sets(sb: Any) -> list[dict[str, Any]]:
    return [r for r in sb.list("ReplicaSet", "shop") if r["metadata"]["name"].startswith("cart-")]


def test_deleting_a_deployment_deletes_its_replicaset_and_pods_in_the_background(pool):
    sb = pool.fresh("node-dead-deployment")
    f = sb.facts
    _apps(sb).delete_namespaced_deployment("cart", "shop")  # no policy: Background for apps/v1
    sb.advance(5)
    assert sb.find("Deployment", "shop", "cart") is None
    assert _cart_replica_sets(sb) == []
    # the replacement on the live node is deleted and its kubelet confirms once its grace period
    # (30 s) is over; the pod on the dead node is deleted too but stays Terminating there, as
    # nobody confirms it
    assert sb.get("Pod", "shop", f["new_pod"])["metadata"]["deletionTimestamp"]
    sb.advance(40, step=10)
    assert sb.find("Pod", "shop", f["new_pod"]) is None
    [old] = _cart_pods(sb)
    assert old["metadata"]["name"] == f["pod"] and old["metadata"]["deletionTimestamp"]


def test_orphan_keeps_the_replicaset_and_its_pods_unowned(pool):
    sb = pool.fresh("node-dead-deployment")
    f = sb.facts
    _apps(sb).delete_namespaced_deployment("cart", "shop", propagation_policy="Orphan")
    sb.advance(5)
    assert sb.find("Deployment", "shop", "cart") is None
    [rs] = _cart_replica_sets(sb)
    assert "ownerReferences" not in rs["metadata"] and not rs["metadata"].get("deletionTimestamp")
    new = sb.get("Pod", "shop", f["new_pod"])
    assert not new["metadata"].get("deletionTimestamp")
    assert new["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]  # still its RS's


def test_foreground_waits_for_the_pod_nobody_confirms_on_the_dead_node(pool):
    sb = pool.fresh("node-dead-deployment")
    f = sb.facts
    _apps(sb).delete_namespaced_deployment("cart", "shop", propagation_policy="Foreground")
    sb.advance(30)
    dep = sb.get("Deployment", "shop", "cart")
    assert dep["metadata"]["deletionTimestamp"] and dep["metadata"]["finalizers"] == ["foregroundDeletion"]
    [rs] = _cart_replica_sets(sb)
    assert rs["metadata"]["deletionTimestamp"] and "foregroundDeletion" in rs["metadata"]["finalizers"]
    assert sb.find("Pod", "shop", f["new_pod"]) is None
    assert [p["metadata"]["name"] for p in _cart_pods(sb)] == [f["pod"]]  # blocks both owners
    k8s.CoreV1Api(kube_for(sb)).delete_namespaced_pod(f["pod"], "shop", grace_period_seconds=0)
    sb.advance(5)
    assert sb.find("Deployment", "shop", "cart") is None and _cart_replica_sets(sb) == []


def test_a_dependent_held_by_its_own_finalizer_is_not_removed_and_keeps_its_pods(pool):
    sb = pool.fresh("node-dead-deployment")
    f = sb.facts
    [rs] = _cart_replica_sets(sb)
    _apps(sb).patch_namespaced_replica_set(rs["metadata"]["name"], "shop",
                                           {"metadata": {"finalizers": ["example.com/hold"]}})
    _apps(sb).delete_namespaced_deployment("cart", "shop")
    sb.advance(10)
    held = sb.get("ReplicaSet", "shop", rs["metadata"]["name"])
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == ["example.com/hold"]
    # the ReplicaSet still exists, so its pods still have an owner: the collector leaves them
    new = sb.get("Pod", "shop", f["new_pod"])
    assert not new["metadata"].get("deletionTimestamp")


def test_an_unknown_propagation_policy_is_refused_with_the_valid_ones(pool):
    sb = pool.get("node-dead-deployment")
    http = api_for(sb)
    try:
        code, body = http("DELETE", "/apis/apps/v1/namespaces/shop/deployments/cart",
                          {"propagationPolicy": "Cascade"})
    finally:
        http.close()
    assert code == 422
    assert body["message"] == ('DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported '
                               'value: "Cascade": supported values: "Foreground", "Background", "Orphan"')
    assert sb.find("Deployment", "shop", "cart") is not None


def test_a_deleted_node_takes_its_csinode_and_lease_and_its_pods_go_after_the_quarantine(pool):
    sb = pool.fresh("node-dead-deployment")
    f = sb.facts
    node = f["new_node"]  # a live node, running the replacement pod
    assert sb.get("CSINode", None, node)["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert sb.find("Lease", LEASES, node) is not None
    k8s.CoreV1Api(kube_for(sb)).delete_node(node)
    sb.advance(1)
    assert sb.find("CSINode", None, node) is None and sb.find("Lease", LEASES, node) is None
    # pod GC first holds the missing node in quarantine (40 s): its pods are still bound to it
    sb.advance(35)
    assert sb.get("Pod", "shop", f["new_pod"])["spec"]["nodeName"] == node
    sb.advance(30)  # at most 20 s more: the next pass after the quarantine
    assert sb.find("Pod", "shop", f["new_pod"]) is None
    assert sb.violations == []


def test_pod_gc_marks_an_orphaned_pod_failed_before_it_force_deletes_it(pool):
    sb = pool.fresh("node-dead-deployment")
    f = sb.facts
    rv = int(sb.store.resource_version)
    k8s.CoreV1Api(kube_for(sb)).delete_node(f["new_node"])
    sb.advance(65)
    changes = [c for c in sb.store.changes_since(rv) or ()
               if c.plural == "pods" and c.obj["metadata"]["name"] == f["new_pod"]]
    failed = next(c.obj for c in changes if c.obj.get("status", {}).get("phase") == "Failed")
    [cond] = [c for c in failed["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (cond["reason"], cond["message"]) == ("DeletionByPodGC", "PodGC: node no longer exists")
    assert changes[-1].type == "DELETED"

