"""zone-outage-ngns end to end in the az-outage sandbox: batches, drops, the cap, other zones."""

from __future__ import annotations

from typing import Any

import pytest

from bot.engine.commands import BreakGlass
from tests.rehearsals.conftest import assert_clean, taint_keys

OOS = "node.kubernetes.io/out-of-service"
ZONE = "ap-southeast-1a"
pytestmark = pytest.mark.slow


def _outcomes(st: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in st.steps.values():
        if s.step_id == "recover" and s.result:
            out.update({i["node"]: i["outcome"] for i in s.result["items"]})
    return out


def _tainted(r: Any) -> set[str]:
    return {n["metadata"]["name"] for n in r.sandbox.list("Node") if OOS in taint_keys(n)}


def _state(r: Any, iid: str) -> str:
    inst = r.sandbox.ec2.instance(iid)
    return str(inst._state.name)


def test_twelve_dead_nodes_recover_in_two_batches(rehearse):
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=12, hung=3)
    f = r.facts
    r.sandbox.advance(300)  # the hung nodes have been NotReady longer than fence_min_not_ready
    st = r.run("zone-outage-ngns", zone=ZONE)
    assert st.status == "succeeded", st.outcome
    batches = [s for s in st.steps.values() if s.step_id == "recover"]
    assert [len(s.item) for s in batches] == [10, 2]
    assert _tainted(r) == set(f["dead_nodes"])
    assert all(_state(r, i) == "stopped" for i in f["instance_ids"])
    assert set(_outcomes(st).values()) == {"tainted"}
    # at most one StopInstances per batch, for the three hung instances only
    stops = [(e.payload["step"], c["targets"]) for e in r.events(st.run_id)
             for c in e.payload.get("calls") or () if c["operation"] == "StopInstances"]
    assert len({s for s, _ in stops}) == len(stops) <= 2
    assert sorted(i for _, ts in stops for i in ts) == sorted(f["instance_ids"][:3])
    # one approval per batch
    granted = [e for e in r.events(st.run_id) if e.type == "approval.granted"]
    assert sorted(e.payload["step"] for e in granted) == ["recover[0]", "recover[1]"]
    placement = st.steps["placement"].result
    assert placement["running"] == placement["total"] == 12 * 5, placement
    summary = st.steps["summary"].message
    # one line for the nodes all out of service (each node's outcome is in its batch's step)
    assert "12 node(s) out of service in 2 batch(es)." in summary and "Not out of service" not in summary
    assert "out-of-service taint" in summary
    # nodes of other zones untouched
    assert not _tainted(r) & set(f["other_zone_nodes"])
    assert_clean(r, st.run_id)



def test_a_node_that_recovers_after_approval_is_dropped_and_the_rest_proceed(rehearse):
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=4, hung=4)
    f = r.facts
    r.sandbox.advance(300)
    back = f["dead_nodes"][0]
    iid = f["instance_ids"][0]
    done: list[str] = []

    def approve_then_recover(state, s):
        cmd = r.approve_all(state, s)
        if s.step_id == "recover" and not done:
            r.submit(cmd)  # approved with all four nodes in the plan ...
            r.sandbox.ec2.set_hung(iid, False)  # ... then one guest comes back before apply
            r.sandbox.advance(15)
            done.append(s.key)
            return None
        return cmd

    run_id = r.start_run("zone-outage-ngns", zone=ZONE)
    st = r.play(run_id, decide=approve_then_recover)
    st = r.play(run_id)
    # the runbook's outcome rules: a node dropped from its batch is not recovered
    assert st.status == "partial" and f"{back} dropped" in st.outcome, (st.status, st.outcome)
    assert _state(r, iid) == "running" and back not in _tainted(r)
    assert _tainted(r) == set(f["dead_nodes"][1:])
    assert all(_state(r, i) == "stopped" for i in f["instance_ids"][1:])
    assert _outcomes(st)[back] == "dropped"
    narrowed = [e.payload for e in r.events(run_id)
                if e.type == "step.planned" and e.payload.get("narrowed_from")]
    assert len(narrowed) == 1 and list(narrowed[0]["dropped"]) == [back]
    assert "Ready" in narrowed[0]["dropped"][back]
    # the approval stood: nobody was asked again
    assert [e.type for e in r.events(run_id)].count("approval.invalidated") == 0
    stops = [c["targets"] for e in r.events(run_id) for c in e.payload.get("calls") or ()
             if c["operation"] == "StopInstances"]
    assert all(iid not in ts for ts in stops)
    assert_clean(r, run_id)


