"""How a run that finished every step ends: the runbook's outcome rules (``spec.outcome``).

The rules are pure (``bot.engine.outcome.decide``); the end-to-end tests run them through the real
runner and store on fake actions and read back what a person would: the run's status and reason,
its sealing audit event, and the commands a finished run refuses.
"""

from __future__ import annotations

import pytest

from bot.engine import outcome
from bot.engine.state import RUN_TERMINAL, RunStatus, advance_run
from bot.errors import IllegalTransition
from bot.runbook.model import OutcomeRule
from tests.fakes.engine_harness import runbook

# a step that fails for good and lets the run go on, then one that succeeds: as node-dead-ngns
# and zone-outage-ngns do with ``on_failure: continue``
STEPS = """
- id: poke
  title: Poke f
  action: fake.flaky
  with: {name: f, failures: 5, permanent: true}
  on_failure: continue
- id: look
  title: Read x
  action: fake.read
  with: {name: x}
"""
RULES = """
  outcome:
    - when: steps.look.status == 'failed'
      outcome: failed
      reason: "could not read x"
    - when: steps.poke.status == 'failed'
      outcome: partial
      reason: >-
        poke failed ({{ steps.poke['items'][0].error[:40] }}),
        x is {{ steps.look.result.value }}
    - when: "true"
      outcome: succeeded
      reason: "x read, f poked"
"""


def _rules(*rows: tuple[str, str, str]) -> tuple[OutcomeRule, ...]:
    return tuple(OutcomeRule(when=w, outcome=o, reason=r) for w, o, r in rows)  # type: ignore[arg-type]


CTX = {"params": {"zone": "a"}, "run": {"id": "rb-x"},
       "steps": {"one": {"status": "failed", "result": None},
                 "two": {"status": "succeeded", "result": {"n": 3}}}}


# -- the rules, pure ---------------------------------------------------------------------------

def test_no_rule_keeps_todays_result():
    assert outcome.decide((), CTX) == outcome.Verdict(RunStatus.SUCCEEDED, "every step finished")


def test_the_first_rule_that_holds_decides_and_its_reason_is_rendered_on_one_line():
    rules = _rules(("steps.two.result.n > 5", "failed", "too many"),
                   ("steps.one.status == 'failed'", "partial",
                    "step one failed\n  in zone {{ params.zone }},\n  {{ steps.two.result.n }} left"),
                   ("true", "failed", "never reached"))
    v = outcome.decide(rules, CTX)
    assert v == outcome.Verdict(RunStatus.PARTIAL, "step one failed in zone a, 3 left", 2,
                                "steps.one.status == 'failed'")


def test_when_no_rule_holds_the_run_succeeded_as_today():
    v = outcome.decide(_rules(("steps.one.status == 'succeeded'", "partial", "x")), CTX)
    assert (v.status, v.reason, v.rule) == (RunStatus.SUCCEEDED, "every step finished", None)


def test_a_rule_that_cannot_be_evaluated_never_lets_the_run_pass_for_a_success():
    v = outcome.decide(_rules(("steps.one.result.n > 1", "partial", "x"),
                              ("true", "succeeded", "fine")), CTX)
    assert v.status == RunStatus.FAILED and v.rule == 1
    assert v.reason.startswith("outcome rule 1 could not be evaluated, so the run cannot be called "
                               "a success: "), v.reason


def test_a_reason_that_cannot_be_rendered_still_gives_the_rules_outcome_and_says_why():
    v = outcome.decide(_rules(("true", "partial", "left: {{ steps.one.result.n }} nodes"),), CTX)
    assert v.status == RunStatus.PARTIAL
    assert v.reason.startswith("left: … nodes (the reason could not be rendered: "), v.reason


