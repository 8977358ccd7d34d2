"""An approval never outlives its plan across a retry.

The attack, as the explorer found it on a zone outage (tests/explore/cases/
zone-outage-ngns--approval-bypassed--retry-before-apply.yaml): bob approves a plan; the re-plan
just before apply meets a throttled API and is retried; by the retry the world has changed, so
the step asks again for the new plan, and nobody answers. The step used to keep its "approved"
mark from the first plan, and the next tick's re-plan, finding the same new plan, applied it with
no approver at all.
"""

from __future__ import annotations

from tests.engine.test_runs import READ_SET


def test_a_retry_between_approval_and_apply_never_carries_the_approval_to_a_new_plan(make_engine):
    e = make_engine({"read-set": READ_SET})
    run = e.start("read-set", name="x")
    first = e.step(run, "change").plan_hash
    e.world.set("x/plan_throttled", 1)  # the re-plan before apply is throttled once ...
    e.world.set("x/noted", "someone looked")  # ... and by its retry the facts have changed
    assert e.approve(run, "bob").ok
    assert e.state(run).steps["change"].status == "waiting"  # the retry's backoff
    e.advance(30)
    e.advance(30)  # the next tick, then another: nothing may apply without a new approval
    st = e.state(run)
    s = st.steps["change"]
    assert st.status == "awaiting_approval" and s.status == "awaiting_approval"
    assert s.plan_hash != first and not s.approved
    assert e.world.get("x") is None and e.world.effects == []
    asked = [a["plan_hash"] for a in e.event(run, "approval.requested")]
    assert asked[-1] == s.plan_hash
    assert [a for a in e.event(run, "step.applying") if a["step"] == "change"] == []
    # a person approves the plan they are shown now: only then does it apply
    assert e.approve(run, "bob").ok
    st = e.state(run)
    assert st.status == "succeeded" and e.world.get("x") == "on"
    assert [a["approvers"] for a in e.event(run, "step.applying") if a["step"] == "change"] \
        == [["bob"]]
