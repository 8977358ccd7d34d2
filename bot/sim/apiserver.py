"""A Kubernetes API server over HTTP on 127.0.0.1, good enough for kubectl and the Python client.

It speaks the REST conventions clients rely on: discovery, typed lists with ``resourceVersion``,
``limit``/``continue``, label and field selectors, the three patch types, ``/status``
subresources, ``Status`` error bodies, server-side Tables for ``kubectl get``, and watches
(``bot.sim.watch``). Every request is authenticated and authorized first (``bot.sim.authz``: the
bot's identity gets exactly what ``deploy/rbac.yaml`` grants). Every accepted write calls
``on_write`` before the response is sent, so the sandbox's controllers have reacted by the time
the client reads again.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import ssl
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bot.sim import discovery, eventsview, openapi, watch
from bot.sim.admission import validate
from bot.sim.authz import ADMIN, Authorizer, Identity, verb_of
from bot.sim.errors import ApiError, conflict, not_found
from bot.sim.net import POLL, Handler, Server, serve_tls
from bot.sim.patch import apply_patch
from bot.sim.propagation import requested_policy
from bot.sim.resources import BY_PATH, Resource
from bot.sim.selectors import field_selector, label_selector
from bot.sim.store import Store
from bot.sim.tables import table

log = logging.getLogger(__name__)
IN_PROCESS_URL = "https://apiserver.sandbox.invalid"  # what an in-process server is called
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


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


EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start "
    "a new list without the continue parameter, or use the continue token in this response to "
    "retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the first "
    "chunk was returned and now may show up in the list.")


def _encode_continue(key: str, rv: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": key, "rv": int(rv)}).encode()).decode()


def _decode_continue(token: str) -> tuple[str, int]:
    try:
        doc = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(doc["after"]), int(doc.get("rv", 0))
    except (ValueError, KeyError, TypeError) as e:
        raise ApiError(400, "BadRequest", "invalid continue token") from e


def _view(res: Resource) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How a stored object is shown through ``res``: as is, or converted for another group."""
    if res.view and res.group == eventsview.GROUP:
        return eventsview.to_events_v1
    return lambda o: o


class WatchStream:
    """What ``handle`` returns for a watch: the HTTP layer streams its events."""

    def __init__(self, events: Any) -> None:
        self.events = events


