"""Triggers: which alerts a runbook answers, how their labels fill its params, and auto_run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.actions.registry import Registry
from bot.errors import RunbookError
from bot.runbook.loader import load_runbooks, load_text
from bot.runbook.triggers import suggestions

SHIPPED = Path(__file__).parents[2] / "runbooks"


def messages(text: str, catalog: Registry) -> list[str]:
    try:
        load_text(text, file="rb.yaml", catalog=catalog)
    except RunbookError as e:
        return [f"{p.file}:{p.line}: {p.message}" for p in e.problems]
    return []


def with_triggers(minimal: str, block: str) -> str:
    return minimal.replace("  steps:\n", block + "  steps:\n")


def test_a_trigger_fills_params_from_labels_and_annotations(minimal: str, catalog: Registry) -> None:
    text = with_triggers(minimal, """\
  triggers:
    - alertname: KubeNodeNotReady
      matchers: ['severity=~"warning|critical"', 'namespace!="kube-system"']
      params:
        node: "{{ labels.node }}"
""")
    rb = load_text(text, file="rb.yaml", catalog=catalog)
    labels = {"alertname": "KubeNodeNotReady", "node": "ip-10-0-1-2", "severity": "warning"}
    [s] = suggestions([rb], labels, {})
    assert (s.runbook, dict(s.params), s.problem) == ("minimal", {"node": "ip-10-0-1-2"}, None)
    assert suggestions([rb], {**labels, "severity": "info"}, {}) == []
    assert suggestions([rb], {**labels, "namespace": "kube-system"}, {}) == []
    [s] = suggestions([rb], {"alertname": "KubeNodeNotReady", "severity": "critical"}, {})
    assert s.problem is not None and "node" in s.problem  # the label is missing: the form asks


@pytest.mark.parametrize(("block", "line", "expected"), [
    ("  triggers:\n    - alertname: KubeNodeNotReady\n      params:\n        nod: \"{{ labels.node }}\"\n",
     14, "trigger 'KubeNodeNotReady' fills param 'nod', which the runbook does not declare "
         "(did you mean 'node'?); declared params: node"),
    ("  triggers:\n    - alertname: KubeNodeNotReady\n      params:\n        node: \"{{ params.node }}\"\n",
     14, "unknown name 'params'; a trigger's params can use: labels, annotations"),
    ("  triggers:\n    - alertname: KubeNodeNotReady\n      matchers: ['phase=Failed\"']\n",
     13, "is not LABEL=VALUE, LABEL!=VALUE, LABEL=~REGEX or LABEL!~REGEX"),
    ("  triggers:\n    - alertname: KubeNodeNotReady\n      matchers: ['phase=~\"(\"']\n",
     13, "is not a regular expression"),
    ("  auto_run: true\n", 11, "auto_run: true needs at least one trigger in spec.triggers"),
])
def test_a_wrong_trigger_is_named_at_its_line_with_what_is_valid(
        minimal: str, catalog: Registry, block: str, line: int, expected: str) -> None:
    found = messages(with_triggers(minimal, block), catalog)
    assert any(m.startswith(f"rb.yaml:{line}: ") and expected in m for m in found), found


def test_auto_run_is_refused_on_a_runbook_with_a_destructive_step(minimal: str, catalog: Registry) -> None:
    text = with_triggers(minimal, """\
  auto_run: true
  triggers:
    - alertname: KubeNodeNotReady
      params: {node: "{{ labels.node }}"}
""") + """\
    - id: taint
      title: Taint
      action: k8s.node.taint
      with:
        node: "{{ params.node }}"
        key: node.kubernetes.io/out-of-service
        value: nodeshutdown
        effect: NoExecute
"""
    [m] = messages(text, catalog)
    assert m.startswith("rb.yaml:11: auto_run: true is only for runbooks whose every step only "
                        "reads"), m
    assert "step 'taint' (line 28) runs destructive action 'k8s.node.taint'" in m, m
    # the same runbook without the destructive step may auto-run
    assert messages(text.split("    - id: taint")[0], catalog) == []


AUTO_RUN_TRIGGER = """\
  auto_run: true
  triggers:
    - alertname: KubeNodeNotReady
      params: {node: "{{ labels.node }}"}
"""


@pytest.mark.parametrize(("step", "says"), [
    ("""\
    - id: cordon
      title: Cordon
      action: k8s.node.cordon
      with: {node: "{{ params.node }}"}
""", "step 'cordon' (line 28) runs action 'k8s.node.cordon', which writes"),
    ("""\
    - id: uncordon
      title: Uncordon
      action: k8s.node.uncordon
      with: {node: "{{ params.node }}"}
""", "step 'uncordon' (line 28) runs action 'k8s.node.uncordon', which writes"),
    ("""\
    - id: snapshot
      title: Snapshot
      action: aws.ec2.volume.snapshot
      with: {volume_id: vol-0123456789abcdef0}
""", "step 'snapshot' (line 28) runs action 'aws.ec2.volume.snapshot', which writes"),
    ("""\
    - id: by_hand
      title: By hand
      manual: "Cordon {{ params.node }} by hand"
