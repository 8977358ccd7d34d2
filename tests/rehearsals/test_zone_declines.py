"""zone-outage-ngns when people decline, when the API throttles, and what a forced detach names.

Before: the only ways past the break-glass step for stuck hosts (``taint_stuck``) were two people
breaking glass, or a rejection, an abort or an expiry, which all ended the run, so a team that
chose not to break glass lost the waits, the release of what was left behind, the placement check
and the summary of the nodes already fenced. One throttled taint failed a whole batch after its
batch-mates were tainted, and the run then said none of them was out of service. And the forced
detach was offered for "the stopped instances" of every node surveyed, whatever became of them.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.clients import kube as kube_mod
from bot.engine.commands import Reject
from bot.errors import RetryableError
from bot.sim.rehearsal import APPROVERS
from tests.rehearsals.conftest import taint_keys

OOS = "node.kubernetes.io/out-of-service"
ZONE = "ap-southeast-1a"
pytestmark = pytest.mark.slow


def _items(st: Any) -> dict[str, dict[str, Any]]:
    return {i["node"]: i for s in st.steps.values() if s.step_id == "recover" and s.result
            for i in s.result["items"]}


def _tainted(r: Any) -> set[str]:
    return {n["metadata"]["name"] for n in r.sandbox.list("Node") if OOS in taint_keys(n)}


def test_a_zone_team_that_declines_to_break_glass_on_stuck_hosts_still_gets_the_rest_of_the_run(
        rehearse):
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=3, hung=2, stuck=1)
    f = r.facts
    stuck_node, stuck_iid = f["dead_nodes"][1], f["instance_ids"][1]
    r.sandbox.advance(300)

    def decline(state, s):
        if s.step_id == "taint_stuck":
            return Reject(run_id=state.run_id, actor=APPROVERS[0], step=s.key,
                          reason="we do not break glass on this zone: AWS is on it")
        return r.approve_all(state, s)

    st = r.run("zone-outage-ngns", zone=ZONE, stop_timeout="5m", decide=decline)
    assert st.steps["taint_stuck[0]"].status == "rejected"
    assert stuck_node not in _tainted(r)
    assert _tainted(r) == set(f["dead_nodes"]) - {stuck_node}
    # the run went on: the waits, the placement check and the summary of what was done
    for step in ("wait_detach", "placement", "summary"):
        assert st.steps[step].status in ("succeeded", "failed"), (step, st.steps[step].status)
    assert stuck_node in st.steps["summary"].message
    assert st.status == "partial" and "stuck" in st.outcome, (st.status, st.outcome)
    # a machine that may still run is never force-detached: the declined host keeps its volumes
    assert stuck_iid not in (st.steps["held"].plan or {}).get("params", {}).get("instance_ids", [])
    assert not [c for e in r.events(st.run_id) for c in e.payload.get("calls") or ()
                if c["operation"] == "DetachVolume" and stuck_iid in str(c.get("targets"))]
    assert r.verified(st.run_id) and not r.judge(st.run_id).violations


def test_a_throttled_zone_taint_never_loses_what_its_batch_did(rehearse, monkeypatch):
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=3, hung=0)
    f = r.facts
    r.sandbox.advance(300)
    victim = sorted(f["dead_nodes"])[-1]
    real = kube_mod.KubeClient.update

    def flaky(self, *, kind, name, mutate, namespace=None, current=None):
        if kind == "Node" and name == victim:
            raise RetryableError("Too Many Requests", service="kubernetes",
                                 operation="replace_node", code="TooManyRequests")
        return real(self, kind=kind, name=name, mutate=mutate, namespace=namespace,
                    current=current)

    monkeypatch.setattr(kube_mod.KubeClient, "update", flaky)
    st = r.run("zone-outage-ngns", zone=ZONE, stop_timeout="2m")
    assert _tainted(r) == set(f["dead_nodes"]) - {victim}
    items = _items(st)
    assert items[victim]["outcome"] == "failed" and "TooManyRequests" in items[victim]["reason"]
    assert st.steps["recover[0]"].status == "succeeded"
    # what stays in place is on record, so node-recovered links back to this run
    assert st.compensations and "out-of-service taint" in st.compensations[0]
    assert st.status == "partial" and "none of the" not in st.outcome, st.outcome
    assert victim in st.outcome


def test_a_forced_zone_detach_is_offered_only_for_instances_of_nodes_out_of_service(rehearse):
    """IAM refuses the stop of one hung instance: its node is not out of service, its machine
    runs. The list of what EC2 still holds, and the forced detach after it, name only the
    instances of the nodes put out of service."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=3, hung=3)
    f = r.facts
    odd = f["instance_ids"][1]
    ec2 = r.sandbox.ec2_client()
    ec2.delete_tags(Resources=[odd], Tags=[{"Key": "kubernetes.io/cluster/sandbox"}])
    ec2.create_tags(Resources=[odd], Tags=[{"Key": "eks:eks-cluster-name", "Value": "sandbox"}])
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE)
    assert _items(st)[f["dead_nodes"][1]]["outcome"] == "failed"
    held = st.steps["held"]
    assert held.status == "succeeded"
    named = set(held.plan["params"]["instance_ids"])
    assert odd not in named
    assert named == set(f["instance_ids"]) - {odd}
