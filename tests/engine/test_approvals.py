"""The approval policy matrix, through the runner exactly as a front-end reaches it."""

from __future__ import annotations

import pytest

from bot.config import PolicyConfig
from bot.engine.approvals import approver_groups
from tests.fakes.engine_harness import runbook
from tests.fakes.engine_world import POLICY

SET = """
- id: change
  title: "Set {{ params.name }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "on"}
  approval:
    min_approvers: {n}
    {extra}
"""
PARAMS = "name: {type: string, default: x}\n"


def book(n: int = 1, extra: str = "", approvals: str = "groups: [sre]\nmin_approvers: 1\n") -> dict:
    return {"b": runbook("b", SET.replace("{n}", str(n)).replace("{extra}", extra),
                         params=PARAMS, approvals=approvals)}


def test_the_requester_cannot_approve_their_own_step(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.approve(run, "alice")
    assert not out.ok and "self-approval is not allowed" in out.message
    assert e.state(run).steps["change"].status == "awaiting_approval"
    assert e.world.effects == []
    refused = e.event(run, "command.refused")
    assert refused and refused[0]["actor"] == "alice"


def test_an_alias_of_the_requester_is_the_requester(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.approve(run, "slack:UALICE")
    assert not out.ok and "cannot approve" in out.message
    assert e.world.effects == []


def test_self_approval_needs_both_the_runbook_and_the_config(make_engine):
    e = make_engine(book(extra="allow_self: true", approvals="groups: [sre]\nallow_self: true\n"))
    run = e.start("b", by="alice")
    assert not e.approve(run, "alice").ok  # the config does not allow it
    policy = PolicyConfig(groups=POLICY.groups, allow_self_approval=True)
    e2 = make_engine(book(extra="allow_self: true", approvals="groups: [sre]\nallow_self: true\n"),
                     policy=policy)
    run2 = e2.start("b", by="alice")
    assert e2.approve(run2, "alice").ok
    assert e2.state(run2).status == "succeeded"


def test_a_quorum_of_two_needs_two_different_people(make_engine):
    e = make_engine(book(n=2))
    run = e.start("b", by="alice")
    first = e.approve(run, "bob")
    assert first.ok and "1 of 2" in first.message
    again = e.approve(run, "bob")
    assert not again.ok and "never counts twice" in again.message
    assert e.world.effects == []
    assert e.approve(run, "carol").ok
    assert e.state(run).status == "succeeded"
    assert [g["actor"] for g in e.event(run, "approval.granted")] == ["bob", "carol"]
    applying = e.event(run, "step.applying")[-1]
    assert applying["approvers"] == ["bob", "carol"]


def test_someone_outside_the_approver_groups_is_refused_and_audited(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.approve(run, "erin")  # in dba, not sre
    assert not out.ok and "not in an approver group" in out.message and "sre" in out.message
    out = e.approve(run, "mallory")
    assert not out.ok
    assert [r["actor"] for r in e.event(run, "command.refused")] == ["erin", "mallory"]
    assert e.world.effects == []


def test_an_unanswered_approval_expires_and_the_run_fails_safe(make_engine):
    e = make_engine(book(extra="expires_after: 10m"))
    run = e.start("b", by="alice")
    e.advance(599)
    assert e.state(run).status == "awaiting_approval"
    e.advance(2)
    st = e.state(run)
    assert st.status == "failed" and st.steps["change"].status == "expired"
    assert "expired" in st.outcome and "nothing was applied" in st.outcome
    assert e.world.effects == []
    assert "approval.expired" in e.events(run)
    assert not e.approve(run, "bob").ok


def test_a_rejection_needs_a_reason_and_ends_the_run_with_nothing_applied(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.reject(run, "bob", reason="no")
    assert not out.ok and "reason" in out.message
    out = e.reject(run, "bob", reason="the node is back, do not touch it")
    assert out.ok
    st = e.state(run)
    assert st.status == "failed" and st.steps["change"].status == "rejected"
    assert e.world.effects == []
    assert e.event(run, "approval.rejected")[0]["reason"] == "the node is back, do not touch it"


def test_a_plan_that_changes_after_approval_voids_it_and_asks_again(make_engine):
    e = make_engine(book(n=2))
    run = e.start("b", by="alice")
    e.approve(run, "bob")
    e.world.set("x", "half")  # the world changes between the approvals and apply
    e.approve(run, "carol")
    st = e.state(run)
    assert st.status == "awaiting_approval", "the second approval was for a plan that no longer holds"
    assert e.world.get("x") == "half" and e.world.effects == []
    inv = e.event(run, "approval.invalidated")
    assert inv and inv[0]["voided"] == ["bob", "carol"]
    assert st.steps["change"].plan["changes"][0]["before"] == "half"
    assert e.approve(run, "bob").ok and e.approve(run, "carol").ok
    assert e.state(run).status == "succeeded" and e.world.get("x") == "on"


def test_a_button_for_an_old_plan_is_refused(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.approve(run, "bob", plan_hash="0" * 64)
    assert not out.ok and "changed since" in out.message
    good = e.state(run).steps["change"].plan_hash
    assert e.approve(run, "bob", plan_hash=good).ok


def test_destructive_steps_need_approval_even_when_the_runbook_says_not(make_engine):
    text = runbook("b", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\nrequired: false\n")
    e = make_engine({"b": text})
    run = e.start("b")
    assert e.state(run).steps["change"].status == "awaiting_approval"


def test_no_configured_groups_means_nobody_can_approve(make_engine):
    e = make_engine(book(approvals="min_approvers: 1\n"), policy=PolicyConfig())
    run = e.start("b", by="alice")
    out = e.approve(run, "bob")
    assert not out.ok and "policy.groups" in out.message


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_the_requester_or_an_approver_may_abort_but_a_stranger_may_not(make_engine, who):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert not e.abort(run, "mallory").ok
    out = e.abort(run, who)
    assert out.ok
    st = e.state(run)
    assert st.status == "aborted" and st.steps["change"].status == "aborted"
    assert e.world.effects == []


EACH = runbook("each", """
- id: change
  title: "Set {{ item }}"
  action: fake.set
  foreach: "['a', 'b']"
  with: {name: "{{ item }}", value: "on"}
  approval:
    groups: [dba]
""")


def test_the_approver_groups_a_front_end_reads_are_those_the_engine_checks(make_engine):
    e = make_engine({"b": book()["b"], "open": book(approvals="min_approvers: 1\n")["b"],
                     "each": EACH})
    run = e.start("b", by="alice")
    assert approver_groups(e.state(run), None, POLICY) == ("sre",)
    assert approver_groups(e.state(run), "nope", POLICY) == ()
    assert e.approve(run, "bob").ok
    assert approver_groups(e.state(run), "change", POLICY) == ()  # nothing waits any more
    # a step naming no group: every configured group may approve it
    assert approver_groups(e.state(e.start("open", by="alice")), None, POLICY) == ("dba", "sre")
    # a foreach element, named by its step id as people type it
    run = e.start("each", by="alice")
    assert e.state(run).steps["change[0]"].status == "awaiting_approval"
    assert approver_groups(e.state(run), "change", POLICY) == ("dba",)
    assert not e.approve(run, "bob", step="change").ok  # sre, not dba: the engine agrees
    assert e.approve(run, "erin", step="change").ok
