"""List and watch, as an informer does: the stream behind ``KubeClient.watch_nodes`` and
``KubeClient.watch_node_leases``.

A module apart from ``bot/clients/kube.py`` (which owns the SDK and calls in here with the SDK's
list function) because that module is at the size budget; this one imports no SDK.

One call of ``follow`` is one bounded pass: without a ``resourceVersion`` it lists (in pages, every
page recorded like any list) and yields one ``LIST`` event holding the items and the list's
``resourceVersion``; with one, it watches from there for at most ``timeout`` seconds
(``timeoutSeconds``, the server ends the stream) and yields the ``ADDED``, ``MODIFIED``,
``DELETED`` and ``BOOKMARK`` events (the request is recorded as ``watch_node`` or
``watch_namespaced_lease``). A ``resourceVersion`` older than the server keeps (410 Gone,
as an HTTP status or as an ``ERROR`` event mid-stream) yields one ``EXPIRED`` event: the caller
lists again (``resource_version=""``) and replaces what it held, so nothing changed in between is
missed. Each watch request is recorded once, when it is answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from bot.errors import RetryableError

Obj = dict[str, Any]
# (the kwargs of one request) -> the SDK's raw response (``_preload_content=False``)
Send = Callable[..., Any]
Record = Callable[[str, str, Any], None]  # (operation, outcome, response headers)
Translate = Callable[..., Exception]

LIST, EXPIRED = "LIST", "EXPIRED"


def _lines(resp: Any) -> Iterator[bytes]:
    """The JSON lines of a chunked watch response, however the chunks split them."""
    buf = b""
    for chunk in resp.stream(decode_content=True):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
    if buf.strip():
        yield buf


def _expired(e: Exception) -> bool:
    return isinstance(e, RetryableError) and e.code == "Expired"


def follow(send: Send, *, operation: str, resource_version: str, timeout: int, page_size: int,
           record: Record, translate: Translate) -> Iterator[Obj]:
    """One bounded list or watch pass (see the module docstring)."""
    if not resource_version:
        yield from _list(send, operation=operation, page_size=page_size, record=record,
                         translate=translate)
        return
    watching = "watch_" + operation.removeprefix("list_")  # recorded apart from the lists
    try:
        resp = send(watch=True, resource_version=resource_version, timeout_seconds=timeout,
                    allow_watch_bookmarks=True)
    except Exception as e:
        err = translate(e, operation=watching)
        record(watching, getattr(err, "code", "") or type(e).__name__, getattr(e, "headers", None))
        if _expired(err):
            yield {"type": EXPIRED, "object": {}}
            return
        if err is e:
            raise
        raise err from e
    record(watching, "ok", getattr(resp, "headers", None))
    try:
        for line in _lines(resp):
            event = json.loads(line)
            if event.get("type") == "ERROR":
                if int((event.get("object") or {}).get("code") or 0) == 410:
                    yield {"type": EXPIRED, "object": {}}
                    return
                raise RetryableError(f"{watching}: watch error: {event.get('object')}",
                                     service="kubernetes", operation=watching, code="WatchError")
            yield event
    finally:
        resp.release_conn()


def _list(send: Send, *, operation: str, page_size: int, record: Record,
          translate: Translate) -> Iterator[Obj]:
    items: list[Obj] = []
    token: str | None = None
    for _attempt in range(2):  # an expired continue token: list again from the first page, once
        items, token = [], None
        try:
            while True:
                page = _page(send, operation=operation, page_size=page_size, token=token,
                             record=record, translate=translate)
                items += page.get("items") or ()
                meta = page.get("metadata") or {}
                token = meta.get("continue") or None
                if not token:
                    rv = str(meta.get("resourceVersion") or "")
                    yield {"type": LIST, "items": items, "object": {"metadata": {"resourceVersion": rv}}}
                    return
        except RetryableError as e:
            if not _expired(e):
                raise
    raise RetryableError(f"{operation}: the list expired twice", service="kubernetes",
                         operation=operation, code="Expired")


def _page(send: Send, *, operation: str, page_size: int, token: str | None, record: Record,
          translate: Translate) -> Obj:
    kwargs: dict[str, Any] = {"limit": page_size}
    if token:
        kwargs["_continue"] = token
    try:
        resp = send(**kwargs)
    except Exception as e:
        err = translate(e, operation=operation)
        record(operation, getattr(err, "code", "") or type(e).__name__, getattr(e, "headers", None))
        if err is e:
            raise
        raise err from e
    record(operation, "ok", getattr(resp, "headers", None))
    body = resp.data
    return dict(json.loads(body)) if body else {}
