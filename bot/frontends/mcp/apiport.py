"""How the MCP tools reach the bot: its API, in the same process or over the network.

``ApiPort.call`` sends one API request as the agent and answers its status and JSON (or text).
``InProcessApi`` calls the API's WSGI app directly with the agent's own ``Authorization`` header
(the streamable HTTP transport, in the bot's process); ``RemoteApi`` sends it over HTTP(S) to a
bot's ``server.url`` with the token the agent host was given (the stdio transport). Both mark the
request as an agent's (``X-Runbook-Bot-Agent: mcp``), which can only take rights away, and pass
the person the agent says it acts for (``X-On-Behalf-Of``). A redirect is never followed: it would
send the token wherever it points.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

from bot.frontends.api.agents import AGENT_HEADER, BEHALF_HEADER

PREFIX = "/api/v1"
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ApiFailure(Exception):
    """The API refused or failed: its status, code and sentence (what the agent is told)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        return json.loads(self.body or b"null")


class ApiPort(Protocol):
    def call(self, method: str, path: str, *, body: Mapping[str, Any] | None = None,
             query: Mapping[str, str] | None = None,
             behalf: str | None = None) -> Reply: ...


def checked(reply: Reply) -> Reply:
    """``reply``, or ApiFailure saying why the API did not answer 2xx."""
    if 200 <= reply.status < 300:
        return reply
    try:
        doc = reply.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "message" in doc:
        raise ApiFailure(reply.status, str(doc.get("error") or "error"), str(doc["message"]))
    raise ApiFailure(reply.status, "error", reply.body.decode("utf-8", "replace")[:500])


def _headers(authorization: str | None, behalf: str | None) -> dict[str, str]:
    out = {AGENT_HEADER: "mcp", "content-type": "application/json", "accept": "application/json"}
    if authorization:
        out["authorization"] = authorization
    if behalf:
        out[BEHALF_HEADER] = behalf
    return out


@dataclass(frozen=True)
class InProcessApi:
    """The API app in this process, called as the agent (its ``Authorization`` header)."""

    app: WSGIApp
    authorization: str | None
    remote: str = "127.0.0.1"
    behalf: str | None = None

    def call(self, method: str, path: str, *, body: Mapping[str, Any] | None = None,
             query: Mapping[str, str] | None = None, behalf: str | None = None) -> Reply:
        data = json.dumps(body).encode() if body is not None else b""
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method, "PATH_INFO": PREFIX + path,
            "QUERY_STRING": urlencode(dict(query or {})), "SERVER_NAME": "mcp",
            "SERVER_PORT": "0", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": self.remote,
            "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(data),
            "CONTENT_LENGTH": str(len(data)) if data else "",
        }
        for name, value in _headers(self.authorization, behalf or self.behalf).items():
            key = name.upper().replace("-", "_")
            environ[key if key in ("CONTENT_TYPE",) else "HTTP_" + key] = value
        got: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
            got["status"], got["headers"] = int(status.split()[0]), dict(headers)

        chunks = self.app(environ, start_response)
        try:
            payload = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        return Reply(got["status"], payload, got["headers"].get("Content-Type", ""))


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass(frozen=True)
class RemoteApi:
    """A bot's API over HTTP(S): ``url`` is its base (``https://runbook-bot.internal``)."""

    url: str
    token: str
    timeout: float = 30.0
    behalf: str | None = None
    ca_bundle: str | None = None

    def call(self, method: str, path: str, *, body: Mapping[str, Any] | None = None,
             query: Mapping[str, str] | None = None, behalf: str | None = None) -> Reply:
        import ssl

        target = self.url.rstrip("/") + PREFIX + path + (f"?{urlencode(dict(query))}"
                                                           if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(target, data=data, method=method,
                                     headers=_headers(f"Bearer {self.token}",
                                                      behalf or self.behalf))
        handlers: list[Any] = [_NoRedirects()]
        if self.ca_bundle:
            handlers.append(urllib.request.HTTPSHandler(
                context=ssl.create_default_context(cafile=self.ca_bundle)))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(req, timeout=self.timeout) as resp:
                return Reply(resp.status, resp.read(), resp.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read(), e.headers.get("Content-Type", ""))
        except (urllib.error.URLError, OSError) as e:
            raise ApiFailure(503, "unreachable", f"cannot reach the bot at {self.url}: "
                             f"{getattr(e, 'reason', e)}") from None
