"""Events as the API server keeps them: two recorders, deduplication, and a time to live.

- The legacy ``core/v1`` recorder (kubelet, kube-controller-manager) writes ``count``,
  ``firstTimestamp`` and ``lastTimestamp``, bumping ``count`` on a repeat.
- The ``events.k8s.io/v1`` recorder (kube-scheduler) writes ``eventTime``, ``reportingController``
  and ``reportingInstance``; a repeat sets ``series`` (``count``, ``lastObservedTime``), and
  ``count``, ``firstTimestamp`` and ``lastTimestamp`` stay empty. Read through ``core/v1`` such an
  event has no ``lastTimestamp``: a client that sorts on it sees none.
- The API server deletes every event ``event_ttl`` seconds after its last write (``--event-ttl``,
  1 h by default, settable with the option ``event_ttl``), so an incident older than that has no
  events left to explain it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Protocol

from bot.sim.resources import BY_KIND
from bot.sim.store import Store, ts

EVENT_TTL = 3600.0
SERIES_SOURCES = ("default-scheduler",)  # components that record through events.k8s.io/v1


class EventContext(Protocol):
    """The members of ``controllers.context.Context`` the recorder uses: ``Context.event`` records
    through this module, so this module names a protocol, not the class (no import cycle)."""

    store: Store
    options: dict[str, Any]
    state: dict[str, Any]

    @property
    def now(self) -> datetime: ...
    def seconds_since(self, stamp: str | None) -> float: ...
    def items(self, kind: str) -> list[dict[str, Any]]: ...


def micro(stamp: str) -> str:
    """A MicroTime from a Time stamp: ``...T00:00:00.000000Z``."""
    return stamp[:-1] + ".000000Z"


def record(ctx: EventContext, obj: dict[str, Any], *, type: str, reason: str, message: str, source: str,
           repeat_after: float) -> bool:
    """Create or update the Event; False when a repeat came too soon to be written."""
    meta = obj["metadata"]
    ns = meta.get("namespace") or "default"
    # as the event correlator keys them: the same text from two components is two events
    key = (obj["kind"], ns, meta["name"], reason, message, source)
    seen: dict[Any, tuple[str, str]] = ctx.state.setdefault("events", {})
    now = ts(ctx.now)
    res = BY_KIND["Event"]
    series = source in SERIES_SOURCES
    if key in seen:
        name, last = seen[key]
        if ctx.seconds_since(last) < repeat_after:
            return False
        ev = ctx.store.find(res, ns, name)
        if ev is not None:
            if series:
                count = int((ev.get("series") or {}).get("count", 1)) + 1
                ev["series"] = {"count": count, "lastObservedTime": micro(now)}
            else:
                ev["count"] = int(ev.get("count", 1)) + 1
                ev["lastTimestamp"] = now
            ctx.store.update(res, ev, namespace=ns, check_rv=False)
            seen[key] = (name, now)
            return True
    seq = ctx.state["event_seq"] = int(ctx.state.get("event_seq", 0)) + 1
    name = f"{meta['name']}.{hashlib.sha256(f'{key}{seq}'.encode()).hexdigest()[:16]}"
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"kind": obj["kind"], "namespace": meta.get("namespace", ""),
                           "name": meta["name"], "uid": meta.get("uid", ""),
                           "apiVersion": obj.get("apiVersion", "v1"),
                           "resourceVersion": meta.get("resourceVersion", "")},
        "reason": reason, "message": message, "type": type}
    if series:
        body.update({"eventTime": micro(now), "reportingComponent": source,
                     "reportingInstance": f"{source}-ip-10-0-0-10", "action": "Scheduling",
                     "source": {}, "firstTimestamp": None, "lastTimestamp": None})
    else:
        body.update({"count": 1, "source": {"component": source}, "reportingComponent": source,
                     "firstTimestamp": now, "lastTimestamp": now})
    ctx.store.create(res, body, ns)
    seen[key] = (name, now)
    return True


def last_write(ev: dict[str, Any]) -> str:
    observed = (ev.get("series") or {}).get("lastObservedTime") or ev.get("eventTime") or ""
    stamp = ev.get("lastTimestamp") or (observed[:19] + "Z" if observed else "")
    return str(stamp or ev["metadata"].get("creationTimestamp") or "")


def reconcile_event_ttl(ctx: EventContext) -> None:
    ttl = float(ctx.options.get("event_ttl", EVENT_TTL))
    res = BY_KIND["Event"]
    for ev in ctx.items("Event"):
        if ctx.seconds_since(last_write(ev)) >= ttl:
            ctx.store.remove(res, ev["metadata"]["namespace"], ev["metadata"]["name"])
