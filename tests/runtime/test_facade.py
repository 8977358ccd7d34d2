"""The runtime facade (``bot.runtime.facade.Runtime``): one load per decision, the channel rule
once, typed errors an API can map (not found, refused with a reason, conflict)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from bot.engine.commands import Approve, Reject, StartRun
from bot.runtime.facade import Conflict, Elsewhere, NotFound, Origin, Refused, Runtime, elsewhere
from tests.fakes.engine_harness import make_engine, runbook

__all__ = ["make_engine"]

CHANGE = runbook("change-it", """
- id: change
  title: Set it
  action: fake.set
  with: {name: "web-1", value: "on"}
""", approvals="""
groups: [sre]
""")
SLACK_RUN = {"frontend": "slack", "channel": "C0INCIDENT"}


def started(make_engine: Any, origin: dict[str, str] | None = None) -> tuple[Any, Runtime, str]:
    e = make_engine({"change-it": CHANGE})
    runtime = Runtime(e.runner)
    state = runtime.start(StartRun(runbook="change-it", params={}, requester="alice",
                                   origin=origin or {}))
    runtime.drive(state.run_id)
    return e, runtime, state.run_id


def test_the_channel_rule() -> None:
    assert elsewhere(SLACK_RUN, Origin("slack", "C0INCIDENT")) is None
    assert elsewhere(SLACK_RUN, Origin("slack", "C0OTHER")) == "C0INCIDENT"
    assert elsewhere(SLACK_RUN, Origin("slack", None)) == "C0INCIDENT"  # a click with no channel
    assert elsewhere(SLACK_RUN, None) is None  # the terminal on the bot's host
    assert elsewhere({"frontend": "terminal"}, Origin("slack", "C0OTHER")) is None


def test_a_decision_loads_its_run_once_and_drives_it_on(make_engine: Any) -> None:
    e, runtime, run = started(make_engine)
    loads: list[str] = []
    inner = e.db.load

    def load(run_id: str) -> Any:
        loads.append(run_id)
        return inner(run_id)

    e.db.load = load
    members: list[Sequence[str]] = []
    answers: list[bool] = []
    out = runtime.decide(Approve(run_id=run, actor="bob"), fresh=members.append,
                         answer=lambda o: answers.append(o.ok))
    assert out.ok and answers == [True] and loads == [run]
    assert members and "bob" in members[0]  # the approver groups' members, read afresh
    assert e.world.get("web-1") == "on"  # driven on: applied
    assert e.state(run).status == "succeeded"


def test_a_decision_from_another_channel_is_refused_and_records_nothing(make_engine: Any) -> None:
    e, runtime, run = started(make_engine, SLACK_RUN)
    before = e.events(run)
    with pytest.raises(Elsewhere) as refused:
        runtime.decide(Approve(run_id=run, actor="bob"), origin=Origin("slack", "C0OTHER"))
    assert isinstance(refused.value, Refused) and refused.value.channel == "C0INCIDENT"
    assert refused.value.reason
    with pytest.raises(Elsewhere):
        runtime.show(run, origin=Origin("slack", "C0OTHER"))
    assert e.events(run) == before and e.world.get("web-1") is None
    assert runtime.decide(Approve(run_id=run, actor="bob"),
                          origin=Origin("slack", "C0INCIDENT")).ok


def test_an_engine_refusal_is_an_audited_outcome_not_an_error(make_engine: Any) -> None:
    e, runtime, run = started(make_engine)
    out = runtime.decide(Approve(run_id=run, actor="alice"))  # the requester
    assert not out.ok and out.message
    assert "command.refused" in e.events(run)


def test_no_such_run_or_runbook_is_not_found(make_engine: Any) -> None:
    _, runtime, _ = started(make_engine)
    with pytest.raises(NotFound):
        runtime.decide(Reject(run_id="rb-nosuch", actor="bob", reason="not this one, wrong node"))
    with pytest.raises(NotFound):
        runtime.show("rb-nosuch")
    with pytest.raises(NotFound):
        runtime.runbook("no-such-runbook")


def test_a_run_held_by_another_worker_is_a_conflict(make_engine: Any) -> None:
    e, runtime, run = started(make_engine)
    # another thread of this process has it
    with e.runner.leases.claimed(run), pytest.raises(Conflict):
        runtime.decide(Approve(run_id=run, actor="bob"))
    assert e.world.get("web-1") is None


def test_show_list_follow_and_params(make_engine: Any) -> None:
    e, _, run = started(make_engine)
    runtime = Runtime(e.runner, names=lambda: ["change-it"], history=e.db)
    assert runtime.show(run, children=True).state.run_id == run
    assert [r.run_id for r in runtime.runs()] == [run]
    events = runtime.follow(run)
    assert events[0].type == "run.created"
    assert [x.seq for x in runtime.follow(run, after=events[-2].seq)] == [events[-1].seq]
    assert runtime.runbook_names() == ["change-it"]
    assert runtime.params_problems("change-it", {}) == {}
