"""A run's owner (its incident commander) and handing it over, through the runner.

The attacks: the new owner approving; handing the run to yourself or to someone who already
approved to launder an approval; someone who is neither owner nor requester taking the run over;
handing it to the bot. And what stays allowed: a former owner who is not the requester approves
like anyone else in the groups, the requester and the owner may still reject and abort.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from bot.engine.commands import Approve, Handover, StartRun
from bot.engine.provenance import Provenance
from bot.errors import NotFound
from bot.present.console import status
from bot.present.views import run_view
from tests.fakes.engine_harness import runbook

SET = """
- id: change
  title: "Set {{ params.name }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "on"}
  approval:
    min_approvers: {n}
"""
PARAMS = "name: {type: string, default: x}\n"


def book(n: int = 1) -> dict[str, str]:
    return {"b": runbook("b", SET.replace("{n}", str(n)), params=PARAMS,
                         approvals="groups: [sre]\nmin_approvers: 1\n")}


def test_a_run_is_owned_by_its_requester_until_handed_over(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.state(run).current_owner == "alice"
    out = e.handover(run, "alice", "bob", reason="going off shift now")
    assert out.ok, out.message
    st = e.state(run)
    assert (st.current_owner, st.requester) == ("bob", "alice")
    [moved] = e.event(run, "run.handed_over")
    assert (moved["from"], moved["to"], moved["reason"], moved["actor"]) == (
        "alice", "bob", "going off shift now", "alice")
    assert e.event(run, "command.handover")[0]["to"] == "bob"
    assert e.verified(run)


def test_the_new_owner_cannot_approve(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.handover(run, "alice", "bob").ok
    out = e.approve(run, "bob")
    assert not out.ok and "owns this run" in out.message
    assert e.world.effects == []
    assert e.state(run).steps["change"].status == "awaiting_approval"
    assert e.event(run, "command.refused")[-1]["actor"] == "bob"


def test_an_alias_of_the_owner_is_the_owner(make_engine):
    e = make_engine(book())
    run = e.start("b", by="bob")
    assert e.handover(run, "bob", "alice").ok
    out = e.approve(run, "slack:UALICE")
    assert not out.ok and "owns this run" in out.message
    assert e.world.effects == []


def test_the_requester_still_cannot_approve_after_handing_over(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.handover(run, "alice", "bob").ok
    out = e.approve(run, "alice")
    assert not out.ok and "started this run" in out.message
    assert e.world.effects == []


def test_handing_over_to_yourself_changes_nothing(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.handover(run, "alice", "alice")
    assert not out.ok and "already owns" in out.message
    assert e.event(run, "run.handed_over") == []


def test_handing_over_to_someone_who_approved_voids_their_approval(make_engine):
    e = make_engine(book(n=2))
    run = e.start("b", by="alice")
    assert e.approve(run, "bob").ok  # 1 of 2
    assert e.handover(run, "alice", "bob", reason="bob leads the incident now").ok
    # carol's approval would have been the second: bob's no longer counts, so nothing applies
    assert e.approve(run, "carol").ok
    assert e.world.effects == []
    s = e.step(run, "change")
    assert s.status == "awaiting_approval" and not s.approved
    assert [v.by for v in s.approvals()] == ["carol"]
    [moved] = e.event(run, "run.handed_over")
    assert moved["voided"] == [{"step": "change", "by": "bob"}]
    assert e.event(run, "approval.invalidated")[-1]["voided"] == ["bob"]
    assert e.approve(run, "dave").ok
    assert e.world.effects and e.state(run).status == "succeeded"
    assert e.verified(run)


def test_a_handover_to_the_only_approver_stops_an_approved_step_from_applying(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    st = e.state(run)
    # the approval and the handover land before any worker drives the run on
    assert e.runner.submit(Approve(run_id=run, actor="bob")).ok
    assert e.runner.submit(Handover(run_id=run, actor="alice", to="bob")).ok
    e.runner.drive(run)
    assert st.run_id == run and e.world.effects == []
    s = e.step(run, "change")
    assert s.status == "awaiting_approval" and not s.approved
    assert e.state(run).status == "awaiting_approval"


def test_only_the_owner_or_the_requester_may_hand_over(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.handover(run, "carol", "carol")  # an approver taking the run over
    assert not out.ok and "only the run's owner (alice) or its requester (alice)" in out.message
    assert e.state(run).current_owner == "alice"
    assert e.event(run, "command.refused")[-1]["actor"] == "carol"
    assert e.handover(run, "alice", "bob").ok
    assert e.handover(run, "bob", "carol").ok  # the owner hands on
    assert e.handover(run, "alice", "dave").ok  # the requester can always reassign
    assert e.handover(run, "bob", "bob").ok is False  # a former owner cannot take it back


def test_a_former_owner_who_is_not_the_requester_may_approve(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.handover(run, "alice", "bob").ok
    assert e.handover(run, "bob", "carol").ok
    out = e.approve(run, "bob")
    assert out.ok, out.message
    assert e.world.effects and e.state(run).status == "succeeded"


def test_the_bot_never_owns_a_run_and_a_bad_name_is_refused(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    out = e.handover(run, "alice", "system:worker")
    assert not out.ok and "bot's own identity" in out.message
    out = e.handover(run, "alice", "<!channel>")
    assert not out.ok and "is not a user" in out.message
    assert e.state(run).current_owner == "alice"


def test_the_owner_may_reject_and_abort(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.handover(run, "alice", "erin").ok  # erin is not in the step's approver group
    out = e.reject(run, "erin", reason="wrong node, stop it")
    assert out.ok, out.message
    assert e.state(run).status == "failed" and e.world.effects == []


def test_a_finished_run_is_not_handed_over(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice")
    assert e.abort(run, "alice").ok
    out = e.handover(run, "alice", "bob")
    assert not out.ok and "already finished" in out.message


def test_an_owner_or_incident_edited_in_the_database_fails_verification(make_engine):
    e = make_engine(book())
    run = e.start("b", by="alice", provenance=Provenance(incident="INC-9"))
    assert e.handover(run, "alice", "bob").ok and e.verified(run)
    for name, forged in (("owner", "mallory"), ("incident", "INC-10")):
        with e.db.engine.begin() as conn:
            header = json.loads(conn.execute(text("SELECT header FROM runs WHERE id = :r"),
                                             {"r": run}).scalar_one())
            good = header[name]
            conn.execute(text("UPDATE runs SET header = :h WHERE id = :r"),
                         {"h": json.dumps(header | {name: forged}), "r": run})
        assert not e.verified(run)
        with e.db.engine.begin() as conn:
            conn.execute(text("UPDATE runs SET header = :h WHERE id = :r"),
                         {"h": json.dumps(header | {name: good}), "r": run})
        assert e.verified(run)


def test_a_run_that_follows_on_names_its_parent_and_the_parent_lists_it(make_engine):
    e = make_engine(book())
    first = e.start("b", by="alice", provenance=Provenance(incident="INC-77"))
    child = e.start("b", by="carol", provenance=Provenance(parent=first))
    st = e.state(child)
    assert (st.parent, st.incident) == (first, "INC-77")  # the incident is inherited
    [linked] = e.event(child, "run.linked")
    assert linked["parent"] == first and linked["incident"] == "INC-77"
    assert e.verified(child)
    shown = status(run_view(e.state(first), children=e.db.children(first)))
    assert f"followed by: {child} b (awaiting_approval)" in shown and "incident: INC-77" in shown
    assert f"follows on from: {first}" in status(run_view(st))
    with pytest.raises(NotFound):
        e.runner.start(StartRun(runbook="b", params={}, requester="alice",
                                provenance=Provenance(parent="rb-aaaaa")))
    assert len(e.db.runs(limit=10)) == 2
