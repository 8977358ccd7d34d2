"""zone-outage-ngns and data that lives only on a dead machine's own disks.

Before: a zone batch force-stopped an instance-store machine running a pod on a local PV on the
batch's one approval, with no word of what was lost (where ``node-dead-ngns`` asks for one more
person and says it in words); and because the survey counted only claims whose volumes had a
VolumeAttachment, the run ended "succeeded: ... 10 of 10 claims in use again" while a pod bound
to a local volume of a fenced node could never run again.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.sim.local_storage import _instance_store_node, add_local_cache
from tests.rehearsals.conftest import taint_keys

OOS = "node.kubernetes.io/out-of-service"
ZONE = "ap-southeast-1a"
pytestmark = pytest.mark.slow


def _items(st: Any) -> dict[str, dict[str, Any]]:
    return {i["node"]: i for s in st.steps.values() if s.step_id == "recover" and s.result
            for i in s.result["items"]}


def _tainted(r: Any) -> set[str]:
    return {n["metadata"]["name"] for n in r.sandbox.list("Node") if OOS in taint_keys(n)}


def test_a_zone_batch_leaves_a_machine_with_local_data_to_be_fenced_alone(rehearse):
    """Even with every approval the batch could ask for, the machine whose instance store and
    local volume would be wiped is not fenced by the batch: it is left out, naming what it holds
    and where two people are shown it; its batch-mate is fenced as before."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2, hung=2)
    f = r.facts
    node, iid = f["dead_nodes"][0], f["instance_ids"][0]
    _instance_store_node(r.sandbox, node, iid)
    add_local_cache(r.sandbox, node)
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE)
    assert r.sandbox.ec2.instance_state(iid) == "running"  # never stopped, never terminated
    items = _items(st)
    assert items[node]["outcome"] == "dropped", items[node]
    why = items[node]["reason"]
    assert why.startswith("holds local data (") and "search/cache-data" in why
    assert "instance store of m5d.xlarge" in why
    assert "fence it alone with node-dead-ngns, where two people see what is lost" in why
    other = f["dead_nodes"][1]
    assert items[other]["outcome"] == "tainted" and _tainted(r) == {other}
    # what was found is in the batch's plan, for its approvers to read
    plan_facts = {(x["subject"], x["name"]) for s in st.steps.values() if s.step_id == "recover"
                  for x in (s.plan or {}).get("facts") or ()}
    assert (f"instance {iid}", "local_volumes") in plan_facts
    assert (f"instance {iid}", "instance_store") in plan_facts
    assert st.status == "partial" and node in st.outcome, (st.status, st.outcome)
    assert r.verified(st.run_id) and not r.judge(st.run_id).violations


def test_a_local_claim_of_a_fenced_zone_node_is_blocked_and_the_run_is_not_succeeded(rehearse):
    """The node's machine was already stopped (nothing to fence, so nothing is refused): the taint
    goes on, and the claim bound to a local PV on that node is reported blocked, with what it
    takes, never counted recovered nor left out of the count."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2)
    f = r.facts
    node = f["dead_nodes"][0]
    extra = add_local_cache(r.sandbox, node)
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE)
    assert _tainted(r) == set(f["dead_nodes"])
    assert extra["local_pv"] in st.steps["survey"].result["pvs"]
    placement = st.steps["placement"].result
    [local] = [i for i in placement["items"] if i["claim"] == "search/cache-data"]
    assert local["outcome"] == "blocked" and local["local"] == "local", local
    assert node in local["reason"] and "own disks" in local["reason"]
    assert placement["running"] == placement["total"] - 1
    assert st.status == "partial", (st.status, st.outcome)
    assert "search/cache-data" in st.outcome and "succeeded" not in st.outcome
