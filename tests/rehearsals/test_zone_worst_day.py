"""zone-outage-ngns on the worst day: node groups replacing nodes mid-batch, IAM refusing one
instance, detaches already under way. Each node of a batch has its own fate; none blocks the
others, and none is called a violation for having been replaced."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from bot.actions.objects import TAINT_AT
from bot.engine.commands import BreakGlass
from bot.sim.iam import ADMIN_KEY
from bot.sim.rehearsal import CLUSTER, Rehearsal
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
            r.sandbox.at(15, lambda: r.sandbox.ec2.terminate_now(iid))  # the ASG replaces it
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


def _replaced_mid_run(rehearse, *, forget: bool):
    """Two hung machines; a minute into their stop, the node group terminates the first and its
    Node is deleted (with ``forget``, kube-controller-manager then restarts and loses it)."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2, hung=2)
    replaced, iid = r.facts["dead_nodes"][0], r.facts["instance_ids"][0]
    r.sandbox.advance(300)
    asked: list[str] = []

    def restart() -> None:  # once the cloud controller has deleted the Node
        if r.sandbox.find("Node", None, replaced) is not None:
            r.sandbox.at(5, restart)
        else:
            r.sandbox.ctx.state.pop("deleted_nodes", None)

    def approve(state, s):
        if s.step_id == "recover" and not asked:
            r.sandbox.at(15, lambda: r.sandbox.ec2.terminate_now(iid))
            if forget:
                r.sandbox.at(65, restart)
        asked.append(s.key)
        return r.approve_all(state, s)

    st = r.run("zone-outage-ngns", zone=ZONE, decide=approve)
    return r, st, replaced, asked


def test_a_replaced_nodes_attachments_are_left_to_kubernetes_and_nobody_is_asked(rehearse):
    """The attach/detach controller detaches a deleted node's volumes once pod GC's 40 s and its
    own 6 minutes have passed; nothing makes them go sooner. Before: the wait read them every
    15-30 s all that time (25 lists here), and, when the node was deleted just before the wait
    began, ended before the controller's and asked people to approve deleting VolumeAttachments
    Kubernetes was about to delete itself (bench/zone_outage.py, replacement)."""
    r, st, replaced, asked = _replaced_mid_run(rehearse, forget=False)
    assert st.status == "succeeded", st.outcome
    assert st.steps["wait_detach"].status == "succeeded"
    assert not [k for k in asked if k.startswith("va_delete")], asked
    assert not [v for v in r.sandbox.list("VolumeAttachment") if v["spec"]["nodeName"] == replaced]
    deletes = [c for e in r.events(st.run_id) for c in e.payload.get("calls") or ()
               if c["operation"] == "delete_volume_attachment"]
    assert deletes == []
    polls = [c for e in r.events(st.run_id) if e.payload.get("step") == "wait_detach"
             for c in e.payload.get("calls") or () if c["outcome"] != "cached"]
    assert len(polls) <= 8, len(polls)  # every two minutes once only the deleted node's are left
    assert_clean(r, st.run_id)


def test_a_replaced_nodes_attachments_the_controller_forgot_are_still_deleted(rehearse):
    """The same, but kube-controller-manager restarted after the deletion: nothing of Kubernetes
    will ever detach them, so once the longer wait ends they are deleted under rule 10, with an
    approval of their own."""
    r, st, replaced, asked = _replaced_mid_run(rehearse, forget=True)
    assert st.steps["wait_detach"].status == "failed"
    assert [k for k in asked if k.startswith("va_delete")], asked
    assert not [v for v in r.sandbox.list("VolumeAttachment") if v["spec"]["nodeName"] == replaced]
    assert st.status == "succeeded", st.outcome
    assert_clean(r, st.run_id)


