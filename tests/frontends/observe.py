"""Helpers for the observability tests: an engine with metrics wired, and scraping over HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bot.frontends.metrics import Metrics
from bot.frontends.observed import ObservedCatalog
from bot.frontends.ops import OpsEndpoints, database_check, side_server, worker_check
from bot.frontends.runlog import RunLog


def observe(engine: Any) -> Metrics:
    """Wire metrics and the run log into a test ``Engine``'s runner, as ``build_runner`` does."""
    metrics = Metrics()
    r = engine.runner
    r.catalog = ObservedCatalog(r.catalog, metrics)
    r.notifiers += [RunLog(), metrics]
    r.leases.takeover_listeners.append(metrics.lease_taken_over)
    r.heartbeat.listeners.append(metrics.worker_looped)
    return metrics


def endpoints(engine: Any, metrics: Metrics, *, stall_after: float = 120.0) -> OpsEndpoints:
    return OpsEndpoints(metrics=metrics, checks={
        "database": database_check(engine.db.engine),
        "worker": worker_check(engine.runner.heartbeat, stall_after=stall_after)})


@contextmanager
def serving(ops: OpsEndpoints) -> Iterator[str]:
    """The endpoints on a side port, as ``worker`` serves them; yields the base URL."""
    server = side_server(ops, host="127.0.0.1", port=0)
    thread = server.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        server.stop()
        thread.join(timeout=5)


def get(url: str, *, data: bytes | None = None) -> tuple[int, str, str]:
    """Status, content type and body of a request (any status)."""
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, by name and sorted labels."""
    status, ctype, body = get(base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
