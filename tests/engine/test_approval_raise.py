"""A plan may ask for more approvers than its step's rule (``approvals.raised``).

The raise is in the plan's data: bound to its hash, shown with the request, read again when the
plan is computed again at apply. Through the runner, as a front-end reaches it.
"""

from __future__ import annotations

import pytest

from bot.engine.approvals import MAX_RAISE, RAISE_KEY, ApprovalRule, raised
from bot.engine.plan import Plan
from tests.engine.test_approvals import book

RULE = ApprovalRule(required=True, min_approvers=1, groups=("sre",), allow_self=False,
                    expires_after=1800.0, reason="destructive action: approval is always required")


def test_a_precious_change_needs_one_more_person_and_the_request_says_why(make_engine):
    e = make_engine(book())
    e.world.set("x/precious", 1)
    run = e.start("b", by="alice")
    step = e.state(run).steps["change"]
    assert step.min_approvers == 2 and "x is precious" in step.approval_text
    asked = e.event(run, "approval.requested")[-1]
    assert (asked["min_approvers"], asked["raised_by"], asked["raised_why"]) == (2, 1, "x is precious")
    first = e.approve(run, "bob")
    assert first.ok and "1 of 2" in first.message
    assert e.world.effects == []  # one person is not enough
    assert e.approve(run, "carol").ok
    assert e.state(run).status == "succeeded"
    assert e.event(run, "step.applying")[-1]["approvers"] == ["bob", "carol"]
    assert e.verified(run)


