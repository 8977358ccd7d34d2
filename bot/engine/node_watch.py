"""What the node watcher decides, as pure data: suspects, storms and the notices they make.

The watcher (``bot/runtime/node_watcher.py``, the loop) keeps the latest Node and Lease of every
node from two watches; this module says which nodes are suspects (a Lease stale past the grace
period and ``detect_after`` since its last renewal, or a node not Ready), which suspects make one
zone notice instead of many, and what each notice suggests. How a suspect is triaged (the EC2 read
and ``actions/liveness.classify``) is behind the ``Triage`` port, implemented in
``bot/diagnose/node_watch.py``; the claim that makes two replicas notice once is behind
``NoticeClaims`` (``bot/store/node_notices.py``). Nothing here starts or changes a run: a notice
only names a runbook and its params for a person to start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, Protocol

Obj = dict[str, Any]
Verdict = Literal["dead", "hung", "sick", "recovered", "zone"]
DEAD: Final = "dead"
HUNG: Final = "hung"
SICK: Final = "sick"
RECOVERED: Final = "recovered"
ZONE: Final = "zone"
FENCE, TRIAGE, ZONE_RUNBOOK = "node-dead-ngns", "node-not-ready-triage", "zone-outage-ngns"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")


@dataclass(frozen=True)
class Suggestion:
    """The runbook a notice names and its params; a person starts it (or not)."""

    runbook: str
    params: Mapping[str, str]


@dataclass(frozen=True)
class NodeNotice:
    """One thing the watcher noticed; ``on_notice`` gets each once across replicas."""

    cluster: str
    node: str  # "" for a zone notice
    verdict: Verdict
    detected_at: datetime  # when the Lease went stale (renewal + grace), or Ready left True
    noticed_at: datetime
    reason: str  # words a person acts on
    suggestion: Suggestion | None
    nodes: tuple[str, ...] = ()  # a zone notice: its nodes
    zone: str | None = None

    @property
    def key(self) -> str:
        """What replicas claim: one notice per (cluster, node or zone, verdict, detected_at)."""
        subject = self.node or f"zone:{self.zone}"
        return f"{self.cluster}/{subject}/{self.verdict}/{self.detected_at.isoformat()}"


@dataclass(frozen=True)
class Suspect:
    node: str
    detected_at: datetime
    node_obj: Obj | None
    lease: Obj | None


@dataclass(frozen=True)
class Triaged:
    """A suspect's verdict from the triage: dead, hung, sick, or None (Ready after all)."""

    node: str
    verdict: Verdict | None
    reason: str


class Triage(Protocol):
    def __call__(self, cluster: str, suspects: Sequence[Suspect], now: datetime) -> list[Triaged]:
        """One batch, at most one EC2 read for all of it; read-only."""
        ...


class NoticeClaims(Protocol):
    def claim(self, key: str, *, now: float) -> bool:
        """True for the one replica that claims ``key`` first."""
        ...


@dataclass
class Thresholds:
    grace: float = 50.0  # policy.node_monitor_grace_period
    detect_after: float = 60.0  # watcher.detect_after, from the Lease's last renewal
    max_out_of_service: int = 3  # policy.max_out_of_service_nodes


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _ready(node: Obj | None) -> tuple[str, datetime | None]:
    for c in ((node or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return str(c.get("status") or "Unknown"), parse_time(c.get("lastTransitionTime"))
    return "Unknown", None


def zone_of(node: Obj | None) -> str | None:
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return next((str(labels[k]) for k in ZONE_LABELS if labels.get(k)), None)


def renewed_at(lease: Obj | None) -> datetime | None:
    return parse_time(((lease or {}).get("spec") or {}).get("renewTime"))


def suspects(nodes: Mapping[str, Obj], leases: Mapping[str, Obj], now: datetime,
             th: Thresholds) -> list[Suspect]:
    """Nodes whose Lease is stale past the grace and ``detect_after`` since its renewal, or that
    are not Ready (a live kubelet posting ``Ready=False``); sorted by name. A node whose Lease
    the watch has not delivered is no suspect yet: without it, a live kubelet's silence cannot be
    told from a dead one's, and a verdict could offer a fence for a node that is only sick."""
    out = []
    for name in sorted(nodes):
        node, lease = nodes[name], leases.get(name)
        renewed = renewed_at(lease)
        status, since = _ready(node)
        age = None if renewed is None else (now - renewed).total_seconds()
        if renewed is not None and age is not None and age >= th.grace:
            if age >= max(th.grace, th.detect_after):
                out.append(Suspect(name, renewed + timedelta(seconds=th.grace), node, lease))
        elif status != "True" and lease is not None:  # a live kubelet posting not Ready
            out.append(Suspect(name, since or EPOCH, node, lease))
    return out


def fresh(node: Obj | None, lease: Obj | None, now: datetime, th: Thresholds) -> bool:
    """Back to health: the Lease renewed within the grace period and the node Ready."""
    renewed = renewed_at(lease)
    return (renewed is not None and (now - renewed).total_seconds() < th.grace
            and _ready(node)[0] == "True")


def suggestion(cluster: str, verdict: str, node: str) -> Suggestion | None:
    if verdict in (DEAD, HUNG):
        return Suggestion(FENCE, {"cluster": cluster, "node": node})
    if verdict == SICK:  # a live kubelet: the triage, never the fence
        return Suggestion(TRIAGE, {"cluster": cluster, "node": node})
    return None


def storm_zones(down: Sequence[Triaged], zones: Mapping[str, str | None],
                nodes: Mapping[str, Obj], th: Thresholds) -> dict[str, list[Triaged]]:
    """Zones whose dead or hung nodes are a storm: more than ``max_out_of_service`` at once, or
    most of the zone's nodes (two or more). Each such zone is one notice, not one per node."""
    by_zone: dict[str, list[Triaged]] = {}
    for t in down:
        zone = zones.get(t.node)
        if zone:
            by_zone.setdefault(zone, []).append(t)
    size = {z: sum(1 for n in nodes.values() if zone_of(n) == z) for z in by_zone}
    return {z: ts for z, ts in by_zone.items()
            if len(ts) > th.max_out_of_service or (len(ts) >= 2 and 2 * len(ts) > size[z])}


def zone_notice(cluster: str, zone: str, members: Sequence[Triaged], detected_at: datetime,
                now: datetime) -> NodeNotice:
    names = tuple(sorted(t.node for t in members))
    dead = sum(1 for t in members if t.verdict == DEAD)
    reason = (f"{len(names)} nodes of zone {zone} went silent at once ({dead} confirmed down by "
              f"EC2, {len(names) - dead} still running but silent): a zone outage, one runbook "
              "for all of them")
    return NodeNotice(cluster=cluster, node="", verdict="zone", detected_at=detected_at,
                      noticed_at=now, reason=reason,
                      suggestion=Suggestion(ZONE_RUNBOOK, {"cluster": cluster, "zone": zone}),
                      nodes=names, zone=zone)
