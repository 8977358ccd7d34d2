"""The attack on ``auto_run`` over HTTP (issue 28): a runbook that writes without being
destructive (a cordon), installed with ``auto_run: true``, and one forged or mistaken alert naming
a healthy node, POSTed to ``/alertmanager`` with the webhook's valid token.

Only a runbook whose every step reads (reads, reports, notify) may start itself; validation refuses
this one, so it answers no alert: no run starts, the sandbox's node stays schedulable, and the
card offers only the shipped runbooks, for a person to start.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.slack_api import CHANNEL, FakeSlack
from tests.frontends.slack.conftest import Bot, texts
from tests.frontends.slack.test_alerts_in_slack import ALERTS, alert, payload, post

pytest.importorskip("moto", reason="the sandbox needs runbook-bot[sim]")
pytestmark = pytest.mark.slow  # a sandbox, as the other alert tests on it

CORDON_ON_ALERT = """\
apiVersion: runbook-bot/v1
kind: Runbook
metadata:
  name: cordon-on-alert
  title: Cordon a node that is not ready
spec:
  params:
    node: {type: string, required: true}
    cluster: {type: string}
  auto_run: true
  triggers:
    - alertname: KubeNodeNotReady
      params: {node: "{{ labels.node }}"}
  steps:
    - id: cordon
      title: "Cordon {{ params.node }}"
      action: k8s.node.cordon
      with: {node: "{{ params.node }}"}
"""


def test_an_alert_never_auto_runs_a_runbook_that_writes(fake: FakeSlack, tmp_path: Path) -> None:
    from bot.sim.rehearsal import Rehearsal

    books = tmp_path / "runbooks"
    books.mkdir()
    (books / "cordon-on-alert.yaml").write_text(CORDON_ON_ALERT, encoding="utf-8")
    r = Rehearsal("stuck-terminating", workdir=tmp_path / "sandbox", runbooks_dir=str(books))
    r.start()
    bot = None
    try:
        bot = Bot(fake, tmp_path, rehearsal=r, alerts=ALERTS, clusters=("sandbox",))
        healthy = [n["metadata"]["name"] for n in r.sandbox.list("Node", None)]
        assert healthy and not any(n.get("spec", {}).get("unschedulable")
                                   for n in r.sandbox.list("Node", None))
        status, _ = post(bot, payload(alert(node=healthy[0], cluster="sandbox")))
        assert status == 200
        assert bot.db.runs(limit=5) == []  # refused by validation: it answers no alert
        assert not any(n.get("spec", {}).get("unschedulable")
                       for n in r.sandbox.list("Node", None))  # no write reached the cluster
        assert 'outcome="auto_run"' not in bot.metrics.exposition().decode()
        # the shipped runbooks still answer the alert on its card, for a person to click
        shown = "\n".join(texts(fake.messages(CHANNEL)))
        assert "node-dead-ngns" in shown and "cordon-on-alert" not in shown, shown
    finally:
        if bot is not None:
            bot.close()
        r.stop()