def test_nodes_replaced_before_their_batch_is_planned_are_gone_and_the_zone_recovers(rehearse):
    """The node group replaces the dead machines of the second batch while the first still waits
    for its hung ones. Before: the second batch's plan dropped its nodes ("the node no longer
    exists"), the wait for attachments did not know them as deleted and failed, the run ended
    partial and asked for a re-run for nodes that no longer existed."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=4, hung=1,
                 volumes_per_node=1, replacement=True, replace_after=400, os_shutdown_timeout=600)
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE, batch_size="2")
    batches = [s for s in st.steps.values() if s.step_id == "recover"]
    assert len(batches) == 2
    second = {i["node"]: i for i in batches[1].result["items"]}
    assert {i["outcome"] for i in second.values()} == {"gone"}, second
    assert all("deleted before its batch" in i["reason"] for i in second.values())
    assert st.steps["wait_detach"].status == "succeeded"
    assert st.status == "succeeded", st.outcome
    assert st.steps["placement"].result["running"] == st.steps["placement"].result["total"]
    assert_clean(r, st.run_id)


def test_a_zone_whose_node_group_replaced_every_dead_node_recovered_and_says_so(rehearse):
    """Every dead machine is replaced before the bot could fence it (the hung ones while their
    forced stop ran), and every claim runs again on the replacements. Before: "none of the 4
    NotReady nodes was put out of service", the run failed for a zone that recovered."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=4, hung=2,
                 volumes_per_node=1, replacement=True, replace_after=400, os_shutdown_timeout=600)
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE, batch_size="2")
    outcomes = {i["outcome"] for s in st.steps.values() if s.step_id == "recover" and s.result
                for i in s.result["items"]}
    assert outcomes == {"gone"}, outcomes
    assert st.status == "succeeded", st.outcome
    assert "or replaced by its node group (4)" in st.outcome
    assert st.steps["placement"].result["running"] == st.steps["placement"].result["total"]
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


def test_one_instance_stuck_stopping_never_keeps_its_batch_mates_untainted(rehearse):
    """A forced stop on a failed host never completes. Before: the batch tainted nobody until
    every instance was stopped, then timed out with every node untainted. Now each node is
    tainted as its own machine stops; the stuck one is "stuck" after stop_timeout, and tainting
    it without a confirmed stop waits for two people to break glass."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=3, hung=2, stuck=1)
    f = r.facts
    stuck_node = f["dead_nodes"][1]  # the last hung instance sits on the failed host
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE, stop_timeout="5m")
    items = _items(st)
    assert items[stuck_node]["outcome"] == "stuck", items[stuck_node]
    assert "Ask AWS" in items[stuck_node]["reason"]
    assert {items[n]["outcome"] for n in f["dead_nodes"] if n != stuck_node} == {"tainted"}
    # the batch-mates were tainted long before the stuck one's deadline
    batch = st.steps["recover[0]"]
    began = datetime.fromisoformat(str(batch.applying_since))
    for n in f["dead_nodes"]:
        if n != stuck_node:
            at = r.sandbox.get("Node", None, n)["metadata"]["annotations"][TAINT_AT]
            assert (datetime.fromisoformat(at.replace("Z", "+00:00")) - began).total_seconds() < 200
    # the run waits, for people, on the break-glass step: never a silent hang
    assert st.status == "awaiting_approval"
    s = st.steps["taint_stuck[0]"]
    assert s.blocked and s.blocked["rule"] == "oos-taint" and "stopping" in s.blocked["message"]
    assert stuck_node not in _tainted(r)
    for who in ("bob", "carol"):
        assert r.submit(BreakGlass(run_id=st.run_id, actor=who, step=s.key,
                                   reason="AZ outage declared, AWS confirms the host is dead")).ok
    st = r.play(st.run_id)
    assert stuck_node in _tainted(r)
    # the stuck host still holds its volumes: a forced detach from a machine that may run is
    # rule 2's to refuse; the step detaching every held volume waits for its own break-glass,
    # naming each volume the stuck host holds, and nothing is detached meanwhile
    held = next(x for x in st.steps.values() if x.blocked)
    assert held.step_id == "force_detach" and held.blocked["rule"] == "force-detach"
    assert f["instance_ids"][1] in held.blocked["message"]
    stuck_volumes = [v for v, rows in r.sandbox.ec2.attachments().items()
                     if rows and rows[0][0] == f["instance_ids"][1]
                     and r.sandbox.ec2.tags(v).get("CSIVolumeName")]
    assert stuck_volumes and all(v in held.blocked["message"] for v in stuck_volumes)
    assert not [c for e in r.events(st.run_id) for c in e.payload.get("calls") or ()
                if c["operation"] == "DetachVolume"]
    # the override is on record with both people and their reasons; the machine was in fact dead
    # (its guest hung on the failed host), so no invariant was broken
    [ev] = [e.payload for e in r.events(st.run_id) if e.type == "interlock.overridden"]
    assert ev["rule"] == "oos-taint" and ev["step"] == s.key
    assert set(ev["approvers"]) == {"bob", "carol"}
    assert r.verified(st.run_id) and not r.judge(st.run_id).violations


def test_a_zone_run_in_which_nothing_recovered_never_ends_succeeded(rehearse):
    """Every machine of the zone is one IAM refuses to stop: every step finishes (they all go on
    past a failure), and before, the run said it succeeded."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2, hung=2)
    f = r.facts
    ec2 = r.sandbox.ec2_client()
    for iid in f["instance_ids"]:
        ec2.delete_tags(Resources=[iid], Tags=[{"Key": "kubernetes.io/cluster/sandbox"}])
        ec2.create_tags(Resources=[iid], Tags=[{"Key": "eks:eks-cluster-name", "Value": "sandbox"}])
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE)
    assert st.status == "failed", (st.status, st.outcome)
    assert "none of the 2 NotReady node(s)" in st.outcome
    assert {i["outcome"] for i in _items(st).values()} == {"failed"}
    assert _tainted(r) == set()
    [end] = [e.payload for e in r.events(st.run_id) if e.type == "run.finished"]
    assert end.get("status") == "failed" or end.get("outcome") == "failed", end


