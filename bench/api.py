"""A decision and a status read through the HTTP API, 50 at a time, beside the same through Slack.

One app process serves both front-ends over one runner and one SQLite store, wired as ``slack
serve`` wires them with API authentication configured (bench/slack.py's set-up: fake actions, the
fake Slack Web API in a second process); this process is the load, one connection a request:

- Slack: ``/runbook run`` commands start the runs, then Approve clicks on their approval messages
  (the decision) and ``/runbook status RUN_ID`` commands (the read), timed to the acknowledgement,
  which is what Slack waits for: the work itself runs after it. The status answer a person reads
  comes later, posted to the command's ``response_url``; a receiver in this process times it too
  (``slack status answer``), from the command sent to its answer received;
- the API: ``POST /api/v1/runs`` starts as many runs, then ``POST /api/v1/runs/{id}/approve``
  (the decision: the engine's verdict is in the answer, saved; the drive follows off the request)
  and ``GET /api/v1/runs/{id}`` (the read, a whole run view), timed to the full answer.

Target: the API's p99 no worse than the Slack path's to the same answer, for each of the two
(the exit status is 1 when it is missed): for the decision, from the click to its approval
message redrawn with the verdict (``slack decision answer``: the fake Slack notes the wall-clock
time of every ``chat.update``); for the read, from the command to its answer posted to the
``response_url`` (``slack status answer``). Slack's bare acknowledgement is printed beside them:
it holds no answer, so it is not the same work, but it is what Slack itself waits for. The API's
rate limit is raised for the bench (its default, 20 a second per identity, would answer most of
this load 429).

    .venv/bin/python bench/api.py [--requests 200] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.slack_requests import signed, slash_command_body  # noqa: E402

ALICE, DAVE = "UALICE0001", "UDAVE00001"
TOKENS = {"alice-token": "token:alice", "dave-token": "token:dave"}


@dataclass(frozen=True)
class Caller:
    identity: str
    groups: tuple[str, ...] = ()
    method: str = "token"


class Tokens:
    """The bench's authenticator: a fixed token per person (the API's own token check hashes and
    compares in constant time; its cost is not what is compared here)."""

    def authenticate(self, headers: Mapping[str, str]) -> Caller:
        from bot.frontends.api.auth import Unauthenticated

        token = headers.get("authorization", "").partition(" ")[2]
        if token not in TOKENS:
            raise Unauthenticated("unknown token")
        return Caller(TOKENS[token])


def serve_app(api_url: str) -> int:
    """Child, the app: prints both URLs; "settle" waits for its work and outbox, answers the runs."""
    from bot.config import PolicyConfig, Settings, SlackConfig
    from bot.engine.ports import SystemClock
    from bot.frontends.api import api_app, api_listener
    from bot.frontends.slack.app import (
        SlackParts,
        build_app,
        collect_garbage_for_latency,
        http_server,
    )
    from bot.runtime.facade import Runtime
    from bot.runtime.runner import Runner
    from bot.store.db import Database
    from tests.fakes.engine_world import FakeCatalog, World
    from tests.fakes.slack_api import BOT_TOKEN
    from tests.fakes.slack_requests import SIGNING_SECRET
    from tests.frontends.slack.conftest import POLICY, TEXTS, NamedSource, registry

    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # a queue is what is measured
    policy = PolicyConfig(groups={"sre": (*POLICY.groups["sre"], "token:dave")})
    with tempfile.TemporaryDirectory() as tmp:
        clock = SystemClock()
        db = Database(f"sqlite:///{tmp}/state.db", audit_key="bench")
        settings = Settings(database_url=db.url, policy=policy, slack=SlackConfig(
            bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, api_url=api_url))
        reg = registry(World())
        parts = SlackParts(settings, store=db, clock=clock, workers=4, card_interval=1.0)
        runner = Runner(store=db, catalog=FakeCatalog(reg), runbooks=NamedSource(TEXTS, catalog=reg),
                        policy=policy, clock=clock, membership=parts.membership(policy),
                        notifiers=[parts.outbox])
        app, _, _ = build_app(settings, runner, parts=parts)
        api = api_app(Runtime(runner, history=db), Tokens(), rate=1e6, burst=1_000_000,
                      submit=parts.work.drive)  # drives on Slack's pool, so "settle" sees them
        parts.start()
        collect_garbage_for_latency()
        slack = http_server(app, host="127.0.0.1", port=0, threads=8)
        api_server = api_listener(api, host="127.0.0.1", port=0, threads=8)
        slack.start()
        api_server.start()
        print(json.dumps({"slack": f"http://127.0.0.1:{slack.effective_port}/slack/events",
                          "api": f"http://127.0.0.1:{api_server.effective_port}"}), flush=True)
        for line in sys.stdin:
            if line.strip() != "settle":
                break
            while not (parts.work.idle(timeout=300) and parts.outbox.idle(timeout=300)
                       and parts.work.idle(timeout=0)):
                pass
            runs = db.runs(limit=100_000)
            print(json.dumps({"runs": {r.run_id: [str(r.status), r.origin.get("frontend")]
                                       for r in runs}}), flush=True)
        api_server.stop()
        slack.stop()
        api.close()
        parts.close()
        db.close()
    return 0


class Answers:
    """Where the app posts Slack's status answers (the commands' ``response_url``): the moment
    each arrives, by its index in the URL's path, so a command's answer is timed from its send."""

    def __init__(self) -> None:
        arrived: dict[int, float] = {}
        self.arrived = arrived

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                arrived[int(self.path.rsplit("/", 1)[1])] = time.perf_counter()
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/answers"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SENT: dict[bytes, float] = {}  # each request's send time, by its bytes (each is unique)
SENT_WALL: dict[bytes, float] = {}  # the same on the wall clock, to compare with another process


async def _send(host: str, port: int, raw: bytes, gate: asyncio.Semaphore) -> tuple[float, int, bytes]:
    async with gate:
        SENT_WALL[raw] = time.time()
        start = SENT[raw] = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(raw)
        await writer.drain()
        response = await reader.read()  # Connection: close
        elapsed = (time.perf_counter() - start) * 1000
        writer.close()
    status = int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/") else 0
    return elapsed, status, response.partition(b"\r\n\r\n")[2]


def _slack_raw(host: str, port: int, path: str, body: str) -> bytes:
    request = signed(body)
    head = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(request.body)}"
            f"\r\nConnection: close\r\n{head}\r\n").encode() + request.body


def _api_raw(host: str, port: int, method: str, path: str, token: str,
             body: Any = None) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    return (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}"
            f"\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n").encode() + data


def _measure(url: str, raws: list[bytes], concurrency: int, ok: tuple[int, ...] = (200,)
             ) -> tuple[list[float], list[bytes]]:
    async def run() -> list[tuple[float, int, bytes]]:
        parts = urllib.parse.urlsplit(url)
        gate = asyncio.Semaphore(concurrency)
        return list(await asyncio.gather(*(_send(parts.hostname or "127.0.0.1", parts.port or 80,
                                                 r, gate) for r in raws)))

    done = asyncio.run(run())
    bad = [s for _, s, _ in done if s not in ok]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed (HTTP {sorted(set(bad))})")
    return [ms for ms, _, _ in done], [b for _, _, b in done]


def _message_ts(click: str) -> str:
    """The ts of the message a click was made on (its interaction payload's container)."""
    payload = json.loads(urllib.parse.parse_qs(click)["payload"][0])
    return str((payload.get("container") or {}).get("message_ts")
               or (payload.get("message") or {}).get("ts"))


def _shown(clicks: list[str], raws: list[bytes], edits: Mapping[str, list[float]]) -> list[float]:
    """Per click, the time from its sending to the first edit of its message after it: the
    decision shown where the person clicked (the approval message, redrawn with the verdict)."""
    out = []
    for click, raw in zip(clicks, raws, strict=True):
        sent = SENT_WALL[raw]
        after = [t for t in edits.get(_message_ts(click), ()) if t >= sent]
        if not after:
            raise SystemExit(f"no edit of message {_message_ts(click)} after its click")
        out.append((min(after) - sent) * 1000)
    return out


def _figures(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def _spawn(script: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), *args], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _ask(child: subprocess.Popen[str], line: str | None = None) -> dict[str, Any]:
    assert child.stdin is not None and child.stdout is not None
    if line is not None:
        child.stdin.write(line + "\n")
        child.stdin.flush()
    answer: dict[str, Any] = json.loads(child.stdout.readline())
    return answer


def _bench(slack_url: str, api: str, app: subprocess.Popen[str], fake: subprocess.Popen[str],
           n: int, concurrency: int, answers: Answers) -> dict[str, list[float]]:
    s = urllib.parse.urlsplit(slack_url)
    sh, sp, spath = s.hostname or "127.0.0.1", s.port or 80, s.path
    a = urllib.parse.urlsplit(api)
    ah, ap = a.hostname or "127.0.0.1", a.port or 80
    out: dict[str, list[float]] = {}
    # warm both up
    _measure(slack_url, [_slack_raw(sh, sp, spath, slash_command_body(text="help", user_id=ALICE))
                         for _ in range(20)], 10)
    _measure(api, [_api_raw(ah, ap, "GET", "/api/v1/whoami", "alice-token")] * 20, 10)
    # Slack: start n runs, then the decision (Approve clicks) and the read (/runbook status)
    _measure(slack_url, [_slack_raw(sh, sp, spath, slash_command_body(
        text=f"run change-thing name=slack-{i}", user_id=ALICE, trigger_id=f"{i}.bench"))
        for i in range(n)], concurrency)
    runs = _ask(app, "settle")["runs"]
    slack_runs = [r for r, (_, fe) in runs.items() if fe == "slack"]
    clicks = _ask(fake, "clicks")["clicks"]
    clicked = [_slack_raw(sh, sp, spath, c) for c in clicks]
    out["slack decision"], _ = _measure(slack_url, clicked, concurrency)
    _ask(app, "settle")
    out["slack decision answer"] = _shown(clicks, clicked, _ask(fake, "edits")["edits"])
    status = [_slack_raw(sh, sp, spath, slash_command_body(
        text=f"status {r}", user_id=ALICE, response_url=f"{answers.url}/{i}")) for i, r in
        enumerate(slack_runs)]
    out["slack status"], _ = _measure(slack_url, status, concurrency)
    _ask(app, "settle")
    if len(answers.arrived) != len(status):
        raise SystemExit(f"{len(answers.arrived)} status answers for {len(status)} commands")
    out["slack status answer"] = [(answers.arrived[i] - SENT[raw]) * 1000
                                  for i, raw in enumerate(status)]
    out["slack status alone"], _ = _measure(slack_url, status[:50], 1)
    _ask(app, "settle")
    # the API: start n runs, then the decision (approve) and the read (the run's view)
    _, bodies = _measure(api, [_api_raw(ah, ap, "POST", "/api/v1/runs", "alice-token", {
        "runbook": "change-thing", "params": {"name": f"api-{i}"}}) for i in range(n)],
        concurrency, ok=(201,))
    api_runs = [json.loads(b)["run"]["run_id"] for b in bodies]
    _ask(app, "settle")
    out["api decision"], _ = _measure(api, [_api_raw(ah, ap, "POST", f"/api/v1/runs/{r}/approve",
                                                     "dave-token", {}) for r in api_runs],
                                      concurrency)
    _ask(app, "settle")
    reads = [_api_raw(ah, ap, "GET", f"/api/v1/runs/{r}", "alice-token") for r in api_runs]
    out["api status"], _ = _measure(api, reads, concurrency)
    out["api status alone"], _ = _measure(api, reads[:50], 1)
    final = _ask(app, "settle")["runs"]
    waiting = sum(1 for r in api_runs if final[r][0] == "awaiting_approval")
    print(f"runs: {len(slack_runs)} started in Slack ({len(clicks)} Approve clicks), "
          f"{len(api_runs)} through the API (every approve answered 200; {waiting} now wait for "
          "their next step's approval)")
    for what in ("slack", "api"):
        p50, _ = _figures(out.pop(f"{what} status alone"))
        print(f"{what + ' status alone':18} n=  50  p50 {p50:7.1f} ms  (one request at a time: "
              "the front-end's own cost)")
    return out


WHAT = {  # what each figure times, from the request sent
    "slack decision": "to the ack (the approval is decided after it)",
    "slack decision answer": "to the approval message redrawn with the verdict",
    "api decision": "to the answer: the engine's verdict, saved",
    "slack status": "to the ack (holds no status)",
    "slack status answer": "to the status, posted to response_url",
    "api status": "to the answer: the whole run view",
}


def _report(figures: dict[str, list[float]]) -> bool:
    """Print each figure with what it times; True when the API's p99 is no worse than Slack's
    acknowledgement's for both the decision and the read."""
    ok = True
    for what in ("decision", "status"):
        for key in (f"slack {what}", f"slack {what} answer", f"api {what}"):
            if key in figures:
                p50, p99 = _figures(figures[key])
                print(f"{key:21} n={len(figures[key]):4}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms"
                      f"  {WHAT[key]}")
        api99 = _figures(figures[f"api {what}"])[1]
        ack99 = _figures(figures[f"slack {what}"])[1]
        answer99 = _figures(figures[f"slack {what} answer"])[1]
        verdict = api99 <= answer99
        ok &= verdict
        print(f"  {what}: API p99 {'<=' if verdict else '>'} the Slack path's p99 to the same "
              f"answer; beside Slack's bare ack ({ack99:.1f} ms), which carries none: "
              f"{'within' if api99 <= ack99 else 'slower by'} {abs(api99 - ack99):.1f} ms")
    print("PASS" if ok else "FAIL (target: the API's p99 no worse than the Slack path's to the "
                            "same answer)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=200,
                        help="runs started per front-end, then as many decisions and reads")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--app", metavar="API_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.app:
        return serve_app(args.app)
    fake = _spawn(ROOT / "bench" / "slack.py", "--fake")
    app = None
    ok = False
    try:
        api_url = _ask(fake)["api_url"]
        app = _spawn(Path(__file__), "--app", api_url)
        urls = _ask(app)
        answers = Answers()
        try:
            figures = _bench(urls["slack"], urls["api"], app, fake, args.requests,
                             args.concurrency, answers)
        finally:
            answers.close()
        ok = _report(figures)
    finally:
        for child in (app, fake):
            if child is not None and child.stdin is not None:
                child.stdin.write("quit\n")
                child.stdin.close()
                child.wait(timeout=60)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
