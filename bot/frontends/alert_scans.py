"""One scan per cluster for every alert waiting: what a flood of alerts costs a cluster.

An alert's card shows what a scan of its subject found, and offers the runbooks the scan names
(``vetted``: a node whose kubelet is alive is offered its triage, never a fence). A scan reads the
whole cluster whatever its scope (``bot.diagnose``), so the alerts of one cluster that wait
together (a batch of ``bot.frontends.alert_queue``) share one scan, narrowed to each alert's
subject in memory (``Report.narrowed``): a delivery of 1,000 node alerts costs one scan, not
1,000, and the alerts that arrive while it runs share the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from bot.diagnose import Report, Scope
from bot.frontends.metrics import Metrics
from bot.store.alerts import AlertLog, StoredAlert

log = logging.getLogger(__name__)

Diagnoser = Callable[[Scope], Report]  # one read-only scan of a cluster (``bot.diagnose``)


def scope_of(cluster: str, params: Mapping[str, str]) -> Scope:
    """What to diagnose for a suggestion: its node, or its pod (and namespace), or namespace."""
    node, pod, namespace = params.get("node"), params.get("pod"), params.get("namespace")
    if pod:
        return Scope(cluster=cluster, pod=pod, namespace=namespace)
    return Scope(cluster=cluster, node=node or None, namespace=namespace or None)


def finding_lines(report: Report, *, limit: int = 3) -> list[str]:
    """The worst findings of a scan, one line each: severity, summary and the runbook for it."""
    lines = []
    for f in report.findings[:limit]:
        line = f"{f.severity.value}: {f.summary}"
        if f.runbook:
            line += f" (runbook {f.runbook})"
        lines.append(line)
    if len(report.findings) > limit:
        lines.append(f"{len(report.findings) - limit} more: /runbook diagnose shows them all")
    if not report.findings:
        lines.append("the diagnosis found nothing wrong here")
    return lines


def vetted(suggested: Sequence[Mapping[str, Any]], report: Report) -> list[dict[str, Any]]:
    """An alert's suggestions once a scan of its subject is in. Where the scan names runbooks,
    the card offers those, with the scan's params, in its order of severity: a ``KubeNodeNotReady``
    for a node whose kubelet is alive offers the triage and never ``node-dead-ngns``, whatever the
    triggers say. Where it names none, the triggers' suggestions stand."""
    out: list[dict[str, Any]] = []
    for f in report.findings:
        if f.runbook and all(x["runbook"] != f.runbook for x in out):
            was = next((x for x in suggested if x.get("runbook") == f.runbook), {})
            out.append({"runbook": f.runbook, "params": dict(f.params),
                        "auto_run": bool(was.get("auto_run")), "problem": was.get("problem")})
    return out or [dict(x) for x in suggested]


def diagnose_groups(alert_log: AlertLog, diagnoser: Diagnoser, group_keys: Iterable[str], *,
                    metrics: Metrics | None = None) -> None:
    """Scan each cluster once for the firing alerts of these groups not diagnosed yet, and keep
    with each alert what the scan found about its subject, and its suggestions as vetted."""
    waiting: dict[str, list[tuple[StoredAlert, Scope]]] = {}
    for group_key in group_keys:
        for a in alert_log.group(group_key):
            if a.status != "firing" or "findings" in a.data:
                continue
            firsts = a.data.get("suggestions") or [{}]
            scope = scope_of(a.data.get("cluster", ""), firsts[0].get("params", {}))
            waiting.setdefault(scope.cluster, []).append((a, scope))
    for cluster, alerts in waiting.items():
        if metrics is not None:
            metrics.alert_scan(len(alerts))
        try:
            report = diagnoser(Scope(cluster=cluster))
        except Exception as e:  # a broken scan is said, never "nothing"; the cards still go
            log.warning("could not diagnose cluster %s for %d alerts: %s", cluster, len(alerts), e)
            said = [f"the diagnosis could not be made: {str(e)[:200]}"]
            alert_log.annotate_many({a.key: {"findings": said} for a, _ in alerts})
            continue
        notes: dict[str, dict[str, Any]] = {}
        for a, scope in alerts:
            found = report.narrowed(scope)
            notes[a.key] = {"findings": finding_lines(found),
                            "suggestions": vetted(a.data.get("suggestions") or [], found)}
        alert_log.annotate_many(notes)
