"""Interlocks block a step whatever the runbook says; only break-glass (two people, reasons) passes."""

from __future__ import annotations

from tests.fakes.engine_harness import runbook

SET = {"b": runbook("b", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\n")}


def test_an_interlock_at_plan_time_blocks_the_step_and_an_approval_cannot_pass_it(make_engine):
    e = make_engine(SET)
    e.world.lock("x")
    run = e.start("b", by="alice")
    st = e.state(run)
    s = st.steps["change"]
    assert st.status == "awaiting_approval" and s.blocked["rule"] == "fake-lock"
    assert e.event(run, "interlock.blocked")[0]["phase"] == "plan"
    out = e.approve(run, "bob")
    assert not out.ok and "blocked by interlock fake-lock" in out.message
    assert e.world.effects == []


def test_an_interlock_that_starts_failing_after_approval_refuses_before_apply(make_engine):
    e = make_engine(SET)
    run = e.start("b", by="alice")
    e.world.lock("x")  # between the approval request and apply
    # the plan computed again just before apply reads the lock live: the interlock refuses
    # there, before anything is written
    e.approve(run, "bob")
    st = e.state(run)
    assert st.steps["change"].blocked is not None
    assert st.status == "awaiting_approval"
    assert e.world.effects == []


def test_break_glass_needs_two_other_people_with_reasons_and_is_audited(make_engine):
    e = make_engine(SET)
    e.world.lock("x")
    run = e.start("b", by="alice")
    assert not e.break_glass(run, "alice").ok  # the requester never counts
    assert not e.break_glass(run, "bob", reason="ok").ok  # a reason is needed
    assert not e.break_glass(run, "erin").ok  # not an eligible approver
    first = e.break_glass(run, "bob")
    assert first.ok and "1 of 2" in first.message
    assert not e.break_glass(run, "bob").ok  # the same person twice
    assert e.world.effects == []
    assert e.break_glass(run, "carol", reason="lock holder is gone, verified by phone").ok
    st = e.state(run)
    assert st.status == "succeeded", st.outcome
    assert e.world.get("x") == "on" and len(e.world.effects) == 1
    over = e.event(run, "interlock.overridden")
    assert over and over[0]["rule"] == "fake-lock" and over[0]["approvers"] == ["bob", "carol"]
    assert "lock holder is gone, verified by phone" in over[0]["reasons"]
    assert e.verified(run)


def test_a_blocked_step_can_be_retried_once_the_cause_is_fixed(make_engine):
    e = make_engine(SET)
    e.world.lock("x")
    run = e.start("b", by="alice")
    e.world.lock("x", False)
    assert e.retry(run, "alice").ok
    st = e.state(run)
    assert st.steps["change"].blocked is None and st.steps["change"].status == "awaiting_approval"
    assert e.approve(run, "bob").ok
    assert e.state(run).status == "succeeded"


TIMED = {"t": runbook("t", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
  timeout: 5m
""", approvals="groups: [sre]\n")}


def _refused_at_apply_then_left(e) -> str:
    """The step is approved, refused by its interlock as it applies, and left so past its
    timeout; the lock is then lifted."""
    run = e.start("t", by="alice")
    e.world.set("x/locked_at_apply", True)
    assert e.approve(run, "bob").ok
    s = e.state(run).steps["change"]
    assert s.blocked and s.blocked["rule"] == "fake-lock" and s.applying_since, s
    e.advance(600)
    e.world.lock("x", False)
    return run


def test_a_step_retried_after_its_apply_was_refused_counts_its_timeout_anew(make_engine):
    """A person's Retry begins a new attempt: the step's timeout counts from its next apply, not
    from the refused one (which had it fail at once, 'timed out', the moment it was approved)."""
    e = make_engine(TIMED)
    run = _refused_at_apply_then_left(e)
    assert e.retry(run, "alice").ok  # the plan is as bob approved it: his approval stands
    st = e.state(run)
    assert st.status == "succeeded", (st.status, st.steps["change"].error)
    assert e.world.get("x") == "on" and e.verified(run)


def test_a_step_overridden_after_its_apply_was_refused_counts_its_timeout_anew(make_engine):
    e = make_engine(TIMED)
    run = _refused_at_apply_then_left(e)
    e.world.lock("x")  # still locked: two people break glass
    for who in ("bob", "carol"):
        assert e.break_glass(run, who).ok
    st = e.state(run)
    s = st.steps["change"]
    if st.status == "awaiting_approval":  # the new plan, if it asks again
        assert e.approve(run, "bob").ok
        st, s = e.state(run), e.state(run).steps["change"]
    assert st.status == "succeeded", (st.status, s.error)
    assert e.world.get("x") == "on" and e.verified(run)


def test_a_blocked_step_that_nobody_overrides_expires_safely(make_engine):
    e = make_engine(SET)
    e.world.lock("x")
    run = e.start("b", by="alice")
    e.advance(1801)
    st = e.state(run)
    assert st.status == "failed" and st.steps["change"].status == "expired"
    assert e.world.effects == []
