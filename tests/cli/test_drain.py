"""SIGTERM stops ``runbook-bot worker`` and ``runbook-bot slack serve`` cleanly as PID 1 of their
own PID namespace (a container's entrypoint): they drain and exit 0, and ``slack serve`` stops
taking requests. The drain of a tick in flight is shown in tests/runtime/test_takeover.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.runtime.replica import can_unshare

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_unshare(), reason="needs unshare (util-linux) as root")]


def _as_pid1(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child",
                             sys.executable, "-m", "bot", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _first_line(proc: subprocess.Popen[str], marker: str = "") -> str:
    """The first line of the process's output that contains ``marker`` ('' when none came)."""
    line = [""]

    def read() -> None:
        for text in proc.stdout:
            if marker in text:
                line[0] = text
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    return line[0]


def _terminate_pid1(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    [pid1] = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    os.kill(pid1, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "RUNBOOK_BOT_RUNBOOKS_DIR": str(ROOT / "runbooks"),
           "RUNBOOK_BOT_DATABASE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
    env.pop("RUNBOOK_BOT_CONFIG", None)
    return env


def test_the_worker_as_pid_1_stops_on_sigterm_with_exit_0(tmp_path):
    proc = _as_pid1(["worker", "--interval", "0.2", "--metrics-port", "0"], _env(tmp_path),
                    tmp_path)
    try:
        assert "worker: resuming" in _first_line(proc, "worker: resuming")
        code, out, err = _terminate_pid1(proc)
        assert code == 0, err
        assert "worker: stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_slack_serve_as_pid_1_stops_taking_requests_and_exits_0_on_sigterm(tmp_path):
    with FakeSlack() as fake:
        env = {**_env(tmp_path), "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": "s3cret",
               "RUNBOOK_BOT_SLACK_API_URL": fake.base_url}
        proc = _as_pid1(["slack", "serve", "--host", "127.0.0.1", "--port", "0",
                         "--metrics-port", "0"], env, tmp_path)
        try:
            line = _first_line(proc, "serving Slack")
            assert "serving Slack on http://127.0.0.1:" in line, proc.stderr.read()
            url = line.split(" on ", 1)[1].split(" ", 1)[0].replace("/slack/events", "/healthz")
            with urllib.request.urlopen(url, timeout=5) as r:
                assert r.status == 200
            code, out, err = _terminate_pid1(proc)
            assert code == 0, err
            assert "runbook-bot: stopped" in out
            with pytest.raises(urllib.error.URLError):
                urllib.request.urlopen(url, timeout=5)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
