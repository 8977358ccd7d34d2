"""deploy/prometheus/runbook-bot-node-lease.yaml: a node whose Lease stopped renewing.

The rule reads only kube-state-metrics' leases series, and node-dead-ngns answers it with the node
its `node` label names. promtool checks it and runs its unit test
(deploy/prometheus/node-lease.test.yaml) with every other rule: tests/deploy/test_alert_rules.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from bot.actions.builtin import builtin_actions
from bot.runbook.loader import load_runbooks
from bot.runbook.triggers import suggestions

ROOT = Path(__file__).parents[2]
RULES = ROOT / "deploy" / "prometheus" / "runbook-bot-node-lease.yaml"
# kube-state-metrics' leases collector (internal/store/lease.go), on by default
KSM_LEASES = {"kube_lease_renew_time", "kube_lease_owner"}


def document() -> dict[str, Any]:
    doc: dict[str, Any] = YAML(typ="safe").load(RULES.read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    return doc


def test_the_rule_reads_only_the_leases_collectors_series_and_waits_a_minute() -> None:
    [rule] = [r for g in document()["spec"]["groups"] for r in g["rules"]
              if r["alert"] == "NodeLeaseNotRenewed"]
    assert rule["for"] == "1m"
    assert set(re.findall(r"\b(kube_[a-z_]+)\b", rule["expr"])) == KSM_LEASES
    assert rule["labels"]["severity"] == "critical"


def test_node_dead_ngns_answers_it_with_the_node_its_label_names() -> None:
    books = load_runbooks(ROOT / "runbooks", catalog=builtin_actions()).values()
    labels = {"alertname": "NodeLeaseNotRenewed", "node": "ip-10-0-1-2.ec2.internal",
              "severity": "critical", "cluster": "prod"}
    found = {s.runbook: dict(s.params) for s in suggestions(books, labels, {})}
    assert found == {"node-dead-ngns": {"node": "ip-10-0-1-2.ec2.internal"}}
