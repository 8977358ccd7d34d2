"""Run views rendered as Block Kit stay inside Slack's limits whatever the run looks like."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.engine.runstate import RunState, StepState, Vote
from bot.engine.state import RunStatus, StepStatus
from bot.present import blockkit as bk
from bot.present.views import run_view, step_view
from bot.runbook.loader import load_text
from tests.fakes.blockkit_limits import validate_blocks, validate_view
from tests.frontends.slack.conftest import CHANGE

NOW = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)


def state(n_steps: int = 3, *, changes: int = 1, title: str = "Recover node") -> RunState:
    steps = {}
    for i in range(n_steps):
        plan = {"summary": f"Taint node ip-10-0-{i}", "hash": f"h{i}" * 8, "changes": [
            {"operation": "taint", "target_kind": "Node", "target": f"ip-10-0-{i}-{j}" * 5,
             "before": "", "after": "node.kubernetes.io/out-of-service"} for j in range(changes)],
            "facts": [{"subject": "instance i-0abc", "name": "state", "value": "stopped",
                       "read_at": (NOW - timedelta(seconds=2)).isoformat()}]}
        steps[f"s{i}"] = StepState(key=f"s{i}", step_id=f"s{i}", position=i, title=f"Step {i} " * 8,
                                   status=StepStatus.AWAITING_APPROVAL, plan=plan,
                                   plan_hash=plan["hash"], needs_approval=True, min_approvers=1,
                                   groups=["sre"])
    return RunState(run_id="rb-7k3q2", runbook="node-dead", runbook_text="", runbook_file="x",
                    title=title, params={"node": "ip-10-0-1-2"}, requester="slack:UALICE",
                    created_at=NOW.isoformat(), status=RunStatus.AWAITING_APPROVAL, steps=steps)


def test_a_card_of_two_hundred_steps_is_valid_and_within_fifty_blocks() -> None:
    blocks = bk.run_card(run_view(state(200)))
    assert len(blocks) <= 50 and validate_blocks(blocks) == []


def test_an_enormous_plan_is_cut_with_a_pointer_to_the_thread() -> None:
    st = state(1, changes=400)
    view = run_view(st)
    blocks = bk.approval_message(view, view.steps[0], destructive=True, now=NOW)
    assert validate_blocks(blocks) == []
    assert any(bk.THREAD_POINTER in b.get("text", {}).get("text", "") for b in blocks)
    approve = next(e for b in blocks if b["type"] == "actions" for e in b["elements"])
    assert approve["style"] == "danger" and len(approve["confirm"]["text"]["text"]) <= 300


def test_guard_evidence_says_how_long_ago_it_was_read() -> None:
    view = run_view(state(1))
    text = str(bk.approval_message(view, view.steps[0], destructive=True, now=NOW))
    assert "instance i-0abc state: `stopped`, read 2 s ago" in text


def test_text_from_the_world_cannot_mention_or_link() -> None:
    st = state(1, title="<!channel> <https://evil|click> & co")
    st.steps["s0"].title = st.title
    view = run_view(st)
    blocks = bk.run_card(view) + bk.approval_message(view, view.steps[0], destructive=True, now=NOW)
    text = " ".join(mrkdwn_texts(blocks))
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text and "&amp; co" in text


def mrkdwn_texts(obj: object) -> list[str]:
    if isinstance(obj, dict):
        own = [obj["text"]] if obj.get("type") == "mrkdwn" else []
        return own + [t for v in obj.values() for t in mrkdwn_texts(v)]
    if isinstance(obj, list):
        return [t for v in obj for t in mrkdwn_texts(v)]
    return []


def test_a_decided_step_shows_who_and_when_instead_of_buttons() -> None:
    st = state(1)
    s = st.steps["s0"]
    s.votes.append(Vote(by="slack:UBOB", at="2026-01-01T12:03:00+00:00", kind="approve",
                        plan_hash=s.plan_hash))
    s.status = StepStatus.SUCCEEDED
    line = bk.decision_line(step_view(s), who=lambda i: f"<@{i[6:]}>")
    assert line == (":white_check_mark: Approved by <@UBOB> "
                    "<!date^1767268980^{date_short_pretty} {time}|Jan 01 2026 12:03 UTC>")


def test_the_params_modal_is_a_valid_view_with_one_input_per_param() -> None:
    runbook = load_text(CHANGE, file="change.yaml", catalog=None)
    view = bk.params_modal(runbook, values={"count": "9"}, errors={"count": "above the maximum 5"},
                           metadata="{}")
    assert validate_view(view) == []
    inputs = [b for b in view["blocks"] if b["type"] == "input"]
    assert [b["block_id"] for b in inputs] == ["param:name", "param:value", "param:count"]
    assert inputs[2]["hint"]["text"] == "above the maximum 5"


def test_a_plan_too_long_for_the_approval_is_given_whole_in_its_own_reply() -> None:
    view = run_view(state(1, changes=400))
    step = view.steps[0]
    assert bk.plan_needs_thread(step)
    blocks = bk.full_plan(step)
    assert validate_blocks(blocks) == [] and len(blocks) <= 50
    assert "ip-10-0-0-399" in str(blocks)
