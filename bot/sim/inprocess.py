"""The sandbox's in-process transport: the bot's clients reach the fake API server, the EC2 proxy
and moto without a socket, a TLS handshake or a server thread (``Sandbox(transport="inprocess")``).

The wire is kept, only the network goes: a request is written out as HTTP/1.1 bytes, the very
request handler the server would run on a connection (``apiserver._Handler``,
``ec2_proxy.ProxyHandler``) reads it from a buffer and writes its answer into another, and the client
gets that answer parsed as it would have arrived (a urllib3 response for the kubernetes client,
status, headers and body for botocore's ``before-send`` hook). Authentication, RBAC, IAM,
throttling, error bodies and headers (``Retry-After``, ``Audit-Id``) are therefore those of the
HTTP path. The handler runs in the caller's thread while the caller waits for it, as the caller
waits for a server thread on the HTTP path, so the sandbox's callbacks (``on_write``,
``on_change``) meet the same state. The EC2 proxy reaches moto's WSGI application by calling it
(``wsgi``), not over a loopback connection.

A watch streams until it times out: its handler runs in a thread of its own over a socket pair,
and the client reads the chunked stream as from a server (``stream``).

What it is for: exploration (``bot.sim.explore``), which plays many timelines in forks of one
staged process (``bot.sim.explore.fork``). A process with no server thread forks cleanly, and a
request costs a function call instead of a loopback round trip. The HTTP path stays the default
and what every rehearsal and test uses; the explorer replays a sample of its timelines over it and
checks that both give the same result.
"""

from __future__ import annotations

import http.client
import io
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3._collections import HTTPHeaderDict
from urllib3._request_methods import RequestMethods

Headers = list[tuple[str, str]]
log = logging.getLogger(__name__)


def request_bytes(method: str, target: str, headers: Iterable[tuple[str, Any]], body: bytes,
                  *, host: str) -> bytes:
    """One HTTP/1.1 request as a client writes it on the connection."""
    lines = [f"{method} {target or '/'} HTTP/1.1", f"Host: {host}"]
    for k, v in headers:
        if k.lower() in ("host", "content-length", "connection", "transfer-encoding"):
            continue
        lines.append(f"{k}: {v.decode('latin-1') if isinstance(v, bytes) else v}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def exchange(handler: type[BaseHTTPRequestHandler], request: bytes) -> bytes:
    """What ``handler`` writes back for one request, run in this thread over in-memory files."""
    h = handler.__new__(handler)
    h.rfile, h.wfile = io.BytesIO(request), io.BytesIO()
    h.client_address = ("in-process", 0)
    h.request = h.connection = None
    h.server = None  # type: ignore[assignment]  # the handlers never reach their server
    h.close_connection = True
    try:
        h.handle_one_request()
    except Exception as e:
        # a socket server reports the failure and hangs up without an answer: so here
        log.error("in-process %s failed", handler.__name__, exc_info=True)
        raise ConnectionResetError("the server closed the connection without an answer") from e
    return h.wfile.getvalue()


def _dechunk(body: bytes) -> bytes:
    out, rest = [], body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";", 1)[0] or b"0", 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2:]
    return b"".join(out)


