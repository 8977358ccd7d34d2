"""Transcripts of a deterministic run: golden files per format, HTML structure, escaping, zones.

The golden files under ``tests/present/golden/`` are the exact Markdown, HTML and JSON of the run
in ``conftest.py``. After an intended change to the templates or the model, regenerate them with

    RUNBOOK_BOT_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/present

and review the diff like any other change.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import html5lib
import pytest

from bot.errors import ConfigError
from bot.present.templates import md, md_code, template_dirs, zone
from bot.present.transcript import render
from tests.present.conftest import EXPORTED_AT, run_scenario, thread, transcript_of

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("RUNBOOK_BOT_REGEN_GOLDEN") == "1"
HOSTILE = "<script>alert(1)</script> | *bold* _em_ [x](http://evil) `tick` # ~~s~~ &amp;\nnext"


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_each_format_matches_its_golden_file(scenario, fmt):
    e, run = scenario
    text = render(transcript_of(e, run), fmt)
    path = GOLDEN / f"transcript.{fmt}"
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), (
        f"{path.name} differs; RUNBOOK_BOT_REGEN_GOLDEN=1 regenerates it")


def test_the_transcript_covers_summary_plans_evidence_approvals_calls_and_integrity(scenario):
    e, run = scenario
    t = transcript_of(e, run)
    assert (t.run.runbook, t.run.requester, t.run.cluster, t.run.status) == (
        "fence-node", "alice", "prod-eu", "succeeded")
    assert t.run.duration_seconds == 100.0
    fence = next(s for s in t.steps if s.key == "fence")
    assert fence.plan is not None and fence.plan.hash == e.state(run).steps["fence"].plan_hash
    assert [f.read_at for f in fence.plan.facts] == ["2026-01-01T00:01:00+00:00"] * 2
    approved = [d for d in fence.decisions if d.kind == "approved"]
    assert [(d.by, d.plan_hash) for d in approved] == [("bob", fence.plan.hash)]
    assert [(c.service, c.operation, c.targets) for c in fence.calls] == [
        ("ec2", "StopInstances", ["i-ip-10-0-1-7"])]
    assert [g.ok for g in fence.guards] == [True, True]  # at plan and again just before apply
    flaky = next(s for s in t.steps if s.key == "flaky")
    assert [p.kind for p in flaky.problems] == ["retrying"]
    assert t.compensations == ["instance i-ip-10-0-1-7 stays stopped: start it once ip-10-0-1-7 "
                               "is replaced"]
    assert t.integrity.verified and t.integrity.head_seq == len(t.events) == t.integrity.events
    assert t.integrity.head_hash == t.events[-1].hash


def test_slack_messages_are_merged_into_the_timeline_by_time(scenario):
    e, run = scenario
    t = transcript_of(e, run)
    kinds = [(x.source, x.kind) for x in t.timeline]
    first = kinds.index(("slack", "message"))
    # bob wrote at 00:00:30, between the approval request (00:00) and his approval (00:01)
    assert kinds[first - 1] == ("audit", "approval.requested")
    assert kinds[first + 1] == ("audit", "command.approve")
    assert [x.at for x in t.timeline] == sorted(x.at for x in t.timeline)
    assert sum(1 for x in t.timeline if x.source == "audit") == len(t.events)


def test_the_html_is_one_well_formed_self_contained_printable_file(scenario):
    e, run = scenario
    t = transcript_of(e, run)
    text = render(t, "html")
    doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)
    assert doc.find("head/title").text == f"Run {run}: Test runbook fence-node"
    assert {s.get("id") for s in doc.iter("section")} >= {
        "decision-summary", "summary", "compensations", "integrity"}
    assert {d.get("id") for d in doc.iter("details")} == {"steps", "timeline"}
    rows = doc.findall(".//details[@id='timeline']//tbody/tr")
    assert len(rows) == len(t.events) + len(thread())
    assert len(doc.findall(".//details[@id='steps']/section")) == len(t.steps)
    assert not list(doc.iter("script")) and not list(doc.iter("link")) and not list(doc.iter("img"))
    for el in doc.iter():
        assert not any(k in ("src", "href") for k in el.attrib), el.tag
    style = doc.find("head/style").text
    assert "@media print" in style and "url(" not in style


def test_hostile_strings_are_escaped_in_every_format(make_engine, monkeypatch):
    from tests.present.conftest import RUNBOOK

    e = make_engine({"fence-node": RUNBOOK})
    run = run_scenario(e, monkeypatch, node=HOSTILE.replace("\n", " "))
    messages = [{"ts": "1767225630.000000", "user": "UMAL", "name": "mallory<b>", "text": HOSTILE}]
    t = transcript_of(e, run, messages=messages)

    text = render(t, "md")
    assert "<script>" not in text and "<b>" not in text
    assert "[x](http" not in text and "\\[x\\](http://evil)" in text and "\n next" not in text
    assert_tables_keep_their_columns(text, rows_at_least=40)

    html = render(t, "html")
    doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(html)
    assert not list(doc.iter("script")) and not list(doc.iter("b"))
    assert not doc.findall(".//a")
    assert "<script>alert(1)</script>" in "".join(doc.find("body").itertext())
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html

    data = json.loads(render(t, "json"))
    assert data["timeline"][-1]["text"] == HOSTILE or any(
        x["text"] == HOSTILE for x in data["timeline"])
    assert data["run"]["params"]["node"] == HOSTILE.replace("\n", " ")


def assert_tables_keep_their_columns(text: str, *, rows_at_least: int = 10) -> None:
    """Every row of every Markdown table has as many unescaped pipes as the table's header."""
    width = None
    rows = 0
    for line in text.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        pipes = len(re.findall(r"(?<!\\)\|", line))
        if width is None:
            width = pipes
        assert pipes == width, line
        rows += 1
    assert rows >= rows_at_least