def test_a_claim_whose_ebs_volume_is_impaired_is_blocked_never_called_recovered(rehearse):
    """EBS disabled the I/O of two volumes of the failed zone (io-enabled failed): their claims'
    pods may even run, but the claims are blocked with the remedy, never counted recovered."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2, impaired_volumes=2)
    r.sandbox.advance(300)
    st = r.run("zone-outage-ngns", zone=ZONE)
    placement = st.steps["placement"].result
    bad = set(r.sandbox.ec2.zone.impaired_volumes)  # the EBS volumes whose I/O EBS disabled
    impaired = [i for i in placement["items"] if i["volume_id"] in bad]
    assert impaired and all(i["volume_status"] == "impaired" for i in impaired)
    assert all(i["outcome"] == "blocked" and "enable-volume-io" in i["reason"] for i in impaired)
    assert placement["running"] == placement["total"] - len(impaired)
    assert st.status == "succeeded" and "blocked with their remedy" in st.outcome
    assert_clean(r, st.run_id)


def test_a_claim_whose_volume_a_stuck_host_holds_is_blocked_with_the_remedy(tmp_path):
    """Placement, on its own: the dead machine was force-stopped but its failed host keeps it
    stopping, and with it every volume attached. Its claims are blocked with the remedy, not left
    waiting as if time would fix them."""
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "placement.yaml").write_text(
        "apiVersion: runbook-bot/v1\nkind: Runbook\nmetadata:\n  name: placement\n"
        "  title: Where the claims are\nspec:\n  params:\n    zone: {type: string, required: true}\n"
        "    nodes: {type: list}\n    pvs: {type: list}\n    cluster: {type: string}\n  steps:\n"
        "    - id: placement\n      title: Check the claims\n      action: k8s.zone.placement\n"
        "      with:\n        zone: \"{{ params.zone }}\"\n        nodes: \"{{ params.nodes }}\"\n"
        "        pvs: \"{{ params.pvs }}\"\n        cluster: \"{{ params.cluster }}\"\n")
    r = Rehearsal("az-outage", options={"nodes": 1, "hung": 1, "stuck": 1},
                  workdir=tmp_path / "r", runbooks_dir=str(runbooks))
    r.start()
    try:
        f = r.facts
        node, iid = f["dead_nodes"][0], f["instance_ids"][0]
        r.sandbox.ec2_client().stop_instances(InstanceIds=[iid], Force=True)
        r.sandbox.advance(600, step=30)
        assert r.sandbox.ec2.instance_state(iid) == "stopping"
        pvs = sorted({v["spec"]["source"]["persistentVolumeName"] for v in r.sandbox.list(
            "VolumeAttachment") if v["spec"]["nodeName"] == node})
        st = r.run("placement", zone=ZONE, nodes=node, pvs=",".join(pvs), cluster=CLUSTER)
        items = st.steps["placement"].result["items"]
        assert items and {i["outcome"] for i in items} == {"blocked"}, items
        assert all(f"held by instance {iid}, stuck stopping" in i["reason"] for i in items)
        assert all("ask AWS" in i["reason"] for i in items)
    finally:
        r.stop()
