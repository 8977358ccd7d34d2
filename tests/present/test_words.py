"""Every shipped runbook's conditions read as words: a skipped step, a wait and a guard of each
step, as the engine records them, shown through the views; and the pieces that make it so (the
language's forms, validate's warnings, one time formatter, help that suggests a verb)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.engine.runstate import RunState, StepState
from bot.engine.state import StepStatus
from bot.errors import RunbookError
from bot.present import times
from bot.present.views import step_view
from bot.present.words import (
    NOT_NEEDED,
    WAITING,
    Skipped,
    collapse,
    context_of,
    step_words,
    wait_text,
)
from bot.runbook.loader import load_runbook, load_text
from bot.runbook.model import Runbook
from bot.runbook.wording import unworded

ROOT = Path(__file__).parents[2]
SHIPPED = sorted((ROOT / "runbooks").glob("*.yaml"))
CODE = ("steps.", "result[", "params.", "{{", "{%")
WORDS_PENDING = {"zone-outage-ngns"}  # edited elsewhere: its words come with that change
NOW = datetime(2026, 1, 1, 16, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    from bot.actions.builtin import builtin_actions

    return builtin_actions()


def _as_recorded(runbook: Runbook) -> RunState:
    """A run of ``runbook`` in which every step is at once skipped, waiting and guarded, recorded
    with the engine's own texts (which quote the expressions)."""
    state = RunState(run_id="rb-words", runbook=runbook.name, title=runbook.metadata.title,
                     requester="alice", params={}, created_at=NOW.isoformat(),
                     runbook_text="", runbook_file="")
    for i, step in enumerate(runbook.spec.steps):
        s = StepState(key=step.id, step_id=step.id, position=i * 10_000, title=step.title)
        wait = step.wait_until
        s.progress = f"waiting until {wait.expr} (30s of 600s)" if wait else ""
        s.poll_started_at = (NOW - timedelta(seconds=30)).isoformat()
        s.next_check_at = (NOW + timedelta(seconds=15)).isoformat()
        s.guards = [{"expr": g.expr, "ok": True, "message": ""} for g in step.guards]
        state.steps[s.key] = s
    return state


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_condition_reads_as_words_in_every_state(path: Path, catalog) -> None:  # type: ignore[no-untyped-def]
    runbook = load_runbook(path, catalog=catalog)
    state = _as_recorded(runbook)
    ctx = context_of(state, runbook)
    for step in runbook.spec.steps:
        s = state.steps[step.id]
        for status in (StepStatus.SKIPPED, StepStatus.WAITING, StepStatus.SUCCEEDED):
            s.status = status
            skipped = status == StepStatus.SKIPPED and step.when_expr
            s.message = f"when is false: {step.when_expr}" if skipped else ""
            view = step_view(s, step_words(step, s, ctx))
            shown = [view.message, view.progress, view.pending, *view.guard_words]
            assert not [t for t in shown if any(c in t for c in CODE)], (step.id, status, shown)
            if status == StepStatus.SKIPPED and step.when_expr:
                assert view.not_needed and view.message
                assert (view.message == NOT_NEEDED) == (step.when_because is None)
                assert f"when: {' '.join(step.when_expr.split())}" in view.details  # on demand
            if status == StepStatus.WAITING and step.wait_until:
                said = wait_text(view, now=NOW, at=lambda t: times.clock(t, date=False))
                gives_up = NOW - timedelta(seconds=30) + timedelta(seconds=step.wait_until.timeout)
                assert said.endswith(f", next check in 15s, gives up at {gives_up:%H:%M} UTC"), said
                assert (view.progress == WAITING) == (step.wait_until.waiting_for is None)
    if runbook.name not in WORDS_PENDING:
        assert unworded(runbook, catalog=catalog) == []


