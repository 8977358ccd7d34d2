"""The terminal as the bot's client (bot/cli/client.py, bot/cli/remote.py), against a stub API.

The stub is a WSGI app on an ephemeral port (wsgiref, in a thread) that answers as the API does
(bot/frontends/api/app.py): runs as ``run_json`` views, events as NDJSON with heartbeats, decisions
as ``{"ok", "message", "run_id", "step"}``. The CLI runs as a subprocess with a scrubbed
environment: no database URL, no AWS or Kubernetes variables, and no database file appears.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from bot.cli.client import ApiClient, ServerError
from bot.cli.remote import state_of, view_of
from bot.config import ServerConfig
from bot.engine.runstate import RunState, StepState, Vote
from bot.engine.state import RunStatus, StepStatus
from bot.errors import ConfigError, NotFound
from bot.present.events import live_lines
from bot.present.views import run_json, run_view

RUN = "rb-7k3qa"
TOKEN = "s3cret-token-of-alice"
ROOT = Path(__file__).resolve().parents[2]


def _state(status: RunStatus = RunStatus.AWAITING_APPROVAL) -> RunState:
    plan = {"summary": "taint node ip-10-0-1-5", "action": "kube.taint_node",
            "changes": [{"operation": "add-taint", "target_kind": "Node", "target": "ip-10-0-1-5",
                         "before": None, "after": "node.kubernetes.io/out-of-service"}],
            "facts": [{"subject": "Node/ip-10-0-1-5", "name": "Ready", "value": "Unknown",
                       "read_at": "2026-01-01T00:00:00+00:00"}]}
    step = StepState(key="taint", step_id="taint", position=0, action="kube.taint_node",
                     destructive=True, status=StepStatus.AWAITING_APPROVAL, title="Taint the node",
                     plan=plan, plan_hash="ab" * 32, needs_approval=True, min_approvers=1,
                     groups=["sre"], approval_text="the node is dead",
                     expires_at="2026-01-01T00:30:00+00:00",
                     votes=[Vote(by="bob", at="2026-01-01T00:01:00+00:00", kind="approve",
                                 plan_hash="ab" * 32)])
    return RunState(run_id=RUN, runbook="node-dead-ngns", runbook_text="", runbook_file="",
                    title="Node dead", params={"node": "ip-10-0-1-5"}, requester="alice",
                    created_at="2026-01-01T00:00:00+00:00", status=status,
                    steps={"taint": step})


def _events() -> list[dict[str, Any]]:
    return [
        {"seq": 1, "ts": "2026-01-01T00:00:00+00:00", "actor": "alice", "type": "run.created",
         "payload": {"runbook": "node-dead-ngns"}, "hash": "h1"},
        {"seq": 2, "ts": "2026-01-01T00:00:01+00:00", "actor": "bot", "type": "step.planned",
         "payload": {"step": "taint"}, "hash": "h2"},
        {"seq": 3, "ts": "2026-01-01T00:00:02+00:00", "actor": "bot",
         "type": "approval.requested",
         "payload": {"step": "taint", "min_approvers": 1, "groups": ["sre"],
                     "reason": "destructive", "expires_at": "2026-01-01T00:30:00+00:00"},
         "hash": "h3"},
    ]


def _report() -> Any:
    from datetime import UTC, datetime

    from bot.diagnose.model import Evidence, Finding, Report, Scope, Severity

    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Report(cluster="prod", scanned_at=at, calls=7, scope=Scope("prod", node="ip-10-0-1-5"),
                  findings=(Finding(
                      kind="node-dead-holding-volumes", severity=Severity.URGENT,
                      summary="node ip-10-0-1-5 is dead and holds 2 volumes",
                      subject={"node": "ip-10-0-1-5"},
                      evidence=(Evidence("Ready is Unknown", "GET /api/v1/nodes", at),),
                      runbook="node-dead-ngns", params={"node": "ip-10-0-1-5"},
                      command="runbook-bot run node-dead-ngns -p node=ip-10-0-1-5"),))


REPORT = _report()


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class Stub:
    """A stub of the bot's API; ``requests`` records (method, path, query, auth, body)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, str, Any]] = []
        self.state = _state()

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> Any:
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(size)) if size else None
        auth = environ.get("HTTP_AUTHORIZATION", "")
        self.requests.append((method, path, environ.get("QUERY_STRING", ""), auth, body))

        def answer(status: str, doc: Any, content: str = "application/json") -> list[bytes]:
            start(status, [("Content-Type", content)])
            return [json.dumps(doc).encode()]

        if path.startswith("/elsewhere"):  # where a redirect points: nothing may arrive here
            return answer("200 OK", {"runs": []})
        if path == "/api/v1/moved":
            # another origin (the same stub under another name; it could be another host)
            start("302 Found", [("Location", f"http://localhost:{environ['SERVER_PORT']}/elsewhere")])
            return [b""]
        if auth != f"Bearer {TOKEN}":
            return answer("401 Unauthorized", {"error": "unauthenticated",
                                               "message": "the token was not accepted"})
        p = "/api/v1"
        if path == f"{p}/runs" and method == "POST":
            if body["runbook"] == "forbidden":
                return answer("403 Forbidden", {"error": "forbidden", "message": "alice may not "
                                                "start forbidden (policy.start)"})
            return answer("201 Created", {"run": run_json(run_view(self.state))})
        if path == f"{p}/runs":
            return answer("200 OK", {"runs": [run_json(run_view(self.state))]})
        if path == f"{p}/runs/{RUN}":
            return answer("200 OK", {"run": run_json(run_view(self.state))})
        if path == f"{p}/runs/{RUN}/events":
            start("200 OK", [("Content-Type", "application/x-ndjson")])
            lines = [json.dumps(e) + "\n" for e in _events()]
            return [b'{"heartbeat": true, "after": 0}\n', *(x.encode() for x in lines)]
        if path == f"{p}/runs/{RUN}/approve":
            return answer("200 OK", {"ok": True, "message": "approved step taint (1 of 1)",
                                     "run_id": RUN, "step": "taint"})
        if path == f"{p}/runs/{RUN}/reject":
            return answer("409 Conflict", {"ok": False, "message": "you requested this run",
                                           "run_id": RUN, "step": "taint"})
        if path == f"{p}/diagnose":
            assert body == {"cluster": "", "node": "ip-10-0-1-5"}
            return answer("200 OK", REPORT.to_json())
        if path == f"{p}/runs/{RUN}/audit":
            return answer("200 OK", {"exit_status": 0, "message": f"{RUN}: audit chain intact: "
                                     "3 events, head h3 (HMAC-SHA256)"})
        return answer("404 Not Found", {"error": "not_found", "message": f"no run {path}"})


