"""Socket Mode that stays connected, and says when it is not: readiness, backoff, one line a failure.

In Socket Mode the bot opens a WebSocket to Slack (``apps.connections.open`` with the app-level
token, then the ``wss://`` URL it answers). ``SocketModeLink`` keeps that connection up:

- ``connect_first`` tries once at start: Slack refusing the app token is a ``ConfigError`` (a
  wrong token never heals by waiting); any other failure is logged and retried, never raised, so a
  Slack outage at start leaves the pod running and unready instead of crash-looping;
- a thread reconnects when the connection is lost (Slack's close frame, or the SDK finding it
  stale by its pings) at once, then after each failed attempt waits slack_sdk's exponential
  backoff with jitter (``BackoffRetryIntervalCalculator``: 0.5 s doubling, plus up to 1 s), capped
  at ``MAX_DELAY``, and starts again from the first delay once connected;
- ``check`` is a readiness check (``bot.frontends.ops``): ``/readyz`` answers 503 while the
  connection is down, so Kubernetes shows the pod unready and no one mistakes it for serving.

slack_sdk's own reconnection (``auto_reconnect_enabled``) retries at once on close and then every
``ping_interval`` seconds with no backoff, and its client logs several lines, some with a
traceback, for each failure; it is switched off here. What the SDK says goes to a logger of its own
that only remembers its last complaint, which becomes the reason in this module's single line per
failure (the SDK's own lines appear with ``--log-level debug``).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.interval_calculator import RetryIntervalCalculator
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from bot.config import SlackConfig
from bot.errors import ConfigError
from bot.frontends.slack.app import payload_problem

log = logging.getLogger(__name__)

MAX_DELAY = 60.0  # seconds: the longest wait between two attempts
POLL = 1.0  # seconds: how often the link looks at a connection the SDK may have found stale
# what apps.connections.open answers for a token that will not work however long one waits
REFUSED = frozenset({"invalid_auth", "not_authed", "not_allowed_token_type", "token_revoked",
                     "token_expired", "account_inactive", "missing_scope"})


class _LastWords(logging.Handler):
    """Remembers the SDK's last warning or error: the reason a connection failed."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()


def _one_line(text: str, limit: int = 200) -> str:
    if ", response: " in text:  # a refused handshake: its status says it, not the headers after it
        text = text.split(", response: ", 1)[0] + ")"
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _Refused(Exception):
    """Slack refused the app token: waiting will not help."""


