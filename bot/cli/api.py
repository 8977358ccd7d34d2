"""``api serve``: the authenticated HTTP API and the worker loop, in one process.

``/api/v1/`` on the api port (``listen.api_port``, ``--port``; ``/healthz``, ``/readyz`` and
``/metrics`` on the ops port, ``listen.ops_port``): terminals and scripts start, decide, read and
follow runs as who they authenticate as (``api:`` in the config: API tokens, OIDC, Kubernetes
tokens; docs/api.md), while the bot keeps the credentials. Runs started or decided here are
carried on by this process (its pool, then its worker loop). SIGTERM (or Ctrl-C) drains: no new
requests, the drives and ticks in hand finish, exit 0.
"""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING, Any

from bot.cli import logs
from bot.cli.ops import add_serve_arguments, add_side_port_arguments, chosen, start_side_server

if TYPE_CHECKING:
    from bot.config import Settings
    from bot.frontends.api import ApiApp
    from bot.runtime.facade import Runtime
    from bot.store.db import Database


def register(sub: Any) -> None:
    p = sub.add_parser("api", help="the authenticated HTTP API (terminals, scripts)",
                       description="Serve the HTTP API (see docs/api.md).")
    s = p.add_subparsers(dest="api_command", metavar="COMMAND")
    serve = s.add_parser("serve", help="serve /api/v1/ and carry runs on",
                         description="Serve the API on /api/v1/ (with /healthz, /readyz and "
                         "/metrics on the ops port) and drive runs, until interrupted.")
    add_serve_arguments(serve, port="api_port", threads=8)
    add_side_port_arguments(serve)
    serve.add_argument("--rate", type=float, default=None,
                       help="requests a second per caller (default 20)")
    serve.add_argument("--burst", type=int, default=None,
                       help="requests a caller may make at once (default 40)")
    logs.add_arguments(serve, here=True)
    serve.set_defaults(handler=cmd_serve, default_log_level="info")
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def build_api(settings: Settings, runtime: Runtime, store: Database, *,
              rate: float | None = None, burst: int | None = None) -> ApiApp:
    """The API app over ``runtime``: the authenticator the config's ``api:`` section describes
    (a ConfigError when it describes none), transcripts and audit verification from ``store``,
    diagnoses of the configured clusters."""
    from bot.cli.wiring import scanner
    from bot.frontends.api import api_app
    from bot.frontends.api.auth import build_authenticator
    from bot.frontends.api.records import StoreAudit, store_exporter
    from bot.store.audit import Keyring

    auth = build_authenticator(settings)
    key = Keyring(settings.audit_key.encode() if settings.audit_key else None,
                  tuple(k.encode() for k in settings.audit_previous_keys))
    return api_app(runtime, auth, exporter=store_exporter(store), audit=StoreAudit(store, key),
                   diagnoser=scanner(settings),
                   rate=rate or settings.api.rate_limit, burst=burst or settings.api.rate_burst,
                   trusted_proxies=settings.api.trusted_proxies, agents=settings.agents)


def agent_runtime(settings: Settings, runner: Any, store: Database) -> Runtime:
    """The runtime facade with the ``agents:`` policy and the triage of the configured clusters
    (``bot.frontends.api.agents.triage_from``): what every server that lets agents in needs."""
    from bot.cli.wiring import scanner
    from bot.frontends.api.agents import triage_from
    from bot.runtime.facade import Runtime

    return Runtime(runner, history=store, refusals=store.refusals, agents=settings.agents,
                   triage=triage_from(scanner(settings)))


class ApiListener:
    """The API served on a thread beside another front-end (``slack serve``); ``stop`` drains it."""

    def __init__(self, server: Any, app: ApiApp) -> None:
        self.server = server
        self.app = app

    def stop(self) -> None:
        self.server.stop()
        self.app.close()


def start_api_listener(settings: Settings, runner: Any, store: Database, host: str, port: int,
                       threads: int = 4) -> ApiListener:
    """The API on the api port, on a thread, over ``runner``; returns what stops it."""
    from bot.frontends.api import api_listener

    app = build_api(settings, agent_runtime(settings, runner, store), store)
    server = api_listener(app, host=host, port=port, threads=threads)
    server.start()
    _record_server(settings, store, f"http://{host}:{server.effective_port}")
    print(f"runbook-bot: API on http://{host}:{server.effective_port}/api/v1/", flush=True)
    return ApiListener(server, app)


def _record_server(settings: Settings, store: Database, listening: str) -> None:
    """Record in the database that this API serves it (``bot.store.servers``), under the address
    terminals use (``server.url`` of this config, else where it listens), so that a terminal in
    local mode refuses to write to it."""
    from bot.store.servers import record_server

    record_server(store, settings.server.url if settings.server else listening)


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.cli.wiring import (
        NodeWatchers,
        build_runner,
        notice_sink,
        open_store,
        ops_endpoints,
        record_worker,
    )
    from bot.config import load_settings
    from bot.frontends.api import api_listener
    from bot.frontends.metrics import Metrics
    from bot.frontends.term.printer import TerminalPrinter
    from bot.runtime.drain import stop_on_signals

    settings = load_settings()
    store = open_store(settings)
    metrics = Metrics()
    runner = build_runner(settings, store=store, notifiers=[TerminalPrinter()], metrics=metrics)
    runtime = agent_runtime(settings, runner, store)  # the front-end's one way to runs
    app = build_api(settings, runtime, store, rate=args.rate, burst=args.burst)
    ops = ops_endpoints(runner, store, metrics, interval=args.interval)
    record = record_worker(runner, store)
    # the node watcher of each cluster, where enabled: cards in Slack where configured, else logs
    watchers = NodeWatchers(settings, store, notice_sink(settings, store, runner), metrics=metrics)
    listen = settings.listen
    host = chosen(args.host, listen.host)
    server = api_listener(app, host=host, port=chosen(args.port, listen.api_port),
                          threads=args.threads)

    def work() -> None:
        try:
            runner.serve(interval=args.interval)
        finally:
            record.close()

    worker = threading.Thread(target=work, name="runbook-bot-worker", daemon=True)
    stop = threading.Event()
    try:
        with stop_on_signals(stop.set):
            worker.start()
            watchers.start()
            side = start_side_server(ops, args, listen)
            server.start()
            _record_server(settings, store, f"http://{host}:{server.effective_port}")
            print(f"runbook-bot: serving the API on http://{host}:{server.effective_port}"
                  "/api/v1/ (openapi.json for its description); SIGTERM or Ctrl-C drains and "
                  "stops", flush=True)
            while not stop.wait(0.5):
                pass
            server.stop()
            app.close()
            watchers.stop()
            runner.stop()
            worker.join(timeout=20)
            side.stop()
    except KeyboardInterrupt:
        runner.stop()
        watchers.stop(timeout=0)
        return 130
    print("runbook-bot: stopped", flush=True)
    return 0
