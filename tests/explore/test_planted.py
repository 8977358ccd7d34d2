"""The explorer must be able to fail: bugs planted in the product (through the module seams a
test may patch) or in a copy of a runbook are found within the search's budget, shrunk to at
most 8 world events, and named by the invariant they break. Marker ``explore``: ``make explore``
runs these; ``make test`` does not (each searches for up to a few minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.actions import ec2 as ec2_actions
from bot.actions import interlocks
from bot.engine import conductor
from bot.sim.explore.search import base_timeline, explore
from bot.sim.rehearsal import REPO

pytestmark = [pytest.mark.explore, pytest.mark.slow]
BUDGET = 240.0  # seconds of search per planted bug


def _finds(report, invariant: str) -> None:
    hits = [f for f in report.failures if f.timeline.invariant == invariant]
    assert hits, (f"not found in {report.played} timelines: {invariant}\n" + report.words())
    assert len(hits[0].timeline.events) <= 8, hits[0].timeline.words()


def test_rule_8_that_reads_no_liveness_is_found_fencing_a_live_machine(monkeypatch) -> None:
    monkeypatch.setattr(interlocks, "check_fence", lambda *a, **k: None)
    base = base_timeline("node-dead-ngns", "node-hung")
    _finds(explore(base, count=400, seed=5, budget=BUDGET), "fence-of-live")


def test_a_fence_that_never_asks_which_boot_it_stops_is_found(monkeypatch) -> None:
    # the mutation: a fence stops a machine started again since it began (LaunchTime ignored).
    # Rule 8 refuses the second stop of a machine that looks alive again, unless people broke
    # glass for the first: a partitioned machine, whose fence needs the break-glass
    monkeypatch.setattr(ec2_actions, "started_since", lambda inst, since: None)
    base = base_timeline("node-dead-ngns", "node-partitioned")
    _finds(explore(base, count=400, seed=5, budget=BUDGET), "fence-of-live")


def test_an_approval_carried_to_any_changed_plan_is_found(monkeypatch) -> None:
    monkeypatch.setattr(conductor, "narrowed", lambda old, new: [])
    base = base_timeline("node-dead-ngns", "node-hung")
    _finds(explore(base, count=400, seed=6, budget=BUDGET), "approval-bypassed")


def test_a_runbook_that_says_succeeded_before_the_pods_run_is_found(tmp_path: Path) -> None:
    import yaml

    doc = yaml.safe_load((REPO / "runbooks" / "node-dead-ngns.yaml").read_text())
    # the mutation: the claims and volumes are judged once, without waiting for the pods to move
    judged = [s for s in doc["spec"]["steps"] if s["id"] in ("pods_running", "volumes_moved")]
    assert len(judged) == 2
    for step in judged:
        step.pop("wait_until")
    (tmp_path / "node-dead-ngns.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    base = base_timeline("node-dead-ngns", "node-hung", runbooks_dir=str(tmp_path))
    _finds(explore(base, count=400, seed=7, budget=BUDGET, runbooks_dir=str(tmp_path)),
           "false-success")


def test_a_resume_the_audit_does_not_record_is_caught_by_the_saved_case(monkeypatch) -> None:
    from bot.engine import events
    from bot.sim.explore.driver import play
    from bot.sim.explore.timeline import load

    real = events.step_applying
    monkeypatch.setattr(conductor.ev, "step_applying",
                        lambda *a, resumed=False, **k: real(*a, **k))
    case = Path(__file__).parent / "cases" / "zone-outage-ngns--unaudited-write--crash-mid-batch.yaml"
    assert "unaudited-write" in {f.invariant for f in play(load(case)).found}
