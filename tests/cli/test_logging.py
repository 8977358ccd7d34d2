"""Logging: JSON lines that parse and carry the run id, step and actor; the worker's side port."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from bot.cli import main
from bot.cli.logs import configure
from bot.engine.commands import Approve
from tests.fakes.engine_harness import make_engine, runbook
from tests.frontends.observe import get, observe, scrape, value

__all__ = ["make_engine"]  # the fixture
ROOT = Path(__file__).resolve().parents[2]

SET = {"set": runbook("set", """
- id: change
  title: Set x
  action: fake.set
  with: {name: x, value: "on"}
""", approvals="groups: [sre]\n")}


@pytest.fixture
def json_log() -> io.StringIO:
    out = io.StringIO()
    handler = configure(fmt="json", level="info", stream=out)
    yield out
    logging.getLogger().removeHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)


def test_every_run_event_is_one_json_line_with_run_step_and_actor(make_engine, json_log) -> None:
    e = make_engine(SET)
    observe(e)
    run = e.start("set", by="alice")
    e.runner.submit(Approve(run_id=run, actor="alice", step="change"))  # refused: own run
    e.runner.submit(Approve(run_id=run, actor="bob", step="change"))
    e.runner.drive(run)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    runs = [x for x in lines if x["logger"] == "bot.runs"]
    assert {x["run_id"] for x in runs} == {run}
    by_event = {x["event"]: x for x in runs}
    assert by_event["command.refused"]["level"] == "warning"
    assert by_event["command.refused"]["actor"] == "alice"
    assert by_event["command.refused"]["step"] == "change"
    granted = by_event["approval.granted"]
    assert (granted["actor"], granted["step"], granted["level"]) == ("bob", "change", "info")
    assert by_event["run.finished"]["level"] == "info" and "succeeded" in by_event["run.finished"]["message"]
    assert "step.planned" not in by_event  # DEBUG, below the level
    for x in lines:
        assert x["ts"].endswith("+00:00") and x["level"] in ("info", "warning", "error")
    # each event once: as many lines as events recorded at INFO and above
    recorded = [ev.type for ev in e.db.events(run)
                if ev.type not in ("step.planned", "guard.passed", "step.polled")]
    assert sorted(x["event"] for x in runs) == sorted(recorded)


def test_a_bad_log_format_in_the_environment_is_a_configuration_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RUNBOOK_BOT_LOG_FORMAT", "xml")
    assert main(["list"]) == 2
    assert "RUNBOOK_BOT_LOG_FORMAT is 'xml': expected one of text, json" in capsys.readouterr().err


def test_the_worker_logs_json_lines_and_serves_metrics_and_readiness_on_its_side_port(
        tmp_path: Path) -> None:
    env = {**os.environ, "RUNBOOK_BOT_DATABASE_URL": f"sqlite:///{tmp_path / 'state.db'}",
           "RUNBOOK_BOT_RUNBOOKS_DIR": str(ROOT / "runbooks"), "KUBECONFIG": str(tmp_path / "none"),
           "RUNBOOK_BOT_LOG_FORMAT": "json"}
    for name in ("RUNBOOK_BOT_CONFIG", "KUBERNETES_SERVICE_HOST", "RUNBOOK_BOT_LOG_LEVEL"):
        env.pop(name, None)
    started = subprocess.run([sys.executable, "-m", "bot", "run", "node-dead-ngns", "-p",
                              "node=ip-10-0-0-1", "--no-follow"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stderr
    run = started.stdout.strip().splitlines()[-1]
    proc = subprocess.Popen([sys.executable, "-m", "bot", "worker", "--metrics-host", "127.0.0.1",
                             "--metrics-port", "0"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logged: list[dict[str, object]] = []
    finished = threading.Event()

    def read_logs() -> None:
        for line in proc.stderr:
            logged.append(json.loads(line))  # every line is JSON
            if logged[-1].get("event") == "run.finished":
                finished.set()

    reader = threading.Thread(target=read_logs, daemon=True)
    reader.start()
    try:
        first = proc.stdout.readline()
        assert "metrics on http://127.0.0.1:" in first, first
        base = first.split(" on ", 1)[1].split("/metrics", 1)[0]
        assert finished.wait(30), logged  # no cluster here: the first step fails, and the run
        failed = [x for x in logged if x.get("event") == "step.failed"]
        assert failed and failed[0]["run_id"] == run and failed[0]["step"] == "node"
        assert failed[0]["actor"] == "runbook-bot" and failed[0]["level"] == "warning"
        # the log line and the counter are two observers of the same event: the counter may
        # be a moment behind the line under load, so read until it shows (bounded)
        deadline = time.monotonic() + 15
        m = scrape(base)
        while (value(m, "runbook_bot_runs_total", runbook="node-dead-ngns", status="failed") != 1
               and time.monotonic() < deadline):
            finished.wait(0.1)
            m = scrape(base)
        assert value(m, "runbook_bot_runs_total", runbook="node-dead-ngns", status="failed") == 1
        assert value(m, "runbook_bot_steps_total", runbook="node-dead-ngns", action="k8s.node.get",
                     outcome="failed") == 1
        with urllib.request.urlopen(base + "/readyz", timeout=10) as r:
            assert r.status == 200
        assert get(base + "/healthz")[0] == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
        reader.join(timeout=5)
        proc.stderr.close()
    assert code == 0


def test_a_terminal_command_logs_its_runs_events_only_when_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.cli import build_parser
    from bot.cli.logs import configure_from

    monkeypatch.delenv("RUNBOOK_BOT_LOG_LEVEL", raising=False)
    runs = logging.getLogger("bot.runs")
    try:
        configure_from(build_parser().parse_args(["status", "rb-x"]))
        assert not runs.isEnabledFor(logging.WARNING)  # the terminal prints the run itself
        configure_from(build_parser().parse_args(["--log-level", "info", "status", "rb-x"]))
        assert runs.isEnabledFor(logging.INFO)
        configure_from(build_parser().parse_args(["worker", "--log-format", "json"]))
        assert runs.isEnabledFor(logging.INFO) and not runs.isEnabledFor(logging.DEBUG)
    finally:
        runs.setLevel(logging.NOTSET)
        logging.getLogger().setLevel(logging.WARNING)