@pytest.mark.parametrize(("raw", "escaped"), [
    ("a|b", "a\\|b"),
    ("<script>", "\\<script\\>"),
    ("*x* _y_ `z`", "\\*x\\* \\_y\\_ \\`z\\`"),
    ("[a](b)", "\\[a\\](b)"),
    ("# title", "\\# title"),
    ("- item", "\\- item"),
    ("1. item", "1\\. item"),
    ("line\nbreak\r\x00end", "line break  end"),
    ("ip-10-0-1-7", "ip-10-0-1-7"),
    ("1767225600.000100", "1767225600.000100"),
    ("-1 degrees", "-1 degrees"),
    ("+ more", "\\+ more"),
])
def test_markdown_text_is_escaped_so_it_cannot_become_markup(raw, escaped):
    assert md(raw) == escaped


def test_a_code_span_falls_back_to_escaped_text_when_it_holds_a_backtick_or_a_pipe():
    assert md_code("a80d2d38f859") == "`a80d2d38f859`"
    assert md_code("x != 'y'") == "`x != 'y'`"
    assert md_code("a`b|c") == "a\\`b\\|c"


def test_times_are_shown_in_the_zone_asked_for_and_events_stay_as_stored(scenario):
    e, run = scenario
    t = transcript_of(e, run, tz="Europe/Paris")
    assert t.run.started_at == "2026-01-01T01:00:00+01:00"
    assert "| Started | 2026-01-01 01:00:00 CET |" in render(t, "md")
    assert "Times are in Europe/Paris." in render(t, "md")
    assert t.timeline[0].at == "2026-01-01T01:00:00+01:00"
    data = json.loads(render(t, "json"))
    assert data["timezone"] == "Europe/Paris"
    assert data["events"][0]["ts"] == "2026-01-01T00:00:00+00:00"


def test_an_unknown_zone_is_refused_with_the_expected_form():
    with pytest.raises(ConfigError, match="IANA name"):
        zone("Mars/Olympus_Mons")


def test_a_broken_chain_is_reported_in_the_transcript(scenario):
    e, run = scenario
    with e.db.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE events SET actor = 'mallory' WHERE seq = 10")
    t = transcript_of(e, run)
    assert not t.integrity.verified and t.integrity.first_bad_seq == 10
    assert "**BROKEN** at seq 10" in render(t, "md")
    assert "BROKEN at seq 10" in render(t, "html")


