"""Bodies over an endpoint's limit are refused with 413 before they are read, over real HTTP."""

from __future__ import annotations

import io
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from bot.frontends.http import limit_bodies, server_cap
from bot.frontends.slack.app import BODY_LIMITS, EVENTS_PATH
from tests.fakes.slack_requests import send, signed, slash_command_body
from tests.frontends.slack.conftest import Bot


def _raw(bot: Bot | str, head: str, body: bytes = b"", *, timeout: float = 5.0) -> bytes:
    """Send raw HTTP to the bot's Slack port (or the listener at a URL); return what the server
    answered (the status line first)."""
    where = urlsplit(bot if isinstance(bot, str) else bot.url)
    with socket.create_connection((where.hostname, where.port), timeout=timeout) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n" + body)
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
    return answer


def test_an_unsigned_200_mb_post_is_refused_from_its_headers_without_waiting_for_the_body(
    bot: Bot,
) -> None:
    answer = _raw(bot, f"POST {EVENTS_PATH} HTTP/1.1\r\nHost: x\r\n"
                       "Content-Type: application/x-www-form-urlencoded\r\n"
                       f"Content-Length: {200 * 1024 * 1024}")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_a_body_just_over_the_slack_limit_is_refused_and_one_within_it_is_checked_for_a_signature(
    bot: Bot,
) -> None:
    limit = BODY_LIMITS[EVENTS_PATH]
    big = b"text=" + b"x" * limit
    answer = _raw(bot, f"POST {EVENTS_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(big)}", big)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    within = b"text=" + b"x" * (limit - 10)
    answer = _raw(bot, f"POST {EVENTS_PATH} HTTP/1.1\r\nHost: x\r\n"
                       "Content-Type: application/x-www-form-urlencoded\r\n"
                       f"Content-Length: {len(within)}", within)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]  # read, and refused as unsigned


def test_a_chunked_body_over_the_limit_is_refused(bot: Bot) -> None:
    chunk = b"x" * 65536
    chunks = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * (BODY_LIMITS[EVENTS_PATH] // len(chunk) + 2)
    answer = _raw(bot, f"POST {EVENTS_PATH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked",
                  chunks + b"0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_health_takes_no_body_and_other_paths_only_a_small_one(bot: Bot) -> None:
    base = bot.url.removesuffix(EVENTS_PATH)
    answer = _raw(bot, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 10", b"0123456789")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    answer = _raw(bot, "GET /healthz HTTP/1.1\r\nHost: x")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    status, _ = send(base + "/metrics", signed("x" * 4096))
    assert status == 413


def test_a_signed_slash_command_within_the_limit_is_served(bot: Bot) -> None:
    status, _ = bot.post(slash_command_body(text="help", user_id="U1"))
    assert status == 200


def _app(seen: list[bytes]) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ["wsgi.input"].read())
        start_response("200 OK", [])
        return [b"ok"]

    return app


class _Endless(io.RawIOBase):
    """A request stream that never ends: a guard must stop reading it."""

    def __init__(self) -> None:
        self.given = 0

    def read(self, n: int = -1) -> bytes:
        assert n >= 0, "the whole stream was asked for"
        self.given += n
        return b"x" * n


@pytest.mark.parametrize(("length", "status"), [("", "413"), ("abc", "400"), ("100", "413"),
                                                ("10", "200")])
def test_the_guard_refuses_by_length_and_reads_a_body_without_one_only_up_to_the_limit(
    length: str, status: str
) -> None:
    seen: list[bytes] = []
    statuses: list[str] = []
    stream = _Endless()
    guarded = limit_bodies(_app(seen), limits={"/hook": 50})
    environ = {"PATH_INFO": "/hook", "CONTENT_LENGTH": length, "HTTP_TRANSFER_ENCODING": "chunked",
               "wsgi.input": io.BytesIO(b"x" * 10) if length == "10" else stream}
    guarded(environ, lambda s, h: statuses.append(s))
    assert statuses[0].startswith(status)
    assert stream.given <= 51
    assert seen == ([b"x" * 10] if status == "200" else [])


def test_the_server_cap_is_the_largest_endpoint_limit() -> None:
    from bot.frontends.alerts import ALERTS_PATH
    from bot.frontends.alerts import BODY_LIMITS as ALERT_LIMITS

    # each listener its own: the Slack port's, and the alerts port's (a larger one)
    assert server_cap(BODY_LIMITS) == BODY_LIMITS[EVENTS_PATH]
    assert server_cap(ALERT_LIMITS) == ALERT_LIMITS[ALERTS_PATH] > BODY_LIMITS[EVENTS_PATH]
    assert server_cap({}) == 1024