def test_a_plan_that_turns_precious_at_apply_voids_the_single_approval(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.state(run).steps["change"].min_approvers == 1
    e.world.set("x/precious", 1)  # between the plan shown and its approval
    assert e.approve(run, "bob").ok
    st = e.state(run)
    assert st.steps["change"].status == "awaiting_approval" and st.steps["change"].min_approvers == 2
    assert e.world.effects == []
    assert e.event(run, "approval.invalidated")[-1]["voided"] == ["bob"]
    assert e.approve(run, "bob").ok and e.world.effects == []
    assert e.approve(run, "carol").ok and e.state(run).status == "succeeded"


def test_a_plan_without_a_raise_asks_as_always_and_records_nothing_new(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    asked = e.event(run, "approval.requested")[-1]
    assert "raised_by" not in asked and "raised_why" not in asked
    assert e.approve(run, "bob").ok and e.state(run).status == "succeeded"


def test_a_dry_run_says_how_many_people_the_raised_plan_would_need(make_engine):
    e = make_engine(book())
    e.world.set("x/precious", 1)
    run = e.start("b", by="alice", dry_run=True)
    assert "2 approver(s)" in e.state(run).steps["change"].message


def test_the_raise_is_part_of_the_plan_hash_and_absent_from_plans_without_it():
    base = Plan(action="a", params={"x": 1})
    with_raise = Plan(action="a", params={"x": 1}, data={RAISE_KEY: {"by": 1, "why": "w"}})
    assert base.hash() != with_raise.hash()
    assert base.hash() == Plan(action="a", params={"x": 1}, data={}).hash()


@pytest.mark.parametrize(("ask", "by"), [
    (None, 0), ({"by": 0}, 0), ({"by": 1}, 1), ({"by": 9}, MAX_RAISE), ({"by": "x"}, 1),
    ({"by": -3}, 0), ("one more", 1), ({}, 0),
])
def test_what_a_plan_may_ask_for(ask, by):
    data = {RAISE_KEY: ask} if ask is not None else {}
    rule = raised(RULE, {"data": data})
    assert rule.min_approvers == 1 + by and rule.raised_by == by
    if by:
        assert rule.required and "more than the step otherwise needs" in rule.reason


def test_a_raise_makes_a_step_that_needed_nobody_need_approval():
    rule = raised(ApprovalRule(required=False, min_approvers=1, groups=(), allow_self=False,
                               expires_after=60.0, reason=""), {"data": {RAISE_KEY: {"by": 1}}})
    assert rule.required and rule.min_approvers == 2


# -- break-glass and the raise --------------------------------------------------------------
# The fake ``fake.set`` reads whether its thing is precious before its lock interlock, and hands
# the plan it would have made to the refusal, as a fence does with the data it destroys.

def test_a_blocked_step_shows_the_raise_its_plan_asks_for_and_break_glass_on_it_approves_it(
        make_engine):
    e = make_engine(book())
    e.world.lock("x")
    e.world.set("x/precious", 1)
    run = e.start("b", by="alice")
    s = e.state(run).steps["change"]
    assert s.blocked and s.blocked["rule"] == "fake-lock"
    # those who may break glass read what the change would destroy, and how many it needs
    assert s.min_approvers == 2 and "x is precious" in s.approval_text
    assert s.plan is not None and s.plan["data"][RAISE_KEY]["by"] == 1
    asked = e.event(run, "approval.requested")[-1]
    assert (asked["raised_by"], asked["plan_hash"]) == (1, s.plan_hash)
    assert e.event(run, "interlock.blocked")[-1]["plan_hash"] == s.plan_hash
    assert e.break_glass(run, "bob").ok and e.break_glass(run, "carol").ok
    st = e.state(run)
    assert st.status == "succeeded", st.outcome
    assert e.event(run, "step.applying")[-1]["approvers"] == ["bob", "carol"]
    assert e.verified(run)


def test_break_glass_given_before_a_raise_appeared_does_not_approve_the_raised_plan(make_engine):
    """Bob and Carol break glass on a plan that destroys nothing; by the re-plan it does. Their
    override stands, their votes do not count for a plan they were never shown."""
    e = make_engine(book())
    e.world.lock("x")
    run = e.start("b", by="alice")
    assert e.state(run).steps["change"].min_approvers == 1
    assert e.break_glass(run, "bob").ok
    e.world.set("x/precious", 1)  # between the request they read and the plan made after it
    assert e.break_glass(run, "carol").ok
    st = e.state(run)
    s = st.steps["change"]
    assert st.status == "awaiting_approval" and s.status == "awaiting_approval", st.outcome
    assert e.world.effects == []  # nothing applied on break-glass alone
    assert s.blocked is None and s.overrides == ["fake-lock"]  # the override stands
    assert s.min_approvers == 2 and "x is precious" in s.approval_text and not s.approved
    voided = e.event(run, "approval.invalidated")[-1]
    assert voided["voided"] == ["bob", "carol"] and voided["new_hash"] == s.plan_hash
    assert e.event(run, "approval.requested")[-1]["already"] == []
    assert e.approve(run, "bob").ok and e.world.effects == []
    assert e.approve(run, "carol").ok
    st = e.state(run)
    assert st.status == "succeeded", st.outcome
    assert e.event(run, "interlock.overridden")[-1]["rule"] == "fake-lock"
    assert e.verified(run)


def test_break_glass_does_not_carry_to_a_plan_whose_changes_differ_from_the_one_shown(
        make_engine):
    e = make_engine(book())
    e.world.lock("x")
    e.world.set("x", "off")
    run = e.start("b", by="alice")
    assert e.break_glass(run, "bob").ok
    e.world.set("x", "half")  # the change is now half -> on, not the off -> on they were shown
    assert e.break_glass(run, "carol").ok
    st = e.state(run)
    assert st.status == "awaiting_approval" and e.world.effects == [], st.outcome
    assert st.steps["change"].plan["changes"][0]["before"] == "half"
    assert e.approve(run, "dave").ok
    assert e.state(run).status == "succeeded"


def test_break_glass_carries_to_a_plan_that_changes_the_same_with_other_facts(make_engine):
    """What the voters were shown is the change and the raise; a fact read again differently
    (a liveness, a timestamp-free status) does not ask them twice."""
    e = make_engine(book())
    e.world.lock("x")
    run = e.start("b", by="alice")
    assert e.break_glass(run, "bob").ok
    e.world.set("x/noted", "read again")
    assert e.break_glass(run, "carol").ok
    assert e.state(run).status == "succeeded"
