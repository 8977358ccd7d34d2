"""A zone outage with a machine that may still be alive: held, fenced in the same run once EC2
confirms it is down, and never fenced when it is not.

In the first minutes of an outage a hung guest's instance reads ``running`` with its status
checks still ``ok``; interlock 8 holds its fence (it may be alive). Before, its batch dropped it:
the run then waited six minutes for VolumeAttachments that could not go and ten for pods that
could not move, finished ``partial`` about 17 minutes after the outage, and a person had to run it
again. Now the batch goes on without it and ``fence_held`` waits for it, planned again by itself,
and fences it as soon as EC2 confirms the machine is down.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.sim.rehearsal import Rehearsal
from tests.rehearsals.conftest import taint_keys

OOS = "node.kubernetes.io/out-of-service"
ZONE = "ap-southeast-1a"
POLICY = {"max_out_of_service_nodes": 20}
pytestmark = pytest.mark.slow


def _play(r: Rehearsal, run_id: str) -> Any:
    """Approve every step; a step held by a timed hold is left to the bot, which plans it again
    by itself when its hold is due (the clock moves to that moment, nobody acts)."""
    from datetime import datetime
    st = r.play(run_id)
    for _ in range(100):
        s = next((x for x in st.steps.values() if x.status == "awaiting_approval"), None)
        if s is None or not (s.blocked or {}).get("recheck") or not s.next_check_at:
            return st
        due = datetime.fromisoformat(s.next_check_at)
        r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))
        st = r.play(run_id)
    raise AssertionError("the hold never lifted")


def _stops(r: Rehearsal, run_id: str) -> list[tuple[str, str, list[str]]]:
    """(step, time, instances) of every StopInstances the run made."""
    return [(str(e.payload["step"]), e.ts, list(c["targets"])) for e in r.events(run_id)
            for c in e.payload.get("calls") or () if c["operation"] == "StopInstances"]


def _tainted(r: Rehearsal) -> set[str]:
    return {n["metadata"]["name"] for n in r.sandbox.list("Node") if OOS in taint_keys(n)}


def test_a_hung_machine_is_held_then_fenced_in_the_same_run(rehearse):
    r = rehearse("az-outage", policy=POLICY, nodes=3, hung=1)
    f = r.facts
    hung = f["hung"][0]
    hung_iid = f["instance_ids"][f["dead_nodes"].index(hung)]
    run_id = r.start_run("zone-outage-ngns", zone=ZONE)
    st = _play(r, run_id)
    assert st.status == "succeeded", st.outcome
    assert _tainted(r) == set(f["dead_nodes"])
    assert r.sandbox.ec2.instance_state(hung_iid) == "stopped"
    recover = st.steps["recover[0]"].result
    assert {i["node"]: i["outcome"] for i in recover["items"]}[hung] == "held"
    assert recover["held"] == [hung]
    # the held machine was stopped by fence_held, and only after interlock 8 let it
    stops = _stops(r, run_id)
    assert [s for s, _, ids in stops if hung_iid in ids] == ["fence_held[0]"]
    events = r.events(run_id)
    held_at = [e.ts for e in events if e.type == "interlock.blocked"
               and e.payload["step"] == "fence_held[0]" and e.payload["rule"] == "fence-wait"]
    fenced_at = [t for s, t, ids in stops if hung_iid in ids]
    assert held_at and held_at[0] < fenced_at[0]
    # one run: nothing waited for attachments that could not go
    waited = st.steps["wait_detach"]
    assert waited.status == "succeeded" and waited.result["nodes_left"] == []
    assert st.steps["placement"].status == "succeeded"
    summary = st.steps["summary"].message
    assert "3 node(s) out of service" in summary and "Not out of service" not in summary
    assert r.verified(run_id) and r.judge(run_id).violations == ()


def test_a_held_machine_whose_kubelet_comes_back_is_never_fenced(rehearse):
    r = rehearse("az-outage", policy=POLICY, nodes=3, hung=1)
    f = r.facts
    hung = f["hung"][0]
    hung_iid = f["instance_ids"][f["dead_nodes"].index(hung)]
    run_id = r.start_run("zone-outage-ngns", zone=ZONE)
    st = r.play(run_id)  # the batch went on; fence_held now holds the hung machine
    s = st.steps.get("fence_held[0]")
    assert s is not None and s.status == "awaiting_approval" and s.blocked["rule"] == "fence-wait"
    r.sandbox.recover_guest(hung)  # the guest comes back by itself while held
    r.sandbox.advance(30)
    st = _play(r, run_id)
    assert r.sandbox.ec2.instance_state(hung_iid) == "running"
    assert hung not in _tainted(r) and _tainted(r) == set(f["dead_nodes"]) - {hung}
    assert all(hung_iid not in ids for _, _, ids in _stops(r, run_id))
    assert st.status == "partial", st.outcome
    assert hung in st.outcome
    # its claims run where they were: counted running, not waited on for ten minutes
    placement = st.steps["placement"]
    assert placement.status == "succeeded", placement.error
    mine = [i for i in placement.result["items"] if i["node"] == hung]
    assert mine and {i["outcome"] for i in mine} == {"running"}
    assert r.verified(run_id) and r.judge(run_id).violations == ()


def test_a_partitioned_machine_ambiguous_past_the_window_is_left_not_fenced(rehearse):
    """Its kubelet silent, its instance running with status checks ``ok`` (a network partition,
    not a dead host): held until policy.fence_ambiguous_after, then left out for node-dead-ngns,
    where only break-glass fences it. The zone run never stops it."""
    r = rehearse("az-outage", policy=POLICY, nodes=3, hung=1)
    f = r.facts
    hung = f["hung"][0]
    hung_iid = f["instance_ids"][f["dead_nodes"].index(hung)]
    r.sandbox.partition(hung)  # the machine runs on, cut off from the API server ...
    r.sandbox.ec2.set_hung(hung_iid, False)  # ... its guest healthy: EC2 never says it is down
    run_id = r.start_run("zone-outage-ngns", zone=ZONE)
    st = _play(r, run_id)
    assert r.sandbox.ec2.instance_state(hung_iid) == "running"
    assert hung not in _tainted(r)
    assert all(hung_iid not in ids for _, _, ids in _stops(r, run_id))
    later = st.steps["fence_held[0]"].result
    out = {i["node"]: i for i in later["items"]}[hung]
    assert out["outcome"] == "dropped" and "MAY BE ALIVE" in out["reason"]
    assert st.status == "partial" and hung in st.outcome
    # its claims are blocked on it, named: the run does not wait out placement's ten minutes
    placement = st.steps["placement"]
    assert placement.status == "succeeded", placement.error
    mine = [i for i in placement.result["items"] if i["node"] == hung]
    assert mine and {i["outcome"] for i in mine} == {"blocked"}
    assert "did not put out of service" in mine[0]["reason"]
    assert r.verified(run_id) and r.judge(run_id).violations == ()
