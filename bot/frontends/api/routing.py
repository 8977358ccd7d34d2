"""The API's plumbing, apart from what its routes do: who a request comes from (the ``Caller`` an
``Authenticator`` vouches for), a request and its answer, a route of the table, errors as
statuses, and the JSON 413 in front of the one HTTP edge's body limits.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from bot.engine.ids import parse_run_id
from bot.frontends.http import WSGIApp

log = logging.getLogger(__name__)


class Caller(Protocol):
    """Who is calling, as an authenticator says (``bot.frontends.api.auth.Caller``)."""

    @property
    def identity(self) -> str: ...
    @property
    def groups(self) -> tuple[str, ...]: ...
    @property
    def method(self) -> str: ...


class Authenticator(Protocol):
    """``authenticate`` the request's headers (lower-case names), or raise ``Unauthenticated``."""

    def authenticate(self, headers: Mapping[str, str]) -> Caller: ...


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str,
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, list(headers)


@dataclass
class Request:
    method: str
    path: str
    args: dict[str, str]  # from the path
    query: dict[str, str]
    body: bytes
    headers: dict[str, str]
    remote: str
    caller: Caller | None = None

    def json(self, model: type[BaseModel]) -> Any:
        try:
            return model.model_validate_json(self.body or b"{}")
        except ValidationError as e:
            first = e.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise ApiError(400, "bad_request", f"{where}: {first['msg']}") from None

    @property
    def actor(self) -> str:
        assert self.caller is not None
        return self.caller.identity

    @property
    def via(self) -> dict[str, Any]:
        assert self.caller is not None
        recorded = getattr(self.caller, "recorded_via", None)  # an agent's (api/agents.py)
        if recorded is not None:
            return dict(recorded)
        return {"frontend": "api", "method": self.caller.method}


@dataclass
class Answer:
    status: int
    body: Any = None  # JSON, unless ``raw``
    raw: Iterable[bytes] | None = None
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # with {name} for path arguments
    handler: Callable[[Request], Answer]
    summary: str
    body: type[BaseModel] | None = None
    query: tuple[tuple[str, str, str], ...] = ()  # (name, JSON type, description)
    answer: type[BaseModel] | None = None
    status: int = 200
    auth: bool = True
    content: str = "application/json"

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.path) + "$")


_STATUS = {200: "200 OK", 201: "201 Created", 400: "400 Bad Request", 401: "401 Unauthorized",
           403: "403 Forbidden", 404: "404 Not Found", 405: "405 Method Not Allowed",
           409: "409 Conflict", 413: "413 Request Entity Too Large",
           429: "429 Too Many Requests", 500: "500 Internal Server Error"}


def truthy(text: str | None) -> bool:
    return (text or "").lower() in ("1", "true", "yes")


def int_arg(query: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ApiError(400, "bad_request", f"{name} is a whole number from {low} to {high}; "
                       f"got {raw[:40]!r}")
    return int(raw)


def run_id_arg(text: str) -> str:
    try:
        return str(parse_run_id(text))
    except ValueError as e:
        raise ApiError(404, "not_found", str(e)) from None


def said(e: Exception) -> str:
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)


def line(obj: Mapping[str, Any]) -> bytes:
    return (json.dumps(obj, default=str, ensure_ascii=False) + "\n").encode()


def json_limits(app: WSGIApp, *, limits: Mapping[str, int], default: int) -> WSGIApp:
    """A body longer than its endpoint takes, by its ``Content-Length``, answered 413 in the
    API's JSON (``limit_bodies``, inside, answers the rest: chunked bodies)."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO") or "/")
        limit = limits.get(path, default)
        raw = str(environ.get("CONTENT_LENGTH") or "").strip()
        if raw.isdigit() and int(raw) > limit:
            log.info("refused a %s-byte body to %s (limit %d bytes)", raw, path, limit)
            return send(Answer(413, {"error": "too_large", "message": f"the body is "
                                          f"{raw} bytes; {path} takes at most {limit}"}),
                             start_response)
        return app(environ, start_response)

    return guarded


def send(answer: Answer, start_response: Callable[..., Any]) -> Iterable[bytes]:
    headers = [("Content-Type", answer.content_type), ("Cache-Control", "no-store"),
               *answer.headers]
    if answer.raw is not None:
        start_response(_STATUS.get(answer.status, str(answer.status)), headers)
        return answer.raw
    data = (json.dumps(answer.body, default=str, ensure_ascii=False) + "\n").encode()
    start_response(_STATUS.get(answer.status, str(answer.status)),
                   [*headers, ("Content-Length", str(len(data)))])
    return [data]