def parse_response(raw: bytes) -> tuple[int, str, Headers, bytes]:
    """(status, reason, headers, body) of an HTTP/1.1 response as a server wrote it."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    headers: Headers = []
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers.append((k.strip(), v.strip()))
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        body = _dechunk(body)
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers, body


def stream(handler: type[BaseHTTPRequestHandler], request: bytes,
           method: str) -> http.client.HTTPResponse:
    """A response read as it is written: ``handler`` serves ``request`` in a thread of its own
    over a socket pair (for watches, which stream until they time out)."""
    ours, theirs = socket.socketpair()

    def serve() -> None:
        try:
            handler(theirs, ("in-process", 0), None)  # type: ignore[arg-type]
        except OSError:  # the client hung up mid-stream
            pass
        finally:
            theirs.close()

    threading.Thread(target=serve, name="sim-inprocess-stream", daemon=True).start()
    ours.sendall(request)
    resp = http.client.HTTPResponse(ours, method=method)
    ours.close()  # the response's file keeps the socket open until it is closed
    resp.begin()
    return resp


class KubePool(RequestMethods):
    """What the kubernetes client's ``rest_client.pool_manager`` is for an in-process sandbox:
    urllib3's request methods over ``urlopen``, which runs the API server's handler."""

    def __init__(self, handler: Callable[[], type[BaseHTTPRequestHandler]]) -> None:
        super().__init__()
        self._handler = handler

    def urlopen(self, method: str, url: str, body: Any = None, headers: Any = None,
                encode_multipart: bool = True, multipart_boundary: str | None = None,
                **kw: Any) -> urllib3.BaseHTTPResponse:
        preload_content = bool(kw.get("preload_content", True))
        decode_content = bool(kw.get("decode_content", True))
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        data = body.encode() if isinstance(body, str) else bytes(body or b"")
        request = request_bytes(method, target, (headers or {}).items(), data, host=parts.netloc)
        query = parts.query.lower()
        if method == "GET" and ("watch=true" in query or "watch=1" in query):
            resp = stream(self._handler(), request, method)
            return urllib3.HTTPResponse(body=resp, headers=HTTPHeaderDict(resp.getheaders()),
                                        status=resp.status, reason=resp.reason,
                                        preload_content=preload_content,
                                        decode_content=decode_content, original_response=resp,
                                        request_method=method, request_url=url)
        try:
            raw = exchange(self._handler(), request)
        except ConnectionResetError as e:  # as urllib3 reports a connection dropped mid-request
            raise urllib3.exceptions.ProtocolError("Connection aborted.", e) from e
        status, reason, hdrs, payload = parse_response(raw)
        return urllib3.HTTPResponse(body=io.BytesIO(payload), headers=HTTPHeaderDict(hdrs),
                                    status=status, reason=reason, preload_content=preload_content,
                                    decode_content=decode_content, request_method=method,
                                    request_url=url)

    def clear(self) -> None:
        """No connections to close (the kubernetes client's ``close``)."""


def send(handler: type[BaseHTTPRequestHandler], method: str, url: str,
         headers: Iterable[tuple[str, Any]], body: bytes) -> tuple[int, Headers, bytes]:
    """One request through ``handler``: (status, headers, body), for botocore's hook;
    ``ConnectionResetError`` when the handler failed without an answer."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    status, _reason, hdrs, payload = parse_response(
        exchange(handler, request_bytes(method, target, headers, body, host=parts.netloc)))
    return status, hdrs, payload


def wsgi(app: Callable[..., Iterable[bytes]], method: str, target: str, headers: dict[str, str],
         body: bytes) -> tuple[int, dict[str, str], bytes]:
    """A WSGI application's answer to one request, called in this thread (moto's server app)."""
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": path or "/",
        "QUERY_STRING": query, "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_LENGTH": str(len(body)), "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body), "wsgi.errors": io.StringIO(), "wsgi.multithread": False,
        "wsgi.multiprocess": False, "wsgi.run_once": False}
    for k, v in headers.items():
        key = k.upper().replace("-", "_")
        if key == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = v
        elif key != "CONTENT_LENGTH":
            environ[f"HTTP_{key}"] = v
    started: list[Any] = []

    def start_response(status: str, response_headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [status, response_headers]
        return lambda _data: None

    def run(wsgi_app: Callable[..., Iterable[bytes]]) -> bytes:
        result = wsgi_app(environ, start_response)
        try:
            return b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    try:
        data = run(app)
    except Exception:  # as werkzeug's server answers an application that raised
        from werkzeug.exceptions import InternalServerError  # deferred: only on a failure

        log.error("in-process WSGI application failed on %s %s", method, target, exc_info=True)
        data = run(InternalServerError())
    return int(str(started[0]).split(" ", 1)[0]), dict(started[1]), data