class ApiServer:
    """The HTTP front of a ``Store``; ``on_write`` runs after every successful mutation."""

    def __init__(self, store: Store, *, on_write: Callable[[str], None] | None = None,
                 authorizer: Authorizer | None = None, throttle_rate: float = 0.0,
                 seed: int = 0) -> None:
        self.store = store
        self.on_write = on_write or (lambda _what: None)
        self.throttle_rate = throttle_rate  # share of requests answered 429, as API Priority and
        self._rng = random.Random(seed)     # Fairness does under load (seeded, reproducible)
        self.authorizer = authorizer
        self.tls: ssl.SSLContext | None = None  # set before start() to serve HTTPS
        # served without a socket (``bot.sim.inprocess``): clients run ``handler_class()`` in
        # their own thread, and the address they are given is a name that never resolves
        self.in_process = False
        self.requests = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._handler: type[_Handler] | None = None

    @property
    def url(self) -> str:
        if self.in_process:
            return IN_PROCESS_URL
        assert self._httpd is not None, "start() first"
        host, port = self._httpd.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    def handler_class(self) -> type[_Handler]:
        """The request handler of this server, for a socket server or the in-process transport."""
        if self._handler is None:
            api = self

            class Handler(_Handler):
                server_api = api

            self._handler = Handler
        return self._handler

    def start(self) -> None:
        self._httpd = _Server(("127.0.0.1", 0), self.handler_class())
        if self.tls is not None:
            serve_tls(self._httpd, self.tls)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(POLL,), name="sim-apiserver",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        with self.store.lock:
            self.store.changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd.close_connections()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # -- request handling, independent of HTTP ------------------------------------------------

    def identify(self, authorization: str) -> Identity:
        return self.authorizer.identify(authorization) if self.authorizer else ADMIN

    def handle(self, method: str, path: str, query: dict[str, str], body: Any,
               content_type: str, accept: str, *, who: Identity = ADMIN) -> tuple[int, Any]:
        self.requests += 1
        if self.throttle_rate and path not in ("/healthz", "/livez", "/readyz", "/version"):
            with self._lock:
                throttled = self._rng.random() < self.throttle_rate
            if throttled:
                raise ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                               details={"retryAfterSeconds": 1}, retry_after=1)
        if path.rstrip("/") == TOKEN_REVIEWS:
            return self._token_review(method, body, who)
        r = route(path)
        if r is None:
            if self.authorizer:
                self.authorizer.check_path(who, path)
            static = self._static(path)
            if static is not None:
                return static
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        watching = method == "GET" and (query.get("watch") or "").lower() in ("1", "true")
        if self.authorizer:
            resource = f"{r.res.plural}/{r.sub}" if r.sub else r.res.plural
            self.authorizer.check(who, verb=verb_of(method, named=r.name is not None, watch=watching),
                                  group=r.res.group, resource=resource, namespace=r.namespace,
                                  name=r.name)
        if method == "GET":
            if watching:
                if r.name is not None:
                    query = {**query, "fieldSelector": ",".join(
                        x for x in (query.get("fieldSelector"), f"metadata.name={r.name}") if x)}
                def render(o: dict[str, Any], res: Resource = r.res) -> dict[str, Any]:
                    if "as=Table" not in accept:
                        return o
                    return self._table(res, [o], {"resourceVersion": o["metadata"]["resourceVersion"]})
                return 200, WatchStream(watch.events(self.store, r.res, r.namespace, query,
                                                     stopped=self.stopping.is_set, render=render,
                                                     convert=_view(r.res)))
            if r.name is None:
                return 200, self._list(r, query, accept)
            # Stored objects are never changed in place, so the snapshot can be serialised as is.
            obj = self.store.peek(r.res, r.namespace, r.name)
            if obj is None:
                raise not_found(r.res.plural, r.res.group, r.name)
            return 200, (self._table(r.res, [obj]) if "as=Table" in accept else _view(r.res)(obj))
        if r.res.view:
            raise ApiError(405, "MethodNotAllowed", f"the sandbox serves {r.res.api_version} "
                           f"{r.res.plural} read-only: write them through the core API")
        result = self._write(method, r, query, body, content_type)
        self.on_write(f"{method} {path} by {who.user}")
        return result

    def _token_review(self, method: str, body: Any, who: Identity) -> tuple[int, Any]:
        """``POST .../tokenreviews``: who a token belongs to (``Authorizer.review``); stored nowhere."""
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", "tokenreviews may only be created")
        if self.authorizer:
            self.authorizer.check(who, verb="create", group="authentication.k8s.io",
                                  resource="tokenreviews", namespace=None, name=None)
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("token"), str):
            raise ApiError(400, "BadRequest", "TokenReview: spec.token is required")
        audiences = [str(a) for a in spec.get("audiences") or []]
        status = (self.authorizer.review(spec["token"], audiences) if self.authorizer else
                  {"authenticated": False, "error": "this sandbox authenticates no one"})
        return 201, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                     "metadata": {"creationTimestamp": None},
                     "spec": {"audiences": audiences}, "status": status}

    def _static(self, path: str) -> tuple[int, Any] | None:
        p = path.rstrip("/") or "/"
        if p == "/version":
            return 200, discovery.VERSION
        if p in ("/healthz", "/readyz", "/livez"):
            return 200, "ok"
        if p == "/api":
            return 200, discovery.api_versions(self.url.split("://", 1)[1])
        if p == "/api/v1":
            return 200, discovery.resource_list("", "v1")
        if p == "/apis":
            return 200, discovery.api_group_list()
        if p.startswith("/openapi/v3"):
            doc = openapi.serve(p)
            return (200, doc) if doc is not None else None
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
        convert = _view(r.res)
        if "as=Table" not in accept:
            items = [convert(o) for o in items]
            items = [o for o in items if by_label(o) and by_field(o)]
        else:  # tables print from the stored shape; selectors still apply to the requested one
            items = [o for o in items if by_label(convert(o)) and by_field(convert(o))]
        meta: dict[str, Any] = {"resourceVersion": rv}
        if query.get("continue"):
            after, token_rv = _decode_continue(query["continue"])
            if token_rv < self.store.compacted_rv:
                # the history the first page was read at is compacted, as etcd's is after 5 min
                raise ApiError(410, "Expired", EXPIRED_CONTINUE,
                               metadata={"continue": _encode_continue(after, rv)})
            meta["resourceVersion"] = str(token_rv)
            rv = str(token_rv)
            items = [o for o in items if self._sort_key(o) > after]
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            meta["continue"] = _encode_continue(self._sort_key(items[limit - 1]), rv)
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

    @staticmethod
    def _field_validation(r: Route, query: dict[str, str], obj: Any) -> None:
        if (query.get("fieldValidation") or "").lower() != "strict" or not isinstance(obj, dict):
            return
        unknown = openapi.unknown_fields(r.res, obj)
        if unknown:
            raise ApiError(400, "BadRequest", "strict decoding error: " + ", ".join(
                f'unknown field "{u}"' for u in unknown))

    def _write(self, method: str, r: Route, query: dict[str, str], body: Any,
               content_type: str) -> tuple[int, Any]:
        dry_run = bool(query.get("dryRun"))
        if method == "POST":
            if r.name is not None:
                raise ApiError(405, "MethodNotAllowed", "POST to a named resource")
            if r.namespace and r.res.kind != "Namespace":
                self.store.get(BY_PATH[("v1", "namespaces")], None, r.namespace)
            self._check_body(r, body)
            self._field_validation(r, query, body)
            validate(r.res, body)
            if dry_run:
                return 201, body
            return 201, self.store.create(r.res, body, r.namespace)
        if r.name is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not supported")
        if method == "PUT":
            self._check_body(r, body)
            if body.get("metadata", {}).get("name") != r.name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
            self._field_validation(r, query, body)
            validate(r.res, body)
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
                self._field_validation(r, query, patched)
                validate(r.res, patched)
                if dry_run:
                    return 200, patched
                return 200, self.store.update(r.res, patched, namespace=r.namespace,
                                              subresource=r.sub)
        if method == "DELETE":
            opts = body if isinstance(body, dict) else {}
            grace = opts.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            pre = opts.get("preconditions") or {}
            policy = requested_policy(r.res, opts, query)
            if dry_run:
                return 200, self.store.get(r.res, r.namespace, r.name)
            obj = self.store.delete(r.res, r.namespace, r.name,
                                    grace_seconds=None if grace is None else int(grace),
                                    precondition_rv=pre.get("resourceVersion"),
                                    precondition_uid=pre.get("uid"), propagation=policy)
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


