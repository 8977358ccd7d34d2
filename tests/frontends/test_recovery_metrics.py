"""``runbook_bot_recovery_stage_seconds``: each stage of a run's recovery, observed when it ends."""

from __future__ import annotations

from datetime import timedelta

from bot.engine.provenance import Provenance
from tests.fakes.engine_harness import make_engine
from tests.frontends.observe import observe
from tests.present.test_event_golden import RECOVER, _stages_of_fakes

__all__ = ["make_engine"]  # the fixture
HIST = "runbook_bot_recovery_stage_seconds"


def test_each_stage_is_observed_once_per_run_when_it_ends(make_engine, monkeypatch) -> None:
    e = make_engine({"recover": RECOVER})
    metrics = observe(e)
    _stages_of_fakes(monkeypatch)
    detected = (e.clock.now() - timedelta(seconds=50)).isoformat()
    run = e.start("recover", provenance=Provenance(suggested_by="watcher:n1", detected_at=detected))
    assert metrics.registry.get_sample_value(f"{HIST}_count", {"runbook": "recover",
                                                               "stage": "run_started"}) is None
    e.clock.advance(40)
    assert e.approve(run, "bob").ok
    e.clock.advance(10)
    assert e.approve(run, "bob").ok
    e.advance(30)
    assert e.state(run).status == "succeeded"

    def seen(stage: str, what: str = "sum") -> float | None:
        return metrics.registry.get_sample_value(f"{HIST}_{what}",
                                                 {"runbook": "recover", "stage": stage})

    assert seen("detected") == 0.0 and seen("run_started") == 50.0
    assert seen("approval_asked") == 50.0  # the first step's: each stage's first time
    assert seen("fenced") == 90.0 and seen("tainted") == 100.0
    assert seen("attachments_gone") == seen("pod_running") == seen("run_finished") == 130.0
    assert seen("approval_given", "count") == 1.0
    assert seen("card_shown", "count") is None  # the run does not know when a card was shown
    assert metrics._stages == {}  # nothing kept once the run ended


def test_a_run_this_process_did_not_see_start_is_not_observed(make_engine, monkeypatch) -> None:
    e = make_engine({"recover": RECOVER})
    _stages_of_fakes(monkeypatch)
    run = e.start("recover")  # started before the metrics were wired
    metrics = observe(e)
    e.clock.advance(40)
    assert e.approve(run, "bob").ok
    assert e.approve(run, "bob").ok
    e.advance(30)
    assert e.state(run).status == "succeeded"
    assert metrics.registry.get_sample_value(
        f"{HIST}_count", {"runbook": "recover", "stage": "run_finished"}) is None
