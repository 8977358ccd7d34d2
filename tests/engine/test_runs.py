"""Runs end to end on fake actions: steps in order, guards, waits, retries, failures, dry runs."""

from __future__ import annotations

import pytest

from tests.fakes.engine_harness import runbook

READ_SET = runbook("read-set", """
- id: read
  title: "Read {{ params.name }}"
  action: fake.read
  with: {name: "{{ params.name }}"}
  outputs:
    before: result.value
- id: change
  title: "Set {{ params.name }} to {{ params.value }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "{{ params.value }}"}
  guards:
    - expr: steps.read.result.value != 'forbidden'
      message: "{{ params.name }} is forbidden: leave it"
- id: after
  title: Read again
  action: fake.read
  with: {name: "{{ params.name }}"}
""", params="""
name: {type: string, required: true}
value: {type: string, default: "on"}
""", approvals="""
groups: [sre]
""")


def test_a_destructive_step_waits_for_approval_then_applies_once(make_engine):
    e = make_engine({"read-set": READ_SET})
    run = e.start("read-set", name="x")
    st = e.state(run)
    assert st.status == "awaiting_approval"
    assert st.steps["read"].status == "succeeded" and st.steps["read"].outputs == {"before": None}
    assert st.steps["change"].status == "awaiting_approval"
    assert e.world.get("x") is None  # nothing applied before approval
    out = e.approve(run, "bob")
    assert out.ok, out.message
    st = e.state(run)
    assert st.status == "succeeded", st.outcome
    assert e.world.get("x") == "on"
    assert [x["name"] for x in e.world.effects] == ["x"]
    assert st.steps["after"].result["value"] == "on"
    assert e.verified(run)
    types = e.events(run)
    assert types[0] == "run.created" and types[-1] == "run.finished"
    for t in ("step.planned", "guard.passed", "approval.requested", "command.approve",
              "approval.granted", "step.applying", "step.applied", "step.succeeded"):
        assert t in types


def test_a_failing_guard_blocks_the_step_with_its_message_and_changes_nothing(make_engine):
    e = make_engine({"read-set": READ_SET})
    e.world.set("x", "forbidden")
    run = e.start("read-set", name="x")
    st = e.state(run)
    assert st.status == "failed"
    assert st.steps["change"].status == "failed"
    assert "x is forbidden: leave it" in st.steps["change"].error
    assert e.world.get("x") == "forbidden" and e.world.effects == []
    failed = e.event(run, "guard.failed")
    assert failed[0]["message"] == "x is forbidden: leave it"
    assert "approval.requested" not in e.events(run)


def test_guards_are_checked_again_just_before_apply(make_engine):
    e = make_engine({"read-set": READ_SET.replace(
        "steps.read.result.value != 'forbidden'", "not plan.facts[0].value == 'forbidden'")})
    run = e.start("read-set", name="x")
    e.world.set("x", "forbidden")  # after the approval was requested, before apply
    e.approve(run, "bob")
    st = e.state(run)
    assert st.status == "failed" and "forbidden" in st.steps["change"].error
    assert e.world.effects == []


WAITS = runbook("waits", """
- id: slow
  title: Slow thing
  action: fake.slow
  with: {name: s, polls: 3}
- id: until
  title: Until x is on
  action: fake.read
  with: {name: x}
  wait_until: {expr: "result.value == 'on'", interval: 15s, timeout: 2m}
""")


def test_waits_are_stored_next_checks_with_progress_not_sleeping_threads(make_engine):
    e = make_engine({"waits": WAITS})
    run = e.start("waits")
    st = e.state(run)
    assert st.status == "waiting" and st.steps["slow"].progress == "1 of 3"
    assert st.next_check_at is not None
    e.advance(10)  # not due yet: nothing happens
    assert e.state(run).steps["slow"].polls == 0
    e.advance(20)
    assert e.state(run).steps["slow"].progress == "2 of 3"
    e.advance(30)
    st = e.state(run)
    assert st.steps["slow"].status == "succeeded"
    assert st.steps["until"].status == "waiting"
    e.world.set("x", "on")
    e.advance(15)
    assert e.state(run).status == "succeeded"
    assert e.events(run).count("step.polled") == 3


def test_a_wait_until_that_never_holds_fails_at_its_timeout(make_engine):
    e = make_engine({"waits": WAITS})
    run = e.start("waits")
    for _ in range(3):
        e.advance(30)
    for _ in range(9):
        e.advance(15)
    st = e.state(run)
    assert st.status == "failed" and "timed out after 120s" in st.steps["until"].error


RETRY = runbook("retry", """
- id: flaky
  title: Flaky call
  action: fake.flaky
  with: {name: f, failures: {fails}, permanent: {perm}}
  retries: {count: 2, backoff: 10s}
""")


def test_a_retryable_failure_is_retried_with_backoff_until_it_succeeds(make_engine):
    e = make_engine({"retry": RETRY.replace("{fails}", "2").replace("{perm}", "false")})
    run = e.start("retry")
    st = e.state(run)
    assert st.status == "waiting" and st.steps["flaky"].attempt == 1
    e.advance(10)
    assert e.state(run).steps["flaky"].attempt == 2
    e.advance(19)
    assert e.state(run).status == "waiting"  # the second backoff is 20s
    e.advance(1)
    st = e.state(run)
    assert st.status == "succeeded" and st.steps["flaky"].result == {"tries": 3}
    assert [r["delay"] for r in e.event(run, "step.retrying")] == [10.0, 20.0]


