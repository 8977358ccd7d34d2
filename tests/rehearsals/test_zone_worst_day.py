"""zone-outage-ngns on the worst day: node groups replacing nodes mid-batch, IAM refusing one
instance, detaches already under way. Each node of a batch has its own fate; none blocks the
others, and none is called a violation for having been replaced."""

from __future__ import annotations

from typing import Any

import pytest

from bot.sim.iam import ADMIN_KEY
from tests.rehearsals.conftest import assert_clean, taint_keys

OOS = "node.kubernetes.io/out-of-service"
ZONE = "ap-southeast-1a"
pytestmark = pytest.mark.slow


def _items(st: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for s in st.steps.values():
        if s.step_id == "recover" and s.result:
            out.update({i["node"]: i for i in s.result["items"]})
    return out


def _tainted(r: Any) -> set[str]:
    return {n["metadata"]["name"] for n in r.sandbox.list("Node") if OOS in taint_keys(n)}


def test_a_node_its_node_group_replaces_mid_batch_is_gone_and_never_blocks_the_batch(rehearse):
    """The hung machines take ten minutes to power off under a forced stop. A minute into the
    wait, the node group terminates one of them (its health check replaced it) and the cloud
    controller deletes its Node. Before: the next full read of the batch met a named node that
    no longer existed, interlock 9 refused the whole batch as "not a node of this cluster" (which
    nothing lifts), and the run hung with its batch-mates stopped and never tainted."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=3, hung=3,
                 os_shutdown_timeout=600)
    f = r.facts
    replaced, iid = f["dead_nodes"][0], f["instance_ids"][0]
    r.sandbox.advance(300)
    scheduled: list[str] = []

    def approve(state, s):
        if s.step_id == "recover" and not scheduled:
            scheduled.append(s.key)
            r.sandbox.at(60, lambda: r.sandbox.ec2.terminate_now(iid))  # the ASG replaces it
        return r.approve_all(state, s)

    st = r.run("zone-outage-ngns", zone=ZONE, decide=approve)
    assert st.status not in ("awaiting_approval", "running", "waiting"), st.status
    items = _items(st)
    assert items[replaced]["outcome"] == "gone", items[replaced]
    assert "replaced" in items[replaced]["reason"] and "terminated" in items[replaced]["reason"]
    assert {items[n]["outcome"] for n in f["dead_nodes"][1:]} == {"tainted"}, items
    assert _tainted(r) == set(f["dead_nodes"][1:])
    assert not [e for e in r.events(st.run_id) if e.type == "interlock.blocked"]
    assert r.sandbox.find("Node", None, replaced) is None
    # its volumes were let go: by the attach/detach controller, or deleted as leftovers
    assert not [v for v in r.sandbox.list("VolumeAttachment") if v["spec"]["nodeName"] == replaced]
    assert st.steps["leftover"].status in ("succeeded", "skipped")
    assert_clean(r, st.run_id)


def test_an_instance_iam_refuses_fails_alone_and_its_batch_mates_are_fenced(rehearse):
    """A Karpenter-style instance tagged eks:eks-cluster-name but not kubernetes.io/cluster/NAME:
    rule 8 knows it is this cluster's, the IAM policy (conditioned on the cluster tag) refuses the
    StopInstances. Before: the refusal failed the whole batch."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=3, hung=3)
    f = r.facts
    odd = f["instance_ids"][1]
    ec2 = r.sandbox.ec2_client()
    ec2.delete_tags(Resources=[odd], Tags=[{"Key": "kubernetes.io/cluster/sandbox"}])
    ec2.create_tags(Resources=[odd], Tags=[{"Key": "eks:eks-cluster-name", "Value": "sandbox"}])
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE)
    items = _items(st)
    node = f["dead_nodes"][1]
    assert items[node]["outcome"] == "failed" and "UnauthorizedOperation" in items[node]["reason"]
    assert {items[n]["outcome"] for n in f["dead_nodes"] if n != node} == {"tainted"}
    assert _tainted(r) == set(f["dead_nodes"]) - {node}
    assert r.sandbox.ec2.instance_state(odd) == "running" and node not in _tainted(r)
    assert node in st.steps["summary"].message
    # the refused call is the one IAM refused, on the wire; no taint on the running machine
    refused = [w for w in r.sandbox.ec2.wire if w.access_key != ADMIN_KEY
               and w.action == "StopInstances"]
    assert len(refused) >= 2
    assert r.verified(st.run_id) and not r.judge(st.run_id).violations


def test_karpenter_replaces_the_tainted_nodes_and_the_claims_move_to_its_new_nodes(rehearse):
    """Karpenter learns of the stopped instances and replaces them a minute later: it terminates
    each (its NodeClaim and Node go once the machine is gone) and launches a new node with a
    NodeClaim of its own. The bot's taint comes first; Karpenter's replacement never undoes it
    into a live machine, and the claims end up on the new nodes."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2,
                 node_group="karpenter", replacement=True, replace_after=400)
    f = r.facts
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE)
    items = _items(st)
    assert {items[n]["outcome"] for n in f["dead_nodes"]} == {"tainted"}, items
    r.sandbox.advance(900, step=30)  # Karpenter's replacement runs its course
    assert all(r.sandbox.find("Node", None, n) is None for n in f["dead_nodes"])
    claims = r.sandbox.list("NodeClaim")
    names = {n["metadata"]["name"] for n in r.sandbox.list("Node")}
    assert {c["status"]["nodeName"] for c in claims} == names  # every node, new ones included
    assert all(r.sandbox.ec2.instance_state(i) == "terminated" for i in f["instance_ids"])
    placement = st.steps["placement"].result
    assert placement["running"] == placement["total"], placement
    assert_clean(r, st.run_id)
