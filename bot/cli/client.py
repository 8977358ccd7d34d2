"""The terminal's client of the bot's API (``server:``, ``RUNBOOK_BOT_SERVER``, ``--server``).

With a server configured, the terminal holds no power of its own: no database URL, no cloud
credentials. It sends a bearer token (``server.token``: the kubeconfig context's, which the server
checks with a TokenReview; ``env:VAR``; ``file:PATH``) and the server decides who that is and
whether they may. Standard library only: ``urllib.request`` with an ``ssl.SSLContext`` that
verifies the server against the system's CAs or ``server.ca_bundle``; there is no way to turn
verification off.

Every failure is one ``ServerError`` line saying what to do: the server unreachable, a TLS
certificate that does not verify (naming ``server.ca_bundle``), 401 (how to get a token that
works), 403 (the server's reason), 404 (``NotFound``), 413, 429 and 5xx.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from bot import __version__
from bot.config import ServerConfig, environment_value
from bot.errors import ConfigError, NotFound, RunbookBotError

API = "/api/v1"
STREAM_TIMEOUT = 120.0  # seconds without a line (an event or a heartbeat) before a stream is dead


class ServerError(RunbookBotError):
    """The bot's API could not be reached, or said no; the message says what to do."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def read_token(server: ServerConfig) -> str:
    """The bearer token ``server.token`` names."""
    kind, _, where = server.token.partition(":")
    if server.token == "kubeconfig":
        from bot.clients.kube import bearer_token

        return bearer_token(kubeconfig=server.kubeconfig, context=server.context)
    if kind == "env":
        value = environment_value(where)
        if not value:
            raise ConfigError(f"server.token is env:{where}, but {where} is not set")
        return value.strip()
    try:
        with open(where, encoding="utf-8") as f:
            value = f.read().strip()
    except OSError as e:
        raise ConfigError(f"server.token is file:{where}, which cannot be read: "
                          f"{e.strerror}") from e
    if not value:
        raise ConfigError(f"server.token is file:{where}, which is empty")
    return value


def tls_context(server: ServerConfig) -> ssl.SSLContext:
    """Verification against ``ca_bundle`` (a PEM file) or the system's CAs, host name included."""
    if server.ca_bundle is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=server.ca_bundle)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"server.ca_bundle {server.ca_bundle} cannot be read as PEM "
                          f"certificates: {e}") from e


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is never followed: urllib would send the bearer token (a cluster credential,
    with ``token: kubeconfig``) to wherever it points, any host, any scheme."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        raise ConfigError(f"the server answered {code} redirecting to {newurl}: not followed, so "
                          "the token is sent nowhere else; set server.url to the API's own "
                          "address (https://HOST/, as the bot serves /api/v1/)")


