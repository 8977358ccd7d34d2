"""The Socket Mode overlay's probes, scraping and webhook against a real ``slack serve --socket-mode``.

The paths and ports come from ``kubectl kustomize deploy/kubernetes/socket-mode``: each probe's
named port is resolved to the container's port number, which must be the config's default for
that port (what the process binds in the pod); the process here binds free ports instead, mapped
back from the default. Slack's fake Socket Mode endpoint then drops the connection and refuses the
next ones: ``/readyz`` answers 503, one log line per failed attempt and no traceback, and 200 again
once the bot reconnected by itself. In process: Slack away at start leaves the bot running and
unready until it connects; an app token Slack refuses stops the start, in one line.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator

from bot.cli import main
from bot.config import ALERTS_PORT, OPS_PORT
from bot.frontends.slack.socket_mode import SocketModeLink
from tests.deploy.test_manifests import KUBERNETES, render
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.slack_requests import slash_command_body
from tests.frontends.slack.conftest import ALICE, Bot

ROOT = Path(__file__).resolve().parents[3]
ALERTS_TOKEN = "alertmanager-token-0123456789"


def _overlay() -> dict[str, Any]:
    """What the rendered overlay asks of the pod: probes, scrape target, open ports."""
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(KUBERNETES / "socket-mode")}
    pod = objects["Deployment", "runbook-bot"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["args"] == ["slack", "serve", "--socket-mode"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = [(kind, container[kind]["httpGet"]) for kind in
              ("startupProbe", "readinessProbe", "livenessProbe")]
    notes = pod["metadata"]["annotations"]
    ingress = {p["port"] for rule in objects["NetworkPolicy", "runbook-bot"]["spec"]["ingress"]
               for p in rule["ports"]}
    service = {p["targetPort"] for p in objects["Service", "runbook-bot"]["spec"]["ports"]}
    return {"ports": ports, "probes": probes, "ingress": ingress, "service": service,
            "scrape": (int(notes["prometheus.io/port"]), notes["prometheus.io/path"])}


def _get(url: str | urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        e.close()
        return int(e.code)


def _until(url: str, status: int, tries: int = 500) -> None:
    """Ask until ``url`` answers ``status`` (the bot's bookkeeping trails the socket by a hair)."""
    seen = [_get(url)]
    while seen[-1] != status and len(seen) < tries:
        seen.append(_get(url))
    assert seen[-1] == status, f"{url}: {seen[-5:]}"


@pytest.mark.kubectl
def test_the_overlays_probes_follow_the_slack_connection(tmp_path: Path) -> None:
    overlay = _overlay()
    ports = overlay["ports"]
    assert "slack" not in ports and ports["ops"] == OPS_PORT and ports["alerts"] == ALERTS_PORT
    # exactly the ports the process serves are let in: no Slack port, nothing else
    assert overlay["ingress"] == set(ports.values())
    assert "slack" not in overlay["service"]
    assert overlay["scrape"] == (OPS_PORT, "/metrics")
    assert all(get["port"] == "ops" for _, get in overlay["probes"])

    with FakeSlack() as fake:
        socket = fake.start_socket_mode()
        env = {**os.environ, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN,
               "RUNBOOK_BOT_SLACK_API_URL": fake.base_url,
               "RUNBOOK_BOT_ALERTS_TOKEN": ALERTS_TOKEN, "RUNBOOK_BOT_ALERTS_CHANNEL": "C0ALERTS1",
               "RUNBOOK_BOT_RUNBOOKS_DIR": str(ROOT / "runbooks"),
               "RUNBOOK_BOT_DATABASE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
        for name in ("RUNBOOK_BOT_CONFIG", "SLACK_SIGNING_SECRET"):
            env.pop(name, None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "slack", "serve", "--socket-mode", "--metrics-host",
             "127.0.0.1", "--metrics-port", "0", "--host", "127.0.0.1", "--alerts-port", "0"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()],
                         daemon=True).start()
        try:
            bound: dict[int, str] = {}  # the manifest's port -> where this process bound it
            line = ""
            while len(bound) < 2 or "Socket Mode" not in line:
                line = lines.get(timeout=20)
                if "metrics on http://" in line:
                    bound[OPS_PORT] = line.split(" on ", 1)[1].split("/metrics", 1)[0]
                elif "Alertmanager on http://" in line:
                    bound[ALERTS_PORT] = line.split(" on ", 1)[1].split("/alertmanager", 1)[0]
            assert "connected to Slack over Socket Mode" in line and "not yet" not in line

            def probe(get: dict[str, Any]) -> str:
                return bound[ports[get["port"]]] + get["path"]

            ready = probe(dict(overlay["probes"])["readinessProbe"])
            liveness = probe(dict(overlay["probes"])["livenessProbe"])
            for _, get in overlay["probes"]:
                assert _get(probe(get)) == 200, get
            assert _get(bound[OPS_PORT] + overlay["scrape"][1]) == 200
            # the webhook answers on the alerts port (and wants Alertmanager's credentials)
            request = urllib.request.Request(bound[ALERTS_PORT] + "/alertmanager", data=b"{}",
                                             method="POST")
            assert _get(request) == 401

            socket.drop()  # Slack goes away, and refuses new connections for a while
            assert _get(ready) == 503 and _get(liveness) == 200  # unready, never restarted
            assert socket.wait_refused()
            assert _get(ready) == 503
            socket.accept()
            assert socket.wait_connected(connections=2)
            _until(ready, 200)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()  # reaped, so no "still running" warning lands on a later test
                err = proc.stderr.read() if proc.stderr else ""
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
    assert code == 0, err
    assert "Traceback" not in err, err
    lost = [x for x in err.splitlines() if "Slack Socket Mode: connection lost" in x]
    failed = [x for x in err.splitlines() if "Slack Socket Mode: cannot connect" in x]
    assert len(lost) == 1 and len(failed) == socket.refused, err
    assert "(status: 503)" in failed[0] and "next in" in failed[0], failed
    # Bolt's warning that the environment's token loses to the client given (the secrets have
    # left the environment once the settings hold them)
    assert "will be unused" not in err and "slack.bolt" not in err, err


def test_an_app_token_slack_refuses_stops_the_start_in_one_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RUNBOOK_BOT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    with FakeSlack() as fake:
        fake.start_socket_mode()
        for name, value in (("SLACK_BOT_TOKEN", BOT_TOKEN), ("SLACK_APP_TOKEN", "xapp-1-revoked"),
                            ("RUNBOOK_BOT_SLACK_API_URL", fake.base_url),
                            ("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'state.db'}")):
            monkeypatch.setenv(name, value)
        assert main(["slack", "serve", "--socket-mode", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "Slack refused SLACK_APP_TOKEN: invalid_auth" in err and "Traceback" not in err
    assert "xapp-1-revoked" not in err


def test_slack_away_at_start_leaves_the_bot_running_unready_until_it_connects(
        bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    socket = bot.fake.start_socket_mode()
    # the Web API fails apps.connections.open three times, then answers
    bot.fake.fail_next("apps.connections.open", status=500, retry_after=None, times=3)
    # slack_sdk's own fixed interval instead of its backoff: the test does not wait it out
    link = SocketModeLink(bot.app, replace(bot.settings.slack, app_token=APP_TOKEN),
                          backoff=FixedValueRetryIntervalCalculator(0.01), poll=0.01)
    try:
        with caplog.at_level(logging.INFO, logger="bot.frontends.slack.socket_mode"):
            assert link.connect_first() is False  # no exception: the process goes on
            assert link.check() == "not connected to Slack over Socket Mode (1 failed attempt)"
            link.start()
            # a request answered over the connection: it is up, so the check must say so
            help_ack = socket.ack_of(socket.send("slash_commands", dict(parse_qsl(
                slash_command_body(text="help", user_id=ALICE)))))
            assert "`/runbook` commands" in help_ack["payload"]["text"]
            assert link.check() is None
    finally:
        link.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "bot.frontends.slack.socket_mode"]
    assert said == [f"Slack Socket Mode: cannot connect (apps.connections.open failed: "
                    f"internal_error); attempt {n} failed, next in 0.0 s" for n in (1, 2, 3)] + [
        "Slack Socket Mode: connected again after 3 failed attempts"]
    assert not any(r.exc_info for r in caplog.records)
