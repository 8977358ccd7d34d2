"""deploy/prometheus/runbook-bot-symptoms.yaml: alerts for symptoms no standard alert catches.

Each alert is answered by a shipped runbook's trigger, its expression reads only
kube-state-metrics series that exist, and it keeps every label the trigger's params read.
"""

from __future__ import annotations

import re
from pathlib import Path

from ruamel.yaml import YAML

from bot.actions.builtin import builtin_actions
from bot.runbook.loader import load_runbooks

ROOT = Path(__file__).parents[2]
RULES = ROOT / "deploy" / "prometheus" / "runbook-bot-symptoms.yaml"
# kube-state-metrics v2 series (docs/metrics in the kube-state-metrics repository)
KSM = {"kube_persistentvolume_deletion_timestamp", "kube_pod_container_status_waiting_reason",
       "kube_pod_spec_volumes_persistentvolumeclaims_info", "kube_pod_status_unschedulable"}


def rules() -> list[dict]:
    doc = YAML(typ="safe").load(RULES.read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    return [r for g in doc["spec"]["groups"] for r in g["rules"]]


def test_every_symptom_alert_reads_kube_state_metrics_series_that_exist():
    for rule in rules():
        series = set(re.findall(r"\b(kube_[a-z_]+)\b", rule["expr"]))
        assert series and series <= KSM, (rule["alert"], series - KSM)
        assert rule["for"] and rule["labels"]["severity"] in ("warning", "critical")
        assert rule["expr"].count("(") == rule["expr"].count(")")


def test_every_symptom_alert_is_answered_by_a_runbook_with_the_labels_its_params_read():
    books = load_runbooks(ROOT / "runbooks", catalog=builtin_actions())
    triggers = {t.alertname: t for b in books.values() for t in b.spec.triggers}
    for rule in rules():
        trigger = triggers[rule["alert"]]
        kept = set(re.findall(r"by \(([^)]*)\)", rule["expr"])[0].replace(" ", "").split(","))
        read = {m for v in trigger.params.values() for m in re.findall(r"labels\.(\w+)", v)}
        assert read and read <= kept, (rule["alert"], read - kept)