def test_retries_run_out_and_a_permanent_error_is_not_retried(make_engine):
    e = make_engine({"retry": RETRY.replace("{fails}", "5").replace("{perm}", "false")})
    run = e.start("retry")
    e.advance(10)
    e.advance(20)
    assert e.state(run).status == "failed"
    e2 = make_engine({"retry": RETRY.replace("{fails}", "1").replace("{perm}", "true")
                      .replace("name: f,", "name: f2,")})
    run2 = e2.start("retry")
    st = e2.state(run2)
    assert st.status == "failed" and "try 1" in st.steps["flaky"].error
    failed = e2.event(run2, "step.failed")[0]
    assert failed["calls"][0]["outcome"] == "Boom" and failed["calls"][0]["request_id"] == "req-1"


FLOW = runbook("flow", """
- id: maybe
  title: Skipped unless asked
  action: fake.noop
  when: params.go
- id: each
  title: "Read {{ item }}"
  action: fake.read
  foreach: params.names.split(',')
  with: {name: "{{ item }}"}
  outputs:
    value: result.value
- id: broken
  title: Fails but the run goes on
  action: fake.flaky
  with: {name: b, failures: 1, permanent: true}
  on_failure: continue
- id: tell
  title: Tell the channel
  action: notify
  with: {message: "read {{ steps.each.result | length }} things; maybe was {{ steps.maybe.status }}"}
""", params="""
go: {type: boolean, default: false}
names: {type: string, default: "a,b,c"}
""")


def test_when_foreach_on_failure_continue_and_notify(make_engine):
    e = make_engine({"flow": FLOW})
    e.world.set("b", "2")
    run = e.start("flow")
    st = e.state(run)
    assert st.status == "succeeded", st.outcome
    assert st.steps["maybe"].status == "skipped" and st.steps["maybe"].result is None
    assert [st.steps[f"each[{i}]"].title for i in range(3)] == ["Read a", "Read b", "Read c"]
    assert [st.steps[f"each[{i}]"].outputs["value"] for i in range(3)] == [None, "2", None]
    assert st.steps["broken"].status == "failed"
    assert e.recorder.messages == ["read 3 things; maybe was skipped"]


GOTO = runbook("goto", """
- id: first
  title: First
  action: fake.noop
- id: check
  title: Check
  action: fake.flaky
  with: {name: g, failures: 2, permanent: true}
  on_failure: {goto: first}
""")


def test_goto_re_enters_an_earlier_step(make_engine):
    e = make_engine({"goto": GOTO})
    run = e.start("goto")
    st = e.state(run)
    assert st.status == "succeeded"
    assert e.events(run).count("step.goto") == 2


MANUAL = runbook("manual", """
- id: look
  title: Look at the console
  manual: "Open the console of {{ params.node }} and check for a kernel panic."
- id: item
  title: Checklist
  action: manual.confirm
  with: {item: "The on-call lead knows"}
""", params="node: {type: string, default: n1}\n")


def test_manual_steps_wait_for_a_confirmation_and_record_who_gave_it(make_engine):
    e = make_engine({"manual": MANUAL})
    run = e.start("manual")
    st = e.state(run)
    assert st.status == "awaiting_approval"
    assert st.steps["look"].message == "Open the console of n1 and check for a kernel panic."
    assert e.confirm(run, "alice").ok  # the requester may confirm their own checklist
    st = e.state(run)
    assert st.steps["look"].status == "succeeded" and st.steps["look"].result["by"] == "alice"
    assert st.steps["item"].status == "awaiting_approval"
    assert e.approve(run, "bob").ok  # approve on a checklist item counts as confirm
    st = e.state(run)
    assert st.status == "succeeded" and st.steps["item"].result == {"confirmed": True, "by": "bob"}
    assert [c["actor"] for c in e.event(run, "step.confirmed")] == ["alice", "bob"]


def test_a_dry_run_plans_everything_and_changes_nothing(make_engine):
    e = make_engine({"read-set": READ_SET, "manual": MANUAL, "waits": WAITS})
    run = e.start("read-set", name="x", dry_run=True)
    st = e.state(run)
    assert st.status == "succeeded"
    assert st.steps["change"].status == "skipped"
    assert "dry run: planned only" in st.steps["change"].message
    assert st.steps["change"].plan["changes"][0]["after"] == "on"
    assert e.world.effects == [] and e.world.get("x") is None
    assert "approval.requested" not in e.events(run)
    for name in ("manual", "waits"):
        other = e.start(name, dry_run=True)
        assert e.state(other).status == "succeeded"


def test_bad_params_start_nothing_and_say_what_is_valid(make_engine):
    from bot.errors import ParamError

    e = make_engine({"read-set": READ_SET})
    with pytest.raises(ParamError, match="name"):
        e.start("read-set")
    assert e.db.runs() == []


def test_a_step_timeout_bounds_its_waits(make_engine):
    text = runbook("t", """
- id: slow
  title: Slow
  action: fake.slow
  with: {name: s, polls: 100}
  timeout: 1m
""")
    e = make_engine({"t": text})
    run = e.start("t")
    e.advance(30)
    e.advance(30)
    st = e.state(run)
    assert st.status == "failed" and "timed out after 60s" in st.steps["slow"].error
