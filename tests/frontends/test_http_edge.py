"""The one HTTP edge (``bot.frontends.http``): its stop, against the waitress version pinned.

Waitress documents no thread-safe stop, so ``HttpServer.stop`` reaches into its internals
(``_stop_waitress``). These tests pin down what that stop must do on the version installed: a
serving listener stops taking connections, its serving thread ends, and a listener never started
releases its port. Nothing sleeps for timing: each wait is bounded by a deadline.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import tomllib
import urllib.request
from collections.abc import Callable, Iterable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from bot.frontends.http import HttpServer

DEADLINE = 10.0  # seconds: far longer than a stop takes, short enough to fail a hung one


def _hello(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "6")])
    return [b"hello\n"]


def _server() -> HttpServer:
    return HttpServer(_hello, name="test", host="127.0.0.1", port=0, threads=2, max_body=0)


def _refused(port: int) -> bool:
    """Whether a connection to ``port`` is refused (nothing listens there any more)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE):
            return False
    except ConnectionRefusedError:
        return True


def _closed_before_deadline(port: int, thread: threading.Thread | None = None) -> bool:
    """Poll until the port refuses connections, for at most ``DEADLINE`` seconds; between tries
    wait on the serving thread (it ends once the loop has closed its sockets)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if _refused(port):
            return True
        if thread is not None:
            thread.join(timeout=0.05)
    return _refused(port)


def test_waitress_is_pinned_to_a_range_and_the_installed_version_is_in_it() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    [req] = [Requirement(r) for r in pyproject["project"]["dependencies"]
             if Requirement(r).name == "waitress"]
    bounds = {spec.operator for spec in req.specifier}
    assert ">=" in bounds and "<" in bounds, f"waitress is not pinned to a range: {req}"
    assert req.specifier.contains(version("waitress")), (version("waitress"), str(req))


def test_a_serving_listener_stops_its_port_closes_and_its_thread_ends() -> None:
    server = _server()
    port = server.effective_port
    thread = server.start()
    try:
        assert thread.name == "runbook-bot-test" and thread.daemon
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=DEADLINE) as r:
            assert (r.status, r.read(), r.headers["Server"]) == (200, b"hello\n", "runbook-bot")
    finally:
        server.stop()
    thread.join(timeout=DEADLINE)
    assert not thread.is_alive(), f"the serving thread still runs {DEADLINE}s after stop()"
    assert _closed_before_deadline(port, thread), f"port {port} still accepts connections"
    server.stop()  # a second stop is harmless


def test_a_listener_stopped_while_a_connection_is_open_still_stops() -> None:
    server = _server()
    port = server.effective_port
    thread = server.start()
    idle = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)  # a keep-alive peer
    try:
        server.stop()
        thread.join(timeout=DEADLINE)
        assert not thread.is_alive()
        # the loop closed the open connection too (or reset it, if not yet accepted)
        with contextlib.suppress(ConnectionResetError):
            assert idle.recv(1) == b""
    finally:
        idle.close()
    assert _closed_before_deadline(port)


def test_a_listener_never_started_releases_its_port_on_stop() -> None:
    server = _server()
    port = server.effective_port
    server.stop()
    assert _closed_before_deadline(port)
    server.run()  # after stop(), run() returns at once instead of serving a closed map