""", "step 'by_hand' (line 28) is a manual step, a change a person makes"),
])
def test_auto_run_is_refused_on_a_runbook_with_any_step_that_writes(
        minimal: str, catalog: Registry, step: str, says: str) -> None:
    """Destructive or not, a write needs a person to start the run: only reads, reports and
    notify may auto-run. The refusal names the file, the line of auto_run, and the step."""
    [m] = messages(with_triggers(minimal, AUTO_RUN_TRIGGER) + step, catalog)
    assert m.startswith("rb.yaml:11: auto_run: true is only for runbooks whose every step only "
                        "reads"), m
    assert says in m, m
    assert messages(with_triggers(minimal, AUTO_RUN_TRIGGER), catalog) == []  # reads and notify


def test_every_action_auto_run_allows_is_a_shipped_action_that_is_not_destructive(
        catalog: Registry) -> None:
    from bot.runbook.autorun import READ_ONLY_ACTIONS

    assert READ_ONLY_ACTIONS.issubset(catalog.names())
    assert not [a for a in READ_ONLY_ACTIONS if catalog.get(a).destructive]
    assert not READ_ONLY_ACTIONS & {"k8s.node.cordon", "k8s.node.uncordon",
                                    "aws.ec2.volume.snapshot", "manual.confirm"}


def test_auto_run_needs_every_required_param_filled_from_the_alert(minimal: str, catalog: Registry) -> None:
    text = with_triggers(minimal, "  auto_run: true\n  triggers:\n    - alertname: KubeNodeNotReady\n")
    [m] = messages(text, catalog)
    assert "auto_run needs every required param filled from the alert" in m and "node" in m


# what kube-prometheus-stack (kubernetes-mixin) and deploy/prometheus/runbook-bot-symptoms.yaml
# send: alert name and the labels the rule keeps
NODE_ALERTS = [
    {"alertname": "KubeNodeNotReady", "node": "ip-10-0-1-2.ec2.internal", "condition": "Ready",
     "status": "true", "job": "kube-state-metrics"},
    {"alertname": "KubeNodeUnreachable", "node": "ip-10-0-1-2.ec2.internal",
     "key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
]
MAPPED = [
    ({"alertname": "KubePodNotReady", "namespace": "shop", "pod": "db-0"}, "multi-attach-triage",
     {"pod": "db-0", "namespace": "shop"}),
    ({"alertname": "PodVolumeAttachStuck", "namespace": "shop", "pod": "db-0"},
     "multi-attach-triage", {"pod": "db-0", "namespace": "shop"}),
    ({"alertname": "PodPendingOnVolume", "namespace": "shop", "pod": "es-2"},
     "volume-affinity-conflict", {"pod": "es-2", "namespace": "shop"}),
    ({"alertname": "PersistentVolumeStuckTerminating", "persistentvolume": "pvc-0b1c"},
     "stuck-terminating-volume", {"pv": "pvc-0b1c"}),
    ({"alertname": "KubePersistentVolumeErrors", "persistentvolume": "pvc-0b1c", "phase": "Failed"},
     "stuck-terminating-volume", {"pv": "pvc-0b1c"}),
    ({"alertname": "KubeStatefulSetReplicasMismatch", "namespace": "shop", "statefulset": "db"},
     "zombie-volumeattachments", {}),
]


@pytest.mark.parametrize(("labels", "runbook", "params"), MAPPED)
def test_the_shipped_runbooks_answer_the_alerts_that_fire_for_their_symptoms(
        catalog: Registry, labels: dict[str, str], runbook: str, params: dict[str, str]) -> None:
    books = load_runbooks(SHIPPED, catalog=catalog).values()
    [s] = suggestions(books, labels, {})
    assert (s.runbook, dict(s.params), s.auto_run, s.problem) == (runbook, params, False, None)


@pytest.mark.parametrize("labels", NODE_ALERTS)
def test_a_node_alert_suggests_the_triage_and_node_dead_ngns_which_the_scan_then_vets(
        catalog: Registry, labels: dict[str, str]) -> None:
    """The card keeps node-dead-ngns only where the scan of the node finds it dead
    (tests/frontends/slack/test_alerts_on_sandbox.py); the triage is always offered."""
    books = load_runbooks(SHIPPED, catalog=catalog).values()
    found = {s.runbook: dict(s.params) for s in suggestions(books, labels, {})}
    assert found == {"node-not-ready-triage": {"node": "ip-10-0-1-2.ec2.internal"},
                     "node-dead-ngns": {"node": "ip-10-0-1-2.ec2.internal"}}


def test_a_pending_pv_is_not_sent_to_the_terminating_volume_runbook(catalog: Registry) -> None:
    books = load_runbooks(SHIPPED, catalog=catalog).values()
    labels = {"alertname": "KubePersistentVolumeErrors", "persistentvolume": "pvc-1", "phase": "Pending"}
    assert suggestions(books, labels, {}) == []
