"""An Alertmanager alert for a real incident in the sandbox: the card names the runbook with the
params the alert filled and what a scan of the cluster found; ``/runbook diagnose`` answers
privately with the findings and a Run button each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.frontends.slack.alert_cards import ACTION_ALERT_DRY_RUN, ACTION_ALERT_RUN
from bot.sim.scenarios import NAMESPACE
from tests.fakes.slack_api import CHANNEL, FakeSlack
from tests.frontends.slack.conftest import ALICE, Bot, button_in, texts
from tests.frontends.slack.test_alerts_in_slack import ALERTS, alert, cards, payload, post

pytest.importorskip("moto", reason="the sandbox needs runbook-bot[sim]")
pytestmark = pytest.mark.slow


def test_a_node_not_ready_alert_in_the_node_dead_scenario_suggests_node_dead_ngns_with_evidence(
        fake: FakeSlack, tmp_path: Path) -> None:
    r, bot = _bot("node-dead", fake, tmp_path)
    try:
        node = r.facts["node"]
        assert post(bot, payload(alert(node=node, cluster="sandbox")))[0] == 200
        [card] = cards(bot)
        shown = "\n".join(texts([card]))
        assert "node-dead-ngns" in shown and "(runbook node-dead-ngns)" in shown, shown
        value = json.loads(button_in(card, ACTION_ALERT_RUN)["value"])
        assert value["rb"] == "node-dead-ngns" and value["p"] == {"node": node, "cluster": "sandbox"}
        # a dry run from the card plans every step against the sandbox and changes nothing
        bot.click(card, ACTION_ALERT_DRY_RUN, user=ALICE)
        [run] = bot.db.runs(limit=5)
        state = bot.db.load(run.run_id)
        assert state.dry_run and state.suggested_by.startswith("alert:sandbox/")
        # /runbook diagnose: privately, each finding with its Run button
        bot.command(f"diagnose node={node}", user=ALICE)
        [answer] = [m for m in fake.ephemerals(ALICE) if "finding" in m.get("text", "")]
        run_button = json.loads(button_in(answer, ACTION_ALERT_RUN)["value"])
        assert run_button["rb"] == "node-dead-ngns" and run_button["p"]["node"] == node
        assert run_button["a"].startswith("diagnosis:sandbox@")
        assert len([m for m in fake.messages(CHANNEL) if "finding" in m.get("text", "")]) == 0
    finally:
        bot.close()
        r.stop()


def _node_alert(f: dict[str, Any]) -> tuple[dict[str, Any], str, dict[str, str]]:
    return (alert("KubeNodeNotReady", node=f["node"], cluster="sandbox"), "node-dead-ngns",
            {"node": f["node"]})


def _pv_alert(pv: str) -> tuple[dict[str, Any], str, dict[str, str]]:
    return (alert("PersistentVolumeStuckTerminating", persistentvolume=pv, cluster="sandbox"),
            "stuck-terminating-volume", {"pv": pv})


# scenario -> the alert that really fires for it, and the runbook and params its card must offer
ALERT_FOR: dict[str, Any] = {
    **{s: _node_alert for s in ("node-dead", "node-hung", "stuck-detach", "tolerating-pod",
                                "pod-force-deleted", "old-incident",
                                "node-recovers-during-approval", "spot-node-dead",
                                "node-replaced", "node-dead-deployment",
                                "auto-mode-node-hung", "node-hung-local-data",
                                "stuck-detach-multi-attach")},
    # a live kubelet (the CNI not ready): the card offers the triage, never node-dead-ngns
    "node-not-ready": lambda f: (alert("KubeNodeNotReady", node=f["node"], cluster="sandbox"),
                                 "node-not-ready-triage", {"node": f["node"]}),
    "node-partitioned": _node_alert,
    # no node alert fires for a Node that no longer exists; the waiting pod's does, and the scan
    # offers the fence of the machine first (URGENT)
    "node-deleted-running": lambda f: (
        alert("KubePodNotReady", pod=f["pod"], namespace=f["namespace"], cluster="sandbox"),
        "node-dead-ngns", {"node": f["node"], "instance_id": f["instance_id"]}),
    "az-capacity-deadlock": lambda f: (
        alert("PodPendingOnVolume", pod=f["pod"], namespace=f["namespace"], cluster="sandbox"),
        "volume-affinity-conflict", {"pod": f["pod"], "namespace": f["namespace"]}),
    "stuck-terminating": lambda f: _pv_alert(sorted(f["pvs"])[0]),
    "bound-pv-deleted": lambda f: _pv_alert(f["pv"]),
    "auto-mode-leak": lambda f: _pv_alert(f["pv"]),
    "zombie-attachments": lambda f: (
        alert("KubeStatefulSetReplicasMismatch", statefulset="es-data", namespace=NAMESPACE,
              cluster="sandbox"), "zombie-volumeattachments", {}),
}


def test_every_scenario_has_an_alert_or_says_why_not() -> None:
    from bot.sim.scenarios import SCENARIOS

    # az-outage (and its worst day): no single alert names a zone; its nodes' KubeNodeNotReady
    # cards carry the scan, which names zone-outage-ngns (tested below) once enough of the zone's
    # machines are confirmed dead
    assert set(SCENARIOS) == set(ALERT_FOR) | {"az-outage", "az-outage-worst-day"}


@pytest.mark.parametrize("scenario", sorted(ALERT_FOR))
def test_the_alert_that_fires_for_each_scenario_suggests_the_runbook_that_fixes_it(
        scenario: str, fake: FakeSlack, tmp_path: Path) -> None:
    r, bot = _bot(scenario, fake, tmp_path)
    try:
        sent, runbook, params = ALERT_FOR[scenario](r.facts)
        assert post(bot, payload(sent, group=f'{{}}:{{alertname="{sent["labels"]["alertname"]}"}}'))[0] == 200
        [card] = cards(bot)
        value = json.loads(button_in(card, ACTION_ALERT_RUN)["value"])
        assert value["rb"] == runbook, texts([card])
        assert {k: v for k, v in value["p"].items() if k != "cluster"} == params
        assert value["a"].startswith("alert:sandbox/")
    finally:
        bot.close()
        r.stop()


def test_a_node_alert_in_a_zone_outage_carries_the_scan_that_names_the_zone_runbook(
        fake: FakeSlack, tmp_path: Path) -> None:
    r, bot = _bot("az-outage", fake, tmp_path)
    try:
        node = sorted(r.facts["dead_nodes"])[0] if "dead_nodes" in r.facts else r.facts["nodes"][0]
        assert post(bot, payload(alert(node=node, cluster="sandbox")))[0] == 200
        [card] = cards(bot)
        shown = "\n".join(texts([card]))
        assert "zone-outage-ngns" in shown, shown
    finally:
        bot.close()
        r.stop()


def _bot(scenario: str, fake: FakeSlack, tmp_path: Path) -> tuple[Any, Bot]:
    from bot.actions.env import ClusterClients
    from bot.cli.wiring import scanner
    from bot.clients.ec2 import Ec2Client
    from bot.clients.kube import KubeClient
    from bot.sim.rehearsal import Rehearsal
    from bot.sim.sandbox import BOT_CONTEXT

    r = Rehearsal(scenario, workdir=tmp_path / "sandbox")
    r.start()
    sb = r.sandbox
    clients = ClusterClients.of(
        kube=KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT),
        ec2=Ec2Client(client=sb.ec2_client(as_bot=True)))
    scan = scanner(r.settings, clients_factory=lambda _cfg: clients, clock=r.clock)
    return r, Bot(fake, tmp_path, rehearsal=r, alerts=ALERTS, clusters=("sandbox",), diagnoser=scan)
