"""The fence of an EKS Auto Mode machine destroys what a stop or terminate does: EKS terminates the
instance, wiping its instance store, and a pod bound to a local volume on it never runs again.

Before: ``k8s.nodeclaim.delete`` read no local data, so ``node-dead-ngns`` deleted the NodeClaim
of such a machine on one approval, where the fence of any other machine names what is lost and
asks for one more person.
"""

from __future__ import annotations

import pytest

from bot.engine.approvals import RAISE_KEY
from bot.engine.commands import Approve
from bot.sim.local_storage import _instance_store_node, add_local_cache
from bot.sim.rehearsal import APPROVERS

pytestmark = pytest.mark.slow


def _one_person(state, s):
    if any(v.by == APPROVERS[0] and v.plan_hash == s.plan_hash for v in s.approvals()):
        return None
    return Approve(run_id=state.run_id, actor=APPROVERS[0], step=s.key, plan_hash=s.plan_hash)


def _deleting(r) -> list[str]:
    return [c["metadata"]["name"] for c in r.sandbox.list("NodeClaim")
            if c["metadata"].get("deletionTimestamp")]


def test_an_auto_mode_fence_of_a_machine_with_local_data_needs_two_people_who_read_it(rehearse):
    r = rehearse("auto-mode-node-hung")
    f = r.facts
    _instance_store_node(r.sandbox, f["dead_node"], f["instance_id"])
    extra = add_local_cache(r.sandbox, f["dead_node"])
    st = r.run("node-dead-ngns", node=f["dead_node"], decide=_one_person)
    fence = st.steps["fence_nodeclaim"]
    assert st.status == "awaiting_approval" and fence.status == "awaiting_approval", st.outcome
    assert fence.min_approvers == 2 and not fence.approved
    assert _deleting(r) == [] and r.sandbox.ec2.instance_state(f["instance_id"]) == "running"
    facts = {(x["subject"], x["name"]): x["value"] for x in fence.plan["facts"]}
    [lost] = facts[(f"instance {f['instance_id']}", "local_volumes")]
    assert lost["pv"] == extra["local_pv"] and lost["claim"] == "search/cache-data"
    assert facts[(f"instance {f['instance_id']}", "instance_store")]["instance_type"] == "m5d.xlarge"
    assert fence.plan["data"][RAISE_KEY]["by"] == 1
    assert "2 in all" in fence.approval_text and "search/cache-data" in fence.approval_text
    # a second person who read it lets it through
    st = r.play(st.run_id)
    assert st.steps["fence_nodeclaim"].status == "succeeded", st.steps["fence_nodeclaim"].error
    assert {v.by for v in st.steps["fence_nodeclaim"].approvals()} == set(APPROVERS)
    assert r.verified(st.run_id)
