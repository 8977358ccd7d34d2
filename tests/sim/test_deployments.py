"""Deployments and ReplicaSets in the sandbox: a dead node's pod is replaced while it is still
Terminating there, a rolling update surges a new pod before the old one goes, scaling to 0 empties
the workload."""

from __future__ import annotations

from typing import Any

APP = {"app": "cart"}


def _pods(sb: Any) -> list[dict[str, Any]]:
    return [p for p in sb.list("Pod", "shop") if p["metadata"].get("labels", {}).get("app") == "cart"]


def test_the_evicted_pod_stays_terminating_and_its_replacement_waits_on_multi_attach(pool):
    sb = pool.get("node-dead-deployment")
    f = sb.facts
    old = sb.get("Pod", "shop", f["pod"])
    new = sb.get("Pod", "shop", f["new_pod"])
    assert old["metadata"].get("deletionTimestamp") and old["spec"]["nodeName"] == f["dead_node"]
    assert new["status"]["phase"] == "Pending" and new["spec"]["nodeName"] == f["new_node"]
    [owner] = new["metadata"]["ownerReferences"]
    assert owner["kind"] == "ReplicaSet" and owner["controller"] is True
    assert any(e.reason == "FailedAttachVolume" and e.object == f"Pod/shop/{f['new_pod']}"
               for e in sb.ctx.events)


def test_a_rolling_update_creates_the_new_pod_while_the_old_one_still_runs(pool):
    sb = pool.fresh("node-dead-deployment")
    f = sb.facts
    sb.repair_node(f["dead_node"])  # the old node comes back: a healthy Deployment again
    sb.advance(120)
    [running] = [p for p in _pods(sb) if p["status"].get("phase") == "Running"]
    sb.store.mutate("Deployment", "shop", "cart", lambda d: d["spec"]["template"]["metadata"][
        "labels"].update(version="2"))
    sb.advance(5)
    rses = sorted(sb.list("ReplicaSet", "shop"), key=lambda r: r["metadata"]["creationTimestamp"])
    assert [r["spec"]["replicas"] for r in rses] == [1, 1]  # maxSurge 1, maxUnavailable 0
    assert sb.get("Pod", "shop", running["metadata"]["name"])["status"]["phase"] == "Running"
    assert len([p for p in _pods(sb) if not p["metadata"].get("deletionTimestamp")]) == 2


def test_scaling_to_zero_leaves_only_the_pod_the_dead_node_cannot_confirm(pool):
    sb = pool.get("node-dead-deployment", scaled_to_zero=True)
    f = sb.facts
    assert [p["metadata"]["name"] for p in _pods(sb)] == [f["pod"]]
    assert sb.get("Deployment", "shop", "cart")["spec"]["replicas"] == 0
