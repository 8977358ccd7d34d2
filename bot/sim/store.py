"""The in-memory object store behind the fake API server, with the API server's write rules.

What it enforces is what runbooks depend on: one global ``resourceVersion`` counter stamped on
every write and every list; optimistic concurrency (a stale ``resourceVersion`` gets 409);
``/status`` writes that touch only status, and main writes that leave status alone; deletion that
only sets ``deletionTimestamp`` while finalizers remain (and, for pods bound to a node, until the
kubelet confirms); immutable fields (StorageClass ``volumeBindingMode``) refused with 422.
Controllers use the same store directly, so their writes bump versions like any client's.

Stored objects are copy-on-write: a write replaces an object with a new one and never changes it in
place. A stored object is therefore a stable snapshot, and ``peek``/``scan`` hand it out without a
copy to readers that promise not to change it (the controllers, the invariants, the HTTP layer,
which only serialises). ``get``/``find``/``list`` return private copies for everyone else. Copying
every object on every controller read was what made a large scenario slow to start.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

from bot.sim.admission import admit_create
from bot.sim.errors import ApiError, already_exists, conflict, invalid, not_found
from bot.sim.propagation import BACKGROUND
from bot.sim.propagation import FINALIZER as GC_FINALIZER
from bot.sim.resources import BY_KIND, Resource

Key = tuple[str, str]  # (namespace or "", name)

# How long the change history is kept, in sandbox seconds: etcd compacts every 5 minutes, after which
# a watch from an older resourceVersion, or an older ``continue`` token, gets 410 Gone.
COMPACTION_SECONDS = 300.0
HISTORY_LIMIT = 20000


class Change:
    """One write as a watch sees it: ADDED, MODIFIED or DELETED, with the object after the write."""

    __slots__ = ("obj", "plural", "rv", "time", "type")

    def __init__(self, rv: int, plural: str, type: str, obj: dict[str, Any], time: datetime) -> None:
        self.rv, self.plural, self.type, self.obj, self.time = rv, plural, type, obj, time


def ts(when: datetime) -> str:
    return _stamp(when, when.tzinfo, "%Y-%m-%dT%H:%M:%SZ")


def micro_ts(when: datetime) -> str:
    """A ``MicroTime`` (a Lease's ``renewTime``, an events.k8s.io ``eventTime``): microseconds."""
    return _stamp(when, when.tzinfo, "%Y-%m-%dT%H:%M:%S.%fZ")


@lru_cache(maxsize=4096)
def _stamp(when: datetime, tz: Any, fmt: str) -> str:
    """A pass stamps many writes with the one time the clock shows: formatted once. The time
    zone is part of the key: equal instants in two zones print differently."""
    return when.strftime(fmt)


def clone(obj: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), several times faster than deepcopy."""
    t = type(obj)
    if t is dict:
        return {k: clone(v) for k, v in obj.items()}
    if t is list:
        return [clone(v) for v in obj]
    return obj


Changes = list[Change]


class Store:
    def __init__(self, *, now: Callable[[], datetime], seed: int = 0) -> None:
        self._now = now
        self._seed = seed
        self.lock = threading.RLock()
        self._rv = 1000
        self._uids = 0
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {}
        self._order: dict[str, list[Key]] = {}  # sorted keys per table, dropped when keys change
        # what ``scan`` answered, per table and namespace, until the table's next write: every
        # controller pass scans the same tables some forty times
        self._scans: dict[str, dict[str | None, list[dict[str, Any]]]] = {}
        self.history: deque[Change] = deque()
        self.compacted_rv = self._rv  # watches and continue tokens older than this get 410
        self.changed = threading.Condition(self.lock)  # notified on every write, for watches

    # -- helpers ------------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def now(self) -> datetime:
        return self._now()

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _uid(self) -> str:
        self._uids += 1
        digest = hashlib.sha256(f"{self._seed}:{self._uids}".encode()).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))

    def _table(self, res: Resource) -> dict[Key, dict[str, Any]]:
        return self._objects.setdefault(res.plural, {})

    @staticmethod
    def _key(res: Resource, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if res.namespaced else "", name)

    # -- reads --------------------------------------------------------------------------------

    def peek(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored snapshot itself: read it, never change it."""
        table = self._objects.get(res.plural)  # every controller pass asks thousands of times
        return None if table is None else table.get(
            ((namespace or "") if res.namespaced else "", name))

    def scan(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """Stored snapshots in name order (namespace, name): read them, never change them."""
        with self.lock:
            ns = namespace if res.namespaced and namespace else None
            scans = self._scans.setdefault(res.plural, {})
            hit = scans.get(ns)
            if hit is None:
                table = self._table(res)
                order = self._order.get(res.plural)
                if order is None:
                    order = self._order[res.plural] = sorted(table)
                hit = scans[ns] = ([table[k] for k in order if k[0] == ns] if ns is not None
                                   else [table[k] for k in order])
            return list(hit)

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.peek(res, namespace, name)
        if obj is None:
            raise not_found(res.plural, res.group, name)
        return clone(obj)

    def find(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self.peek(res, namespace, name)
        return clone(obj) if obj is not None else None

    def list(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        return clone(self.scan(res, namespace))

    def rebase(self, shift: Callable[[Any], Any]) -> None:
        """Replace every object with ``shift(object)`` (timestamps moved); versions stay."""
        with self.lock:
            self._scans.clear()
            for table in self._objects.values():
                for key, obj in list(table.items()):
                    table[key] = shift(obj)

    def _put(self, res: Resource, key: Key, obj: dict[str, Any]) -> None:
        table = self._table(res)
        added = key not in table
        if added:
            self._order.pop(res.plural, None)
        self._scans.pop(res.plural, None)
        table[key] = obj
        self._record(res, "ADDED" if added else "MODIFIED", obj)

    def _drop(self, res: Resource, key: Key) -> dict[str, Any]:
        """Remove an object for good; the DELETED change carries a new resourceVersion."""
        obj = clone(self._table(res).pop(key))
        self._order.pop(res.plural, None)
        self._scans.pop(res.plural, None)
        obj["metadata"]["resourceVersion"] = self._bump()
        self._record(res, "DELETED", obj)
        return obj

    def _record(self, res: Resource, type: str, obj: dict[str, Any]) -> None:
        now = self._now()
        self.history.append(Change(int(obj["metadata"]["resourceVersion"]), res.plural, type, obj, now))
        while self.history and (len(self.history) > HISTORY_LIMIT or (
                now - self.history[0].time).total_seconds() > COMPACTION_SECONDS):
            self.compacted_rv = self.history.popleft().rv
        self.changed.notify_all()

    def changes_since(self, rv: int) -> Changes | None:
        """Changes after ``rv``, oldest first; None when ``rv`` is older than the kept history."""
        with self.lock:
            if rv < self.compacted_rv:
                return None
            return [c for c in self.history if c.rv > rv]

    # -- writes -------------------------------------------------------------------------------
    # Each write builds a new object and puts it in place of the old one (see the docstring).

    def create(self, res: Resource, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        with self.lock:
            obj = clone(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + self._uid()[:5]
            name = meta.get("name")
            if not name:
                raise invalid(res.kind, res.group, "", "metadata.name", "",
                              "name or generateName is required")
            if res.namespaced:
                ns = namespace or meta.get("namespace") or "default"
                if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                    raise ApiError(400, "BadRequest",
                                   "the namespace of the provided object does not match the "
                                   "namespace sent on the request")
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            key = self._key(res, meta.get("namespace"), name)
            if key in self._table(res):
                raise already_exists(res.plural, res.group, name)
            admit_create(res, obj)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            meta["uid"] = self._uid()
            meta["creationTimestamp"] = ts(self._now())
            meta.setdefault("generation", 1)
            meta.pop("deletionTimestamp", None)
            meta["resourceVersion"] = self._bump()
            self._put(res, key, obj)
            return clone(obj)

    def update(self, res: Resource, obj: dict[str, Any], *, namespace: str | None = None,
               subresource: str = "", check_rv: bool = True) -> dict[str, Any]:
        """Replace an object (PUT semantics). Returns the stored object, or it as deleted."""
        with self.lock:
            obj = clone(obj)
            meta = obj.setdefault("metadata", {})
            name = meta.get("name", "")
            key = self._key(res, namespace or meta.get("namespace"), name)
            current = self._table(res).get(key)
            if current is None:
                raise not_found(res.plural, res.group, name)
            rv = meta.get("resourceVersion")
            if check_rv and rv and rv != current["metadata"]["resourceVersion"]:
                raise conflict(res.plural, res.group, name)
            if meta.get("uid") and meta["uid"] != current["metadata"]["uid"]:
                raise conflict(res.plural, res.group, name)
            new = self._merge_write(res, current, obj, subresource)
            self._validate_update(res, current, new)
            if new == current:
                return clone(current)  # no-op writes do not bump the version, as upstream
            new["metadata"]["resourceVersion"] = self._bump()
            if subresource != "status" and new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
            self._put(res, key, new)
            self._maybe_finalize(res, key)
            return clone(new)

    def _merge_write(self, res: Resource, current: dict[str, Any], obj: dict[str, Any],
                     subresource: str) -> dict[str, Any]:
        if subresource == "status":
            new = clone(current)
            new["status"] = obj.get("status", {})
            return new
        new = obj
        meta, cur_meta = new["metadata"], current["metadata"]
        for k in ("uid", "creationTimestamp", "namespace", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "resourceVersion", "generation"):
            if k in cur_meta:
                meta[k] = cur_meta[k]
            else:
                meta.pop(k, None)
        if not res.namespaced:
            meta.pop("namespace", None)
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        if res.status:  # the main resource ignores status when a /status subresource exists
            if "status" in current:
                new["status"] = clone(current["status"])
            else:
                new.pop("status", None)
        if cur_meta.get("deletionTimestamp"):
            # Finalizers may only be removed once deletion has started, not added.
            added = set(meta.get("finalizers") or []) - set(cur_meta.get("finalizers") or [])
            if added:
                raise ApiError(422, "Invalid", f'{res.kind} "{meta.get("name")}" is invalid: '
                               "metadata.finalizers: Forbidden: no new finalizers can be added "
                               "if the object is being deleted")
        return new

    def _validate_update(self, res: Resource, current: dict[str, Any], new: dict[str, Any]) -> None:
        name = new["metadata"].get("name", "")
        if res.kind == "StorageClass":
            for fld in ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"):
                if current.get(fld) != new.get(fld):
                    raise invalid(res.kind, res.group, name, fld, new.get(fld), "field is immutable")
        if res.kind == "VolumeAttachment" and current.get("spec") != new.get("spec"):
            raise invalid(res.kind, res.group, name, "spec", new.get("spec"), "field is immutable")
        if res.kind == "Pod":
            cur_node = current.get("spec", {}).get("nodeName")
            if cur_node and new.get("spec", {}).get("nodeName") != cur_node:
                raise invalid(res.kind, res.group, name, "spec.nodeName",
                              new.get("spec", {}).get("nodeName"), "field is immutable")

    def delete(self, res: Resource, namespace: str | None, name: str, *,
               grace_seconds: int | None = None, precondition_rv: str | None = None,
               precondition_uid: str | None = None, propagation: str = BACKGROUND) -> dict[str, Any]:
        """Start deletion; the object goes only when finalizers (and a pod's kubelet) allow.

        ``propagation`` ``Orphan`` or ``Foreground`` gives the object the garbage collector's
        finalizer first (``bot.sim.propagation``), so it stays until the collector is done."""
        with self.lock:
            key = self._key(res, namespace, name)
            current = self._table(res).get(key)
            if current is None:
                raise not_found(res.plural, res.group, name)
            obj = clone(current)
            meta = obj["metadata"]
            if precondition_rv and precondition_rv != meta["resourceVersion"]:
                raise conflict(res.plural, res.group, name)
            if precondition_uid and precondition_uid != meta["uid"]:
                raise conflict(res.plural, res.group, name)
            gc_finalizer = GC_FINALIZER.get(propagation)
            if gc_finalizer and not meta.get("deletionTimestamp") and \
                    gc_finalizer not in (meta.get("finalizers") or []):
                meta["finalizers"] = [*(meta.get("finalizers") or []), gc_finalizer]
            graceful = res.kind == "Pod" and obj.get("spec", {}).get("nodeName")
            if graceful:
                if grace_seconds is None:
                    grace_seconds = int(obj["spec"].get("terminationGracePeriodSeconds", 30))
                if grace_seconds > 0 or meta.get("finalizers"):
                    if not meta.get("deletionTimestamp") or grace_seconds < int(
                            meta.get("deletionGracePeriodSeconds") or 0):
                        meta["deletionTimestamp"] = ts(self._now())
                        meta["deletionGracePeriodSeconds"] = grace_seconds
                        meta["resourceVersion"] = self._bump()
                        self._put(res, key, obj)
                    if grace_seconds == 0:
                        self._maybe_finalize(res, key)
                    return clone(obj)
            if meta.get("finalizers"):
                if not meta.get("deletionTimestamp"):
                    meta["deletionTimestamp"] = ts(self._now())
                    meta["deletionGracePeriodSeconds"] = 0
                    meta["resourceVersion"] = self._bump()
                    self._put(res, key, obj)
                return clone(obj)
            return self._drop(res, key)

    def _maybe_finalize(self, res: Resource, key: Key) -> None:
        obj = self._table(res).get(key)
        if obj is None:
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            if res.kind == "Pod" and int(meta.get("deletionGracePeriodSeconds") or 0) > 0:
                return  # the kubelet (or pod GC) still has to confirm
            self._drop(res, key)

    def remove(self, res: Resource, namespace: str | None, name: str) -> None:
        """Remove an object outright: a kubelet's final confirmation or a pod-GC force delete."""
        with self.lock:
            key = self._key(res, namespace, name)
            current = self._table(res).get(key)
            if current is None:
                return
            if current["metadata"].get("finalizers"):
                obj = clone(current)
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                obj["metadata"].setdefault("deletionTimestamp", ts(self._now()))
                obj["metadata"]["resourceVersion"] = self._bump()
                self._put(res, key, obj)
                return
            self._drop(res, key)

    def mutate(self, kind: str, namespace: str | None, name: str,
               fn: Callable[[dict[str, Any]], None]) -> dict[str, Any] | None:
        """Read-modify-write by a controller: no version check, bump only on change.

        ``fn`` changes a private copy; what it puts in belongs to the store afterwards. Returns the
        stored snapshot (read-only).
        """
        res = BY_KIND[kind]
        with self.lock:
            key = self._key(res, namespace, name)
            current = self._table(res).get(key)
            if current is None:
                return None
            obj = clone(current)
            fn(obj)
            if obj == current:
                return current
            obj["metadata"]["resourceVersion"] = self._bump()
            self._put(res, key, obj)
            self._maybe_finalize(res, key)
            return self._table(res).get(key)
