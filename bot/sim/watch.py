"""Watches: the stream of changes ``kubectl get -w``, ``kubectl wait`` and informers read.

A watch from a ``resourceVersion`` replays the store's kept history after it, then follows new
writes as they happen; one older than the kept history (compacted, as etcd does every five
minutes) gets a 410 ``Expired`` ERROR event, and the client lists again. Without a
``resourceVersion`` (or with ``0``) the watch starts with a synthetic ADDED event per matching
object. ``sendInitialEvents=true`` ends those with the ``k8s.io/initial-events-end`` bookmark.
Each event is one JSON line of a chunked response, as the real server streams them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from bot.sim.errors import ApiError
from bot.sim.resources import Resource
from bot.sim.selectors import field_selector, label_selector
from bot.sim.store import Store

MAX_TIMEOUT = 1800.0  # the real server's --min-request-timeout spreads watches over 30-60 min
TOO_OLD = ApiError(410, "Expired", "too old resource version")


def _matches(res: Resource, namespace: str | None,
             by_label: Callable[[dict[str, Any]], bool],
             by_field: Callable[[dict[str, Any]], bool]) -> Callable[[dict[str, Any]], bool]:
    def ok(obj: dict[str, Any]) -> bool:
        if res.namespaced and namespace and obj["metadata"].get("namespace") != namespace:
            return False
        return by_label(obj) and by_field(obj)
    return ok


def events(store: Store, res: Resource, namespace: str | None, query: dict[str, str], *,
           stopped: Callable[[], bool],
           render: Callable[[dict[str, Any]], dict[str, Any]] = lambda o: o,
           convert: Callable[[dict[str, Any]], dict[str, Any]] = lambda o: o) -> Iterator[dict[str, Any]]:
    """The watch events for a request, until its timeout, the server's stop, or a 410.

    ``convert`` gives the stored object the requested group's shape (selectors apply to it);
    ``render`` turns it into what the client asked for (a one-row Table for kubectl).
    """
    ok = _matches(res, namespace, label_selector(query.get("labelSelector")),
                  field_selector(query.get("fieldSelector"), res))
    timeout = min(float(query.get("timeoutSeconds") or MAX_TIMEOUT), MAX_TIMEOUT)
    deadline = time.monotonic() + timeout
    raw_rv = query.get("resourceVersion") or ""
    initial = (query.get("sendInitialEvents") or "").lower() in ("true", "1")
    with store.lock:
        if raw_rv in ("", "0") or initial:
            rv = int(store.resource_version)
            start = [{"type": "ADDED", "object": render(o)}
                     for o in map(convert, store.scan(res, namespace)) if ok(o)]
        else:
            try:
                rv = int(raw_rv)
            except ValueError as e:
                raise ApiError(400, "BadRequest", f"invalid resourceVersion {raw_rv!r}") from e
            if store.changes_since(rv) is None:
                raise TOO_OLD
            start = []
    yield from start
    if initial:
        yield {"type": "BOOKMARK", "object": {
            "kind": res.kind, "apiVersion": res.api_version, "metadata": {
                "resourceVersion": str(rv), "annotations": {"k8s.io/initial-events-end": "true"}}}}
    while not stopped():
        with store.lock:
            changes = store.changes_since(rv)
            if changes is None:
                yield {"type": "ERROR", "object": TOO_OLD.status()}
                return
            if not changes:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                store.changed.wait(min(left, 0.2))
                continue
        for c in changes:
            rv = c.rv
            if c.plural == res.plural and ok(obj := convert(c.obj)):
                yield {"type": c.type, "object": render(obj)}
        if time.monotonic() >= deadline:
            return
