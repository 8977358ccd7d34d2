"""Ack latency of the Slack front-end over HTTP, with 50 requests in flight at once.

Three processes, as in production, where Slack is another company's servers:

- the app: bolt behind waitress, with its worker pools, its outbox and a SQLite store on disk,
  wired like ``slack serve`` (actions are the tests' fakes, so no cluster is needed);
- the fake Slack Web API, which the app posts its run cards and approvals to;
- this process, the load: signed slash commands (``/runbook run``, which starts a run after the
  ack) and then Approve clicks on the approval messages those runs posted, 50 at a time, each on
  its own connection, timed from the request leaving to its HTTP response.

The work after each ack (starting and driving the runs, drawing them in Slack) runs in the app
while later requests arrive, and competes with them for its CPU, but is not in the figure: what
Slack measures against its 3 s limit is the acknowledgement. Target: p99 at most 100 ms.

    .venv/bin/python bench/slack.py [--requests 500] [--concurrency 50]
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
import time
import urllib.parse
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.slack_requests import signed, slash_command_body  # noqa: E402

TARGET_P99_MS = 100.0
ALICE = "UALICE0001"


def serve_fake() -> int:
    """Child 1, the fake Slack: prints its API URL; answers "clicks" with the clicks to send, and
    "edits" with the wall-clock times each message was edited (``chat.update``), by its ts: when
    a decision became visible where the person clicked."""
    from tests.fakes.slack_api import CHANNEL, FakeSlack
    from tests.fakes.slack_requests import block_actions_payload, interaction_body
    from tests.frontends.slack.conftest import BOB, button_in, workspace

    edits: dict[str, list[float]] = {}

    class TimedSlack(FakeSlack):
        def _m_chat_update(self, tok: Any, token: str, p: dict[str, Any]) -> dict[str, Any]:
            out = super()._m_chat_update(tok, token, p)
            edits.setdefault(str(out["ts"]), []).append(time.time())
            return out

    with TimedSlack() as fake:
        workspace(fake)
        print(json.dumps({"api_url": fake.base_url}), flush=True)
        for line in sys.stdin:
            if line.strip() == "edits":
                print(json.dumps({"edits": edits}), flush=True)
                continue
            if line.strip() != "clicks":
                break
            clicks = []
            for card in fake.messages(CHANNEL):
                for m in fake.thread(CHANNEL, card["ts"])[1:]:
                    try:
                        el = button_in(m, "rb_approve")
                    except AssertionError:
                        continue
                    clicks.append(interaction_body(block_actions_payload(
                        user_id=BOB, action_id="rb_approve", value=el["value"],
                        block_id=el["_block_id"], message=m)))
            print(json.dumps({"clicks": clicks}), flush=True)
    return 0


def serve_app(api_url: str) -> int:
    """Child 2, the app: prints its URL; answers "settle" once its work and outbox are idle."""
    from bot.config import Settings, SlackConfig
    from bot.engine.ports import SystemClock
    from bot.frontends.slack.app import (
        SlackParts,
        build_app,
        collect_garbage_for_latency,
        http_server,
    )
    from bot.runtime.runner import Runner
    from bot.store.db import Database
    from tests.fakes.engine_world import FakeCatalog, World
    from tests.fakes.slack_api import BOT_TOKEN
    from tests.fakes.slack_requests import SIGNING_SECRET
    from tests.frontends.slack.conftest import POLICY, TEXTS, NamedSource, registry

    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # a queue is what is measured
    with tempfile.TemporaryDirectory() as tmp:
        clock = SystemClock()
        db = Database(f"sqlite:///{tmp}/state.db", audit_key="bench")
        settings = Settings(database_url=db.url, policy=POLICY, slack=SlackConfig(
            bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, api_url=api_url))
        reg = registry(World())  # in memory: production actions are network calls, not file I/O
        parts = SlackParts(settings, store=db, clock=clock, workers=4, card_interval=1.0)
        runner = Runner(store=db, catalog=FakeCatalog(reg), runbooks=NamedSource(TEXTS, catalog=reg),
                        policy=POLICY, clock=clock, membership=parts.membership(POLICY),
                        notifiers=[parts.outbox])
        app, _, _ = build_app(settings, runner, parts=parts)
        parts.start()
        collect_garbage_for_latency()  # as ``slack serve`` does before serving
        server = http_server(app, host="127.0.0.1", port=0, threads=8)  # the serve default
        server.start()
        print(json.dumps({"url": f"http://127.0.0.1:{server.effective_port}/slack/events"}),
              flush=True)
        for line in sys.stdin:
            if line.strip() != "settle":
                break
            while not (parts.work.idle(timeout=300) and parts.outbox.idle(timeout=300)
                       and parts.work.idle(timeout=0)):
                pass
            print(json.dumps({"runs": len(db.runs(limit=100_000))}), flush=True)
        parts.close()
        db.close()
    return 0


async def _timed(host: str, port: int, path: str, body: str, gate: asyncio.Semaphore) -> float:
    """One signed POST on its own connection, as Slack sends them; milliseconds to the response.

    The load generator is one thread on an event loop: fifty client threads would spend more
    of this machine's two cores scheduling themselves than the app spends acknowledging.
    """
    request = signed(body)
    head = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
    data = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(request.body)}"
            f"\r\nConnection: close\r\n{head}\r\n").encode() + request.body
    async with gate:
        start = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(data)
        await writer.drain()
        response = await reader.read()  # the server closes: Connection: close
        elapsed = (time.perf_counter() - start) * 1000
        writer.close()
    status = int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/") else 0
    if status != 200:
        raise SystemExit(f"request failed with HTTP {status}")
    return elapsed


def _measure(url: str, bodies: list[str], concurrency: int) -> list[float]:
    parts = urllib.parse.urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"

    async def run() -> list[float]:
        gate = asyncio.Semaphore(concurrency)
        return list(await asyncio.gather(*(_timed(host, port, path, b, gate) for b in bodies)))

    return asyncio.run(run())


def _report(name: str, ms: list[float]) -> bool:
    ms = sorted(ms)
    p50 = statistics.median(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    ok = p99 <= TARGET_P99_MS
    print(f"{name:16} n={len(ms):4}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  max {ms[-1]:7.1f} ms  "
          f"{'ok' if ok else 'OVER'} (target p99 <= {TARGET_P99_MS:.0f} ms)")
    return ok


def _ask(child: subprocess.Popen[str], line: str) -> dict[str, Any]:
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None
    stdin.write(line + "\n")
    stdin.flush()
    answer: dict[str, Any] = json.loads(stdout.readline())
    return answer


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _first_line(child: subprocess.Popen[str]) -> dict[str, Any]:
    out: IO[str] | None = child.stdout
    assert out is not None
    answer: dict[str, Any] = json.loads(out.readline())
    return answer


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=500,
                        help="slash commands, and then as many clicks (default 500)")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--fake", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--app", metavar="API_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake:
        return serve_fake()
    if args.app:
        return serve_app(args.app)
    fake = _spawn("--fake")
    app = None
    try:
        app = _spawn("--app", _first_line(fake)["api_url"])
        url = _first_line(app)["url"]
        _measure(url, [slash_command_body(text="help", user_id=ALICE)] * 20, 10)  # warm up
        alone = _measure(url, [slash_command_body(text="help", user_id=ALICE)] * 50, 1)
        print(f"{'one at a time':16} n={len(alone):4}  p50 {statistics.median(alone):7.1f} ms  "
              f"(the app's own cost of an ack, nothing else running)")
        commands = [slash_command_body(text=f"run change-thing name=bench-{i}", user_id=ALICE,
                                       trigger_id=f"{i}.bench") for i in range(args.requests)]
        started = time.perf_counter()
        slash_ms = _measure(url, commands, args.concurrency)
        runs = _ask(app, "settle")["runs"]
        settled = time.perf_counter() - started
        clicks = _ask(fake, "clicks")["clicks"]
        click_ms = _measure(url, clicks, args.concurrency)
        _ask(app, "settle")
        print(f"{'runs started':16} n={runs:4}  all shown in Slack (card and approval) "
              f"{settled:.1f} s after the first command was sent")
        ok = _report("slash command", slash_ms) & _report("button click", click_ms)
        if runs != args.requests or len(clicks) != args.requests:
            print(f"FAIL: {runs} runs and {len(clicks)} approvals for {args.requests} commands")
            ok = False
        print("PASS" if ok else "FAIL")
    finally:
        for child in (app, fake):
            if child is not None and child.stdin is not None:
                child.stdin.write("quit\n")
                child.stdin.close()
                child.wait(timeout=60)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
