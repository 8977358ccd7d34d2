"""``runbook-bot alerts serve`` with PagerDuty only: signed V3 webhooks on ``/pagerduty``, as a
process, reading the incident's alerts from the fake PagerDuty REST API over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

from tests.fakes.pagerduty_api import SECRET, TOKEN, USER_EMAIL, FakePagerDuty

ROOT = Path(__file__).resolve().parents[2]


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code), e.read().decode()


def test_alerts_serve_takes_signed_incidents_and_names_the_run_with_its_incident(tmp_path: Path) -> None:
    with FakePagerDuty() as pd:
        (tmp_path / "runbook-bot.yaml").write_text(
            f"pagerduty:\n  from_email: {USER_EMAIL}\n  api_url: {pd.base_url}\n")
        pd.add_incident("Q9SRV", details=[{"alertname": "KubeNodeNotReady",
                                           "node": "ip-10-0-1-2.ec2.internal"}])
        env = {**os.environ, "PYTHONPATH": str(ROOT),
               "RUNBOOK_BOT_DATABASE_URL": f"sqlite:///{tmp_path / 'state.db'}",
               "RUNBOOK_BOT_PAGERDUTY_WEBHOOK_SECRET": SECRET, "RUNBOOK_BOT_PAGERDUTY_TOKEN": TOKEN}
        for name in ("RUNBOOK_BOT_CONFIG", "RUNBOOK_BOT_ALERTS_TOKEN"):
            env.pop(name, None)
        proc = subprocess.Popen([sys.executable, "-m", "bot", "alerts", "serve", "--host",
                                 "127.0.0.1", "--port", "0", "--metrics-host", "127.0.0.1",
                                 "--metrics-port", "0"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(
                proc.stdout.readline() for _ in range(2)))
            reader.start()
            reader.join(timeout=20)
            assert len(lines) == 2 and "serving PagerDuty on http://127.0.0.1:" in lines[1], \
                proc.stderr.read()
            url = lines[1].split(" on ", 1)[1].split(";", 1)[0]
            body, headers = pd.webhook("Q9SRV")
            assert _post(url, body, {**headers, "X-PagerDuty-Signature": "v1=" + "0" * 64})[0] == 401
            assert _post(url.replace("/pagerduty", "/alertmanager"), b"{}", {})[0] == 404
            assert _post(url, body, headers) == (200, '{"suggested": 1}\n')
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
    assert ("runbook-bot run node-dead-ngns -p node=ip-10-0-1-2.ec2.internal --incident "
            "'pagerduty:Q9SRV https://acme.pagerduty.com/incidents/Q9SRV'") in out + err
    assert SECRET not in out + err and TOKEN not in out + err
