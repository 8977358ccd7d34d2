"""Socket settings shared by the sandbox's HTTP servers (the fake API server, the EC2 proxy, moto),
and the threaded server the first two run on."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# How often a server loop checks for shutdown: stopping a sandbox waits for it, three times over.
POLL = 0.05


def no_delay(sock: Any) -> None:
    """Send small responses at once: with Nagle's algorithm, a reply written as headers then body
    waits for the peer's delayed ACK (40 ms on Linux), capping a connection at ~25 requests/s."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def serve_tls(server: ThreadingHTTPServer, context: ssl.SSLContext) -> None:
    """Serve HTTPS; each handshake runs in its request's thread (``Handler.setup``), never in the
    accepting loop, so one slow client does not hold up the others."""
    server.socket = context.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)


class Handler(BaseHTTPRequestHandler):
    """A keep-alive HTTP/1.1 handler that finishes a deferred TLS handshake and sends at once."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            self.request.settimeout(None)
        super().setup()
        no_delay(self.connection)


class Server(ThreadingHTTPServer):
    """A threaded HTTP server that ends its open connections when it stops.

    Clients keep connections alive between requests (botocore's and the kubernetes client's pools
    do), and each open connection holds a request thread, and through it the server and everything
    its handler reaches, for as long as the client lives. ``close_connections`` after ``shutdown``
    hangs those connections up and waits for their threads, so a stopped sandbox leaves no thread
    behind and is freed.
    """

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: dict[Any, threading.Thread] = {}  # connection -> the thread serving it
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                  daemon=True)
        with self._open_lock:
            self._open[request] = thread
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def close_connections(self, timeout: float = 5.0) -> None:
        with self._open_lock:
            still = list(self._open.items())
        for sock, _ in still:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for _, thread in still:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout)
