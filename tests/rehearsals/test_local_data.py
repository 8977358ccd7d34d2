"""A fence that destroys data no other machine holds takes one more person.

``node-hung-local-data``: the hung node is an m5d.xlarge (its instance-store NVMe is wiped by any
stop) and runs a cache pod whose claim is bound to a local PV on that disk. Before the fence's plan
read them, ``node-dead-ngns`` force-stopped it on one approval, like any other hung node.
"""

from __future__ import annotations

import pytest

from bot.engine.approvals import RAISE_KEY
from bot.engine.commands import Approve
from bot.sim.rehearsal import APPROVERS
from tests.rehearsals.conftest import assert_clean

pytestmark = pytest.mark.slow


def _one_person(state, s):
    """Only the first approver ever approves."""
    if any(v.by == APPROVERS[0] and v.plan_hash == s.plan_hash for v in s.approvals()):
        return None
    return Approve(run_id=state.run_id, actor=APPROVERS[0], step=s.key, plan_hash=s.plan_hash)


def test_a_fence_of_a_node_with_local_data_approved_by_one_person_does_not_go_through(rehearse):
    r = rehearse("node-hung-local-data")
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"], decide=_one_person)
    fence = st.steps["fence"]
    assert st.status == "awaiting_approval" and fence.status == "awaiting_approval", st.outcome
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"  # not fenced
    assert [v.by for v in fence.approvals()] == [APPROVERS[0]] and not fence.approved
    assert fence.min_approvers == 2
    # the plan lists what is lost, and the people asked read it in words
    facts = {(x["subject"], x["name"]): x["value"] for x in fence.plan["facts"]}
    lost = facts[(f"instance {f['instance_id']}", "local_volumes")]
    assert lost == [{"pv": f["local_pv"], "kind": "local", "claim": "search/cache-data",
                     "pods": ["search/cache-0"], "path": "/mnt/disks/nvme1n1"}]
    store = facts[(f"instance {f['instance_id']}", "instance_store")]
    assert store["instance_type"] == "m5d.xlarge" and store["total_gb"] == 150
    text = fence.approval_text
    assert "2 in all, 1 more than this step otherwise needs" in text, text
    assert "search/cache-data" in text and "instance store of m5d.xlarge" in text
    assert "Repairing the node in place" in text
    # bound to the plan hash, and recorded in the audit with the request
    assert fence.plan["data"][RAISE_KEY]["by"] == 1
    asked = [e for e in r.events(st.run_id)
             if e.type == "approval.requested" and e.payload.get("step") == "fence"]
    assert asked and asked[-1].payload["raised_by"] == 1 and asked[-1].payload["min_approvers"] == 2
    assert asked[-1].payload["plan_hash"] == fence.plan_hash
    assert r.verified(st.run_id)


def test_two_people_fence_it_and_the_instance_store_is_named_without_local_volumes(rehearse):
    r = rehearse("node-hung-local-data", local_pv=False)
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    fence = st.steps["fence"]
    assert {v.by for v in fence.approvals()} == set(APPROVERS)
    assert [n for s, n, *_ in ((x["subject"], x["name"]) for x in fence.plan["facts"])
            if n in ("instance_store", "local_volumes")] == ["instance_store"]
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "stopped"
    assert_clean(r, st.run_id)


def test_a_node_without_local_data_still_needs_one_person_and_its_plan_has_no_raise(rehearse):
    r = rehearse("node-hung")
    st = r.run("node-dead-ngns", node=r.facts["node"], decide=_one_person)
    assert st.status == "succeeded", st.outcome
    fence = st.steps["fence"]
    assert RAISE_KEY not in fence.plan["data"] and "MORE APPROVERS" not in fence.approval_text
    assert not any("raised_by" in e.payload for e in r.events(st.run_id))


def test_local_data_that_appears_after_the_plan_was_shown_voids_a_single_approval(rehearse):
    """The raise is re-read when the fence is planned again after its approval: a cache pod on a
    local volume scheduled to the node meanwhile makes one person's approval not enough."""
    from bot.sim.local_storage import add_local_cache

    r = rehearse("node-hung")
    f = r.facts
    added: list[str] = []

    def late(state, s):
        if s.key == "fence" and not added:
            added.append(add_local_cache(r.sandbox, f["node"])["local_pv"])
        return _one_person(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=late)
    fence = st.steps["fence"]
    assert added and st.status == "awaiting_approval" and fence.status == "awaiting_approval"
    assert fence.min_approvers == 2 and not fence.approved
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    voided = [e for e in r.events(st.run_id) if e.type == "approval.invalidated"
              and e.payload.get("step") == "fence"]
    assert voided and voided[0].payload["voided"] == [APPROVERS[0]]
    assert RAISE_KEY in fence.plan["data"] and added[0] in fence.approval_text