class ApiClient:
    """JSON requests to one server, each with the bearer token; ``stream`` reads NDJSON."""

    def __init__(self, server: ServerConfig, *, token: Callable[[], str] | None = None) -> None:
        self.server = server
        self._token_of = token or (lambda: read_token(server))
        self._token: str | None = None
        # https: the environment's proxy, if any, tunnels TLS it cannot read (CONNECT); plain
        # http goes only to this machine, never through a proxy
        handlers: list[Any] = ([urllib.request.HTTPSHandler(context=tls_context(server))]
                               if server.url.startswith("https:")
                               else [urllib.request.ProxyHandler({})])
        self._opener = urllib.request.build_opener(*handlers, _NoRedirects())

    # -- the verbs of HTTP ----------------------------------------------------------------------

    def get(self, path: str, **query: Any) -> Any:
        with self._open("GET", path, query) as resp:
            return self._json(resp.read())

    def post(self, path: str, body: Mapping[str, Any], *, refused_ok: bool = False) -> Any:
        """POST JSON; with ``refused_ok`` a 409 is an answer (the engine refused a command)."""
        with self._open("POST", path, {}, body=body, refused_ok=refused_ok) as resp:
            return self._json(resp.read())

    def text(self, path: str, **query: Any) -> bytes:
        with self._open("GET", path, query) as resp:
            data: bytes = resp.read()
            return data

    def stream(self, path: str, **query: Any) -> Iterator[dict[str, Any]]:
        """The JSON objects of an NDJSON answer as they come; blank and heartbeat lines skipped."""
        with self._open("GET", path, query, timeout=max(self.server.timeout,
                                                        STREAM_TIMEOUT)) as resp:
            for raw in resp:
                line = raw.strip()
                if not line:
                    continue
                item = self._json(line)
                if isinstance(item, dict) and "seq" in item and "type" in item:
                    yield item

    # -- internals ------------------------------------------------------------------------------

    def _url(self, path: str, query: Mapping[str, Any]) -> str:
        q = {k: ("true" if v is True else "false" if v is False else v)
             for k, v in query.items() if v is not None}
        return self.server.url + API + path + ("?" + urlencode(q) if q else "")

    def _open(self, method: str, path: str, query: Mapping[str, Any], *,
              body: Mapping[str, Any] | None = None, refused_ok: bool = False,
              timeout: float | None = None, fresh: bool = False) -> Any:
        """One request; a 401 is tried once more with a token read again (a kubeconfig token
        from ``aws eks get-token`` lasts 15 minutes, and ``follow`` can outlast it)."""
        if self._token is None:
            self._token = self._token_of()
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self._url(path, query), data=data, method=method, headers={
            "Authorization": f"Bearer {self._token}", "Accept": "application/json",
            "User-Agent": f"runbook-bot/{__version__}",
            **({"Content-Type": "application/json"} if data is not None else {})})
        try:
            return self._opener.open(req, timeout=timeout or self.server.timeout)
        except urllib.error.HTTPError as e:
            if refused_ok and e.code == 409:
                return e
            if e.code == 401 and not fresh:
                e.close()
                self._token = None
                return self._open(method, path, query, body=body, refused_ok=refused_ok,
                                  timeout=timeout, fresh=True)
            raise self._refusal(e) from None
        except urllib.error.URLError as e:
            raise self._unreachable(e.reason) from None
        except (TimeoutError, ConnectionError) as e:
            raise self._unreachable(e) from None

    @staticmethod
    def _json(data: bytes) -> Any:
        try:
            return json.loads(data) if data.strip() else {}
        except ValueError:
            raise ServerError("the server's answer is not JSON: is server.url the bot's API "
                              "address?") from None

    def _unreachable(self, reason: object) -> ServerError:
        url = self.server.url
        if isinstance(reason, ssl.SSLCertVerificationError):
            return ServerError(
                f"the TLS certificate of {url} does not verify ({reason.verify_message or reason}):"
                f" if the bot's certificate comes from a private CA, set server.ca_bundle to that "
                f"CA's PEM file (now: {self.server.ca_bundle or 'the system CAs'}); verification "
                "cannot be switched off")
        if isinstance(reason, ssl.SSLError):
            return ServerError(f"TLS with {url} failed ({reason}); check server.url and "
                               "server.ca_bundle")
        return ServerError(f"cannot reach the bot at {url}: {reason} (check server.url, "
                           "RUNBOOK_BOT_SERVER or --server, and that the bot's API is served)")

    def _refusal(self, e: urllib.error.HTTPError) -> RunbookBotError:
        try:
            raw = json.loads(e.read() or b"{}")
            answer = raw if isinstance(raw, dict) else {}
        except ValueError:
            answer = {}
        message = str(answer.get("message") or e.reason or "")
        if e.code == 401:
            how = {"kubeconfig": "the bearer token of your kubeconfig context "
                                 f"({self.server.context or 'the current one'}): refresh it "
                                 "(`aws eks update-kubeconfig --name CLUSTER`) and check "
                                 "`kubectl auth whoami`"}.get(
                self.server.token, f"{self.server.token}: check that it holds a valid token")
            return ServerError(f"the bot at {self.server.url} did not accept your credentials "
                               f"(401: {message}); your token is {how}", status=401)
        if e.code == 403:
            return ServerError(f"refused by the bot (403): {message}", status=403)
        if e.code == 404:
            return NotFound(message or f"not found: {e.url}")
        if e.code == 429:
            after = e.headers.get("Retry-After")
            return ServerError(f"the bot is busy (429): {message}"
                               + (f"; try again in {after} s" if after else ""), status=429)
        if e.code == 413:
            return ServerError(f"the request is too large for the bot (413): {message}",
                               status=413)
        if e.code >= 500:
            return ServerError(f"the bot failed ({e.code}): {message or 'see its logs'}",
                               status=e.code)
        return ServerError(f"the bot said {e.code}: {message}", status=e.code)


def run_path(run_id: str, *rest: str) -> str:
    return "/".join([f"/runs/{quote(run_id, safe='')}", *rest])
