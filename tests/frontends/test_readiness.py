"""``/readyz`` over real HTTP: 503 when the database is unreachable or the worker loop stalled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import PG
from tests.fakes.engine_harness import Engine, make_engine
from tests.fakes.tcp_proxy import TcpProxy
from tests.frontends.observe import endpoints, get, observe, serving

__all__ = ["make_engine"]  # the fixture


def test_ready_only_while_the_worker_loop_goes_round(make_engine) -> None:
    e = make_engine({})
    with serving(endpoints(e, observe(e), stall_after=120)) as base:
        status, _, body = get(base + "/readyz")
        assert status == 503 and "worker: the worker loop has not started" in body
        e.runner.run_due()  # one pass of the loop
        assert get(base + "/readyz")[:3:2] == (200, "ready\n")
        e.clock.advance(120)
        assert get(base + "/readyz")[0] == 200
        e.clock.advance(1)  # stalled: no pass for more than 120 s
        status, _, body = get(base + "/readyz")
        assert status == 503 and "worker loop last went round 121 s ago" in body
        assert "database" not in body
        assert get(base + "/healthz")[0] == 200  # liveness does not look at any of it
        e.runner.run_due()
        assert get(base + "/readyz")[0] == 200


@pytest.mark.postgres
def test_not_ready_while_the_database_is_unreachable(pg_url: str, tmp_path: Path) -> None:
    proxy = TcpProxy("127.0.0.1", 5432)
    url = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    assert url != pg_url and PG in pg_url
    e = Engine(url, tmp_path, {})
    try:
        e.runner.run_due()
        with serving(endpoints(e, observe(e))) as base:
            assert get(base + "/readyz")[0] == 200
            proxy.cut()
            status, _, body = get(base + "/readyz")
            assert status == 503 and body.startswith("database: the database does not answer")
            assert "worker" not in body
            assert get(base + "/healthz")[0] == 200
            assert get(base + "/metrics")[0] == 200  # counts are still served
    finally:
        proxy.cut()
        e.db.engine.dispose()