def test_the_json_follows_its_published_schema(scenario):
    jsonschema = pytest.importorskip("jsonschema")
    e, run = scenario
    schema = json.loads((Path(__file__).parents[2] / "docs" / "transcript.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(json.loads(render(transcript_of(e, run), "json")), schema)


def test_templates_are_found_in_the_source_tree():
    assert template_dirs()[0] == Path(__file__).parents[2] / "templates"


def test_templates_installed_as_data_files_are_found_under_the_prefix(tmp_path, monkeypatch):
    import shutil
    import sysconfig

    installed = tmp_path / "share" / "runbook-bot" / "templates"
    shutil.copytree(Path(__file__).parents[2] / "templates", installed)
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    assert installed in template_dirs()


def test_the_json_carries_every_audit_event_exactly_as_stored(scenario):
    e, run = scenario
    data = json.loads(render(transcript_of(e, run), "json"))
    assert data["events"] == [ev.to_dict() for ev in e.db.events(run)]
    seq, hash_, mac = e.db.signed_head(run)
    assert data["head"] == {"seq": seq, "hash": hash_, "mac": mac} and seq == 25 and mac
    assert data["run"]["run_id"] == run


def test_a_thread_message_with_an_unreadable_ts_is_refused(scenario):
    e, run = scenario
    with pytest.raises(ConfigError, match="ts 'yesterday'"):
        transcript_of(e, run, messages=[{"ts": "yesterday", "user": "U1", "name": "x", "text": "t"}])


def test_export_renders_a_stored_run_and_refuses_an_unknown_format(scenario):
    from bot.present.transcript import export

    e, run = scenario
    text = export(e.db, run, fmt="md", thread=thread(), exported_at=EXPORTED_AT)
    assert text == (GOLDEN / "transcript.md").read_text(encoding="utf-8")
    with pytest.raises(ConfigError, match="choose one of md, html, json"):
        export(e.db, run, fmt="pdf")


def test_the_decision_summary_names_who_decided_what_changed_and_each_wait(scenario):
    e, run = scenario
    s = transcript_of(e, run).summary
    assert s.requester == "alice"
    assert [(d.by, d.step, d.kind) for d in s.decisions] == [("bob", "fence", "approved")]
    assert [c.text for c in s.ec2_changes] == ["stop Instance i-ip-10-0-1-7: running → stopped"]
    assert s.cluster_changes == [] and s.interlocks == [] and s.break_glass == []
    assert s.in_place and "stays stopped" in s.in_place[0]
    waits = {(w.step, w.kind): (w.seconds, w.outcome) for w in s.waits}
    assert waits[("fence", "approval")] == (60.0, "approved")
    assert waits[("slow", "world")] == (30.0, "done")
    md_text = render(transcript_of(e, run), "md")
    assert md_text.index("## Decision summary") < md_text.index("## Run") < md_text.index("## Steps")


def test_params_are_shown_as_written_and_skipped_steps_say_why(make_engine):
    from tests.fakes.engine_harness import runbook

    text = runbook("paced", """
- id: maybe
  title: Only when asked
  action: fake.noop
  when: {expr: params.go, because: "nobody asked for it (go={{ params.go }})"}
- id: pause
  title: Pause
  action: fake.noop
""", params="""
go: {type: boolean, default: false}
pace: {type: duration, default: 6m}
""")
    e = make_engine({"paced": text})
    run = e.start("paced", pace="1h30m")
    e.runner.drive(run)
    t = transcript_of(e, run, messages=[])
    assert t.run.params_written["pace"] == "1h30m"  # not 5400.0
    assert t.run.params["pace"] == 5400.0  # the normal form, as run.created records it
    maybe = next(s for s in t.steps if s.key == "maybe")
    assert maybe.skipped_because == "nobody asked for it (go=False)"  # the runbook's words
    assert maybe.details == ["when: params.go"]  # and the expression, for whoever asks
    md_text = render(t, "md")
    params_row = next(line for line in md_text.splitlines() if line.startswith("| Parameters"))
    assert "`pace` = 1h30m" in params_row and "5400" not in params_row
    assert "Skipped at " in md_text and "Started -" not in md_text
