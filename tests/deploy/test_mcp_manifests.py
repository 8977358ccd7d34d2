"""The MCP server's component (``deploy/kubernetes/components/mcp``), rendered in an overlay.

It adds ``runbook-bot mcp serve`` as a Deployment of its own: the agents reach its mcp port through
its Service, Prometheus its ops port, and nothing else; the bot's Service never sends Slack's or
the API's traffic to it; the database's NetworkPolicy admits it beside the bot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_manifests import SCHEMA_VERSION
from tests.deploy.test_monitoring_manifests import overlay, selects

pytestmark = pytest.mark.kubectl
MCP = ("Deployment", "runbook-bot-mcp")


def _rendered(tmp_path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return overlay(tmp_path, "mcp")


def test_the_mcp_component_renders_valid_objects_on_their_own_ports(tmp_path: Path) -> None:
    import kubernetes_validate

    objects = _rendered(tmp_path)
    for key in [MCP, ("Service", "runbook-bot-mcp"), ("NetworkPolicy", "runbook-bot-mcp")]:
        kubernetes_validate.validate(json.loads(json.dumps(objects[key])), SCHEMA_VERSION,
                                     strict=True)
    pod = objects[MCP]["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    assert c["args"] == ["mcp", "serve"]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"mcp": 8090, "ops": 9464}
    assert c["securityContext"]["readOnlyRootFilesystem"] and pod["spec"]["securityContext"][
        "runAsNonRoot"]
    # no Slack secret: the MCP server answers agents, never Slack
    assert not [e for e in c["env"] if e["name"].startswith("SLACK_")]
    policy = objects[("NetworkPolicy", "runbook-bot-mcp")]["spec"]
    assert sorted(p["port"] for rule in policy["ingress"] for p in rule["ports"]) == [8090, 9464]
    assert selects(policy["podSelector"], pod["metadata"]["labels"])


def test_the_bots_service_never_reaches_the_mcp_pods_and_the_database_admits_them(
        tmp_path: Path) -> None:
    objects = _rendered(tmp_path)
    labels = objects[MCP]["spec"]["template"]["metadata"]["labels"]
    bot = objects[("Service", "runbook-bot")]["spec"]["selector"]
    assert not bot.items() <= labels.items()
    assert objects[("Service", "runbook-bot-mcp")]["spec"]["selector"].items() <= labels.items()
    [rule] = objects[("NetworkPolicy", "runbook-bot-database")]["spec"]["ingress"]
    assert any(selects(f["podSelector"], labels) for f in rule["from"])
    bot_pods = objects[("Deployment", "runbook-bot")]["spec"]["template"]["metadata"]["labels"]
    assert any(selects(f["podSelector"], bot_pods) for f in rule["from"])
