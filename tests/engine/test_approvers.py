"""Who is never an approver, and who a step's approver list lets in, through the runner.

The attacks: a step's ``groups: []`` (or a group outside the runbook's) widening who approves; the
bot's own identity, directly or through an alias, approving or breaking glass; a terminal identity
approving where the config accepts approvals from Slack only.
"""

from __future__ import annotations

import pytest

from bot.config import PolicyConfig
from bot.engine.approvals import effective_rule
from bot.errors import RunbookError
from bot.runbook.model import Approval
from tests.fakes.engine_harness import runbook

GROUPS = {"sre": ("alice", "bob", "carol", "runbook-bot", "system:worker", "mallory",
                  "slack:UBOB", "slack:UCAROL"),
          "dba": ("erin",)}
POLICY = PolicyConfig(groups=GROUPS, aliases={"mallory": "runbook-bot"})
SLACK_ONLY = PolicyConfig(groups=GROUPS, approvals_from=("slack",))


def book(step_approval: str, action: str = "fake.set") -> dict[str, str]:
    return {"b": runbook("b", f"""
- id: change
  title: Set x
  action: {action}
  with: {{name: x, value: "on"}}
  approval: {step_approval}
""".replace(", value: \"on\"", "" if action == "fake.read" else ", value: \"on\""),
        approvals="groups: [sre]\n")}


@pytest.mark.parametrize("approval", ["{groups: []}", "{required: true, groups: []}"])
def test_an_empty_step_group_list_is_an_error_not_every_group(make_engine, approval):
    e = make_engine(book(approval), policy=POLICY)
    with pytest.raises(RunbookError) as err:
        e.start("b", by="alice")
    assert ("approval.groups: an empty list would let any approver group approve: name at least "
            "one group") in str(err.value)
    assert e.db.runs(limit=5) == []


def test_a_step_may_not_widen_approval_to_a_group_outside_the_runbooks(make_engine):
    e = make_engine(book("{required: true, groups: [dba]}", action="fake.read"), policy=POLICY)
    with pytest.raises(RunbookError) as err:
        e.start("b", by="alice")
    assert ("step 'change': groups dba are not in the runbook's spec.approvals.groups (sre); a "
            "step may narrow who approves, never widen it") in str(err.value)


def test_a_step_that_names_no_groups_has_the_runbooks_groups(make_engine):
    e = make_engine(book("{required: true}"), policy=POLICY)
    run = e.start("b", by="alice")
    out = e.approve(run, "erin")
    assert not out.ok and "eligible groups: sre" in out.message
    assert e.world.effects == []


@pytest.mark.parametrize(("step", "runbook", "groups"), [
    ((), ("sre",), ("sre",)),  # an empty list read from an older store: the runbook's, not all
    (None, ("sre",), ("sre",)),
    (("sre",), ("sre", "dba"), ("sre",)),
    (("dba",), ("sre",), ("sre",)),  # never wider than the runbook's
    (None, None, ()),  # a runbook that names none: any configured group (documented)
])
def test_the_engine_only_ever_narrows_the_runbooks_groups(step, runbook, groups):
    rule = effective_rule(runbook=Approval(groups=runbook),
                          step=Approval.model_construct(groups=step), destructive=True,
                          policy=POLICY)
    assert rule.groups == groups


@pytest.mark.parametrize("bot", ["runbook-bot", "system:worker", "mallory"])
def test_the_bot_itself_never_approves_even_when_listed_in_a_group(make_engine, bot):
    e = make_engine(book("{required: true}"), policy=POLICY)
    run = e.start("b", by="alice")
    out = e.approve(run, bot)
    assert not out.ok and "never approves a step or breaks glass" in out.message
    assert e.state(run).steps["change"].status == "awaiting_approval"
    assert e.world.effects == []
    assert e.event(run, "command.refused")[0]["actor"] == bot


def test_the_bot_itself_never_breaks_glass(make_engine):
    e = make_engine(book("{required: true}"), policy=POLICY)
    e.world.lock("x")
    run = e.start("b", by="alice")
    assert e.break_glass(run, "bob").ok
    for bot in ("runbook-bot", "system:worker", "mallory"):
        out = e.break_glass(run, bot)
        assert not out.ok and "never approves a step or breaks glass" in out.message
    assert e.state(run).steps["change"].blocked is not None
    assert e.event(run, "interlock.override_granted") == []


def test_approvals_from_slack_refuses_terminal_approval_and_break_glass_but_not_stopping(
    make_engine,
):
    e = make_engine(book("{required: true}"), policy=SLACK_ONLY)
    e.world.lock("x")
    run = e.start("b", by="alice")
    out = e.break_glass(run, "bob")
    assert not out.ok and "cannot break glass from the terminal" in out.message
    assert "accepts approvals only from slack" in out.message
    assert e.break_glass(run, "slack:UBOB").ok and e.break_glass(run, "slack:UCAROL").ok
    assert e.world.get("x") == "on"  # the two Slack voters saw the plan: their votes approve it
    e.world.lock("x", False)
    run = e.start("b", by="alice")
    out = e.approve(run, "carol")
    assert not out.ok and "cannot approve from the terminal" in out.message
    assert e.state(run).steps["change"].status == "awaiting_approval"
    assert e.abort(run, "bob").ok  # stopping is always possible
    assert e.state(run).status == "aborted"


def test_approvals_from_slack_accepts_a_slack_approval(make_engine):
    e = make_engine(book("{required: true}"), policy=SLACK_ONLY)
    run = e.start("b", by="alice")
    assert e.approve(run, "slack:UBOB").ok
    assert e.state(run).status == "succeeded" and e.world.get("x") == "on"