class SocketModeLink:
    """One Socket Mode connection for ``app``, kept up until ``stop``."""

    def __init__(self, app: App, config: SlackConfig, *,
                 backoff: RetryIntervalCalculator | None = None, max_delay: float = MAX_DELAY,
                 poll: float = POLL) -> None:
        self._words = _LastWords()
        # a logger outside the logging tree: the SDK's lines reach the log only when debugging
        debugging = log.isEnabledFor(logging.DEBUG)
        sdk = logging.Logger(f"{__name__}.sdk", logging.DEBUG if debugging else logging.WARNING)
        sdk.addHandler(self._words)
        if debugging:
            sdk.parent = log
        self.handler = SocketModeHandler(app, app_token=config.app_token, logger=sdk,
                                         auto_reconnect_enabled=False)
        self.client: Any = self.handler.client
        # every request passes the payload check first (bolt's own listener is replaced)
        self.client.socket_mode_request_listeners[:] = [self._handle]
        self.client.on_close_listeners.append(self._closed)
        self._backoff = backoff or BackoffRetryIntervalCalculator(backoff_factor=0.5)
        self._max_delay = max_delay
        self._poll = poll
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lost: str | None = None  # why Slack closed the connection, until the loop reconnects
        self._failures = 0  # attempts failed in a row
        self._delay = 0.0  # the wait before the next attempt
        self._thread: threading.Thread | None = None

    # -- requests -----------------------------------------------------------------------------

    def _handle(self, client: Any, req: SocketModeRequest) -> None:
        """One request, to bolt unless its payload has a shape bolt cannot route: that one is
        acknowledged (Slack would redeliver it, to the same end) and named in one line, as the
        HTTP listener answers it 400. A request bolt fails on is logged here with its traceback,
        not left to the SDK's logger, whose last words name a lost connection."""
        problem = payload_problem(req.payload)
        if problem:
            log.warning("refused a malformed Slack request over Socket Mode: %s (envelope %s)",
                        problem, req.envelope_id)
            client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        try:
            self.handler.handle(client, req)
        except Exception:
            log.exception("Slack Socket Mode: the %s request in envelope %s failed", req.type,
                          req.envelope_id)

    # -- readiness --------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._lost is None and bool(self.client.is_connected())

    def check(self) -> str | None:
        """A readiness check: None while connected, else why not."""
        if self.connected:
            return None
        tries = (f" ({self._failures} failed attempt{'' if self._failures == 1 else 's'})"
                 if self._failures else "")
        return f"not connected to Slack over Socket Mode{tries}"

    # -- connecting ---------------------------------------------------------------------------

    def _closed(self, code: int, reason: str | None = None) -> None:
        """The SDK's close listener (its thread): Slack closed the connection; wakes the loop."""
        if not self._stop.is_set():
            self._lost = f"Slack closed it: code {code}" + (f", {reason}" if reason else "")
            self._wake.set()

    def _attempt(self) -> str | None:
        """Open a new connection: None when connected, else why not (``_Refused`` when Slack
        refuses the app token)."""
        self._words.last = None
        try:
            self.client.connect_to_new_endpoint(force=True)
        except SlackApiError as e:
            code = str(e.response.get("error")) if e.response is not None else ""
            if code in REFUSED:
                raise _Refused(code) from None
            return f"apps.connections.open failed: {code or _one_line(str(e))}"
        except Exception as e:  # the Web API unreachable: retried like any other failure
            return f"apps.connections.open failed: {type(e).__name__}: {_one_line(str(e))}"
        if self.client.is_connected():
            return None
        return _one_line(self._words.last or "the WebSocket connection was not established")

    def _failed(self, why: str) -> None:
        """One line for a failed attempt, and the wait before the next (the SDK's backoff)."""
        self._failures += 1
        exponent = min(self._failures - 1, 16)
        self._delay = min(self._max_delay, self._backoff.calculate_sleep_duration(exponent))
        log.warning("Slack Socket Mode: cannot connect (%s); attempt %d failed, next in %.1f s",
                    why, self._failures, self._delay)

    def connect_first(self) -> bool:
        """Try once, now; True when connected. Slack refusing the app token is a ConfigError; any
        other failure is logged once and left to the loop (``start``)."""
        try:
            why = self._attempt()
        except _Refused as e:
            self._close()  # the SDK's threads too
            raise ConfigError(f"Slack refused SLACK_APP_TOKEN: {e} (an app-level token, xapp-..., "
                              "with connections:write; see docs/slack.md)") from None
        if why is not None:
            self._failed(why)
        return why is None

    def start(self) -> None:
        """Keep the connection up from a thread of its own, until ``stop``."""
        self._thread = threading.Thread(target=self._run, name="slack-socket-mode", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._delay:
                self._stop.wait(self._delay)
                self._delay = 0.0
            elif self._failures or self._lost is not None or not self.client.is_connected():
                self._reconnect()
            else:
                self._wake.wait(self._poll)
                self._wake.clear()

    def _reconnect(self) -> None:
        if not self._failures:  # the connection was up: say once that it went
            lost = self._lost or _one_line(self._words.last or "found closed")
            log.warning("Slack Socket Mode: connection lost (%s); reconnecting", lost)
        try:
            why = self._attempt()
        except _Refused as e:
            why = f"Slack refused SLACK_APP_TOKEN: {e}"
        if self._stop.is_set():
            return
        # only now: cleared before, the old connection could look up until the SDK closed it
        self._lost = None
        if why is not None:
            self._failed(why)
            return
        if self._failures:
            log.info("Slack Socket Mode: connected again after %d failed attempt%s", self._failures,
                     "" if self._failures == 1 else "s")
        self._failures = 0

    def stop(self) -> None:
        """Close the connection and stop reconnecting."""
        self._stop.set()
        self._wake.set()
        self._close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _close(self) -> None:
        """The SDK's client closed, its threads ended, at once."""
        # the SDK's receiving thread holds the socket for up to its 3 s receive timeout, and its
        # close waits for it: shutting the socket down first ends that wait (and tells Slack now)
        sock = getattr(getattr(self.client, "current_session", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        # likewise its message thread waits up to 1 s for a message: closed (what its close sets
        # first), then an empty message, and it ends at once
        self.client.closed = True
        self.client.message_queue.put(None)
        self.handler.close()
