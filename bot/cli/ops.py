"""The side port of ``worker`` and Socket Mode: ``/metrics``, ``/readyz`` and ``/healthz``.

Commands that serve no HTTP of their own answer Prometheus and Kubernetes here; ``slack serve``
in HTTP mode answers them on its main port instead.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

METRICS_PORT = 9464


def add_serve_arguments(parser: Any, *, port: int, threads: int) -> None:
    """Where a serving command listens, its request threads, and how often it drives runs."""
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=port, help=f"port to listen on (default {port})")
    parser.add_argument("--threads", type=int, default=threads,
                        help=f"HTTP request threads (default {threads})")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between checks for due runs (default 1)")


def add_side_port_arguments(parser: Any, *, what: str) -> None:
    parser.add_argument("--metrics-host", default="0.0.0.0",
                        help=what + "address of /metrics, /readyz and /healthz (default 0.0.0.0)")
    parser.add_argument("--metrics-port", type=int, default=METRICS_PORT,
                        help=what + f"port of /metrics, /readyz and /healthz (default {METRICS_PORT})")


def start_side_server(endpoints: Any, args: argparse.Namespace) -> Any:
    """Serve the endpoints on the side port, on a thread; returns the server
    (``bot.frontends.http.stop_server`` stops it)."""
    from bot.frontends.ops import side_server

    server = side_server(endpoints, host=args.metrics_host, port=args.metrics_port)
    threading.Thread(target=server.run, name="runbook-bot-metrics", daemon=True).start()
    print(f"runbook-bot: metrics on http://{args.metrics_host}:{server.effective_port}/metrics "
          "(readiness: /readyz, health: /healthz)", flush=True)
    return server
