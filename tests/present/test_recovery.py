"""Time to recovery, pure: which stages a step's result shows (``bot.engine.stages``) and how
``stage_times`` reads a run's stages from recorded events."""

from __future__ import annotations

import json
from pathlib import Path

import html5lib
import jsonschema
import pytest

from bot.engine import events as ev
from bot.engine.provenance import check_detected_at
from bot.engine.stages import reached
from bot.errors import ParamError
from bot.present.recovery import STAGES, first_times, recovery_of, stage_times
from bot.present.transcript import render
from tests.present.conftest import transcript_of
from tests.present.test_event_golden import GOLDEN, STORIES, _stages_of_fakes, _start, engine

__all__ = ["engine"]  # the golden stories' fixture

T0 = "2026-01-01T00:00:00+00:00"


def _at(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}+00:00"


def _e(data: ev.EventData, seconds: int) -> dict:
    """An event as a JSON export holds it."""
    return {"type": data.type.value, "ts": _at(seconds), "payload": data.payload}


def _run(*, detected: str | None = None) -> list[dict]:
    return [
        _e(ev.run_created(runbook="node-dead-ngns", file="f", params={}, dry_run=False,
                          origin={}, title="t"), 60),
        _e(ev.run_linked(parent=None, parent_why="", incident=None, suggested_by="watcher:n1",
                         detected_at=detected), 60),
        _e(ev.approval_requested("fence", confirmation=False, plan_hash="h", min_approvers=2,
                                 groups=[], expires_at=None, reason="", already=[]), 60),
        _e(ev.approval_granted("fence", plan_hash="h", count=1, needed=2), 90),
        _e(ev.approval_granted("fence", plan_hash="h", count=2, needed=2), 120),
        _e(ev.stage_reached("fenced", at=_at(150), source="step:fence"), 150),
        _e(ev.stage_reached("fenced", at=_at(160), source="step:fenced"), 160),  # seen again
        _e(ev.stage_reached("tainted", at=_at(170), source="step:taint", node="n1"), 170),
        _e(ev.stage_reached("attachments_gone", at=_at(230), source="step:wait"), 230),
        _e(ev.stage_reached("pod_running", at=_at(260), source="step:pods", pod="db-0"), 260),
        _e(ev.run_finished(status="succeeded", outcome="", compensations=[],
                           duration_seconds=200), 260),
    ]


def test_stages_count_from_the_detection_with_each_share_of_the_whole():
    stages = stage_times(_run(detected=T0))
    assert [s.stage for s in stages] == [
        "detected", "run_started", "approval_asked", "approval_given", "fenced", "tainted",
        "attachments_gone", "pod_running", "run_finished"]
    assert [s.seconds for s in stages] == [0, 60, 60, 120, 150, 170, 230, 260, 260]
    assert [s.took for s in stages] == [0, 60, 0, 60, 30, 20, 60, 30, 0]
    assert stages[0].source == "watcher:n1" and stages[3].step == "fence"
    assert stages[5].subject == "node n1" and stages[5].source == "step:taint"
    assert stages[1].share == round(60 / 260, 4)
    assert abs(sum(s.share for s in stages) - 1) < 0.001
    assert all(s.stage in STAGES for s in stages)
    assert first_times(stages)["fenced"] == 150  # the first time it was seen


def test_without_a_detection_the_run_start_is_the_origin():
    stages = stage_times(_run())
    assert stages[0].stage == "run_started" and stages[0].seconds == 0
    assert stages[-1].seconds == 200


def test_an_older_run_has_stages_but_no_recovery_to_show():
    old = [e for e in _run() if e["type"] != "stage.reached"]
    assert [s.stage for s in stage_times(old)] == [
        "run_started", "approval_asked", "approval_given", "run_finished"]
    assert recovery_of(old) == []
    assert recovery_of(_run()) != []
    assert stage_times([]) == []
    assert stage_times(_run()[2:4]) == []  # nothing to count from


def test_a_detection_time_earlier_than_its_event_orders_the_stages():
    late = _run(detected=T0)
    late.append(_e(ev.stage_reached("volume_attached", at=_at(240), source="step:x",
                                    volume="vol-1"), 300))
    names = [s.stage for s in stage_times(late)]
    assert names.index("volume_attached") == names.index("attachments_gone") + 1