@pytest.fixture
def stub() -> Iterator[tuple[Stub, str]]:
    app = Stub()
    server = make_server("127.0.0.1", 0, app, server_class=_Threading, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield app, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_never_followed_so_the_token_goes_nowhere_else(
        stub: tuple[Stub, str]) -> None:
    app, url = stub
    with pytest.raises(ConfigError, match=r"redirecting to .*/elsewhere: not followed"):
        _client(url).get("/moved")
    assert [r[1] for r in app.requests] == ["/api/v1/moved"]  # nothing reached /elsewhere


def _client(url: str, token: str = TOKEN, **kw: Any) -> ApiClient:
    return ApiClient(ServerConfig(url=url, **kw), token=lambda: token)


# -- the client ------------------------------------------------------------------------------------

def test_a_run_view_read_back_prints_as_the_run_itself() -> None:
    state = _state()
    view = view_of(json.loads(json.dumps(run_json(run_view(state)))))
    assert view == run_view(state)
    again = state_of(view)
    for ev in _events():
        from bot.cli.remote import _event

        assert live_lines(again, _event(ev)) == live_lines(state, _event(ev))


def test_errors_say_what_to_do(stub: tuple[Stub, str]) -> None:
    _, url = stub
    with pytest.raises(ServerError, match=r"did not accept your credentials \(401.*aws eks "
                       "update-kubeconfig"):
        _client(url, token="wrong").get("/runs")
    tokens = iter(["expired", TOKEN])  # read again after a 401: a 15-minute token ran out
    renewed = ApiClient(ServerConfig(url=url), token=lambda: next(tokens))
    assert renewed.get("/runs")["runs"][0]["run_id"] == RUN
    with pytest.raises(ServerError, match=r"refused by the bot \(403\): alice may not start"):
        _client(url).post("/runs", {"runbook": "forbidden"})
    with pytest.raises(NotFound, match="no run"):
        _client(url).get("/runs/rb-zzzzz")
    answer = _client(url).post(f"/runs/{RUN}/reject", {"reason": "x"}, refused_ok=True)
    assert answer == {"ok": False, "message": "you requested this run", "run_id": RUN,
                      "step": "taint"}
    closed = url.rsplit(":", 1)[0] + ":1"
    with pytest.raises(ServerError, match=r"cannot reach the bot at http://127\.0\.0\.1:1"):
        _client(closed).get("/runs")


def test_the_events_stream_skips_heartbeats(stub: tuple[Stub, str]) -> None:
    _, url = stub
    seen = list(_client(url).stream(f"/runs/{RUN}/events", after=0, follow=True))
    assert [e["seq"] for e in seen] == [1, 2, 3]


def test_tls_is_verified_against_ca_bundle(tmp_path: Path) -> None:
    from bot.sim.tls import make_certificates, server_context

    ca, cert, key = make_certificates(tmp_path / "tls")
    app = Stub()
    server = make_server("127.0.0.1", 0, app, server_class=_Threading, handler_class=_Quiet)
    server.socket = server_context(cert, key).wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ServerError, match=r"does not verify.*set server\.ca_bundle"):
            _client(url).get("/runs")
        assert _client(url, ca_bundle=str(ca)).get("/runs")["runs"][0]["run_id"] == RUN
    finally:
        server.shutdown()
        server.server_close()


