"""A fake of Slack's Socket Mode endpoint: the WebSocket an app opens instead of serving HTTP.

The app calls ``apps.connections.open`` with its app-level token (``xapp-…``) on the fake Web API,
which answers with this server's ``ws://`` URL; the app then connects, Slack says ``hello``, and
sends each request as an envelope (``{"envelope_id", "type", "payload", "accepts_response_payload",
"retry_attempt", "retry_reason"}``); the app answers every envelope with
``{"envelope_id", "payload"?}``, its acknowledgement. A test sends envelopes with ``send`` and
reads the acknowledgements with ``ack_of``. ``drop`` closes the app's connection as Slack does
when it goes away (a close frame), and refuses new ones (503 at the handshake) until ``accept``.
"""

from __future__ import annotations

import itertools
import json
import threading
from http import HTTPStatus
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve


class FakeSocketMode:
    """One app connection at a time, as with one ``slack serve --socket-mode``."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._connection: ServerConnection | None = None
        self._acks: dict[str, dict[str, Any]] = {}
        self._refusing = False
        self.connections = 0  # connections accepted
        self.refused = 0  # handshakes refused (``drop``)
        self._server: Server = serve(self._handle, "127.0.0.1", 0, process_request=self._admit)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="fake-slack-socket-mode")
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{host}:{port}/link/?ticket=fake"

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)

    def _admit(self, connection: ServerConnection, request: Any) -> Any:
        with self._cond:
            if self._refusing:
                self.refused += 1
                self._cond.notify_all()
                return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "down for the test\n")
        return None

    def drop(self) -> None:
        """Close the app's connection (a close frame) and refuse new ones until ``accept``."""
        with self._cond:
            self._refusing = True
            connection = self._connection
        if connection is not None:
            connection.close()

    def accept(self) -> None:
        with self._cond:
            self._refusing = False

    def _handle(self, connection: ServerConnection) -> None:
        with self._cond:
            self._connection = connection
            self.connections += 1
            self._cond.notify_all()
        connection.send(json.dumps({"type": "hello", "num_connections": 1,
                                    "connection_info": {"app_id": "A0APP00001"}}))
        try:
            for raw in connection:
                message = json.loads(raw)
                with self._cond:
                    if "envelope_id" in message:
                        self._acks[str(message["envelope_id"])] = message
                    self._cond.notify_all()
        except ConnectionClosed:
            pass
        finally:
            with self._cond:
                if self._connection is connection:
                    self._connection = None

    def wait_connected(self, timeout: float = 10.0, *, connections: int = 1) -> bool:
        """The app is connected, and has connected ``connections`` times in all."""
        with self._cond:
            return self._cond.wait_for(lambda: self._connection is not None
                                       and self.connections >= connections, timeout=timeout)

    def wait_refused(self, timeout: float = 10.0, *, refused: int = 1) -> bool:
        """The app has been refused ``refused`` times in all."""
        with self._cond:
            return self._cond.wait_for(lambda: self.refused >= refused, timeout=timeout)

    def send(self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0,
             envelope_id: str | None = None) -> str:
        """Deliver one request (``slash_commands``, ``interactive``...); its envelope id."""
        assert self.wait_connected(), "the app did not connect over Socket Mode"
        envelope_id = envelope_id or f"env-{next(self._ids):06d}"
        envelope = {"envelope_id": envelope_id, "type": kind, "payload": payload,
                    "accepts_response_payload": kind != "events_api",
                    "retry_attempt": retry_attempt,
                    "retry_reason": "timeout" if retry_attempt else ""}
        with self._cond:
            assert self._connection is not None
            self._connection.send(json.dumps(envelope))
        return envelope_id

    def ack_of(self, envelope_id: str, timeout: float = 10.0) -> dict[str, Any]:
        """The app's acknowledgement of an envelope (waits for it)."""
        with self._cond:
            assert self._cond.wait_for(lambda: envelope_id in self._acks, timeout=timeout), (
                f"no acknowledgement of {envelope_id}")
            return self._acks[envelope_id]
