"""Where the serving commands listen, and the ops listener: ``/metrics``, ``/readyz``, ``/healthz``.

Every serving command (``slack serve`` in either mode, ``alerts serve``, ``worker``) answers
Prometheus and Kubernetes on a port of its own, the ops port (``listen.ops_port``, default 9464),
never on the port of Slack's requests or of Alertmanager's webhook: an Ingress or NetworkPolicy
rule that lets Slack in lets in nothing else (docs/deploy.md, "Ports"). The config file's
``listen`` section gives the addresses; the options here override them.
"""

from __future__ import annotations

import argparse
from typing import Any

from bot.config import OPS_PORT, ListenConfig


def add_serve_arguments(parser: Any, *, port: str, threads: int) -> None:
    """Where a serving command listens (``port``: the ``listen`` key of its default), its request
    threads, and how often it drives runs."""
    parser.add_argument("--host", default=None,
                        help="address to listen on (default: listen.host, 0.0.0.0)")
    parser.add_argument("--port", type=int, default=None,
                        help=f"port to listen on (default: listen.{port})")
    parser.add_argument("--threads", type=int, default=threads,
                        help=f"HTTP request threads (default {threads})")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between checks for due runs (default 1)")


def add_side_port_arguments(parser: Any, *, what: str = "") -> None:
    """The ops listener's address (``what``: a prefix for the help text)."""
    parser.add_argument("--metrics-host", default=None,
                        help=what + "address of /metrics, /readyz and /healthz (default: "
                        "listen.host, 0.0.0.0)")
    parser.add_argument("--metrics-port", "--ops-port", dest="metrics_port", type=int, default=None,
                        help=what + "port of /metrics, /readyz and /healthz (default: "
                        f"listen.ops_port, {OPS_PORT})")


def chosen(value: Any, default: Any) -> Any:
    """An option's value, or the config's when the option was not given."""
    return default if value is None else value


def start_side_server(endpoints: Any, args: argparse.Namespace, listen: ListenConfig) -> Any:
    """Serve the endpoints on the ops port, on a thread; returns the server
    (its ``stop()`` stops it)."""
    from bot.frontends.ops import side_server

    host = chosen(args.metrics_host, listen.host)
    server = side_server(endpoints, host=host, port=chosen(args.metrics_port, listen.ops_port))
    server.start()
    print(f"runbook-bot: metrics on http://{host}:{server.effective_port}/metrics "
          "(readiness: /readyz, health: /healthz)", flush=True)
    return server