# -- break-glass on a fence of local data ---------------------------------------------------
# ``pod-force-deleted``: a partitioned node whose kubelet is alive, so interlock 8 refuses the
# fence (``fence-live``) and only two people breaking glass lift it. Before the fence read what
# it destroys ahead of the interlock, the refused fence showed no local data and no raise; the two
# break-glass votes then counted towards the raise of the plan made after them, and the machine's
# instance store and local volume were wiped without anyone being shown that.

def _nobody_approves_the_fence(r):
    return lambda state, s: None if s.step_id == "fence" else r.approve_all(state, s)


def _blocked_fence(r):
    st = r.run("node-dead-ngns", node=r.facts["dead_node"],
               decide=lambda state, s: None if s.blocked else r.approve_all(state, s))
    fence = st.steps["fence"]
    assert fence.blocked and fence.blocked["rule"] == "fence-live", fence.blocked
    return st, fence


def _break_glass(r, run_id: str) -> None:
    from bot.engine.commands import BreakGlass

    for who in APPROVERS:
        assert r.submit(BreakGlass(run_id=run_id, actor=who, step="fence",
                                   reason="console dead, machine partitioned")).ok


def test_a_fence_refused_for_a_live_kubelet_shows_break_glass_the_data_it_destroys(rehearse):
    from bot.sim.local_storage import _instance_store_node, add_local_cache

    r = rehearse("pod-force-deleted")
    f = r.facts
    _instance_store_node(r.sandbox, f["dead_node"], f["instance_id"])
    pv = add_local_cache(r.sandbox, f["dead_node"])["local_pv"]
    st, fence = _blocked_fence(r)
    # what the people who may break glass are shown: the data lost, and two of them needed
    assert fence.plan and fence.plan["data"][RAISE_KEY]["by"] == 1
    assert "THE FENCE DESTROYS DATA" in fence.approval_text and pv in fence.approval_text
    assert "instance store of m5d.xlarge" in fence.approval_text and fence.min_approvers == 2
    facts = {(x["subject"], x["name"]) for x in fence.plan["facts"]}
    assert (f"instance {f['instance_id']}", "local_volumes") in facts
    asked = [e.payload for e in r.events(st.run_id)
             if e.type == "approval.requested" and e.payload.get("step") == "fence"]
    assert asked[-1]["raised_by"] == 1 and asked[-1]["plan_hash"] == fence.plan_hash
    # two people who read that break glass: their votes are for the plan they were shown
    _break_glass(r, st.run_id)
    st = r.play(st.run_id, decide=_nobody_approves_the_fence(r))
    fence = st.steps["fence"]
    assert [v.kind for v in fence.votes] == ["break_glass", "break_glass"]
    assert r.sandbox.ec2.instance_state(f["instance_id"]) in ("stopping", "stopped")
    assert r.verified(st.run_id)


def test_local_data_found_after_break_glass_needs_the_approval_of_people_shown_it(rehearse):
    from bot.sim.local_storage import add_local_cache

    r = rehearse("pod-force-deleted")
    f = r.facts
    st, fence = _blocked_fence(r)
    assert RAISE_KEY not in ((fence.plan or {}).get("data") or {}) and fence.min_approvers == 1
    _break_glass(r, st.run_id)
    # a cache pod on a local volume lands on the machine before the fence is planned again
    pv = add_local_cache(r.sandbox, f["dead_node"])["local_pv"]
    st = r.play(st.run_id, decide=_nobody_approves_the_fence(r))
    fence = st.steps["fence"]
    assert st.status == "awaiting_approval" and fence.status == "awaiting_approval", st.outcome
    assert r.sandbox.ec2.instance_state(f["instance_id"]) == "running"  # not fenced
    assert fence.blocked is None and fence.overrides == ["fence-live"]  # the override stands
    assert fence.min_approvers == 2 and not fence.approved and pv in fence.approval_text
    voided = [e.payload for e in r.events(st.run_id)
              if e.type == "approval.invalidated" and e.payload.get("step") == "fence"]
    assert voided and sorted(voided[-1]["voided"]) == sorted(APPROVERS)
    # the two read the new plan and approve it: only then is the machine fenced
    st = r.play(st.run_id)
    assert r.sandbox.ec2.instance_state(f["instance_id"]) in ("stopping", "stopped")
    assert {v.by for v in st.steps["fence"].votes if v.kind == "approve"} == set(APPROVERS)
    assert r.verified(st.run_id)
