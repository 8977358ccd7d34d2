"""A Kubernetes API server over HTTP on 127.0.0.1, good enough for kubectl and the Python client.

It speaks the REST conventions clients rely on: discovery, typed lists with ``resourceVersion``,
``limit``/``continue``, label and field selectors, the three patch types, ``/status``
subresources, ``Status`` error bodies, and server-side Tables for ``kubectl get``. Every accepted
write calls ``on_write`` before the response is sent, so the sandbox's controllers have reacted
by the time the client reads again. Watch is not served (clients poll).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bot.sim import discovery
from bot.sim.errors import ApiError, conflict, not_found
from bot.sim.net import POLL, no_delay
from bot.sim.patch import apply_patch
from bot.sim.resources import BY_PATH, Resource
from bot.sim.selectors import field_selector, label_selector
from bot.sim.store import Store
from bot.sim.tables import table

log = logging.getLogger(__name__)


class Route:
    def __init__(self, res: Resource, namespace: str | None, name: str | None, sub: str) -> None:
        self.res, self.namespace, self.name, self.sub = res, namespace, name, sub


def route(path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        gv, rest = "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and (gv, rest[2]) in BY_PATH:
        namespace, rest = rest[1], rest[2:]
    if not rest or (gv, rest[0]) not in BY_PATH or len(rest) > 3:
        return None
    res = BY_PATH[(gv, rest[0])]
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) == 3 else ""
    if sub and (sub != "status" or not res.status):
        return None
    return Route(res, namespace, name, sub)


def _encode_continue(key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": key}).encode()).decode()


def _decode_continue(token: str) -> str:
    try:
        return str(json.loads(base64.urlsafe_b64decode(token.encode()))["after"])
    except (ValueError, KeyError) as e:
        raise ApiError(400, "BadRequest", "invalid continue token") from e


class ApiServer:
    """The HTTP front of a ``Store``; ``on_write`` runs after every successful mutation."""

    def __init__(self, store: Store, *, on_write: Callable[[], None] | None = None) -> None:
        self.store = store
        self.on_write = on_write or (lambda: None)
        self.requests = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!r}:{port}".replace("'", "")

    def start(self) -> None:
        api = self

        class Handler(_Handler):
            server_api = api

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(POLL,), name="sim-apiserver",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- request handling, independent of HTTP ------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any,
               content_type: str, accept: str) -> tuple[int, Any]:
        self.requests += 1
        static = self._static(path)
        if static is not None:
            return static
        r = route(path)
        if r is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET":
            if query.get("watch") in ("1", "true"):
                raise ApiError(405, "MethodNotAllowed", "watch is not served by the sandbox; poll")
            if r.name is None:
                return 200, self._list(r, query, accept)
            # Stored objects are never changed in place, so the snapshot can be serialised as is.
            obj = self.store.peek(r.res, r.namespace, r.name)
            if obj is None:
                raise not_found(r.res.plural, r.res.group, r.name)
            return 200, (self._table(r.res, [obj]) if "as=Table" in accept else obj)
        result = self._write(method, r, query, body, content_type)
        self.on_write()
        return result

    def _static(self, path: str) -> tuple[int, Any] | None:
        p = path.rstrip("/") or "/"
        if p == "/version":
            return 200, discovery.VERSION
        if p in ("/healthz", "/readyz", "/livez"):
            return 200, "ok"
        if p == "/api":
            return 200, discovery.api_versions(self.url.removeprefix("http://"))
        if p == "/api/v1":
            return 200, discovery.resource_list("", "v1")
        if p == "/apis":
            return 200, discovery.api_group_list()
        parts = [x for x in p.split("/") if x]
        if len(parts) == 2 and parts[0] == "apis":
            doc = discovery.api_group(parts[1])
            return (200, doc) if doc else None
        if len(parts) == 3 and parts[0] == "apis":
            doc = discovery.resource_list(parts[1], parts[2])
            return (200, doc) if doc else None
        return None

    def _list(self, r: Route, query: dict[str, str], accept: str) -> dict[str, Any]:
        with self.store.lock:
            items = self.store.scan(r.res, r.namespace)
            rv = self.store.resource_version
        by_label = label_selector(query.get("labelSelector"))
        by_field = field_selector(query.get("fieldSelector"), r.res)
        items = [o for o in items if by_label(o) and by_field(o)]
        meta: dict[str, Any] = {"resourceVersion": rv}
        if query.get("continue"):
            after = _decode_continue(query["continue"])
            items = [o for o in items if self._sort_key(o) > after]
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            meta["continue"] = _encode_continue(self._sort_key(items[limit - 1]))
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if "as=Table" in accept:
            return self._table(r.res, items, meta)
        return {"kind": f"{r.res.kind}List", "apiVersion": r.res.api_version, "metadata": meta,
                "items": items}

    @staticmethod
    def _sort_key(obj: dict[str, Any]) -> str:
        m = obj.get("metadata", {})
        return f"{m.get('namespace', '')}/{m.get('name', '')}"

    def _table(self, res: Resource, items: list[dict[str, Any]],
               meta: dict[str, Any] | None = None) -> dict[str, Any]:
        return table(res, items, now=self.store.now(),
                     list_meta=meta or {"resourceVersion": self.store.resource_version})

    def _write(self, method: str, r: Route, query: dict[str, str], body: Any,
               content_type: str) -> tuple[int, Any]:
        dry_run = bool(query.get("dryRun"))
        if method == "POST":
            if r.name is not None:
                raise ApiError(405, "MethodNotAllowed", "POST to a named resource")
            if r.namespace and r.res.kind != "Namespace":
                self.store.get(BY_PATH[("v1", "namespaces")], None, r.namespace)
            self._check_body(r, body)
            if dry_run:
                return 201, body
            return 201, self.store.create(r.res, body, r.namespace)
        if r.name is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not supported")
        if method == "PUT":
            self._check_body(r, body)
            if body.get("metadata", {}).get("name") != r.name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
            if dry_run:
                return 200, body
            return 200, self.store.update(r.res, body, namespace=r.namespace, subresource=r.sub)
        if method == "PATCH":
            with self.store.lock:
                current = self.store.get(r.res, r.namespace, r.name)
                patched = apply_patch(current, body, content_type)
                if not isinstance(patched, dict):
                    raise ApiError(422, "Invalid", "a patch must produce an object")
                sent_rv = self._patch_rv(body, content_type)
                if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                    raise conflict(r.res.plural, r.res.group, r.name)
                patched.setdefault("metadata", {})["resourceVersion"] = current["metadata"][
                    "resourceVersion"]
                patched["metadata"]["name"] = r.name
                if dry_run:
                    return 200, patched
                return 200, self.store.update(r.res, patched, namespace=r.namespace,
                                              subresource=r.sub)
        if method == "DELETE":
            opts = body if isinstance(body, dict) else {}
            grace = opts.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            pre = opts.get("preconditions") or {}
            if dry_run:
                return 200, self.store.get(r.res, r.namespace, r.name)
            obj = self.store.delete(r.res, r.namespace, r.name,
                                    grace_seconds=None if grace is None else int(grace),
                                    precondition_rv=pre.get("resourceVersion"),
                                    precondition_uid=pre.get("uid"))
            return 200, obj
        raise ApiError(405, "MethodNotAllowed", f"method {method} not allowed")

    @staticmethod
    def _patch_rv(body: Any, content_type: str) -> str | None:
        """The resourceVersion a patch pins (JSON patch pins it with a ``test`` op instead)."""
        if isinstance(body, dict):
            rv = body.get("metadata", {}).get("resourceVersion") if isinstance(
                body.get("metadata"), dict) else None
            return str(rv) if rv else None
        return None

    @staticmethod
    def _check_body(r: Route, body: Any) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        kind = body.get("kind")
        if kind and kind != r.res.kind:
            raise ApiError(400, "BadRequest",
                           f"the kind {kind!r} does not match the resource {r.res.plural!r}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_api: ApiServer

    def setup(self) -> None:
        super().setup()
        no_delay(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("apiserver: " + format, *args)

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            try:
                body = json.loads(raw) if raw else None
            except ValueError as e:
                if raw and self.headers.get("Content-Type", "").startswith("application/yaml"):
                    raise ApiError(415, "UnsupportedMediaType", "send JSON") from e
                raise ApiError(400, "BadRequest", f"invalid JSON body: {e}") from e
            code, payload = self.server_api.handle(
                method, parts.path, query, body, self.headers.get("Content-Type", ""),
                self.headers.get("Accept", ""))
        except ApiError as e:
            code, payload = e.code, e.status()
        except Exception as e:  # a sandbox bug must still answer, or clients hang
            log.exception("apiserver: %s %s failed", method, self.path)
            code, payload = 500, ApiError(500, "InternalError", str(e)).status()
        if isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")
