"""The ``events.k8s.io/v1`` view of the events the sandbox stores in their ``core/v1`` shape.

The real API server keeps one Event object and serves it through both groups, converting field by
field: ``involvedObject`` is ``regarding``, ``message`` is ``note``, ``source``, ``count``,
``firstTimestamp`` and ``lastTimestamp`` become ``deprecated*``, and ``series`` and ``eventTime``
are the same. The sandbox serves this view read-only (get, list, watch); events are written through
``core/v1``, as kubelets and kube-controller-manager write them.
"""

from __future__ import annotations

from typing import Any

GROUP = "events.k8s.io"


def to_events_v1(core: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": f"{GROUP}/v1", "kind": "Event", "metadata": core["metadata"],
                           "reason": core.get("reason"), "type": core.get("type"),
                           "note": core.get("message"), "regarding": core.get("involvedObject"),
                           "eventTime": core.get("eventTime"),
                           "reportingController": core.get("reportingComponent") or
                           (core.get("source") or {}).get("component"),
                           "reportingInstance": core.get("reportingInstance") or
                           (core.get("source") or {}).get("host")}
    for src, dst in (("series", "series"), ("action", "action"), ("related", "related"),
                     ("source", "deprecatedSource"), ("count", "deprecatedCount"),
                     ("firstTimestamp", "deprecatedFirstTimestamp"),
                     ("lastTimestamp", "deprecatedLastTimestamp")):
        if core.get(src) not in (None, {}, ""):
            out[dst] = core[src]
    return {k: v for k, v in out.items() if v is not None}
