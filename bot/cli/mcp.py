"""``mcp serve``: the MCP server for AI agents (docs/agents.md), two ways.

- ``runbook-bot mcp serve``: the bot itself, serving MCP's streamable HTTP transport on the mcp port
  (``listen.mcp_port``, ``--port``) through the one HTTP edge, each tool call answered by the API
  app in this process as the agent's own bearer token names it (``api:`` configures how agents
  authenticate, ``agents:`` what they may request), with the worker loop carrying runs on. Like
  ``api serve``, SIGTERM (or Ctrl-C) drains and stops.
- ``runbook-bot mcp serve --stdio``: for an MCP client that starts its servers as processes (a
  desktop agent, HolmesGPT's local toolsets). A client of a bot's API (``server:`` in the config,
  ``--server``, ``$RUNBOOK_BOT_SERVER``), never local mode: it opens no database and holds no
  cloud or cluster-write credential, only the token ``server.token`` names. Standard output is the
  protocol; everything else goes to standard error.

The ``mcp`` SDK is an optional extra (``pip install 'runbook-bot[mcp]'``); without it the command
says so.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from bot.cli import logs
from bot.cli.ops import add_serve_arguments, add_side_port_arguments, chosen, start_side_server
from bot.cli.remote import add_server_option, server_of
from bot.errors import ConfigError

EXTRA = "the MCP server needs the mcp extra: pip install 'runbook-bot[mcp]'"


def register(sub: Any) -> None:
    p = sub.add_parser("mcp", help="the MCP server for AI agents (requesters, never approvers)",
                       description="Serve MCP to AI agents (see docs/agents.md).")
    s = p.add_subparsers(dest="mcp_command", metavar="COMMAND")
    serve = s.add_parser("serve", help="serve MCP: streamable HTTP, or --stdio as an API client",
                         description="Serve MCP over streamable HTTP on /mcp (the bot, with "
                         "the worker loop), or over standard input and output as a client of "
                         "the bot's API (--stdio).")
    add_serve_arguments(serve, port="mcp_port", threads=8)
    add_side_port_arguments(serve)
    serve.add_argument("--stdio", action="store_true",
                       help="serve on standard input/output, as a client of the bot's API "
                       "(server.url and server.token: no database, no cloud credentials)")
    serve.add_argument("--on-behalf-of", metavar="IDENTITY", default=None,
                       help="with --stdio: the person this agent acts for (k8s:alice, "
                       "slack:U0123ABCD); it grants nothing and makes them a requester")
    add_server_option(serve)
    logs.add_arguments(serve, here=True)
    serve.set_defaults(handler=cmd_serve, default_log_level="warning")
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def _sdk() -> None:
    try:
        import bot.frontends.mcp.server  # noqa: F401
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in ("mcp", "mcp_types", "uvicorn", "starlette"):
            raise ConfigError(EXTRA) from None
        raise


def cmd_serve(args: argparse.Namespace) -> int:
    _sdk()
    return serve_stdio(args) if args.stdio else serve_http(args)


def serve_stdio(args: argparse.Namespace) -> int:
    from bot.cli.client import read_token
    from bot.config import load_settings
    from bot.frontends.mcp.apiport import RemoteApi
    from bot.frontends.mcp.server import serve_stdio as serve

    settings = load_settings()
    server = server_of(args, settings)
    if server is None:
        raise ConfigError("mcp serve --stdio is a client of the bot's API and never opens a "
                          "database itself: set server.url (or $RUNBOOK_BOT_SERVER, --server) "
                          "and server.token (docs/agents.md)")
    api = RemoteApi(server.url, read_token(server), timeout=server.timeout,
                    behalf=args.on_behalf_of, ca_bundle=server.ca_bundle)
    print(f"runbook-bot: MCP over stdio, a client of {server.url}", file=sys.stderr, flush=True)
    serve(api)
    return 0


def serve_http(args: argparse.Namespace) -> int:
    from bot.cli.api import agent_runtime, build_api
    from bot.cli.wiring import build_runner, open_store, ops_endpoints, record_worker
    from bot.config import load_settings
    from bot.frontends.mcp.server import MCP_PATH, http_app, mcp_listener
    from bot.frontends.metrics import Metrics
    from bot.runtime.drain import stop_on_signals

    settings = load_settings()
    store = open_store(settings)
    metrics = Metrics()
    runner = build_runner(settings, store=store, metrics=metrics)
    runtime = agent_runtime(settings, runner, store)
    api = build_api(settings, runtime, store)
    listen = settings.listen
    host = chosen(args.host, listen.host)
    server = mcp_listener(http_app(api, host=host), host=host,
                          port=chosen(args.port, listen.mcp_port))
    ops = ops_endpoints(runner, store, metrics, interval=args.interval)
    record = record_worker(runner, store)

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
            side = start_side_server(ops, args, listen)
            server.start()
            print(f"runbook-bot: serving MCP on http://{host}:{server.effective_port}{MCP_PATH} "
                  "(streamable HTTP); SIGTERM or Ctrl-C drains and stops", flush=True)
            while not stop.wait(0.5):
                pass
            server.stop()
            api.close()
            runner.stop()
            worker.join(timeout=20)
            side.stop()
    except KeyboardInterrupt:
        runner.stop()
        return 130
    print("runbook-bot: stopped", flush=True)
    return 0
