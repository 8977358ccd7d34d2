"""A timed hold (an interlock whose condition can clear by itself, ``recheck_after``) plans its
step again every ``policy.hold_recheck_seconds``, records the hold once, and stops at expiry."""

from __future__ import annotations

from datetime import datetime

from tests.fakes.engine_harness import runbook

SET = {"b": runbook("b", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\n")}


def _next(e, run: str) -> float:
    st = e.state(run)
    return (datetime.fromisoformat(str(st.next_check_at)) - e.clock.now()).total_seconds()


def test_a_held_step_rechecks_itself_records_one_hold_and_goes_on_when_it_clears(make_engine):
    e = make_engine(SET)
    e.world.set("x/held", "a")
    run = e.start("b", by="alice")
    s = e.step(run, "change")
    assert e.state(run).status == "awaiting_approval" and s.blocked["rule"] == "fake-hold"
    assert s.blocked["recheck"] == 15.0 and _next(e, run) == 15.0  # never sooner than the policy
    expires = s.expires_at
    for _ in range(4):  # the same hold, re-planned: no new event, the same expiry
        e.advance(15)
    assert e.events(run).count("interlock.blocked") == 1
    assert e.step(run, "change").expires_at == expires and _next(e, run) == 15.0
    e.world.set("x/held", "b")  # another message, the same refused plan: still the same hold
    e.advance(15)
    assert e.events(run).count("interlock.blocked") == 1
    e.world.set("x/noted", "n1")  # the refused plan's facts changed: recorded anew, same expiry
    e.advance(15)
    assert e.events(run).count("interlock.blocked") == 2
    assert e.step(run, "change").expires_at == expires
    e.world.set("x/held", "")  # cleared: asked for approval like any first plan
    e.advance(15)
    s = e.step(run, "change")
    assert s.blocked is None and s.status == "awaiting_approval"
    assert e.state(run).next_check_at == s.expires_at
    assert e.world.effects == []
    assert e.approve(run, "bob").ok and e.state(run).status == "succeeded"
    assert e.verified(run)


def test_a_hold_that_hardens_into_a_refusal_stops_rechecking(make_engine):
    e = make_engine(SET)
    e.world.set("x/held", "a")
    run = e.start("b", by="alice")
    held_until = e.step(run, "change").expires_at
    e.world.set("x/held", "")
    e.world.lock("x")
    e.advance(15)
    s = e.step(run, "change")
    assert s.blocked["rule"] == "fake-lock" and "recheck" not in s.blocked
    assert e.state(run).next_check_at == s.expires_at
    # it waits for a person until the hold's own expiry, not a fresh one from the hardening
    assert held_until is not None and s.expires_at == held_until


def test_people_may_retry_or_abort_a_held_step_and_an_unanswered_hold_expires(make_engine):
    e = make_engine(SET)
    e.world.set("x/held", "a")
    run = e.start("b", by="alice")
    assert not e.approve(run, "bob").ok  # an approval cannot pass a hold
    assert e.retry(run, "alice").ok and e.events(run).count("interlock.blocked") == 2
    e.advance(1801)
    st = e.state(run)
    assert st.status == "failed" and st.steps["change"].status == "expired"
    other = e.start("b", by="alice")
    assert e.abort(other, "alice").ok and e.state(other).status == "aborted"
