"""What the status table means for a run, shown on real runs through the runner.

Each test drives a run into a status and checks what a person relies on there: what the world
looks like afterwards, which audit events were written, and which commands are refused. The table
itself is checked as a whole in ``test_state.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.engine_harness import Engine, runbook

TWO_CHANGES = runbook("two", """
- id: first
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
  approval: {min_approvers: 2, expires_after: 10m}
- id: second
  title: Set y
  action: fake.set
  with: {name: y, value: "on"}
""", approvals="groups: [sre]\n")

WAITS = runbook("waits", """
- id: slow
  title: Slow thing
  action: fake.slow
  with: {name: s, polls: 5}
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\n")

LOCKED = runbook("locked", """
- id: first
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
- id: second
  title: Set y
  action: fake.set
  with: {name: y, value: "on"}
""", approvals="groups: [sre]\n")

FAILS = runbook("fails", """
- id: broken
  title: Fails for good
  action: fake.flaky
  with: {name: b, permanent: true}
""")

BOOKS = {"two": TWO_CHANGES, "waits": WAITS, "locked": LOCKED, "fails": FAILS}


def _every_command(e: Engine, run: str) -> list[Any]:
    """Every command a person can send, each from someone who could otherwise give it."""
    return [e.approve(run, "carol"), e.confirm(run, "carol"), e.reject(run, "carol"),
            e.break_glass(run, "carol"), e.retry(run, "alice"), e.abort(run, "alice")]


def _assert_every_command_refused(e: Engine, run: str, status: str) -> None:
    before = e.events(run)
    outcomes = _every_command(e, run)
    assert [o.ok for o in outcomes] == [False] * 6
    assert all(f"has already finished ({status})" in o.message for o in outcomes), outcomes
    assert e.state(run).status == status
    assert e.events(run)[len(before):].count("command.refused") == 6
    assert "step.applying" not in e.events(run)[len(before):]
    assert e.verified(run)


def test_a_rejected_step_is_never_applied_and_its_run_takes_no_further_command(make_engine):
    e = make_engine(BOOKS)
    run = e.start("two", by="alice")
    assert e.approve(run, "bob").ok  # one of the two approvals needed
    assert e.reject(run, "dave", reason="the node came back by itself").ok
    st = e.state(run)
    assert st.status == "failed" and st.steps["first"].status == "rejected"
    assert "second" not in st.steps, "no later step is started after a rejection"
    _assert_every_command_refused(e, run, "failed")
    e.advance(3600)  # past the approval's expiry: nothing is left to expire or apply
    assert e.world.effects == []
    assert e.events(run).count("run.finished") == 1 and "approval.expired" not in e.events(run)


def test_an_expired_approval_cannot_be_completed_later(make_engine):
    e = make_engine(BOOKS)
    run = e.start("two", by="alice")
    assert e.approve(run, "bob").ok
    e.advance(601)
    st = e.state(run)
    assert st.status == "failed" and st.steps["first"].status == "expired"
    out = e.approve(run, "carol")  # the second approval, too late
    assert not out.ok and "already finished" in out.message
    assert [g["actor"] for g in e.event(run, "approval.granted")] == ["bob"]
    assert "step.applying" not in e.events(run)
    assert e.world.effects == [] and e.world.get("x") is None


def test_an_aborted_run_never_applies_the_step_that_was_waiting_for_approval(make_engine):
    e = make_engine(BOOKS)
    run = e.start("two", by="alice")
    assert e.approve(run, "bob").ok
    assert e.abort(run, "alice").ok
    st = e.state(run)
    assert st.status == "aborted" and st.steps["first"].status == "aborted"
    _assert_every_command_refused(e, run, "aborted")
    e.advance(3600)
    assert e.state(run).steps["first"].status == "aborted"  # not expired: it was already over
    assert e.world.effects == []
    finished = e.event(run, "run.finished")
    assert [f["status"] for f in finished] == ["aborted"]
    assert e.event(run, "run.aborted")[0]["actor"] == "alice"


def test_an_aborted_wait_is_never_polled_again_and_the_next_step_never_starts(make_engine):
    e = make_engine(BOOKS)
    run = e.start("waits", by="alice")
    assert e.state(run).steps["slow"].status == "waiting"
    e.advance(30)
    assert e.state(run).steps["slow"].polls == 1
    assert e.abort(run, "bob").ok  # an eligible approver may abort
    for _ in range(10):
        e.advance(30)
    st = e.state(run)
    assert st.status == "aborted" and st.steps["slow"].status == "aborted"
    assert st.steps["slow"].polls == 1 and e.events(run).count("step.polled") == 1
    assert "change" not in st.steps and e.world.effects == []


def test_a_step_blocked_again_on_retry_stays_blocked_and_changes_nothing(make_engine):
    e = make_engine(BOOKS)
    e.world.lock("x")
    run = e.start("locked", by="alice")
    assert e.retry(run, "alice").ok  # the lock is still there: the new plan is blocked again
    st = e.state(run)
    assert st.status == "awaiting_approval" and st.steps["first"].blocked["rule"] == "fake-lock"
    assert [b["phase"] for b in e.event(run, "interlock.blocked")] == ["plan", "plan"]
    assert not e.approve(run, "bob").ok
    assert e.world.effects == []


def test_break_glass_overrides_the_blocked_step_only(make_engine):
    e = make_engine(BOOKS)
    e.world.lock("x")
    e.world.lock("y")
    run = e.start("locked", by="alice")
    assert e.break_glass(run, "bob").ok and e.break_glass(run, "carol").ok
    st = e.state(run)
    # the overridden step applied; the next one hit the same kind of lock and is blocked in turn
    assert e.world.get("x") == "on" and [x["name"] for x in e.world.effects] == ["x"]
    assert st.steps["first"].status == "succeeded"
    assert st.steps["second"].status == "awaiting_approval" and st.steps["second"].blocked
    assert not e.approve(run, "bob", step="second").ok
    assert [o["step"] for o in e.event(run, "interlock.overridden")] == ["first"]


@pytest.mark.parametrize("ending", ["succeeded", "failed"])
def test_a_run_that_ended_on_its_own_refuses_every_command(make_engine, ending):
    e = make_engine(BOOKS)
    if ending == "succeeded":
        run = e.start("locked", by="alice")
        assert e.approve(run, "bob").ok and e.approve(run, "bob").ok
    else:
        run = e.start("fails", by="alice")
    assert e.state(run).status == ending
    effects = e.world.effects
    _assert_every_command_refused(e, run, ending)
    e.advance(3600)
    assert e.world.effects == effects and e.events(run).count("run.finished") == 1