def test_the_cap_holds_and_break_glass_for_n_allows_n_not_more(rehearse):
    r = rehearse("az-outage", nodes=5)
    f = r.facts
    run_id = r.start_run("zone-outage-ngns", zone=ZONE)
    st = r.play(run_id)
    s = st.steps["recover[0]"]
    assert st.status == "awaiting_approval" and s.blocked and s.blocked["rule"] == "blast-radius"
    assert s.blocked["count"] == 5 and _tainted(r) == set()
    # break-glass must name a number; an override for 4 does not allow 5
    out = r.submit(BreakGlass(run_id=run_id, actor="bob", reason="zone outage declared"))
    assert not out.ok and "--nodes" in out.message
    for who in ("bob", "carol"):
        assert r.submit(BreakGlass(run_id=run_id, actor=who, reason="zone outage INC-1",
                                   nodes=4)).ok
    st = r.play(run_id)
    s = st.steps["recover[0]"]
    assert s.blocked and s.blocked["rule"] == "blast-radius" and "allows 4" in s.blocked["message"]
    assert _tainted(r) == set()
    for who in ("bob", "carol"):
        assert r.submit(BreakGlass(run_id=run_id, actor=who, reason="zone outage INC-1",
                                   nodes=5)).ok
    st = r.play(run_id)
    assert st.status == "succeeded", st.outcome
    assert _tainted(r) == set(f["dead_nodes"])
    granted = [e.payload for e in r.events(run_id) if e.type == "interlock.override_granted"]
    assert [g.get("nodes") for g in granted] == [4, 5]
    assert any(e.type == "interlock.overridden" for e in r.events(run_id))
    assert_clean(r, run_id)


def test_a_node_of_another_zone_refuses_the_run_and_nothing_changes(rehearse):
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=3)
    f = r.facts
    other = f["other_zone_nodes"][0]
    st = r.run("zone-outage-ngns", zone=ZONE, nodes=",".join([*f["dead_nodes"], other]))
    s = st.steps["survey"]
    assert s.blocked and s.blocked["rule"] == "zone-scope" and other in s.blocked["message"]
    assert _tainted(r) == set()
    # break-glass does not lift it: the zone is not a judgement call
    for who in ("bob", "carol"):
        r.submit(BreakGlass(run_id=st.run_id, actor=who, reason="try anyway"))
    st = r.play(st.run_id)
    assert st.steps["survey"].blocked and _tainted(r) == set()
    assert_clean(r, st.run_id)


def test_a_spot_node_is_terminated_in_its_batch_and_named_as_a_termination(rehearse):
    """EC2 cannot stop a one-time Spot instance: the batch terminates it under the batch's
    approval, whose plan names it as a termination, and its node is then out of service or gone
    (the cloud controller deletes the Node of a terminated instance); the others are stopped."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=4, hung=2, spot=1)
    f = r.facts
    r.sandbox.advance(300)
    spot, spot_iid = f["spot"][0], f["instance_ids"][0]
    st = r.run("zone-outage-ngns", zone=ZONE)
    assert st.status == "succeeded", st.outcome
    planned = [(c["operation"], c["target"]) for e in r.events(st.run_id)
               if e.type == "step.planned" and e.payload.get("step") == "recover[0]"
               for c in (e.payload.get("plan") or {}).get("changes") or ()]
    assert ("terminate", spot_iid) in planned and ("force-stop", spot_iid) not in planned
    calls = [(c["operation"], c["targets"]) for e in r.events(st.run_id)
             for c in e.payload.get("calls") or ()
             if c["operation"] in ("StopInstances", "TerminateInstances")]
    assert calls.count(("TerminateInstances", [spot_iid])) == 1
    assert all(spot_iid not in ts for op, ts in calls if op == "StopInstances")
    assert _state(r, spot_iid) == "terminated"
    out = _outcomes(st)
    assert out[spot] in ("tainted", "gone"), out
    assert all(out[n] == "tainted" for n in f["dead_nodes"] if n != spot), out
    assert _tainted(r) >= set(f["dead_nodes"]) - {spot}
    assert_clean(r, st.run_id)


def test_what_ec2_still_holds_is_force_detached_through_the_guarded_path(rehearse):
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2)
    f = r.facts
    iid = f["instance_ids"][0]
    stuck = next(v for v, rows in r.sandbox.ec2.attachments().items()
                 if rows and rows[0][0] == iid and r.sandbox.ec2.tags(v).get("CSIVolumeName"))
    r.sandbox.ec2.mark_stuck(stuck, "busy")  # its DetachVolume never completes
    st = r.run("zone-outage-ngns", zone=ZONE, detach_wait="2m")
    assert st.status == "succeeded", st.outcome
    assert st.steps["wait_detach"].status == "failed"  # the attachment stayed
    assert st.steps["held"].outputs["items"] == [
        {"volume_id": stuck, "instance_id": iid, "pv": r.sandbox.ec2.tags(stuck)["CSIVolumeName"],
         "state": "busy"}]
    detach = st.steps["force_detach"]  # one step for every volume still held
    assert detach.status == "succeeded" and len({v.by for v in detach.approvals()}) == 2
    assert [(i["volume_id"], i["forced"]) for i in detach.result["items"]] == [(stuck, True)]
    assert r.sandbox.ec2.attachments()[stuck] == [] or r.sandbox.ec2.attachments()[stuck][0][0] != iid
    assert st.steps["placement"].result["running"] == st.steps["placement"].result["total"]
    assert_clean(r, st.run_id)
