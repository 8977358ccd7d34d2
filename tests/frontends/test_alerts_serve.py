"""``runbook-bot alerts serve``: the Alertmanager webhook without Slack, as a process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bot.cli import main

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "standalone-token-0123456789"


def test_without_credentials_it_refuses_to_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("RUNBOOK_BOT_CONFIG", "RUNBOOK_BOT_ALERTS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    assert main(["alerts", "serve"]) == 2
    assert "RUNBOOK_BOT_ALERTS_TOKEN" in capsys.readouterr().err


def _post(base: str, body: bytes, auth: str | None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
    req = urllib.request.Request(base + "/alertmanager", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_it_names_the_runbook_for_an_alert_and_refuses_anyone_without_the_token(tmp_path: Path) -> None:
    env = {**os.environ, "RUNBOOK_BOT_ALERTS_TOKEN": TOKEN, "PYTHONPATH": str(ROOT),
           "RUNBOOK_BOT_DATABASE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
    env.pop("RUNBOOK_BOT_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "bot", "alerts", "serve", "--host", "127.0.0.1",
                             "--port", "0", "--metrics-host", "127.0.0.1", "--metrics-port", "0"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(
            proc.stdout.readline() for _ in range(2)))
        reader.start()
        reader.join(timeout=20)
        assert len(lines) == 2 and "metrics on http://127.0.0.1:" in lines[0], proc.stderr.read()
        ops = lines[0].split(" on ", 1)[1].split("/metrics", 1)[0]
        assert "serving Alertmanager on http://127.0.0.1:" in lines[1], proc.stderr.read()
        base = lines[1].split(" on ", 1)[1].split("/alertmanager", 1)[0]
        body = json.dumps({
            "version": "4", "groupKey": '{}:{alertname="KubeNodeNotReady"}', "status": "firing",
            "receiver": "runbook-bot", "groupLabels": {"alertname": "KubeNodeNotReady"},
            "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am:9093",
            "truncatedAlerts": 0,
            "alerts": [{"status": "firing", "fingerprint": "1a30ba71cca2921f",
                        "labels": {"alertname": "KubeNodeNotReady", "node": "ip-10-0-1-2.ec2.internal"},
                        "annotations": {"summary": "Node is not ready."},
                        "startsAt": "2026-12-03T03:01:12Z", "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prometheus:9090/graph"}]}).encode()
        assert _post(base, body, None) == 401
        assert _post(base, body, "Bearer not-the-token-0123456") == 401
        assert _post(base, body, f"Bearer {TOKEN}") == 200
        with pytest.raises(urllib.error.HTTPError) as e:  # the ops endpoints have their own port
            urllib.request.urlopen(base + "/metrics", timeout=5)
        e.value.close()
        assert e.value.code == 404
        with urllib.request.urlopen(ops + "/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert 'runbook_bot_alerts_total{outcome="suggested"} 1.0' in metrics
        assert 'runbook_bot_alert_requests_total{answer="unauthorized"} 2.0' in metrics
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            out, err = proc.stdout.read(), proc.stderr.read()
            proc.stdout.close()
            proc.stderr.close()
    assert code == 0, err
    assert ("runbook-bot run node-dead-ngns -p node=ip-10-0-1-2.ec2.internal (suggested by "
            "alert:default/1a30ba71cca2921f)") in out + err
