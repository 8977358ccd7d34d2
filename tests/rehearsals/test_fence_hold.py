"""A fence held for a timed condition (interlock 8, ``fence-wait``) plans itself again every
``policy.hold_recheck_seconds`` until the hold clears or hardens, with no person typing retry.

A hung machine's kubelet goes silent at once, but EC2's instance check reads ``impaired`` only
about three minutes later: the fence planned in between is held. Before holds were re-checked,
the step then waited for a person's ``retry`` (docs/engine.md, "Interlocks and break-glass").
"""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise

import pytest

from bot.engine.state import RunStatus
from bot.present.blockkit import approval_message
from bot.present.console import status
from bot.present.views import run_view
from bot.sim.rehearsal import Rehearsal
from tests.rehearsals.conftest import assert_clean, types

pytestmark = pytest.mark.slow


def _held(r: Rehearsal, run_id: str, *, step: str = "fence") -> tuple[object, list[datetime]]:
    """Drive the run, approving what asks, and let every timed hold of ``step`` re-check itself
    (nobody retries): the final state and when each recheck was due."""
    rechecks: list[datetime] = []
    st = r.play(run_id)
    while st.status == RunStatus.AWAITING_APPROVAL:
        s = st.steps.get(step)
        if s is None or not (s.blocked or {}).get("recheck"):
            break
        if not rechecks:  # how a held step reads to people: the terminal and the Slack card
            view = run_view(st)
            said = "held: re-checked every 15 s until EC2 confirms the machine is down"
            assert said in status(view, r.clock.now()), status(view, r.clock.now())
            card = str(approval_message(view, view.waiting_on, destructive=True,  # type: ignore[arg-type]
                                        now=r.clock.now()))
            assert said in card and "Blocked by interlock" not in card, card
        due = datetime.fromisoformat(str(st.next_check_at))
        assert due == datetime.fromisoformat(str(s.next_check_at))  # the run wakes for the hold
        rechecks.append(due)
        r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))
        st = r.play(run_id)
    return st, rechecks


def _count(r: Rehearsal, run_id: str, kind: str, step: str = "fence") -> int:
    return sum(1 for t, k in types(r, run_id) if t == kind and k == step)


def test_a_held_fence_goes_through_by_itself_once_ec2_reads_impaired(rehearse):
    r = rehearse("node-hung", at_death="true")
    r.sandbox.advance(110)  # the kubelet silent past the grace period and fence_min_not_ready
    st, rechecks = _held(r, r.start_run("node-dead-ngns", node=r.facts["node"]))
    assert st.status == "succeeded", st.outcome
    assert rechecks, "the fence was never held"
    gaps = [(b - a).total_seconds() for a, b in pairwise(rechecks)]
    assert all(g >= 15 for g in gaps), gaps  # never sooner than policy.hold_recheck_seconds
    # one hold on record, not one per recheck; then the request for the plan that may fence
    assert _count(r, st.run_id, "interlock.blocked") == 1
    assert _count(r, st.run_id, "approval.requested") == 2
    assert not [c for c, _ in r.submitted if type(c).__name__ in ("Retry", "BreakGlass")]
    assert r.sandbox.ec2.instance_state(r.facts["instance_id"]) in ("stopped", "stopping")
    assert_clean(r, st.run_id)


def test_a_node_that_comes_back_while_held_is_never_fenced(rehearse):
    r = rehearse("node-recovers-during-approval", at_death="true", recover_after=140)
    r.sandbox.advance(110)
    st, rechecks = _held(r, r.start_run("node-dead-ngns", node=r.facts["node"]))
    fence = st.steps["fence"]
    # the re-plan found its kubelet alive: blocked for a person (break-glass, retry or abort),
    # no longer re-checked by itself
    assert rechecks and st.status == "awaiting_approval", st.status
    assert fence.blocked["rule"] == "fence-live" and "recheck" not in fence.blocked
    assert st.next_check_at == fence.expires_at
    assert r.sandbox.ec2.instance_state(r.facts["instance_id"]) == "running"
    assert _count(r, st.run_id, "interlock.blocked") == 2  # the hold, then the refusal


def test_a_hold_that_reaches_fence_ambiguous_after_needs_break_glass_and_stops_rechecking(
        rehearse):
    r = rehearse("node-partitioned")
    st, rechecks = _held(r, r.start_run("node-dead-ngns", node=r.facts["node"]))
    fence = st.steps["fence"]
    assert rechecks and st.status == "awaiting_approval"
    assert fence.blocked["rule"] == "fence-live" and "MAY BE ALIVE" in fence.blocked["message"]
    assert "recheck" not in fence.blocked and st.next_check_at == fence.expires_at
    assert _count(r, st.run_id, "interlock.blocked") == 2
    assert r.sandbox.ec2.instance_state(r.facts["instance_id"]) == "running"