@pytest.mark.parametrize(("action", "result", "stages"), [
    ("aws.ec2.instance.stop", {"instance_id": "i-1", "state": "stopped"}, ["fenced"]),
    ("aws.ec2.instance.stop", {"instance_id": "i-1", "state": "stopping"}, []),
    ("aws.ec2.instance.terminate", {"state": "terminated"}, ["fenced"]),
    ("aws.ec2.instance.get", {"state": "running"}, []),
    ("k8s.nodeclaim.delete", {"state": "terminated"}, ["fenced"]),
    ("k8s.node.taint", {"node": "n1", "taints": [
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
         "effect": "NoExecute"}]}, ["tainted"]),
    ("k8s.node.taint", {"node": "n1", "taints": [{"key": "other"}]}, []),
    ("k8s.node.taint", {"node": "n1", "exists": False, "taints": []}, []),
    ("k8s.volumeattachments.wait_gone", {"remaining": [], "count": 0, "detached": 2},
     ["attachments_gone"]),
    ("k8s.volumeattachments.wait_gone", {"remaining": ["va"], "count": 1}, []),
    ("k8s.zone.fence_taint", {"stopped": ["i-1"], "out_of_service": ["n1"]}, ["fenced", "tainted"]),
    ("k8s.claims.status", {"satisfied": True, "items": [
        {"claim": "ns/data-db-0", "volume_id": "vol-1", "running_elsewhere": True,
         "pods": [{"name": "db-0", "node": "n2", "phase": "Running", "terminating": False}]},
        {"claim": "ns/gone", "volume_id": "vol-2", "running_elsewhere": False, "pods": []}]},
     ["volume_attached", "pod_running"]),
    ("k8s.claims.status", {"satisfied": False, "items": [
        {"volume_id": "vol-1", "running_elsewhere": True, "pods": []}]}, []),
    ("k8s.pods.list", {"items": []}, []),
    (None, {}, []),
])
def test_a_step_result_shows_the_stages_its_action_reaches(action, result, stages):
    seen = reached(action, result, step="s", at=T0)
    assert [d.payload["stage"] for d in seen] == stages
    assert all(d.payload["source"] == "step:s" and d.payload["at"] == T0 for d in seen)


def test_a_claim_served_elsewhere_names_its_volume_and_pod():
    result = {"satisfied": True, "items": [
        {"volume_id": "vol-1", "running_elsewhere": True,
         "pods": [{"name": "db-0", "node": "n2", "phase": "Running", "terminating": False}]}]}
    attached, running = (d.payload for d in reached("k8s.claims.status", result, step="s", at=T0))
    assert attached["volume"] == "vol-1"
    assert running["pod"] == "db-0" and running["node"] == "n2"


def test_a_stage_outside_the_closed_list_is_refused():
    with pytest.raises(ValueError, match="is not a stage"):
        ev.stage_reached("rebooted", at=T0, source="x")


def test_the_recovered_golden_run_exports_its_stages_against_the_schema():
    doc = json.loads((GOLDEN / "recovered.json").read_text(encoding="utf-8"))
    schema = json.loads((Path(__file__).parents[2] / "docs" / "transcript.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert [s["stage"] for s in doc["recovery"]][:3] == ["detected", "card_shown", "run_started"]
    assert [s["stage"] for s in doc["recovery"]] == [s.stage for s in stage_times(doc["events"])]
    for story in ("rejected", "flow", "handed-over"):  # older shapes export no recovery
        assert "recovery" not in json.loads((GOLDEN / f"{story}.json").read_text(encoding="utf-8"))


def test_the_html_draws_the_stages_on_a_chart_like_the_runs(engine):
    run = STORIES["recovered"](engine)
    html = render(transcript_of(engine, run, messages=[]), "html")
    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(html)
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 2
    assert "Time to recovery" in html and "attachments_gone 23%" in html
    old = STORIES["rejected"](engine)
    assert "Time to recovery" not in render(transcript_of(engine, old, messages=[]), "html")


def test_a_dry_run_records_no_stage(engine, monkeypatch):
    _stages_of_fakes(monkeypatch)
    run = _start(engine, "recover", "rb-dryrc", dry_run=True)
    assert engine.state(run).status == "succeeded"
    assert "stage.reached" not in engine.events(run)
    assert recovery_of(engine.db.events(run)) == []


def test_a_detection_time_is_an_iso_time_with_its_zone_kept_in_utc():
    assert check_detected_at("2026-01-01T01:00:00+01:00") == "2026-01-01T00:00:00+00:00"
    assert check_detected_at(None) is None and check_detected_at(" ") is None
    with pytest.raises(ParamError, match=r"detected_at: .* with its zone"):
        check_detected_at("2026-01-01T00:00:00")
    with pytest.raises(ParamError, match="shown_at"):
        check_detected_at("yesterday", what="shown_at")
