"""``diagnose()``: one read-only pass over a cluster and its EC2 side, and what it found.

The pass lists every kind once and joins in memory (``world.read_world``), runs the rules
(``rules.py``), keeps what the scope asks about, and fills in each finding's runbook params from
what that runbook declares (the catalogue: runbook name -> its param names, read from the runbook
files), so a finding never carries a param its runbook would refuse. Every request goes through
the cluster's clients, bound read-only, and is counted in ``Report.calls``.

A failed read (API server unreachable, 403, EC2 refusing) raises: a broken scan is never a report
without findings.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping
from datetime import datetime

from bot.actions.env import ClusterClients
from bot.config import ClusterConfig
from bot.diagnose.draft import Draft
from bot.diagnose.model import Finding, Report, Scope, in_scope
from bot.diagnose.rules import findings
from bot.diagnose.world import read_world
from bot.engine.plan import ApiCall
from bot.runbook.source import DirectorySource

# runbook name -> the names of the params it declares
Catalogue = Mapping[str, Collection[str]]


def command_line(runbook: str, params: Mapping[str, str]) -> str:
    """The terminal command that starts ``runbook`` with ``params``, quoted for a POSIX shell."""
    return " ".join(["runbook-bot", "run", shlex.quote(runbook),
                     *(f"-p {shlex.quote(f'{k}={v}')}" for k, v in sorted(params.items()))])


def _in_scope(d: Draft, scope: Scope) -> bool:
    return in_scope(d.subject, d.related, scope)


def _finish(d: Draft, cluster: str, runbooks: Catalogue) -> Finding:
    params = dict(d.params)
    if d.runbook is not None:
        params["cluster"] = cluster
        names = runbooks.get(d.runbook)
        if names is not None:  # a runbook not installed here keeps the params the rule gave
            params = {k: v for k, v in params.items() if k in names}
        command = command_line(d.runbook, params)
    else:
        params = {}
        command = d.command or ""
    return Finding(kind=d.kind, severity=d.severity, summary=d.summary, subject=dict(d.subject),
                   evidence=tuple(d.evidence), runbook=d.runbook, params=params, command=command,
                   related=frozenset(d.related))


def diagnose(cfg: ClusterConfig, clients: ClusterClients, scope: Scope, *, now: datetime,
             runbooks: Catalogue, grace: float = 50.0) -> Report:
    """Read the cluster once and report what is wrong, each finding with its runbook and command."""
    calls: list[ApiCall] = []
    kube = clients.kube.bound(calls, read_only=True)
    ec2 = clients.ec2.bound(calls, read_only=True)
    world = read_world(kube, ec2, now=now, grace=grace)
    found = [_finish(d, cfg.name, runbooks) for d in findings(world) if _in_scope(d, scope)]
    found.sort(key=lambda f: (f.severity.rank, f.kind, sorted(f.subject.items())))
    return Report(cluster=cfg.name, scanned_at=now, findings=tuple(found), calls=len(calls),
                  scope=scope)


def catalogue_of(source: DirectorySource) -> dict[str, frozenset[str]]:
    """Runbook name -> declared param names, from a runbook source's valid runbooks; invalid
    files are left out."""
    out: dict[str, frozenset[str]] = {}
    for name, entry in source.index().entries.items():
        if entry.runbook is not None:
            out[name] = frozenset(entry.runbook.spec.params)
    return out
