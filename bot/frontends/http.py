"""The one HTTP edge: every HTTP server the bot runs is built, served and stopped here, behind
request body limits enforced before a body is read.

**Servers.** ``HttpServer`` is one named listener: a WSGI app on a host and port, served by waitress
(a production WSGI server; this is the one module that imports it, an import-linter contract).
Each front-end builds its listener here (Slack events: ``slack.app.http_server``; the ops
endpoints: ``ops.side_server``; the Alertmanager webhook: ``alerts.listener``; the API:
``api.app.api_listener``): ``HttpServer(app, name=..., host=..., port=..., threads=...,
max_body=...)``,
then ``start()`` (a daemon thread) or ``run()`` (this thread), and ``stop()`` from any thread.
Waitress has no documented thread-safe stop, so the one reach into its internals is
``_stop_waitress``, checked against the pinned version by tests/frontends/test_http_edge.py.
The MCP server's streamable HTTP transport is an ASGI app (the MCP SDK's): ``AsgiServer`` is the
second kind of server, with the same interface (``name``, ``effective_port``,
``start``/``run``/``stop``), run by uvicorn (which the SDK brings; its ``Server.should_exit`` is a
documented stop) behind ``limit_asgi_bodies``; uvicorn joins waitress in the contract.

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


# -- ASGI: the MCP server's streamable HTTP transport ------------------------------------------

ASGIApp = Callable[[dict[str, Any], Any, Any], Any]


def limit_asgi_bodies(app: ASGIApp, *, limit: int) -> ASGIApp:
    """``app`` behind a body limit (bytes): 413 from ``Content-Length`` before a byte is read, and
    a body without one (chunked) cut off past ``limit``."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or ()}
        raw = headers.get("content-length", "").strip()
        if (raw and not raw.isdigit()) or (raw.isdigit() and int(raw) > limit):
            log.info("refused a %s-byte body to %s (limit %d bytes)", raw[:40],
                     scope.get("path"), limit)
            await _asgi_answer(send, 413 if raw.isdigit() else 400,
                               f"request body too large: at most {limit} bytes\n")
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body") or b"")
                if seen > limit:
                    raise ValueError(f"request body over {limit} bytes")
            return message

        await app(scope, counted, send)

    return guarded


async def _asgi_answer(send: Any, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class AsgiServer:
    """One named ASGI listener, the twin of ``HttpServer``: ``app`` on ``host``:``port`` (0: any
    free port), bound now, not yet serving: ``start()`` or ``run()``, then ``stop()``."""

    def __init__(self, app: ASGIApp, *, name: str, host: str, port: int, max_body: int) -> None:
        import socket

        import uvicorn

        self.name = name
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError as e:
            self._socket.close()
            raise ConfigError(f"the {name} listener cannot bind {host}:{port}: {e}") from None
        config = uvicorn.Config(limit_asgi_bodies(app, limit=max_body), log_level="warning",
                                lifespan="on", server_header=False, access_log=False)
        self._server = uvicorn.Server(config)
        self._lock = threading.Lock()
        self._stopped = False
        self._done = threading.Event()

    @property
    def effective_port(self) -> int:
        return int(self._socket.getsockname()[1])

    @property
    def started(self) -> bool:
        """Whether it serves yet (uvicorn's startup, the app's lifespan included, is done)."""
        return bool(self._server.started)

    def run(self) -> None:
        """Serve in this thread until ``stop()``."""
        with self._lock:
            if self._stopped:
                return
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._done.set()

    def start(self, *, ready: float = 10.0) -> threading.Thread:
        """Serve on a daemon thread, ``runbook-bot-<name>``, once ready (up to ``ready`` s)."""
        thread = threading.Thread(target=self.run, name=f"runbook-bot-{self.name}", daemon=True)
        thread.start()
        waited = threading.Event()
        for _ in range(int(ready * 100)):
            if self.started or self._done.is_set():
                break
            waited.wait(0.01)
        return thread

    def stop(self, *, timeout: float = 10.0) -> None:
        """Take no more requests, finish those in hand, close the socket; from any thread."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._server.should_exit = True
        self._done.wait(timeout)
        self._socket.close()