# -- the command line, in a scrubbed environment ------------------------------------------------------

SCRUBBED = ("AWS_", "KUBECONFIG", "RUNBOOK_BOT_DATABASE_URL", "RUNBOOK_BOT_AUDIT")


def _cli(tmp_path: Path, url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "runbook-bot.yaml"
    config.write_text(f"server:\n  url: {url}\n  token: env:RB_TEST_TOKEN\n")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / "home"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "RUNBOOK_BOT_CONFIG": str(config), "RB_TEST_TOKEN": TOKEN,
           "PYTHONPATH": str(ROOT)}
    assert not [k for k in env if k.startswith(SCRUBBED)]
    out = subprocess.run([sys.executable, "-m", "bot", *argv], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert not (tmp_path / "state").exists(), "server mode opened a local database"
    return out


def test_the_cli_runs_and_decides_through_the_api(stub: tuple[Stub, str], tmp_path: Path) -> None:
    app, url = stub
    out = _cli(tmp_path, url, "run", "node-dead-ngns", "-p", "node=ip-10-0-1-5",
               "--incident", "INC-7")
    assert out.returncode == 0, out.stderr
    assert ("POST", "/api/v1/runs", "", f"Bearer {TOKEN}",
            {"runbook": "node-dead-ngns", "params": {"node": "ip-10-0-1-5"}, "dry_run": False,
             "incident": "INC-7"}) in app.requests
    # the same lines the terminal prints in local mode: the plan, the ask, how to approve
    assert f"run {RUN}: Node dead" in out.stdout
    assert "change: add-taint Node ip-10-0-1-5" in out.stdout
    assert f"approve with: runbook-bot approve {RUN} --step taint" in out.stdout
    assert f"run {RUN} is waiting at step taint" in out.stdout

    out = _cli(tmp_path, url, "approve", RUN, "--step", "taint")
    assert out.returncode == 0, out.stderr
    assert "approved step taint (1 of 1)" in out.stdout
    assert app.requests[-1][1:] == (f"/api/v1/runs/{RUN}/approve", "", f"Bearer {TOKEN}",
                                    {"step": "taint"})
    out = _cli(tmp_path, url, "reject", RUN, "stale", "lock")
    assert out.returncode == 1 and "you requested this run" in out.stdout
    assert app.requests[-1][4] == {"reason": "stale lock", "step": None}



def test_reads_go_through_the_api_too(stub: tuple[Stub, str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    _, url = stub
    monkeypatch.delenv("RUNBOOK_BOT_SERVER", raising=False)
    monkeypatch.setenv("RB_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("RUNBOOK_BOT_DATABASE_URL", f"sqlite:///{tmp_path / 'never.db'}")
    config = tmp_path / "runbook-bot.yaml"
    config.write_text("server:\n  token: env:RB_TEST_TOKEN\n  url: https://elsewhere.example\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    assert main(["status", RUN, "--server", url]) == 0  # --server replaces server.url
    out = capsys.readouterr().out
    assert "taint" in out and "approved by bob" in out
    assert main(["runs", "--server", url]) == 0 and RUN in capsys.readouterr().out
    assert main(["audit", "verify", RUN, "--server", url]) == 0
    assert "audit chain intact" in capsys.readouterr().out
    from bot.present.diagnosis import report_text

    assert main(["diagnose", "--node", "ip-10-0-1-5", "--server", url]) == 1  # found something
    assert capsys.readouterr().out == report_text(REPORT)  # as a local scan prints it
    assert main(["approve", RUN, "--as", "bob", "--server", url]) == 1
    assert "--as is refused with a server" in capsys.readouterr().err
    assert not (tmp_path / "never.db").exists()


def test_a_missing_token_is_one_line_saying_what_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    config = tmp_path / "runbook-bot.yaml"
    config.write_text("server:\n  url: https://runbook-bot.example\n  token: env:RB_NOT_SET\n")
    monkeypatch.setenv("RUNBOOK_BOT_CONFIG", str(config))
    monkeypatch.delenv("RB_NOT_SET", raising=False)
    monkeypatch.delenv("RUNBOOK_BOT_SERVER", raising=False)
    assert main(["runs"]) == 2
    assert capsys.readouterr().err.strip() == ("runbook-bot: error: server.token is "
                                               "env:RB_NOT_SET, but RB_NOT_SET is not set")


def test_help_says_who_holds_the_powers_in_each_mode(capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "whoever runs it holds the powers" in text
    assert "go through the bot's API with your token" in text
    with pytest.raises(SystemExit):
        main(["approve", "--help"])
    assert "--server URL" in capsys.readouterr().out
