"""The one HTTP edge: every HTTP server the bot runs is built, served and stopped here, behind
request body limits enforced before a body is read.

**Servers.** ``HttpServer`` is one named listener: a WSGI app on a host and port, served by waitress
(a production WSGI server; this is the one module that imports it, an import-linter contract).
Each front-end builds its listener here (Slack events: ``slack.app.http_server``; the ops
endpoints: ``ops.side_server``; the Alertmanager webhook: ``alerts.listener``; the API:
``api.app.api_listener``), as will the MCP server: ``HttpServer(app, name=..., host=...,
port=..., threads=..., max_body=...)``,
then ``start()`` (a daemon thread) or ``run()`` (this thread), and ``stop()`` from any thread.
Waitress has no documented thread-safe stop, so the one reach into its internals is
``_stop_waitress``, checked against the pinned version by tests/frontends/test_http_edge.py.
An ASGI app (an MCP server's streaming transport) would be added here as a second kind of server
with the same interface (``name``, ``effective_port``, ``start``/``run``/``stop``) run by an ASGI
server such as uvicorn (its ``Server.should_exit`` is a documented stop), behind an ASGI version
of ``limit_bodies``; that server's import then joins waitress in the contract.

**Body limits.** Anyone who can reach the port can send a body, signed or not, and a signature can
only be checked once the body is in hand. So each endpoint declares the largest body it takes, and
``limit_bodies`` answers ``413`` from the ``Content-Length`` header alone, before the application
reads a byte. A chunked request without a length (another server passing it through) is read at
most one byte past the limit; a request with neither a length nor a chunked body has no body.
``server_cap`` gives the largest limit, for the server's own cap (waitress's
``max_request_body_size``), so a body over every limit is refused right after its headers, never
buffered. Every endpoint (Slack events, health, metrics, alert webhooks) is served through this one
guard; docs/slack.md lists the limits.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bot.errors import ConfigError

log = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

DEFAULT_LIMIT = 1024  # an endpoint that declared nothing: health checks and 404s take no body
# a load balancer's health check, answered by every listener ("ok", from nothing it reads): the
# ALB in front of the Slack port checks that port, which answers nothing else but Slack's requests
HEALTH_PATH = "/healthz"


def server_cap(limits: Mapping[str, int], default: int = DEFAULT_LIMIT) -> int:
    """The largest body any endpoint takes, for the server to refuse bigger ones outright."""
    return max([default, *limits.values()])


def _answer(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]


def healthy(start_response: Callable[..., Any]) -> list[bytes]:
    """The answer to ``GET /healthz`` on a listener that is not the ops port: up, nothing more."""
    return _answer(start_response, "200 OK", "ok\n")


def not_found(start_response: Callable[..., Any]) -> list[bytes]:
    return _answer(start_response, "404 Not Found", "not found\n")


def limit_bodies(app: WSGIApp, *, limits: Mapping[str, int],
                 default: int = DEFAULT_LIMIT) -> WSGIApp:
    """``app`` behind per-path body limits (bytes): ``limits`` by exact path, ``default`` else."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        limit = limits.get(path, default)
        raw = str(environ.get("CONTENT_LENGTH") or "").strip()
        if raw:
            if not raw.isdigit():
                log.info("refused a request to %s: Content-Length %r is not a number", path, raw[:40])
                return _answer(start_response, "400 Bad Request", "invalid Content-Length\n")
            if int(raw) > limit:
                log.info("refused a %s-byte body to %s (limit %d bytes)", raw, path, limit)
                return _answer(start_response, "413 Request Entity Too Large",
                               f"request body too large for {path}: at most {limit} bytes\n")
        elif "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING") or "").lower():
            body = environ["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                log.info("refused a body of over %d bytes to %s (no Content-Length)", limit, path)
                return _answer(start_response, "413 Request Entity Too Large",
                               f"request body too large for {path}: at most {limit} bytes\n")
            environ = {**environ, "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}
        return app(environ, start_response)

    return guarded


class HttpServer:
    """One named HTTP listener: ``app`` on ``host``:``port`` (0: any free port, see
    ``effective_port``), bound now, not yet serving: ``start()`` or ``run()``, then ``stop()``.

    ``max_body`` is the largest body any endpoint of ``app`` takes (``server_cap``): waitress
    refuses a longer ``Content-Length`` right after the headers, before ``app`` is called."""

    def __init__(self, app: WSGIApp, *, name: str, host: str, port: int, threads: int,
                 max_body: int) -> None:
        from waitress.server import BaseWSGIServer, create_server

        server = create_server(app, host=host, port=port, threads=threads,
                               # whole seconds: waitress reads the loop timeout as an int, and 0
                               # busy-polls a core
                               asyncore_loop_timeout=1, ident="runbook-bot",
                               max_request_body_size=max_body + 1)
        if not isinstance(server, BaseWSGIServer):  # a host naming several addresses
            server.close()
            raise ConfigError(f"the {name} listener's host {host!r} names several addresses: "
                              "give one address")
        self.name = name
        self.host = host
        self._server: Any = server  # types-waitress lacks effective_port
        self._lock = threading.Lock()
        self._running = False
        self._stopped = False

    @property
    def effective_port(self) -> int:
        """The port bound (the one asked for, or the one given for port 0)."""
        return int(self._server.effective_port)

    @property
    def loop_timeout(self) -> int:
        """Seconds the idle loop waits in ``select`` (at least 1, or it busy-polls a core)."""
        return int(self._server.adj.asyncore_loop_timeout)

    def run(self) -> None:
        """Serve in this thread until ``stop()`` (at once, if it was already stopped)."""
        with self._lock:
            if self._stopped:
                return
            self._running = True
        self._server.run()

    def start(self) -> threading.Thread:
        """Serve on a daemon thread, ``runbook-bot-<name>``; returns it."""
        thread = threading.Thread(target=self.run, name=f"runbook-bot-{self.name}", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Take no more requests, finish those in hand (up to waitress's 5 s), close every
        socket; from any thread, any number of times. ``run()`` returns once it is done."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            running = self._running
        _stop_waitress(self._server, loop_running=running)


def _stop_waitress(server: Any, *, loop_running: bool) -> None:
    """The one reach into waitress's internals (it documents no thread-safe stop; its own
    ``close()`` is for the loop's thread): the request threads finish, then the loop closes its
    own sockets. tests/frontends/test_http_edge.py checks this against the pinned waitress."""
    server.task_dispatcher.shutdown()  # first: a request thread still running pulls the trigger
    close_all = functools.partial(server.asyncore.close_all, server._map)
    if not loop_running:  # no loop owns the sockets: close them here
        close_all()
        return
    # a closed trigger descriptor (EBADF) means the loop already closed every socket of its map,
    # the trigger's included: the server is stopped and there is nothing left to close
    with contextlib.suppress(OSError):
        server.trigger.pull_trigger(close_all)
