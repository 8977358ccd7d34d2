"""``slack serve``: the Slack front-end and the worker loop, in one process.

HTTP mode serves ``/slack/events`` from waitress (a production WSGI server) on the Slack port
(``listen.slack_port``, ``--port``), which answers nothing else but the load balancer's
``GET /healthz``; ``--socket-mode`` connects out to Slack with the app-level token instead, and
keeps reconnecting with backoff, ``/readyz`` answering 503 while it is not connected
(``bot.frontends.slack.socket_mode``; a refused app token stops it at start). In
both modes ``/healthz``, ``/readyz`` and ``/metrics`` are on the ops port (``listen.ops_port``,
``--metrics-port``) and, with webhook credentials, ``/alertmanager`` on the alerts port
(``listen.alerts_port``, ``--alerts-port``), and with API authentication configured (``api:``)
the HTTP API on the api port (``listen.api_port``, ``--api-port``; ``bot.cli.api``): one port per
audience (docs/deploy.md, "Ports").
Either way the runner's worker loop runs in a thread beside it, so waits end and approvals
expire without anyone typing, and the Slack outbox draws runs on a thread of its own (including
runs changed from the terminal or left half-drawn by a restart). SIGTERM (or Ctrl-C) drains: no
new requests, the work and ticks in hand finish, leases are released, exit 0
(``bot.runtime.drain``).
Configuration is checked first, and what is missing is named in one message. Once the settings
hold the secrets, they leave the process environment (``bot.config_secrets.scrub_environment``):
Bolt would read ``SLACK_BOT_TOKEN`` from it behind the config, and child processes inherit it.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

from bot.cli import logs
from bot.cli.ops import add_serve_arguments, add_side_port_arguments, chosen, start_side_server


def register(sub: Any) -> None:
    p = sub.add_parser("slack", help="the Slack front-end",
                       description="Run runbook-bot in Slack (see docs/slack.md).")
    s = p.add_subparsers(dest="slack_command", metavar="COMMAND")
    serve = s.add_parser("serve", help="serve the Slack app and carry runs on",
                         description="Serve Slack's requests (HTTP mode by default, on "
                         "/slack/events with /healthz for load balancers) and drive runs as "
                         "their waits end, until interrupted. /metrics, /readyz and /healthz "
                         "are on the ops port, /alertmanager on the alerts port.")
    add_serve_arguments(serve, port="slack_port", threads=8)
    serve.add_argument("--socket-mode", action="store_true",
                       help="connect to Slack over Socket Mode (needs SLACK_APP_TOKEN) "
                       "instead of serving HTTP")
    add_side_port_arguments(serve)
    serve.add_argument("--alerts-port", type=int, default=None,
                       help="port of /alertmanager, with webhook credentials configured "
                       "(default: listen.alerts_port)")
    serve.add_argument("--api-port", type=int, default=None,
                       help="port of /api/v1/, with API authentication configured (api: in the "
                       "config file) (default: listen.api_port)")
    logs.add_arguments(serve, here=True)
    serve.set_defaults(handler=cmd_serve, default_log_level="info")
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def _verify_token(parts: Any, api_url: str | None) -> None:
    """Ask Slack who the token is, so a wrong token or URL fails now with a clear message."""
    from bot.errors import ConfigError
    from bot.frontends.slack.app import DEFAULT_API_URL, verify_token

    try:
        verify_token(parts.client)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"cannot reach the Slack Web API at {api_url or DEFAULT_API_URL}: {e}") from e


def start_alerts_listener(webhook: Any, host: str, port: int, threads: int,
                          more: Any = None) -> Any:
    """The Alertmanager webhook (and ``more``: ``/pagerduty``) on the alerts port, on a thread;
    returns the server."""
    from bot.frontends.alerts import listener

    server = listener(webhook, host=host, port=port, threads=threads, more=more)
    server.start()
    for path in (["/alertmanager"] if webhook is not None else []) + sorted(more or {}):
        source = "Alertmanager" if path == "/alertmanager" else "PagerDuty"
        print(f"runbook-bot: {source} on http://{host}:{server.effective_port}{path}", flush=True)
    return server


def cmd_serve(args: argparse.Namespace) -> int:
    from bot.cli.wiring import (
        NodeWatchers,
        build_runner,
        open_store,
        ops_endpoints,
        record_worker,
        scanner,
    )
    from bot.config import load_settings
    from bot.config_secrets import scrub_environment
    from bot.frontends.metrics import Metrics
    from bot.frontends.slack.app import (
        SlackParts,
        background_thread,
        build_app,
        check_config,
        collect_garbage_for_latency,
        http_server,
    )
    from bot.frontends.slack.socket_mode import SocketModeLink
    from bot.runtime.drain import stop_on_signals

    settings = load_settings()
    check_config(settings.slack, socket_mode=args.socket_mode)
    store = open_store(settings)
    metrics = Metrics()
    parts = SlackParts(settings, store=store, metrics=metrics)
    _verify_token(parts, settings.slack.api_url)
    scrub_environment()  # the settings hold the secrets now; nothing else may read them there
    runner = build_runner(settings, store=store, notifiers=[parts.outbox],
                          membership=parts.membership(settings.policy), metrics=metrics)
    app, _, _ = build_app(settings, runner, parts=parts, diagnoser=scanner(settings))
    ops = ops_endpoints(runner, store, metrics, interval=args.interval)
    socket: SocketModeLink | None = None
    connected = False
    if args.socket_mode:  # ready only while connected; a refused app token is a ConfigError now
        socket = SocketModeLink(app, settings.slack)
        ops.checks["slack"] = socket.check
        connected = socket.connect_first()
    record = record_worker(runner, store)
    # the node watcher of each cluster, where enabled: its notices become cards (docs/watcher.md)
    assert parts.notice_cards is not None  # build_app made them
    watchers = NodeWatchers(settings, store, parts.notice_cards.show, metrics=metrics)
    listen = settings.listen
    host = chosen(args.host, listen.host)

    def work() -> None:
        background_thread()  # the worker loop yields the CPU to the threads answering Slack
        try:
            runner.serve(interval=args.interval)
        finally:
            record.close()

    worker = threading.Thread(target=work, name="runbook-bot-worker", daemon=True)
    stop = threading.Event()
    server: Any = None
    side: Any = None
    alerts: Any = None
    api: Any = None
    try:
        with stop_on_signals(stop.set):
            worker.start()
            parts.start()
            watchers.start()
            collect_garbage_for_latency()
            side = start_side_server(ops, args, listen)
            if parts.webhook is not None or parts.alert_routes:
                alerts = start_alerts_listener(parts.webhook, host,
                                               chosen(args.alerts_port, listen.alerts_port), 2,
                                               more=parts.alert_routes)
            if settings.api.enabled:
                from bot.cli.api import start_api_listener

                api = start_api_listener(settings, runner, store, host,
                                         chosen(args.api_port, listen.api_port))
            if socket is not None:
                socket.start()
                state = ("connected to Slack over Socket Mode" if connected else
                         "not yet connected to Slack over Socket Mode (retrying; /readyz answers "
                         "503 until connected)")
                print(f"runbook-bot: {state}; SIGTERM or Ctrl-C drains and stops", flush=True)
            else:
                server = http_server(app, host=host, port=chosen(args.port, listen.slack_port),
                                     threads=args.threads)
                server.start()
                print(f"runbook-bot: serving Slack on http://{host}:{server.effective_port}"
                      "/slack/events (and /healthz for the load balancer); "
                      "SIGTERM or Ctrl-C drains and stops",
                      flush=True)
            while not stop.wait(0.5):
                pass
            # draining: take no more requests, finish those in hand and the ticks in flight
            if server is not None:
                server.stop()
            if alerts is not None:
                alerts.stop()
            if api is not None:
                api.stop()
            if socket is not None:
                socket.stop()
            watchers.stop()  # no new cards once draining
            runner.stop()
            parts.close()  # the Slack work in hand (drives included), then the outbox
            worker.join(timeout=20)
            if side is not None:
                side.stop()
    except KeyboardInterrupt:  # a second signal: stop without waiting
        runner.stop()
        watchers.stop(timeout=0)
        return 130
    print("runbook-bot: stopped", flush=True)
    return 0
