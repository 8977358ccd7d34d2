"""``runbook-bot api serve``: the API on its own port, as a process, with an API token."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "ci-token-0123456789abcdef"


def _get(url: str, token: str | None) -> tuple[int, dict[str, object]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=10) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code), json.loads(e.read())


def test_it_serves_the_api_to_a_token_and_drains_on_a_signal(tmp_path: Path) -> None:
    config = tmp_path / "runbook-bot.yaml"
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    config.write_text(f"api:\n  tokens:\n    ci-bot: sha256:{digest}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNBOOK_BOT_CONFIG": str(config),
           "RUNBOOK_BOT_DATABASE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
    proc = subprocess.Popen([sys.executable, "-m", "bot", "api", "serve", "--host", "127.0.0.1",
                             "--port", "0", "--metrics-host", "127.0.0.1", "--metrics-port", "0"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        lines: list[str] = []
        assert proc.stdout is not None and proc.stderr is not None
        out = proc.stdout
        reader = threading.Thread(target=lambda: lines.extend(out.readline() for _ in range(2)),
                                  daemon=True)
        reader.start()
        reader.join(timeout=20)
        assert len(lines) == 2 and "serving the API on http://127.0.0.1:" in lines[1], lines
        base = lines[1].split(" on ", 1)[1].split("/api/v1/", 1)[0]
        assert _get(base + "/api/v1/whoami", TOKEN) == (
            200, {"identity": "token:ci-bot", "groups": [], "method": "token"})
        status, doc = _get(base + "/api/v1/runs", None)
        assert status == 401 and doc["error"] == "unauthenticated"
        status, doc = _get(base + "/api/v1/runbooks", TOKEN)
        assert status == 200 and "node-dead-ngns" in {r["name"] for r in doc["runbooks"]}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
            err = proc.stderr.read() if proc.stderr else ""
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    assert code == 0, err
