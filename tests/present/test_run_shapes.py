"""Every shape of run renders in every format: rejected, blocked and broken-glass, re-planned,
aborted, dry, failed with ``continue``, ``foreach``, and still waiting for an approval."""

from __future__ import annotations

import json
from pathlib import Path

import html5lib
import pytest

from bot.present.transcript import render
from tests.fakes.engine_harness import runbook
from tests.present.conftest import transcript_of
from tests.present.test_transcript import assert_tables_keep_their_columns

SHAPES = runbook("shapes", """
- id: read
  title: "Read {{ params.name }}"
  action: fake.read
  with: {name: "{{ params.name }}"}
- id: each
  title: "Check {{ item }}"
  action: fake.noop
  foreach: "['a', 'b']"
- id: change
  title: "Set {{ params.name }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "on"}
- id: boom
  title: Fails but the run goes on
  action: fake.flaky
  with: {name: boom, failures: 5, permanent: true}
  on_failure: continue
""", params="""
name: {type: string, required: true}
""", approvals="""
groups: [sre]
""")


MANUAL = runbook("manual", """
- id: check
  title: Check the dashboard
  manual: "Open the dashboard for {{ params.name }} and confirm the <b>volumes</b> are gone"
- id: read
  title: Read it
  action: fake.read
  with: {name: "{{ params.name }}"}
""", params="""
name: {type: string, required: true}
""")


def confirmed(e):
    run = e.start("manual", name="x")
    assert e.confirm(run, "bob").ok
    return run, "confirmed"


def rejected(e):
    run = e.start("shapes", name="x")
    assert e.reject(run, "bob").ok
    return run, "rejected"


def broken_glass(e):
    e.world.lock("x")
    run = e.start("shapes", name="x")
    assert e.break_glass(run, "bob").ok and e.break_glass(run, "carol").ok
    assert e.state(run).steps["change"].status == "succeeded"
    return run, "overridden"


def replanned(e):
    run = e.start("shapes", name="x")
    e.world.set("x", "changed")  # after the request, before the approval: the plan changes
    e.approve(run, "bob")
    assert e.approve(run, "carol").ok
    return run, "invalidated"


def aborted(e):
    run = e.start("shapes", name="x")
    assert e.abort(run, "alice").ok
    return run, None


def dry(e):
    return e.start("shapes", name="x", dry_run=True), None


def waiting(e):
    return e.start("shapes", name="x"), "requested"


@pytest.mark.parametrize("shape", [rejected, broken_glass, replanned, aborted, dry, waiting,
                                   confirmed],
                         ids=lambda f: f.__name__)
def test_every_shape_of_run_renders_in_every_format(make_engine, shape):
    jsonschema = pytest.importorskip("jsonschema")
    e = make_engine({"shapes": SHAPES, "manual": MANUAL})
    run, decision = shape(e)
    t = transcript_of(e, run)
    assert t.integrity.verified
    if decision is not None:
        assert decision in {d.kind for s in t.steps for d in s.decisions}
    if shape is not confirmed:
        assert [s.key for s in t.steps][:3] == ["read", "each[0]", "each[1]"]

    assert_tables_keep_their_columns(render(t, "md"))
    doc = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(render(t, "html"))
    assert len(doc.findall(".//details[@id='steps']/section")) == len(t.steps)
    schema = json.loads((Path(__file__).parents[2] / "docs" / "transcript.schema.json").read_text())
    jsonschema.validate(json.loads(render(t, "json")), schema)


def test_a_run_still_waiting_has_no_end_and_no_duration(make_engine):
    e = make_engine({"shapes": SHAPES})
    run, _ = waiting(e)
    t = transcript_of(e, run)
    assert t.run.finished_at is None and t.run.duration_seconds is None
    assert "| Finished | - |" in render(t, "md")


def test_a_failure_with_continue_is_listed_with_its_error(make_engine):
    e = make_engine({"shapes": SHAPES})
    run = e.start("shapes", name="x")
    e.approve(run, "bob")
    t = transcript_of(e, run)
    boom = next(s for s in t.steps if s.key == "boom")
    assert boom.status == "failed" and "boom failed" in boom.error
    assert [p.kind for p in boom.problems] == ["failed"]
    assert "**Error**: apply failed: boom failed (try 1)" in render(t, "md")
