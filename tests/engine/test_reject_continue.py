"""Declining a step the runbook can do without: a rejection of a step whose ``on_failure`` is
``continue`` ends that step (``rejected``, nothing of it applied) and the run goes on, as a failure
of the step would; any other rejection still stops the run. A run that stops at a rejection or an
expired approval never says "nothing was applied" once earlier steps changed things."""

from __future__ import annotations

from tests.fakes.engine_harness import runbook

STEPS = """
- id: first
  title: "Set a"
  action: fake.set
  with: {name: a, value: "on"}
- id: optional
  title: "Set b"
  action: fake.set
  with: {name: b, value: "on"}
  {policy}
- id: last
  title: "Set c"
  action: fake.set
  with: {name: c, value: "on"}
"""
APPROVALS = "groups: [sre]\nmin_approvers: 1\nexpires_after: 10m\n"


def book(policy: str = "on_failure: continue") -> dict[str, str]:
    return {"b": runbook("b", STEPS.replace("{policy}", policy), approvals=APPROVALS)}


def test_a_rejected_step_under_on_failure_continue_is_declined_and_the_run_goes_on(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.approve(run, "bob").ok  # first
    out = e.reject(run, "bob", reason="we do not break glass for this, go on without it")
    assert out.ok and "goes on" in out.message, out.message
    st = e.state(run)
    assert st.steps["optional"].status == "rejected"
    assert "rejected by bob" in st.steps["optional"].error
    assert st.status == "awaiting_approval" and st.steps["last"].status == "awaiting_approval"
    assert e.approve(run, "bob").ok  # last
    st = e.state(run)
    assert st.status == "succeeded", st.outcome
    assert [x["name"] for x in e.world.effects] == ["a", "c"]  # nothing of the declined step
    assert e.event(run, "approval.rejected")[0]["step"] == "optional"
    assert e.verified(run)


def test_a_rejection_of_a_step_without_on_failure_continue_still_stops_the_run(make_engine):
    e = make_engine(book(policy=""))
    run = e.start("b", by="alice")
    assert e.approve(run, "bob").ok
    out = e.reject(run, "bob", reason="stop here")
    assert out.ok and "stopped" in out.message
    st = e.state(run)
    assert st.status == "failed" and st.steps["optional"].status == "rejected"
    assert "last" not in st.steps
    assert [x["name"] for x in e.world.effects] == ["a"]
    # the first step changed something: the outcome must not say nothing was applied
    assert "nothing was applied" not in st.outcome, st.outcome
    assert "nothing of optional was applied" in st.outcome and "first" in st.outcome


def test_an_approval_that_expires_after_earlier_changes_never_says_nothing_was_applied(make_engine):
    e = make_engine(book(policy=""))
    run = e.start("b", by="alice")
    assert e.approve(run, "bob").ok
    e.advance(601)
    st = e.state(run)
    assert st.status == "failed" and st.steps["optional"].status == "expired"
    assert "nothing was applied" not in st.outcome, st.outcome
    assert "nothing of optional was applied" in st.outcome and "first" in st.outcome


def test_an_approval_that_expires_before_any_change_still_says_nothing_was_applied(make_engine):
    e = make_engine(book(policy=""))
    run = e.start("b", by="alice")
    e.advance(601)
    st = e.state(run)
    assert st.status == "failed" and st.steps["first"].status == "expired"
    assert st.outcome.endswith("nothing was applied"), st.outcome
