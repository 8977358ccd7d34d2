"""An Alertmanager alert for a real incident in the sandbox: the card names the runbook with the
params the alert filled and what a scan of the cluster found; ``/runbook diagnose`` answers
privately with the findings and a Run button each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.frontends.slack.alert_cards import ACTION_ALERT_DRY_RUN, ACTION_ALERT_RUN
from tests.fakes.slack_api import CHANNEL, FakeSlack
from tests.frontends.slack.conftest import ALICE, Bot, button_in, texts
from tests.frontends.slack.test_alerts_in_slack import ALERTS, alert, cards, payload, post

pytest.importorskip("moto", reason="the sandbox needs runbook-bot[sim]")
pytestmark = pytest.mark.slow


def test_a_node_not_ready_alert_in_the_node_dead_scenario_suggests_node_dead_ngns_with_evidence(
        fake: FakeSlack, tmp_path: Path) -> None:
    from bot.actions.env import ClusterClients
    from bot.cli.wiring import scanner
    from bot.clients.ec2 import Ec2Client
    from bot.clients.kube import KubeClient
    from bot.sim.rehearsal import Rehearsal
    from bot.sim.sandbox import BOT_CONTEXT

    r = Rehearsal("node-dead", workdir=tmp_path / "sandbox")
    r.start()
    sb = r.sandbox
    clients = ClusterClients.of(
        kube=KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT),
        ec2=Ec2Client(client=sb.ec2_client(as_bot=True)))
    scan = scanner(r.settings, clients_factory=lambda _cfg: clients, clock=r.clock)
    bot = Bot(fake, tmp_path, rehearsal=r, alerts=ALERTS, clusters=("sandbox",), diagnoser=scan)
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
