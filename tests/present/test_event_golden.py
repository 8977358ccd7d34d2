"""Exported runs, byte for byte: every audit event type, as JSON and Markdown, against golden files.

Each story below is a deterministic run (fixed run id, manual clock, keyed chain, the engine's fake
actions) that together produce every event type the engine records: approvals granted, refused,
rejected, voided by a changed plan and expired; interlocks blocked and overridden by break-glass;
manual confirmations; skips, retries, failures, gotos, polls; aborts and dry runs. The exported
JSON holds the events exactly as stored (their chain is hashed from that text) and the timeline's
sentence for each, so a change in how events are recorded or described shows up here.

After an intended change, regenerate with

    RUNBOOK_BOT_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/present/test_event_golden.py

and review the diff like any other change.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.engine import events as ev
from bot.engine import stages
from bot.engine.commands import Retry, StartRun
from bot.engine.provenance import Provenance
from bot.frontends.term.printer import TerminalPrinter
from bot.present.transcript import render
from tests.fakes.engine_harness import Engine, runbook
from tests.present.conftest import transcript_of

GOLDEN = Path(__file__).parent / "golden" / "runs"
REGEN = os.environ.get("RUNBOOK_BOT_REGEN_GOLDEN") == "1"

CHANGE = runbook("change", """
- id: look
  title: Read x
  action: fake.read
  with: {name: x}
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
  guards:
    - expr: plan.facts[0].value != 'broken'
      message: "x is broken"
  approval: {required: true, description: "Turn x on."}
- id: tell
  title: Tell the channel
  action: notify
  with: {message: "x: step change {{ steps.change.status }}"}
""", approvals="groups: [sre]\n")

FLOW = runbook("flow", """
- id: maybe
  title: Skipped unless asked
  action: fake.noop
  when: params.go
- id: look
  title: Look at the console
  manual: "Open the console of {{ params.node }} and check for a kernel panic."
- id: first
  title: First
  action: fake.noop
- id: check
  title: Check
  action: fake.flaky
  with: {name: g, failures: 1, permanent: true}
  on_failure: {goto: first}
- id: busy
  title: Busy
  action: fake.flaky
  with: {name: h, failures: 1}
  retries: {count: 1, backoff: 5}
- id: guarded
  title: Guarded
  action: fake.noop
  guards:
    - expr: params.go
      message: "go is {{ params.go }}"
  on_failure: continue
- id: slow
  title: Wait for v
  action: fake.slow
  with: {name: v, polls: 2}
- id: item
  title: Checklist
  action: manual.confirm
  with: {item: "The on-call lead knows"}
- id: broken
  title: Fails and stops the run
  action: fake.flaky
  with: {name: b, failures: 1, permanent: true}
""", params="""
go: {type: boolean, default: false}
node: {type: string, default: n1}
settle: {type: duration, default: 90s}
""")


RECOVER = runbook("recover", """
- id: fence
  title: Fence the machine
  action: fake.set
  with: {name: machine, value: fenced}
  approval: {required: true, description: "Stop the machine."}
- id: taint
  title: Taint the node
  action: fake.set
  with: {name: node, value: tainted}
- id: detach
  title: Wait for the attachments to go
  action: fake.slow
  with: {name: va, polls: 2}
- id: serve
  title: Check the claim is served elsewhere
  action: fake.read
  with: {name: pod}
