"""A zone batch (``k8s.zone.fence_taint``) is as careful as the fence of one node.

Before: it force-stopped machines whose pods' data lived on their own disks (local volumes,
instance store) on the batch's one approval, with no word of what was lost; it checked the
blast radius after its StopInstances, so a refusal came with machines already stopping; one
throttled taint escaped the action after its batch-mates were tainted, losing what it had done;
and a first apply retried after a transient error was taken for a poll, which never fences.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.clients import kube as kube_mod
from bot.errors import InterlockBlocked, RetryableError

OOS = "node.kubernetes.io/out-of-service"
ZONE = "us-east-1a"
TYPE_LABEL = "node.kubernetes.io/instance-type"


def _dead(world, *, state: str = "running", name: str | None = None) -> tuple[str, str]:
    iid = world.instance(state=state)
    node = world.dead_node(iid, name=name)
    obj = world.kube.get("nodes", node)
    obj["metadata"]["labels"][TYPE_LABEL] = "m5.xlarge"  # no instance store
    world.kube.put("nodes", obj)
    return iid, node


def _local_pv(world, name: str, *, key: str, node: str, claim: str,
              spec: dict[str, Any]) -> None:
    world.kube.put("persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {**spec, "storageClassName": "local",
                 "claimRef": {"namespace": "default", "name": claim},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": key, "operator": "In", "values": [node]}]}]}}},
        "status": {"phase": "Bound"}})


def _stops(world) -> list[str]:
    return [w for w in world.writes() if w in ("StopInstances", "TerminateInstances")]


def test_a_zone_batch_never_fences_a_machine_whose_pods_data_is_on_its_own_disks(world):
    """A TopoLVM volume pinned by its driver's own topology key, its pod already force-deleted:
    only the affinity says the data is on that machine. The batch leaves that node out, saying
    where two people see what is lost, and fences the others."""
    kept, kept_node = _dead(world, name="n1")
    local, local_node = _dead(world, name="n2")
    _local_pv(world, "pvc-lvm", key="topology.topolvm.io/node", node=local_node,
              claim="data-pg-0", spec={"csi": {"driver": "topolvm.io", "volumeHandle": "v1"}})
    plan, _ = world.plan("k8s.zone.fence_taint", zone=ZONE, nodes=[kept_node, local_node])
    assert {c.target for c in plan.changes} == {kept, kept_node}
    why = plan.data["batch"]["dropped"][local_node]
    assert why.startswith("holds local data (")
    assert "data-pg-0" in why and "fence it alone with node-dead-ngns" in why
    assert "two people see what is lost" in why
    # what was found is shown to the batch's approvers, and the batch asks for nobody more
    lost = [f.value for f in plan.facts if f.subject == f"instance {local}"
            and f.name == "local_volumes"]
    assert lost and lost[0][0]["pv"] == "pvc-lvm"
    assert "approvers_raised" not in plan.data
    world.until_done(plan)
    assert world.instance_state(local) == "running" and OOS not in str(world.taints(local_node))
    assert world.instance_state(kept) == "stopped"


def test_local_data_that_appears_before_apply_drops_the_node_and_stops_nothing_of_it(world):
    iid, node = _dead(world, name="n1")
    plan, _ = world.plan("k8s.zone.fence_taint", zone=ZONE, nodes=[node])
    assert [c.operation for c in plan.changes] == ["force-stop", "taint"]
    _local_pv(world, "local-pv-1", key="kubernetes.io/hostname", node=node, claim="cache-0",
              spec={"local": {"path": "/mnt/disks/nvme1n1"}})
    world.pod("cache-0", node=node, pvc="cache-0")
    result, _ = world.apply(plan)
    [item] = result.data["items"]
    assert item["outcome"] == "dropped" and "holds local data" in item["reason"]
    assert _stops(world) == [] and world.instance_state(iid) == "running"


@pytest.mark.parametrize("world", [{"max_oos": 3}], indirect=True)
def test_the_blast_radius_is_checked_before_any_machine_of_the_batch_is_stopped(world):
    iid, node = _dead(world, name="n1")
    plan, _ = world.plan("k8s.zone.fence_taint", zone=ZONE, nodes=[node])
    # meanwhile three other nodes were put out of service: the batch would make it four
    for other in ("o1", "o2", "o3"):
        world.node(other, ready="Unknown", taints=[{"key": OOS, "value": "nodeshutdown",
                                                     "effect": "NoExecute"}])
    with pytest.raises(InterlockBlocked) as e:
        world.apply(plan)
    assert e.value.rule == "blast-radius"
    assert _stops(world) == [] and world.instance_state(iid) == "running"


def test_a_throttled_taint_is_tried_again_at_the_next_poll_and_its_batch_mates_keep_theirs(
        world, monkeypatch):
    nodes = [_dead(world, state="stopped", name=f"n{i}")[1] for i in range(3)]
    victim = nodes[-1]
    real = kube_mod.KubeClient.update
    refusals = [2]

    def flaky(self, *, kind, name, mutate, namespace=None, current=None):
        if kind == "Node" and name == victim and refusals[0]:
            refusals[0] -= 1
            raise RetryableError("Too Many Requests", service="kubernetes",
                                 operation="replace_node", code="TooManyRequests")
        return real(self, kind=kind, name=name, mutate=mutate, namespace=namespace,
                    current=current)

    monkeypatch.setattr(kube_mod.KubeClient, "update", flaky)
    plan, _ = world.plan("k8s.zone.fence_taint", zone=ZONE, nodes=nodes)
    first, _ = world.apply(plan)  # returns what it did: never raises past its batch-mates' taints
    assert not first.done
    assert sorted(first.data["out_of_service"]) == sorted(nodes[:2])
    [late] = [i for i in first.data["items"] if i["node"] == victim]
    assert late["outcome"] == "fencing" and "TooManyRequests" in late["reason"]
    results, _ = world.until_done(plan, limit=5)
    assert sorted(results[-1].data["out_of_service"]) == sorted(nodes)
    assert results[-1].data["compensation"]
    assert all(OOS in str(world.taints(n)) for n in nodes)


def test_a_taint_that_stays_throttled_past_stop_timeout_fails_alone(world, monkeypatch):
    nodes = [_dead(world, state="stopped", name=f"n{i}")[1] for i in range(2)]
    victim = nodes[-1]
    real = kube_mod.KubeClient.update

    def flaky(self, *, kind, name, mutate, namespace=None, current=None):
        if kind == "Node" and name == victim:
            raise RetryableError("Too Many Requests", service="kubernetes",
                                 operation="replace_node", code="TooManyRequests")
        return real(self, kind=kind, name=name, mutate=mutate, namespace=namespace,
                    current=current)

    monkeypatch.setattr(kube_mod.KubeClient, "update", flaky)
    plan, _ = world.plan("k8s.zone.fence_taint", zone=ZONE, nodes=nodes, stop_timeout="2m")
    began, last = world.clock.now(), None
    for n in range(30):  # as the engine applies and polls: the step's clock starts at its apply
        ctx = world.ctx(poll=n > 0, last_result=last)
        ctx.applying_since = began
        result = world.catalog.apply(plan.action, plan, ctx)
        if result.done:
            break
        last = dict(result.data)
        world.clock.advance(result.retry_after)
    assert result.done and (world.clock.now() - began).total_seconds() >= 120
    items = {i["node"]: i for i in result.data["items"]}
    assert items[nodes[0]]["outcome"] == "tainted"
    assert items[victim]["outcome"] == "failed" and "TooManyRequests" in items[victim]["reason"]
    assert result.data["out_of_service"] == [nodes[0]] and result.data["compensation"]


def test_a_first_apply_retried_after_a_transient_error_still_fences(world, monkeypatch):
    """The engine retries an apply that raised a retryable error before it wrote anything; the
    retry comes as a poll with no earlier result. Before, the batch took it for a poll after its
    fence and dropped every machine still running as "running again after the fence"."""
    iid, node = _dead(world, name="n1")
    plan, _ = world.plan("k8s.zone.fence_taint", zone=ZONE, nodes=[node])
    result, _ = world.apply(plan, poll=True)  # last_result is None: no earlier apply returned
    [item] = result.data["items"]
    assert item["outcome"] != "dropped", item
    assert _stops(world) == ["StopInstances"]
    assert world.instance_state(iid) in ("stopping", "stopped")