def test_when_takes_a_plain_expression_or_words_and_words_need_a_reason() -> None:
    from tests.fakes.engine_harness import runbook

    text = runbook("worded", """
- id: a
  title: A
  action: fake.noop
  when: params.go
- id: b
  title: B
  action: fake.noop
  when: {expr: params.go, because: "nobody asked for {{ params.what }}"}
""", params="go: {type: boolean, default: false}\nwhat: {type: string, default: it}\n")
    rb = load_text(text, file="worded.yaml", catalog=None)
    assert rb.step("a").when_expr == rb.step("b").when_expr == "params.go"
    assert rb.step("a").when_because is None
    assert rb.step("b").when_because == "nobody asked for {{ params.what }}"
    with pytest.raises(RunbookError, match="because"):
        load_text(text.replace(', because: "nobody asked for {{ params.what }}"', ""),
                  file="worded.yaml", catalog=None)
    with pytest.raises(RunbookError, match="unknown param 'wat'"):
        load_text(text.replace("params.what", "params.wat"), file="worded.yaml", catalog=None)
    problems = unworded(rb, catalog=None)
    assert [p.message.split(":")[0] for p in problems] == ["step 'a'"]


def test_the_schema_offers_both_forms_of_when_and_the_words_of_guards_and_waits() -> None:
    from bot.runbook.schema import runbook_schema

    defs = runbook_schema()["$defs"]
    assert set(defs["When"]["required"]) == {"expr", "because"}
    assert "checks" in defs["Guard"]["properties"]
    assert "waiting_for" in defs["WaitUntil"]["properties"]


def test_skipped_steps_in_a_row_collapse_into_one_line_with_each_reason_once() -> None:
    def skipped(key: str, why: str) -> StepState:
        return StepState(key=key, step_id=key, position=0, status=StepStatus.SKIPPED,
                         message="when is false: x", title=key)

    views = [step_view(StepState(key="read", step_id="read", position=0,
                                 status=StepStatus.SUCCEEDED))]
    from bot.present.words import StepWords

    for key, why in [("a", "the instance was already stopped"), ("b", "the instance was "
                     "already stopped"), ("c", "nothing was stuck at EC2")]:
        views.append(step_view(skipped(key, why), StepWords(skipped=why)))
    out = collapse(views)
    assert len(out) == 2 and isinstance(out[1], Skipped)
    assert out[1].line() == ("3 steps not needed: the instance was already stopped, nothing was "
                             "stuck at EC2")


def test_one_formatter_writes_times_and_lengths_for_every_view() -> None:
    at = "2026-12-03T16:18:48.559969+00:00"
    assert times.clock(at) == "2026-12-03 16:18:48 UTC"
    assert times.clock(at, date=False) == "16:18 UTC"
    assert times.slack(at, tokens="{time}") == "<!date^1796314728^{time}|16:18 UTC>"
    assert [times.duration(s) for s in (0, 45, 80, 3600, 3900, 90061)] == [
        "0s", "45s", "1m 20s", "1h", "1h 5m", "1d 1h"]


def test_an_unknown_verb_is_answered_with_the_nearest_one() -> None:
    from bot.engine.verbs import VerbError, parse_words, slack_person

    with pytest.raises(VerbError, match="did you mean `/runbook approve`"):
        parse_words(["aprove", "rb-1"], slack_person, front_end="slack", prefix="/runbook ")
    with pytest.raises(VerbError, match="`/runbook help` lists every command"):
        parse_words(["xyzzy"], slack_person, front_end="slack", prefix="/runbook ")


def test_the_terminal_suggests_the_nearest_command(capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    with pytest.raises(SystemExit):
        main(["aprove"])
    assert "unknown command 'aprove': did you mean 'approve'?" in capsys.readouterr().err


def test_the_terminal_shows_times_in_its_own_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal's status and waits read in the machine's zone (``TZ``); a transcript keeps
    the zone it is exported in, and Slack each reader's own."""
    import time as _time

    from bot.present.console import clock_text, local_clock, short_clock

    stamp = "2026-12-04T16:45:02.559969+00:00"
    monkeypatch.setenv("TZ", "Asia/Singapore")
    _time.tzset()
    try:
        assert local_clock(stamp) == "2026-12-05 00:45:02 +08"
        assert short_clock(stamp) == "00:45 +08"
        assert clock_text(stamp) == "2026-12-04 16:45:02 UTC"  # the audit's words stay in UTC
    finally:
        monkeypatch.undo()
        _time.tzset()
