"""A small Kubernetes API server reached over real HTTP, so the product's kubernetes client runs
unmodified against it.

It serves the core/v1 and storage.k8s.io/v1 objects the actions use (and the apps/v1 and batch/v1
workloads they list), with resourceVersion checks (409 on a stale PUT), ``limit``/``continue``
pagination, field and label selectors, finalizer-driven deletion, an ``Audit-Id`` on every answer
as a real API server sends, and injectable faults (conflicts, 429s, any status for chosen requests).

Used until every case can run against ``bot.sim.sandbox.Sandbox``; nothing here is product code.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

ROUTES = {  # (api prefix, plural) -> (kind, namespaced)
    ("/api/v1", "nodes"): ("Node", False),
    ("/api/v1", "pods"): ("Pod", True),
    ("/api/v1", "events"): ("Event", True),
    ("/api/v1", "persistentvolumes"): ("PersistentVolume", False),
    ("/api/v1", "persistentvolumeclaims"): ("PersistentVolumeClaim", True),
    ("/apis/storage.k8s.io/v1", "volumeattachments"): ("VolumeAttachment", False),
    ("/apis/storage.k8s.io/v1", "storageclasses"): ("StorageClass", False),
    ("/apis/storage.k8s.io/v1", "csinodes"): ("CSINode", False),
    ("/apis/coordination.k8s.io/v1", "leases"): ("Lease", True),
    ("/apis/apps/v1", "deployments"): ("Deployment", True),
    ("/apis/apps/v1", "replicasets"): ("ReplicaSet", True),
    ("/apis/apps/v1", "statefulsets"): ("StatefulSet", True),
    ("/apis/batch/v1", "jobs"): ("Job", True),
    ("/apis/karpenter.sh/v1", "nodeclaims"): ("NodeClaim", False),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


class FakeKubeApi:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, ns, name) -> object
        self.rv = 100
        self.lock = threading.RLock()
        self.conflicts_next_put = 0  # answer the next N PUTs with 409
        self.throttle_next = 0  # answer the next N requests with 429
        self.fail_next: list[tuple[int, str]] = []  # answer the next requests with (code, reason)
        self.requests: list[tuple[str, str]] = []
        self.on_put: list[Any] = []  # callbacks(plural, obj) run before a PUT is checked
        # fault(method, path, query) -> (code, reason, message) | None, asked for every request
        self.fault: Any = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer._handle(self, "GET")

            def do_PUT(self) -> None:
                outer._handle(self, "PUT")

            def do_DELETE(self) -> None:
                outer._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeKubeApi:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    # -- state ---------------------------------------------------------------------------------

    def put(self, plural: str, obj: Obj) -> Obj:
        with self.lock:
            self.rv += 1
            meta = obj.setdefault("metadata", {})
            meta["resourceVersion"] = str(self.rv)
            self.objects[(plural, meta.get("namespace", ""), meta["name"])] = obj
            return obj

    def get(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        with self.lock:
            found = self.objects.get((plural, namespace, name))
            return copy.deepcopy(found) if found else None

    def delete(self, plural: str, name: str, namespace: str = "") -> None:
        with self.lock:
            self.objects.pop((plural, namespace, name), None)

    def items(self, plural: str) -> Iterator[Obj]:
        with self.lock:
            return iter([copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items()) if p == plural])

    # -- HTTP ----------------------------------------------------------------------------------

    def _route(self, path: str) -> tuple[str, str, str | None] | None:
        for (prefix, plural), _ in ROUTES.items():
            if not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1:].split("/")
            ns = ""
            if rest[0] == "namespaces" and len(rest) >= 3:
                ns, rest = rest[1], rest[2:]
            if rest[0] == plural:
                return plural, ns, rest[1] if len(rest) > 1 else None
        return None

    def _reply(self, h: BaseHTTPRequestHandler, code: int, body: Obj,
               headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("Audit-Id", f"audit-{len(self.requests)}")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    def _status(self, h: BaseHTTPRequestHandler, code: int, reason: str, message: str,
                headers: dict[str, str] | None = None) -> None:
        self._reply(h, code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "reason": reason, "message": message, "code": code}, headers)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(h.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.requests.append((method, url.path))
        with self.lock:
            if self.throttle_next > 0:
                self.throttle_next -= 1
                return self._status(h, 429, "TooManyRequests", "slow down", {"Retry-After": "0"})
            if self.fail_next:
                code, reason = self.fail_next.pop(0)
                return self._status(h, code, reason, f"injected {reason}")
            fault = self.fault(method, url.path, query) if self.fault else None
            if fault:
                return self._status(h, *fault)
        route = self._route(url.path)
        if route is None:
            return self._status(h, 404, "NotFound", f"no route {url.path}")
        plural, ns, name = route
        if method == "GET" and name is None:
            return self._list(h, plural, ns, query)
        if method == "GET":
            obj = self.get(plural, name or "", ns)
            if obj is None:
                return self._status(h, 404, "NotFound", f'{plural} "{name}" not found')
            return self._reply(h, 200, obj)
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"{}")
        if method == "DELETE":
            return self._delete(h, plural, ns, name or "", body)
        return self._replace(h, plural, ns, name or "", body)

    def _delete(self, h: BaseHTTPRequestHandler, plural: str, ns: str, name: str, body: Obj) -> None:
        """A graceful pod delete and a finalizer-held delete only mark the object; others remove."""
        with self.lock:
            live = self.objects.get((plural, ns, name))
            if live is None:
                return self._status(h, 404, "NotFound", f'{plural} "{name}" not found')
            uid = (body.get("preconditions") or {}).get("uid")
            if uid and uid != live["metadata"].get("uid"):
                return self._status(h, 409, "Conflict", f"Precondition failed: UID in precondition: "
                                    f"{uid}, UID in object meta: {live['metadata'].get('uid')}")
            if plural == "pods" or live["metadata"].get("finalizers"):
                live = copy.deepcopy(live)
                live["metadata"].setdefault("deletionTimestamp", "2026-01-01T00:00:00Z")
                return self._reply(h, 200, self.put(plural, live))
            self.delete(plural, name, ns)
            return self._reply(h, 200, live)

    def _list(self, h: BaseHTTPRequestHandler, plural: str, ns: str, query: dict[str, str]) -> None:
        items = [o for o in self.items(plural) if not ns or o["metadata"].get("namespace") == ns]
        for sel in filter(None, query.get("fieldSelector", "").split(",")):
            key, _, value = sel.partition("=")
            items = [o for o in items if str(_dig(o, key) or "") == value]
        for sel in filter(None, query.get("labelSelector", "").split(",")):
            key, _, value = sel.partition("=")
            items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start:start + limit]
        token = str(start + limit) if start + limit < len(items) else ""
        self._reply(h, 200, {"kind": "List", "apiVersion": "v1", "items": page,
                             "metadata": {"resourceVersion": str(self.rv), "continue": token}})

    def _replace(self, h: BaseHTTPRequestHandler, plural: str, ns: str, name: str, body: Obj) -> None:
        with self.lock:
            for hook in self.on_put:
                hook(plural, name)
            live = self.objects.get((plural, ns, name))
            if live is None:
                return self._status(h, 404, "NotFound", f'{plural} "{name}" not found')
            if self.conflicts_next_put > 0:
                self.conflicts_next_put -= 1
                self.put(plural, copy.deepcopy(live))  # someone else wrote in between
                live = self.objects[(plural, ns, name)]
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent != live["metadata"]["resourceVersion"]:
                return self._status(h, 409, "Conflict", "the object has been modified; please "
                                    "apply your changes to the latest version and try again")
            body["metadata"]["deletionTimestamp"] = live["metadata"].get("deletionTimestamp")
            if not body["metadata"]["deletionTimestamp"]:
                body["metadata"].pop("deletionTimestamp")
            if "status" in live:
                body["status"] = live["status"]  # status is a subresource
            if body["metadata"].get("deletionTimestamp") and not body["metadata"].get("finalizers"):
                self.delete(plural, name, ns)
                return self._reply(h, 200, body)
            self._reply(h, 200, self.put(plural, body))
