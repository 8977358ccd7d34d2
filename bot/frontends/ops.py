"""``/metrics``, ``/readyz`` and ``/healthz``: what Prometheus and Kubernetes ask the bot.

``/healthz`` answers 200 without touching anything: the process is up (a liveness probe that
reached further would restart the bot whenever the database blinked). ``/readyz`` answers 200 only
when every readiness check passes (the database answers a query, the worker loop went round
recently; in Socket Mode, the bot is connected to Slack: ``bot.frontends.slack.socket_mode``) and
503 naming the ones that failed. ``/metrics`` serves the ``Metrics`` registry in
Prometheus's text format. None of them takes a body: each is served behind
``bot.frontends.http.limit_bodies`` with a limit of 0 bytes.

Every serving command answers them on a port of their own, the ops port (``side_server``;
``listen.ops_port``, 9464), in every mode: never on the Slack port the Ingress exposes, nor on the
Alertmanager webhook's. Probes and Prometheus reach it from inside the cluster only
(docs/deploy.md, "Ports").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bot.frontends.http import HttpServer, WSGIApp, limit_bodies, server_cap
from bot.frontends.metrics import CONTENT_TYPE, Metrics
from bot.runtime.liveness import Heartbeat

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"
PATHS = (HEALTH_PATH, READY_PATH, METRICS_PATH)
BODY_LIMITS = {p: 0 for p in PATHS}  # none of them takes a body
DEFAULT_STALL_AFTER = 120.0  # seconds without a pass of the worker loop before it counts as stalled

Check = Callable[[], str | None]  # None: fine; else why not


def database_check(engine: Any) -> Check:
    """The database answers ``SELECT 1`` (``engine``: the store's SQLAlchemy engine)."""
    from sqlalchemy import text

    def check() -> str | None:
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as e:
            return f"the database does not answer: {type(e).__name__}"
        return None

    return check


def worker_check(heartbeat: Heartbeat, *, stall_after: float = DEFAULT_STALL_AFTER) -> Check:
    """The worker loop went round within ``stall_after`` seconds (by the runner's clock)."""
    return lambda: heartbeat.stalled(after=stall_after)


def _answer(start_response: Callable[..., Any], status: str, body: bytes,
            content_type: str = "text/plain; charset=utf-8") -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store")])
    return [body]


class OpsEndpoints:
    """The three endpoints as a WSGI app (``handles`` says which paths are theirs)."""

    def __init__(self, *, metrics: Metrics, checks: Mapping[str, Check]) -> None:
        self.metrics = metrics
        self.checks = dict(checks)
        self._failing: frozenset[str] = frozenset()

    @staticmethod
    def handles(path: str) -> bool:
        return path in PATHS

    def ready(self) -> list[str]:
        """The failed checks, as ``name: why``; empty when ready."""
        failed = []
        for name, check in self.checks.items():
            try:
                why = check()
            except Exception as e:  # a check that breaks counts as failed, never as a 500
                why = f"{type(e).__name__}: {e}"
            if why:
                failed.append(f"{name}: {why}")
        names = frozenset(f.split(":", 1)[0] for f in failed)
        if names != self._failing:  # said once when it changes, not at every probe
            if failed:
                log.warning("not ready: %s", "; ".join(failed))
            else:
                log.info("ready again")
            self._failing = names
        return failed

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        if not self.handles(path):
            return _answer(start_response, "404 Not Found", b"not found\n")
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", b"GET only\n")
        if path == HEALTH_PATH:
            return _answer(start_response, "200 OK", b"ok\n")
        if path == READY_PATH:
            failed = self.ready()
            if failed:
                return _answer(start_response, "503 Service Unavailable",
                               ("\n".join(failed) + "\n").encode())
            return _answer(start_response, "200 OK", b"ready\n")
        return _answer(start_response, "200 OK", self.metrics.exposition(), CONTENT_TYPE)  # /metrics


def ops_app(endpoints: OpsEndpoints) -> WSGIApp:
    """The endpoints alone, behind their body limits: the ops port's app."""
    return limit_bodies(endpoints, limits=BODY_LIMITS)


def side_server(endpoints: OpsEndpoints, *, host: str, port: int) -> HttpServer:
    """A small listener for the endpoints on the ops port (``bot.frontends.http``; not yet
    serving)."""
    return HttpServer(ops_app(endpoints), name="ops", host=host, port=port, threads=2,
                      max_body=server_cap(BODY_LIMITS))
