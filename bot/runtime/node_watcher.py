"""The node watcher: notice a dead node within a minute of its kubelet going silent, not after the
15 minutes of a stock alert's ``for:``.

It keeps the latest Node and Lease of every node of one cluster from two list+watches (``Feed``:
resumed from the last ``resourceVersion``, listed again on 410 Gone, each call bounded by
``watch_timeout`` seconds so the loop can stop), and on each pass (``step``) decides with
``bot/engine/node_watch.py``: a node whose Lease is stale past the grace period and
``detect_after`` since its renewal, or that is not Ready, is a suspect; the new suspects are
triaged in one batch (the ``Triage`` port: at most one EC2 read per pass); a storm (more dead or
hung nodes of one zone than ``max_out_of_service``, or most of a zone) is ONE zone notice; a
noticed node whose Lease is fresh and that is Ready again is ``recovered``. Each notice is claimed
through the store (``NoticeClaims``) so that two replicas hand it to ``on_notice`` once.

It only reads and tells: it never starts or changes a run. ``start()``/``stop()`` run ``step``
on a thread every ``interval`` seconds; tests call ``step(now)`` on a simulated clock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from bot.engine.node_watch import (
    DEAD,
    HUNG,
    RECOVERED,
    SICK,
    ZONE,
    NodeNotice,
    NoticeClaims,
    Suspect,
    Thresholds,
    Triage,
    Triaged,
    Verdict,
    fresh,
    renewed_at,
    storm_zones,
    suggestion,
    suspects,
    zone_notice,
    zone_of,
)
from bot.engine.ports import Clock

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# (resource_version=..., timeout=...) -> the events of one list or bounded watch pass
# (KubeClient.watch_nodes / watch_node_leases)
WatchFn = Callable[..., Iterable[Obj]]


@dataclass
class WatchStats:
    """Counters a front-end may export (``bot/frontends/metrics.py``)."""

    passes: int = 0
    lists: int = 0  # list requests started (the first, and each relist)
    relists: int = 0  # of which after a 410 Gone
    watches: int = 0  # bounded watch calls
    events: int = 0  # watch events applied
    triages: int = 0  # batches triaged (each at most one EC2 read)
    notices: int = 0  # notices this replica claimed and handed on
    duplicates: int = 0  # notices another replica claimed first
    failures: int = 0  # passes that failed (logged; the next pass tries again)
    requests: int = 0  # Kubernetes and EC2 requests made (with ``calls``)


class Feed:
    """The latest object of each name from one list+watch, as an informer keeps them."""

    def __init__(self, watch: WatchFn, *, timeout: int, stats: WatchStats) -> None:
        self.watch, self.timeout, self.stats = watch, timeout, stats
        self.rv = ""
        self.items: dict[str, Obj] = {}

    def poll(self) -> None:
        """One bounded pass: list if there is no version to resume from, else watch from it."""
        for _ in range(3):  # a watch, then at most a relist after a 410 (and its watch)
            listing = not self.rv
            if listing:
                self.stats.lists += 1
            else:
                self.stats.watches += 1
            if not self._apply(self.watch(resource_version=self.rv, timeout=self.timeout)):
                return  # the watch ran its course (or a list ended): resume from here next pass
            self.stats.relists += 1  # 410 Gone: list again now, replacing what is held

    def _apply(self, events: Iterable[Obj]) -> bool:
        """Apply the events; True when the version expired and the caller must list again."""
        for ev in events:
            kind, obj = ev.get("type"), ev.get("object") or {}
            if kind == "EXPIRED":
                self.rv = ""
                return True
            meta = obj.get("metadata") or {}
            if kind == "LIST":
                self.items = {str((o.get("metadata") or {}).get("name")): o
                              for o in ev.get("items") or ()}
            elif kind in ("ADDED", "MODIFIED"):
                self.items[str(meta.get("name"))] = obj
                self.stats.events += 1
            elif kind == "DELETED":
                self.items.pop(str(meta.get("name")), None)
                self.stats.events += 1
            self.rv = str(meta.get("resourceVersion") or self.rv)
        return False


@dataclass(frozen=True)
class Noticed:
    verdict: Verdict
    detected_at: datetime
    zone: str | None = None
    checked_at: datetime | None = None  # the last triage that kept the verdict


class NodeWatcher:
    """Watches one cluster's Nodes and Leases and hands each new ``NodeNotice`` to ``on_notice``."""

    def __init__(self, cluster: str, *, nodes: WatchFn, leases: WatchFn, triage: Triage,
                 claims: NoticeClaims, on_notice: Callable[[NodeNotice], None], clock: Clock,
                 thresholds: Thresholds | None = None, watch_timeout: int = 5,
                 interval: float = 5.0, calls: list[Any] | None = None) -> None:
        self.cluster, self.triage, self.claims = cluster, triage, claims
        self.on_notice, self.clock, self.interval = on_notice, clock, interval
        self.th = thresholds or Thresholds()
        self.stats = WatchStats()
        self.nodes = Feed(nodes, timeout=watch_timeout, stats=self.stats)
        self.leases = Feed(leases, timeout=watch_timeout, stats=self.stats)
        self.noticed: dict[str, Noticed] = {}
        self.calls = calls  # the clients' request records: counted into stats, then cleared
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"node-watcher-{self.cluster}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the pass in flight (each watch call ends within ``watch_timeout``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # a failed read: say so, try again next pass
                self.stats.failures += 1
                log.exception("node watcher %s: the pass failed", self.cluster)
            self._stop.wait(self.interval)

    # -- one pass -----------------------------------------------------------------------------

    def step(self, now: datetime | None = None) -> list[NodeNotice]:
        """One pass: follow both watches, decide, triage the new suspects, claim and hand on
        what this replica noticed first. Returns the notices handed on."""
        try:
            self.nodes.poll()
            self.leases.poll()
            self.stats.passes += 1
            return self._decide(now or self.clock.now())
        finally:
            if self.calls is not None:
                self.stats.requests += sum(1 for c in self.calls if c.outcome != "cached")
                self.calls.clear()

    def _decide(self, now: datetime) -> list[NodeNotice]:
        nodes, leases = self.nodes.items, self.leases.items
        out = self._recovered(nodes, leases, now)
        found = suspects(nodes, leases, now, self.th)
        new = [s for s in found if s.node not in self.noticed]
        again = [s for s in found if self._due_again(s.node, now)]
        if new or again:
            out += self._triage(new, again, nodes, leases, now)
        return [n for n in out if self._hand_on(n)]

    def _due_again(self, node: str, now: datetime) -> bool:
        """A hung or sick node is triaged again every ``detect_after``: hung turns dead once the
        status checks fail (EC2 takes minutes), a sick kubelet may die."""
        seen = self.noticed.get(node)
        return (seen is not None and seen.verdict in (HUNG, SICK) and (
            now - (seen.checked_at or seen.detected_at)).total_seconds() >= self.th.detect_after)

    def _recovered(self, nodes: Mapping[str, Obj], leases: Mapping[str, Obj],
                   now: datetime) -> list[NodeNotice]:
        """A noticed node that is back; a zone once none of its noticed nodes is left (each back
        or replaced): one notice for the zone, as it had one card, not one per node."""
        out = []
        zones = {seen.zone: seen.detected_at for seen in self.noticed.values()
                 if seen.verdict == ZONE and seen.zone}
        back: dict[str, list[str]] = {}
        for name, seen in sorted(self.noticed.items()):
            if name not in nodes:  # the Node is gone (replaced): nothing to recover
                del self.noticed[name]
            elif fresh(nodes[name], leases.get(name), now, self.th):
                del self.noticed[name]
                if seen.verdict == ZONE and seen.zone:
                    back.setdefault(seen.zone, []).append(name)
                    continue
                out.append(NodeNotice(
                    cluster=self.cluster, node=name, verdict=RECOVERED,
                    detected_at=seen.detected_at, noticed_at=now, suggestion=None, zone=seen.zone,
                    reason=f"node {name} is back: its kubelet renews its Lease again and it is "
                           f"Ready (it was {seen.verdict})"))
        left = {seen.zone for seen in self.noticed.values() if seen.verdict == ZONE}
        for zone, detected in sorted(zones.items()):
            if zone not in left:
                names = tuple(back.get(zone, ()))
                out.append(NodeNotice(
                    cluster=self.cluster, node="", verdict=RECOVERED, detected_at=detected,
                    noticed_at=now, suggestion=None, zone=zone, nodes=names,
                    reason=f"zone {zone} is back: {len(names)} of its silent nodes renew their "
                           "Leases again and are Ready, the others were replaced"))
        return out

    def _silent_in(self, zones: set[str], nodes: Mapping[str, Obj], leases: Mapping[str, Obj],
                   now: datetime, have: set[str]) -> list[Suspect]:
        """Nodes of these zones silent past the grace, not yet suspects: a storm's other members."""
        out = []
        for name in sorted(nodes):
            renewed = renewed_at(leases.get(name))
            if (name in have or name in self.noticed or zone_of(nodes[name]) not in zones
                    or renewed is None or (now - renewed).total_seconds() < self.th.grace):
                continue
            out.append(Suspect(name, renewed + timedelta(seconds=self.th.grace), nodes[name],
                               leases.get(name)))
        return out

    def _triage(self, new: Sequence[Suspect], again: Sequence[Suspect], nodes: Mapping[str, Obj],
                leases: Mapping[str, Obj], now: datetime) -> list[NodeNotice]:
        zones = {z for s in new if (z := zone_of(s.node_obj))}
        due = {s.node for s in [*new, *again]}
        batch = [*new, *again, *self._silent_in(zones, nodes, leases, now, due)]
        self.stats.triages += 1
        triaged = self.triage(self.cluster, batch, now)
        by_name = {s.node: s for s in batch}
        out: list[NodeNotice] = []
        down = [t for t in triaged if t.verdict in (DEAD, HUNG)]
        storms = storm_zones(down, {n: zone_of(nodes.get(n)) for n in by_name}, nodes, self.th)
        open_zones = {z for seen in self.noticed.values() if seen.verdict == ZONE and (z := seen.zone)}
        for z, members in sorted(storms.items()):
            out += self._zone(z, members, by_name, now, fresh_zone=z not in open_zones)
        stormed = {t.node for ms in storms.values() for t in ms}
        for t in triaged:
            if t.node in stormed or t.node not in due or t.verdict is None:
                continue
            prev = self.noticed.get(t.node)
            if prev is not None and prev.verdict == t.verdict:  # triaged again, unchanged
                self.noticed[t.node] = replace(prev, checked_at=now)
                continue
            zone = zone_of(nodes.get(t.node))
            if zone in open_zones and t.verdict in (DEAD, HUNG):  # joins the zone already noticed
                self.noticed[t.node] = Noticed(ZONE, by_name[t.node].detected_at, zone)
                continue
            s = by_name[t.node]
            self.noticed[t.node] = Noticed(t.verdict, s.detected_at, zone)
            out.append(NodeNotice(cluster=self.cluster, node=t.node, verdict=t.verdict,
                                  detected_at=s.detected_at, noticed_at=now, reason=t.reason,
                                  suggestion=suggestion(self.cluster, t.verdict, t.node),
                                  zone=zone))
        return out

    def _zone(self, zone: str, members: Sequence[Triaged], by_name: Mapping[str, Suspect],
              now: datetime, *, fresh_zone: bool) -> list[NodeNotice]:
        detected = min(by_name[t.node].detected_at for t in members)
        for t in members:
            self.noticed[t.node] = Noticed(ZONE, by_name[t.node].detected_at, zone)
        return [zone_notice(self.cluster, zone, members, detected, now)] if fresh_zone else []

    def _hand_on(self, notice: NodeNotice) -> bool:
        if not self.claims.claim(notice.key, now=notice.noticed_at.timestamp()):
            self.stats.duplicates += 1
            return False
        self.stats.notices += 1
        self.on_notice(notice)
        return True
