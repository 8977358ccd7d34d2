"""Discovery documents: what kubectl and client libraries read before any real request.

Only the plain (non-aggregated) forms are served; a client asking for aggregated discovery with
``Accept: ...as=APIGroupDiscoveryList`` gets plain JSON and, like kubectl, falls back to it.
"""

from __future__ import annotations

from typing import Any

from bot.sim.resources import RESOURCES, VERBS, group_versions

VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-sandbox",
           "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
           "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
           "platform": "linux/amd64"}


def api_versions(server: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}]}


def _group(group: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, v) for g, v in group_versions()]}


def api_group(group: str) -> dict[str, Any] | None:
    for g, v in group_versions():
        if g == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(g, v)}
    return None


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    rows: list[dict[str, Any]] = []
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        rows.append({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                     "kind": r.kind, "verbs": ["get", "list", "watch"] if r.view else VERBS,
                     "shortNames": list(r.short_names)})
        if r.status:
            rows.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                         "kind": r.kind, "verbs": ["get", "patch", "update"]})
    if not rows:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": rows}