""", approvals="groups: [sre]\n")


def _stages_of_fakes(mp: pytest.MonkeyPatch) -> None:
    """The fake actions' results show the stages a real fence, taint, wait and check show
    (``bot/engine/stages.py``): a set names the stage it reached, a slow wait its VolumeAttachments
    gone, a read the claim served on another node."""
    def named(r, at, source):
        return [ev.stage_reached(r["value"], at=at, source=source, node="n1")]

    def served(r, at, source):
        return [ev.stage_reached("volume_attached", at=at, source=source, volume="vol-0a1"),
                ev.stage_reached("pod_running", at=at, source=source, node="n2", pod="db-0")]

    mp.setitem(stages.SEEN, "fake.set", named)  # type: ignore[index]
    mp.setitem(stages.SEEN, "fake.slow", lambda r, at, source: [  # type: ignore[index]
        ev.stage_reached("attachments_gone", at=at, source=source, node="n1")])
    mp.setitem(stages.SEEN, "fake.read", served)  # type: ignore[index]


def _recovered(e: Engine) -> str:
    """A watcher's run of a recovery: detected, its card shown, fenced, tainted, VolumeAttachments
    gone, the volume attached and the pod running elsewhere; the transcript's time to recovery."""
    now = e.clock.now()
    with pytest.MonkeyPatch.context() as mp:
        _stages_of_fakes(mp)
        run = _start(e, "recover", "rb-r3cwd", provenance=Provenance(
            suggested_by="watcher:n1", detected_at=(now - timedelta(seconds=50)).isoformat(),
            shown_at=(now - timedelta(seconds=20)).isoformat()))
        e.clock.advance(40)
        assert e.approve(run, "bob").ok
        e.clock.advance(10)
        assert e.approve(run, "bob").ok
        e.advance(30)  # the wait's second poll
        assert e.state(run).status == "succeeded", e.state(run).outcome
    return run


def _rejected(e: Engine) -> str:
    run = _start(e, "change", "rb-rejct")
    assert not e.approve(run, "erin").ok  # not in the approver group: refused and audited
    assert e.reject(run, "bob", reason="x must stay off during the freeze").ok
    return run


def _break_glass(e: Engine) -> str:
    e.world.lock("x")
    run = _start(e, "change", "rb-brk4g")
    assert not e.approve(run, "bob").ok  # an approval cannot pass an interlock
    e.clock.advance(30)
    assert e.break_glass(run, "bob", reason="the lock holder left, checked with them").ok
    e.clock.advance(30)
    assert e.break_glass(run, "carol", reason="confirmed on the bridge call").ok
    assert e.state(run).status == "succeeded", e.state(run).outcome
    return run


def _invalidated_then_aborted(e: Engine) -> str:
    e.world.lock("x")
    run = _start(e, "change", "rb-7k3qa")
    e.world.lock("x", False)
    e.clock.advance(10)
    out = e.runner.submit(Retry(run_id=run, actor="alice", step="change"))
    assert out.ok, out.message
    e.runner.drive(run)
    e.world.set("x", "half")  # the world changes after the plan was shown
    e.clock.advance(10)
    assert e.approve(run, "bob").ok  # re-planned before apply: the approval is void
    e.clock.advance(10)
    assert e.abort(run, "alice", reason="x was changed by hand, stopping").ok
    return run


def _expired(e: Engine) -> str:
    run = _start(e, "change", "rb-exp4d")
    e.advance(1801)
    assert e.state(run).status == "failed"
    return run


def _flow(e: Engine) -> str:
    run = _start(e, "flow", "rb-f4wcd")
    e.clock.advance(20)
    assert e.confirm(run, "alice").ok
    e.advance(5)  # the busy step's retry
    e.advance(30)  # the slow step's second poll
    assert e.approve(run, "bob").ok  # approve on a checklist item confirms it
    assert e.state(run).status == "failed", e.state(run).outcome
    return run


def _handed_over(e: Engine) -> str:
    run = _start(e, "change", "rb-hx4nd", provenance=Provenance(
        incident="INC-4471", suggested_by="alert:KubeNodeNotReady/3f9c2a"))
    e.clock.advance(60)
    assert e.handover(run, "alice", "bob", reason="bob leads the incident from here").ok
    assert not e.approve(run, "bob").ok  # the owner never approves
    e.clock.advance(30)
    assert e.approve(run, "carol").ok
    assert e.state(run).status == "succeeded", e.state(run).outcome
    return run


def _key_rotated(e: Engine) -> str:
    run = _start(e, "change", "rb-k3yr4")  # waiting for approval, its chain under test-key
    e.clock.advance(60)
    e.restart_store(audit_key="test-key-2", previous_keys=["test-key"])  # the key was rotated
    assert e.approve(run, "bob").ok
    assert e.state(run).status == "succeeded", e.state(run).outcome
    return run


def _dry_run(e: Engine) -> str:
    run = _start(e, "change", "rb-dry4r", dry_run=True)
    assert e.state(run).status == "succeeded"
    return run


