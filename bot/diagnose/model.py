"""What a diagnosis says: findings, each with its evidence, severity and the runbook to run.

These are the shapes every reader of a scan shares (the terminal, JSON for machines, the alert
suggestions): a ``Report`` of ``Finding`` objects, each naming what it is about (``subject``),
what was read to conclude it (``evidence``), the runbook that applies with its params filled in,
and the command line that starts it. Plain frozen data, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    URGENT = "urgent"  # act now: data is at risk within minutes (the timeout detach of a live node)
    HIGH = "high"  # an outage in progress: pods cannot start
    MEDIUM = "medium"  # something is stuck, nothing is down because of it yet
    LOW = "low"  # latent risk: nothing is wrong today

    @property
    def rank(self) -> int:
        return list(Severity).index(self)


SUBJECT_KEYS = frozenset({"node", "pod", "namespace", "pv", "pvc", "volume", "zone", "storageclass",
                          "volumeattachment"})


@dataclass(frozen=True)
class Evidence:
    """One thing read, in words (``what``), where from (``GET /api/v1/nodes``,
    ``ec2:DescribeInstances``) and when."""

    what: str
    source: str
    read_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "source": self.source, "read_at": self.read_at.isoformat()}


@dataclass(frozen=True)
class Finding:
    kind: str  # a stable slug: node-dead-holding-volumes, pod-force-deleted-volume-attached, ...
    severity: Severity
    summary: str
    subject: Mapping[str, str]  # keys among SUBJECT_KEYS
    evidence: tuple[Evidence, ...]
    runbook: str | None  # the runbook that applies, or None
    params: Mapping[str, str]  # that runbook's params, filled in (only params it declares)
    command: str  # a ready command line
    # what else it concerns (node:N, pod:NS/P, namespace:NS), so a report narrows to a scope
    related: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        unknown = set(self.subject) - SUBJECT_KEYS
        if unknown:
            raise ValueError(f"finding {self.kind}: subject keys {sorted(unknown)} are not among "
                             f"{sorted(SUBJECT_KEYS)}")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity.value, "summary": self.summary,
                "subject": dict(self.subject), "evidence": [e.to_json() for e in self.evidence],
                "runbook": self.runbook, "params": dict(self.params), "command": self.command}


@dataclass(frozen=True)
class Scope:
    """What to look at: a cluster, optionally one namespace, one pod (with its namespace) or one
    node. Findings about anything else are left out; the scan still reads the whole cluster."""

    cluster: str
    namespace: str | None = None
    pod: str | None = None
    node: str | None = None

    def __post_init__(self) -> None:
        if self.pod and self.node:
            raise ValueError("a scope names a pod or a node, not both")


def in_scope(subject: Mapping[str, str], related: Collection[str], scope: Scope) -> bool:
    """Whether a finding about ``subject`` (and ``related``) is one ``scope`` asks about."""
    about = set(related) | {f"{k}:{v}" for k, v in subject.items() if k in ("node", "namespace")}
    if scope.node and f"node:{scope.node}" not in about:
        return False
    if scope.pod:
        pods = {r.removeprefix("pod:") for r in about if r.startswith("pod:")}
        return any(p.split("/", 1)[1] == scope.pod
                   and (scope.namespace is None or p.split("/", 1)[0] == scope.namespace)
                   for p in pods)
    return not (scope.namespace and f"namespace:{scope.namespace}" not in about)


@dataclass(frozen=True)
class Report:
    cluster: str
    scanned_at: datetime
    findings: tuple[Finding, ...]
    calls: int  # the API calls the scan made (each page of a list counts)
    scope: Scope | None = field(default=None, compare=False)

    def narrowed(self, scope: Scope) -> Report:
        """What a scan of ``scope`` would have said, from this scan of the whole cluster: one
        scan answers every alert of a cluster (``bot.frontends.alert_scans``)."""
        kept = tuple(f for f in self.findings if in_scope(f.subject, f.related, scope))
        return Report(cluster=self.cluster, scanned_at=self.scanned_at, findings=kept,
                      calls=self.calls, scope=scope)

    @property
    def worst(self) -> Severity | None:
        return min((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def to_json(self) -> dict[str, Any]:
        scope = self.scope
        return {"cluster": self.cluster, "scanned_at": self.scanned_at.isoformat(),
                "calls": self.calls,
                "scope": {"namespace": scope.namespace, "pod": scope.pod, "node": scope.node}
                if scope else {},
                "findings": [f.to_json() for f in self.findings]}
