"""Socket settings shared by the sandbox's HTTP servers (the fake API server, the EC2 proxy, moto)."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

# How often a server loop checks for shutdown: stopping a sandbox waits for it, three times over.
POLL = 0.05


def no_delay(sock: Any) -> None:
    """Send small responses at once: with Nagle's algorithm, a reply written as headers then body
    waits for the peer's delayed ACK (40 ms on Linux), capping a connection at ~25 requests/s."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
