"""The MCP listener on the one HTTP edge: health, a bearer token required, bodies limited before
they are read, and a stop that returns (``bot.frontends.http.AsgiServer``)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

pytest.importorskip("mcp", reason="the MCP server needs the mcp extra: pip install runbook-bot[mcp]")

from bot.frontends.mcp.server import BODY_LIMIT, MCP_PATH, http_app, mcp_listener


def _never(environ: object, start_response: object) -> list[bytes]:
    raise AssertionError("no request should reach the API here")


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_mcp_listener_checks_before_the_sdk_reads_a_byte() -> None:
    server = mcp_listener(http_app(_never, host="127.0.0.1"), host="127.0.0.1", port=0)
    thread = server.start()
    base = f"http://127.0.0.1:{server.effective_port}"
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=10) as resp:
            assert resp.status == 200 and resp.read() == b"ok\n"
        status, body = _post(base + MCP_PATH, b"{}", {"Content-Type": "application/json"})
        assert status == 401 and b"Bearer" in body
        status, _ = _post(base + MCP_PATH, b"x" * (BODY_LIMIT + 1),
                          {"Authorization": "Bearer t", "Content-Type": "application/json"})
        assert status == 413
    finally:
        server.stop()
    thread.join(10)
    assert not thread.is_alive()