class _Server(Server):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hung up mid-handshake or mid-stream is not the sandbox's error
        log.debug("apiserver: connection from %s ended abruptly", client_address, exc_info=True)


class _Handler(Handler):
    server_api: ApiServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("apiserver: " + format, *args)

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        extra: dict[str, str] = {}
        try:
            try:
                body = json.loads(raw) if raw else None
            except ValueError as e:
                if raw and self.headers.get("Content-Type", "").startswith("application/yaml"):
                    raise ApiError(415, "UnsupportedMediaType", "send JSON") from e
                raise ApiError(400, "BadRequest", f"invalid JSON body: {e}") from e
            who = self.server_api.identify(self.headers.get("Authorization", ""))
            code, payload = self.server_api.handle(
                method, parts.path, query, body, self.headers.get("Content-Type", ""),
                self.headers.get("Accept", ""), who=who)
            if isinstance(payload, WatchStream):
                self._stream(payload)
                return
        except ApiError as e:
            code, payload = e.code, e.status()
            if e.retry_after is not None:
                extra["Retry-After"] = str(e.retry_after)
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
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, stream: WatchStream) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()

        def chunk(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        try:
            try:
                for event in stream.events:
                    chunk(json.dumps(event).encode() + b"\n")
            except ApiError as e:
                chunk(json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away (closed, reset, or a TLS close without notify)
            self.close_connection = True

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
