"""A run its runbook's outcome rules end ``partial`` reads the same in every view: the terminal
(live line, ``status``, ``runs``), the Slack card and last reply, the transcripts in Markdown,
HTML and JSON (against the published schema), and the exit status of ``run``."""

from __future__ import annotations

import json
from pathlib import Path

import html5lib
import pytest

from bot.cli.runs import exit_of
from bot.present.blockkit import final_summary, run_card, runs_list
from bot.present.console import runs_table, status
from bot.present.events import describe, live_lines
from bot.present.transcript import render
from bot.present.views import run_view, stored_runbook
from tests.engine.test_run_outcome import RULES, STEPS
from tests.fakes.blockkit_limits import validate_blocks
from tests.fakes.engine_harness import runbook
from tests.present.conftest import transcript_of

REASON = "poke failed (apply failed: f failed (try 1)), x is on"


@pytest.fixture
def partial(make_engine):
    e = make_engine({"judged": runbook("judged", STEPS) + RULES})
    e.world.set("x", "on")
    run = e.start("judged")
    st = e.state(run)
    assert (st.status, st.outcome) == ("partial", REASON)
    return e, run


def test_the_terminal_says_partial_and_why(partial):
    e, run = partial
    st = e.state(run)
    [end] = [ev for ev in e.db.events(run) if ev.type == "run.finished"]
    assert live_lines(st, end) == [f"run {run} partial: {REASON}"]
    # the timeline names the rule that decided, which older runs' events do not have
    assert describe(end) == f"finished partial: {REASON} (outcome rule 2: steps.poke.status == 'failed')"
    view = run_view(st, stored_runbook(st))
    shown = status(view)
    assert "   status: partial   " in shown and shown.endswith(f"  outcome: {REASON}")
    table = runs_table([view]).splitlines()
    assert table[0].split()[:2] == ["RUN", "STATUS"] and table[1].split()[:2] == [run, "partial"]
    assert exit_of("partial") == 3 and exit_of("succeeded") == 0
    assert exit_of("failed") == exit_of("aborted") == 1


def test_slack_shows_partial_with_its_reason_in_blocks_slack_accepts(partial):
    e, run = partial
    view = run_view(e.state(run))
    card, last, listing = run_card(view), final_summary(view), runs_list([view])
    for blocks in (card, last, listing):
        assert validate_blocks(blocks) == [], blocks
    fields = [f["text"] for b in card if b["type"] == "section" for f in b.get("fields") or ()]
    assert "*Status*\npartial" in fields
    assert {"type": "mrkdwn", "text": f"*Outcome:* {REASON}"} in [b.get("text") for b in card]
    assert last[0]["text"]["text"] == f":warning: *Run `{run}` partial*: {REASON}"
    assert "_partial_" in listing[0]["text"]["text"]
    # a finished run waits for nobody
    assert not any("Waiting for" in str(b) for b in card)


def test_every_transcript_format_says_partial_and_the_json_follows_its_schema(partial):
    jsonschema = pytest.importorskip("jsonschema")
    e, run = partial
    t = transcript_of(e, run, messages=[])
    md = render(t, "md")
    assert f"| Outcome | **partial**: {REASON} |" in md, md[:2000]
    html = render(t, "html")
    doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(html)
    marks = [s for s in doc.iter("span") if s.get("class") == "status s-partial"]
    assert marks and all(s.text == "partial" for s in marks)
    data = json.loads(render(t, "json"))
    assert (data["run"]["status"], data["run"]["outcome"]) == ("partial", REASON)
    assert data["events"][-1]["type"] == "run.finished"
    assert data["events"][-1]["payload"]["rule"] == 2
    schema = json.loads((Path(__file__).parents[2] / "docs" / "transcript.schema.json").read_text())
    jsonschema.validate(data, schema)