def test_partial_is_a_final_status_reached_only_from_running():
    assert RunStatus.PARTIAL in RUN_TERMINAL
    assert advance_run(RunStatus.RUNNING, RunStatus.PARTIAL) == RunStatus.PARTIAL
    for start in (RunStatus.PENDING, RunStatus.WAITING, RunStatus.AWAITING_APPROVAL,
                  RunStatus.SUCCEEDED, RunStatus.FAILED):
        with pytest.raises(IllegalTransition):
            advance_run(start, RunStatus.PARTIAL)
    with pytest.raises(IllegalTransition):
        advance_run(RunStatus.PARTIAL, RunStatus.RUNNING)


# -- through the runner and the store ----------------------------------------------------------

def test_a_runbook_that_declares_nothing_ends_exactly_as_before(make_engine):
    """A step failed under ``on_failure: continue`` and nothing is declared: succeeded, "every
    step finished", and the sealing event has the shape every stored run has."""
    e = make_engine({"plain": runbook("plain", STEPS)})
    e.world.set("x", "on")
    run = e.start("plain")
    st = e.state(run)
    assert st.steps["poke"].status == "failed"
    assert (st.status, st.outcome) == ("succeeded", "every step finished")
    [end] = e.event(run, "run.finished")
    assert set(end) == {"status", "outcome", "compensations", "duration_seconds", "actor"}
    assert e.verified(run)


def test_a_declared_rule_ends_the_run_partial_with_its_reason_sealed_in_the_audit(make_engine):
    e = make_engine({"judged": runbook("judged", STEPS) + RULES})
    e.world.set("x", "on")
    run = e.start("judged")
    st = e.state(run)
    assert st.status == "partial"
    assert st.outcome == "poke failed (apply failed: f failed (try 1)), x is on", st.outcome
    assert st.finished_at and st.next_check_at is None
    [end] = e.event(run, "run.finished")
    assert (end["status"], end["outcome"], end["rule"], end["when"]) == (
        "partial", st.outcome, 2, "steps.poke.status == 'failed'")
    assert e.events(run)[-1] == "run.finished" and e.verified(run)
    # a partial run is finished: nothing more can be done to it
    out = e.retry(run, "bob")
    assert not out.ok and "has already finished (partial)" in out.message
    assert e.state(run).status == "partial"


def test_the_rules_see_every_step_and_a_run_that_met_its_goal_says_so(make_engine):
    steps = STEPS.replace("failures: 5, permanent: true", "failures: 0")
    e = make_engine({"judged": runbook("judged", steps) + RULES})
    e.world.set("x", "on")
    run = e.start("judged")
    st = e.state(run)
    assert (st.status, st.outcome) == ("succeeded", "x read, f poked")
    assert e.event(run, "run.finished")[0]["rule"] == 3


def test_a_failed_rule_ends_the_run_failed(make_engine):
    steps = STEPS.replace("with: {name: x}", "with: {name: x}\n  on_failure: continue").replace(
        "action: fake.read", "action: fake.flaky").replace("{name: x}", "{name: x, failures: 9, "
                                                             "permanent: true}")
    e = make_engine({"judged": runbook("judged", steps) + RULES})
    run = e.start("judged")
    st = e.state(run)
    assert (st.status, st.outcome) == ("failed", "could not read x")
    assert e.event(run, "run.finished")[0]["rule"] == 1


def test_a_run_that_stopped_early_never_reaches_the_rules(make_engine):
    steps = STEPS.replace("  on_failure: continue\n", "")
    e = make_engine({"judged": runbook("judged", steps) + RULES})
    run = e.start("judged")
    st = e.state(run)
    assert st.status == "failed" and "poke" in st.outcome and "rule" not in e.event(
        run, "run.finished")[0]
    assert "look" not in st.steps


def test_a_dry_run_applies_nothing_so_the_rules_do_not_judge_it(make_engine):
    e = make_engine({"judged": runbook("judged", STEPS) + RULES})
    e.world.set("x", "on")
    run = e.start("judged", dry_run=True)
    st = e.state(run)
    assert st.status in ("succeeded", "failed") and "rule" not in e.event(run, "run.finished")[0]
