"""Request body limits for every HTTP endpoint the bot serves, enforced before a body is read.

Anyone who can reach the port can send a body, signed or not, and a signature can only be checked
once the body is in hand. So each endpoint declares the largest body it takes, and ``limit_bodies`` answers
``413`` from the ``Content-Length`` header alone, before the application reads a byte. A chunked
request without a length (another server passing it through) is read at most one byte past the
limit; a request with neither a length nor a chunked body has no body. ``server_cap`` gives the
largest limit, for the server's own cap (waitress's ``max_request_body_size``), so a body over
every limit is refused right after its headers, never buffered. Every endpoint, now (Slack events,
health) or later (metrics, alert webhooks), is served through this one guard; docs/slack.md lists the limits.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

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


def stop_server(server: Any) -> None:
    """Stop a running waitress server from another thread: its loop closes its own sockets."""
    server.task_dispatcher.shutdown()  # first: a request thread still running pulls the trigger
    # a closed trigger descriptor (EBADF) means the loop already closed every socket of its map,
    # the trigger's included: the server is stopped and there is nothing left to close
    with contextlib.suppress(OSError):
        server.trigger.pull_trigger(lambda: server.asyncore.close_all(server._map))
