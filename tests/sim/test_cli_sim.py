"""``runbook-bot sim up`` as a user runs it: a real process that prints the kubeconfig and env file
paths, then ``ready``; kubectl reaches the cluster through that kubeconfig; SIGINT ends it cleanly."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bot.cli import main
from tests.sim.kit import KUBECTL, needs_kubectl


def read_until_ready(proc: subprocess.Popen[str], *, timeout: float) -> list[str]:
    """Lines of stdout up to ``ready``; a reader thread, so a silent process cannot hang the test."""
    assert proc.stdout is not None
    stdout = proc.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            raise AssertionError(f"no `ready` line within {timeout}s; got {seen!r}")
        seen.append(line)
        if line == "ready":
            return seen


@needs_kubectl
@pytest.mark.kubectl
def test_sim_up_serves_the_scenario_to_kubectl_until_sigint_and_exits_0(tmp_path: Path):
    kubeconfig, env_file = tmp_path / "kube" / "config", tmp_path / "sandbox.env"
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr, subprocess.Popen(
            [sys.executable, "-m", "bot", "sim", "up", "--scenario", "node-dead", "--kubeconfig",
             str(kubeconfig), "--env-file", str(env_file), "--time-scale", "5", "--seed", "3"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}) as proc:
        _drive(proc, kubeconfig, env_file, tmp_path)
    assert proc.returncode == 0
    assert "stopped" in err.read_text()


def _drive(proc: subprocess.Popen[str], kubeconfig: Path, env_file: Path, tmp_path: Path) -> None:
    try:
        lines = read_until_ready(proc, timeout=60)
        assert lines == [f"kubeconfig: {kubeconfig}", f"env file: {env_file}", "ready"]
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
        assert env["KUBECONFIG"] == str(kubeconfig) and env["AWS_DEFAULT_REGION"] == "ap-southeast-1"
        assert env["AWS_ENDPOINT_URL_EC2"].startswith("http://127.0.0.1:")
        assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
        assert KUBECTL is not None
        out = subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "c"),
                              "get", "nodes", "--no-headers"], capture_output=True, text=True, timeout=30,
                             check=True).stdout.splitlines()
        assert len(out) == 6 and sum(" NotReady " in line for line in out) == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sim_scenarios_lists_each_scenario_on_one_line(capsys: pytest.CaptureFixture[str]):
    assert main(["sim", "scenarios"]) == 0
    from bot.sim.scenarios import SCENARIOS

    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == list(SCENARIOS)
    assert {"node-dead", "node-hung", "stuck-detach", "az-capacity-deadlock", "stuck-terminating",
            "zombie-attachments", "az-outage", "bound-pv-deleted", "tolerating-pod",
            "pod-force-deleted", "auto-mode-leak", "old-incident",
            "node-recovers-during-approval", "spot-node-dead", "node-replaced"} <= set(names)
    assert all(len(line.split(None, 1)[1]) > 20 for line in lines)


def test_sim_up_refuses_an_unknown_scenario_before_starting_anything(capsys: pytest.CaptureFixture[str]):
    assert main(["sim", "up", "--scenario", "no-such-incident"]) == 1
    err = capsys.readouterr().err
    assert "unknown scenario 'no-such-incident'" in err and "node-dead" in err