def _agent_requested(e: Engine) -> str:
    """An AI agent's request (docs/agents.md): its reason and evidence in the run's origin; the
    agent and the person it acted for are refused, a person in the group approves."""
    run = _start(e, "change", "rb-4gent", requester="agent:holmes", origin={
        "frontend": "api", "method": "token", "agent": "holmes", "runs_as": "token:holmes",
        "through": "mcp", "on_behalf_of": "alice",
        "reason": "x reads broken since 10:02; turning it on fixes the checkout errors",
        "evidence": "diagnose: x-off (warning); 41 errors a minute in checkout"})
    assert not e.approve(run, "agent:holmes").ok  # an agent never approves
    assert not e.approve(run, "alice").ok  # she asked for it, through her agent
    e.clock.advance(30)
    assert e.approve(run, "bob").ok
    assert e.state(run).status == "succeeded", e.state(run).outcome
    return run


STORIES: dict[str, Callable[[Engine], str]] = {
    "rejected": _rejected, "break-glass": _break_glass,
    "invalidated-aborted": _invalidated_then_aborted, "expired": _expired, "flow": _flow,
    "dry-run": _dry_run, "handed-over": _handed_over, "key-rotated": _key_rotated,
    "recovered": _recovered, "agent-requested": _agent_requested,
}


@pytest.fixture
def engine(make_engine, monkeypatch) -> Iterator[Engine]:
    e = make_engine({"change": CHANGE, "flow": FLOW, "recover": RECOVER})
    e.terminal = io.StringIO()  # type: ignore[attr-defined]
    e.runner.notifiers.append(TerminalPrinter(e.terminal))  # type: ignore[attr-defined]
    monkeypatch.setattr(e, "_run_ids", [], raising=False)
    # run ids are drawn from the id module's random source: make it spell the story's id
    monkeypatch.setattr("bot.engine.ids.secrets", SimpleNamespace(choice=lambda _: e._run_ids.pop(0)))
    yield e


def _start(e: Engine, name: str, run_id: str, *, dry_run: bool = False,
           provenance: Provenance | None = None, requester: str = "alice",
           origin: dict[str, str] | None = None) -> str:
    e._run_ids.extend(run_id.removeprefix("rb-"))  # type: ignore[attr-defined]
    state = e.runner.start(StartRun(runbook=name, params={}, requester=requester,
                                    dry_run=dry_run, origin=origin or {"frontend": "terminal"},
                                    provenance=provenance or Provenance()))
    assert state.run_id == run_id
    e.runner.drive(run_id)
    return run_id


@pytest.mark.parametrize("story", list(STORIES))
def test_exported_runs_match_their_golden_files(engine, story):
    """The JSON and Markdown exports, and what the terminal printed as the run went."""
    run = STORIES[story](engine)
    assert engine.verified(run)
    t = transcript_of(engine, run, messages=[])
    texts = {"json": render(t, "json"), "md": render(t, "md"),
             "term.txt": engine.terminal.getvalue()}  # type: ignore[attr-defined]
    for ext, text in texts.items():
        path = GOLDEN / f"{story}.{ext}"
        if REGEN:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
        assert text == path.read_text(encoding="utf-8"), (
            f"{path.name} differs; RUNBOOK_BOT_REGEN_GOLDEN=1 regenerates it")


RECORDED = {
    "run.created", "step.planned", "guard.passed", "guard.failed", "approval.requested",
    "confirmation.requested", "approval.granted", "approval.rejected", "approval.expired",
    "approval.invalidated", "step.confirmed", "interlock.blocked",
    "interlock.override_requested", "interlock.override_granted", "interlock.overridden",
    "step.applying", "step.applied", "step.polled", "step.retrying", "step.succeeded",
    "step.failed", "step.skipped", "step.goto", "command.approve", "command.reject",
    "command.confirm", "command.break_glass", "command.retry", "command.abort",
    "command.refused", "run.aborted", "run.finished", "run.linked", "run.handed_over",
    "command.handover", "run.context", "audit.key_rotated", "stage.reached"}


def test_the_golden_runs_record_every_event_type_of_the_list():
    seen = {ev["type"] for story in STORIES
            for ev in json.loads((GOLDEN / f"{story}.json").read_text(encoding="utf-8"))["events"]}
    assert seen == RECORDED
