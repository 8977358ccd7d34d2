"""Alert floods over HTTP: 1,000 alerts in one POST to ``/alertmanager`` of ``slack serve``.

The attack (or the honest storm): one delivery of 1,000 ``KubeNodeNotReady`` alerts, each naming
another node and each answered by a runbook that auto-runs. Unbounded, it made one full scan of
the cluster and one run per alert, and its follow-ups queued ahead of the next delivery's card.
What the tests read is the fake Slack's channel, the store's runs, the scans the diagnoser was
asked for, and the metrics; no sleeps: the auto-run window passes on the ManualClock, and a scan
"in progress" is one held on an Event.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.diagnose import Report, Scope
from tests.fakes.engine_harness import runbook
from tests.frontends.slack.conftest import Bot, texts
from tests.frontends.slack.test_alerts_in_slack import ALERTS, LOOK, TOKEN, cards

# only reads (notify): it may auto-run, so a flood of its alert is a flood of runs
LOOK_AT_NODE = runbook("look-at-node", """
- id: tell
  title: "Look at {{ params.node }}"
  action: notify
  with: {message: "look at {{ params.node }}"}
""", params="""
node: {type: string, required: true}
""").replace("  steps:", """  auto_run: true
  triggers:
    - alertname: KubeNodeNotReady
      params: {node: "{{ labels.node }}"}
  steps:""")

TEXTS = {"look-at-node": LOOK_AT_NODE, "look-at-pod": LOOK}


def nodes_down(n: int, *, first: int = 0) -> list[dict[str, Any]]:
    """``n`` KubeNodeNotReady alerts, one per node, oldest first (about 260 bytes each)."""
    return [{"status": "firing", "fingerprint": f"{first + i:016x}",
             "labels": {"alertname": "KubeNodeNotReady", "node": f"ip-10-{(first + i) // 250}-"
                                                                  f"{(first + i) % 250}"},
             "annotations": {"summary": "Node is not ready."},
             "startsAt": f"2026-12-03T03:{(first + i) // 60 % 60:02}:{(first + i) % 60:02}Z",
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": ""} for i in range(n)]


def delivery(alerts: list[dict[str, Any]], *, group: str, truncated: int = 0) -> bytes:
    return json.dumps({"version": "4", "groupKey": group, "status": "firing",
                       "receiver": "runbook-bot", "groupLabels": {}, "commonLabels": {},
                       "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
                       "truncatedAlerts": truncated, "alerts": alerts}).encode()


def send(bot: Bot, body: bytes) -> tuple[int, dict[str, str], str]:
    """POST as Alertmanager does; the answer, without waiting for the work after it."""
    req = urllib.request.Request(f"{bot.alerts_base}/alertmanager", data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(r.status), dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), dict(e.headers), e.read().decode()


class Scans:
    """The diagnoser: counts the scans asked for; with ``hold``, the first one waits for it."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.scopes: list[Scope] = []
        self.hold = hold
        self.started = threading.Event()

    def __call__(self, scope: Scope) -> Report:
        self.scopes.append(scope)
        self.started.set()
        if self.hold is not None and len(self.scopes) == 1:
            assert self.hold.wait(timeout=30), "the test never let the scan finish"
        return Report(cluster=scope.cluster or "default", findings=(), calls=7, scope=scope,
                      scanned_at=datetime(2026, 12, 3, 3, 30, tzinfo=UTC))


def metric(bot: Bot, line: str) -> float:
    for row in bot.metrics.exposition().decode().splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def test_one_post_of_1000_alerts_makes_one_scan_and_starts_no_more_runs_than_the_limit(make_bot: Any):
    scans = Scans()
    bot = make_bot(alerts=ALERTS, texts=TEXTS, diagnoser=scans)
    body = delivery(nodes_down(1000), group='{}:{alertname="KubeNodeNotReady"}', truncated=250)
    status, _, answer = send(bot, body)
    bot.settle()
    assert status == 200, answer
    runs = bot.db.runs(limit=5000)
    assert (len(scans.scopes), len(runs)) == (1, 10)  # unbounded: (1000, 1000)
    assert scans.scopes == [Scope(cluster="default")]  # the cluster, once, for every alert
    assert {r.runbook for r in runs} == {"look-at-node"}
    # what was dropped is counted ...
    assert metric(bot, 'runbook_bot_alerts_dropped_total{reason="over_limit"}') == 900
    assert metric(bot, 'runbook_bot_alerts_dropped_total{reason="truncated"}') == 250
    assert metric(bot, 'runbook_bot_alerts_total{outcome="suggested"}') == 100
    assert metric(bot, 'runbook_bot_alerts_total{outcome="auto_run"}') == 10
    assert metric(bot, 'runbook_bot_alerts_total{outcome="auto_run_limited"}') == 90
    assert metric(bot, "runbook_bot_alert_scans_total") == 1
    assert metric(bot, "runbook_bot_alerts_coalesced_total") == 99
    # ... and said on the one card
    [card] = cards(bot)
    shown = "\n".join(texts([card]))
    assert "1150 alerts of this group were not looked at" in shown, shown
    assert "250 left out by Alertmanager" in shown and "900 over the 100" in shown, shown
    assert "90 auto-runs not started" in shown and "10 in 10 minutes" in shown, shown
    assert "(started by the bot: it only reads)" in shown  # the oldest ten did start


def test_replicas_share_the_auto_run_limit_through_the_store_and_it_frees_after_its_window(
        make_bot: Any, db_url: str):
    one = make_bot(alerts=ALERTS, texts=TEXTS, db_url=db_url)
    two = make_bot(alerts=ALERTS, texts=TEXTS, db_url=db_url)
    assert send(one, delivery(nodes_down(8), group="a"))[0] == 200
    one.settle()
    status, _, answer = send(two, delivery(nodes_down(8, first=100), group="b"))
    two.settle()
    assert (status, json.loads(answer)) == (200, {"suggested": 8, "auto_run": 2,
                                                  "auto_run_limited": 6})
    assert len(one.db.runs(limit=100)) == 10  # 8 on one replica, 2 on the other
    [held] = [c for c in texts(cards(one)) if "ip-10-0-100" in c]
    assert "6 auto-runs not started" in held and "not started by the bot" in held, held
    # the window slides: ten minutes after the first eight, not a second earlier
    one.clock.advance(599)
    send(one, delivery(nodes_down(1, first=200), group="c"))
    one.clock.advance(1)
    send(two, delivery(nodes_down(1, first=300), group="d"))
    one.settle()
    two.settle()
    assert len(one.db.runs(limit=100)) == 11
    assert metric(one, 'runbook_bot_alerts_total{outcome="auto_run_limited"}') == 1
    assert metric(two, 'runbook_bot_alerts_total{outcome="auto_run_limited"}') == 6


def pod_stuck(fingerprint: str, pod: str) -> list[dict[str, Any]]:
    return [{"status": "firing", "fingerprint": fingerprint,
             "labels": {"alertname": "PodVolumeAttachStuck", "namespace": "shop", "pod": pod},
             "annotations": {"summary": f"{pod} waits for its volume"},
             "startsAt": "2026-12-03T03:20:00Z", "endsAt": "0001-01-01T00:00:00Z"}]


def test_while_a_flood_is_scanned_the_next_deliveries_wait_for_one_scan_and_a_full_queue_is_503(
        make_bot: Any, monkeypatch: pytest.MonkeyPatch):
    from bot.frontends import alert_queue

    monkeypatch.setattr(alert_queue, "CAPACITY", 150)  # alerts waiting; 1000 by default
    hold = threading.Event()
    scans = Scans(hold)
    bot = make_bot(alerts=ALERTS, texts=TEXTS, diagnoser=scans)
    flood_c = delivery(nodes_down(1000, first=2000), group="flood-c")
    try:
        assert send(bot, delivery(nodes_down(1000), group="flood-a"))[0] == 200
        assert scans.started.wait(timeout=30)  # flood A's scan is running, and does not end
        # the next deliveries are answered at once, and wait for one scan
        assert send(bot, delivery(nodes_down(1000, first=1000), group="flood-b"))[0] == 200
        assert send(bot, delivery(pod_stuck("77aa", "db-0"), group="real"))[0] == 200
        assert metric(bot, "runbook_bot_alert_queue") == 101
        # backpressure: no room for another 100 alerts; a 503 records nothing
        status, headers, answer = send(bot, flood_c)
        assert (status, headers.get("Retry-After")) == (503, "10"), answer
        assert metric(bot, 'runbook_bot_alert_requests_total{answer="busy"}') == 1
        # a real alert still fits beside them
        assert send(bot, delivery(pod_stuck("88bb", "db-1"), group="real-2"))[0] == 200
        assert len(scans.scopes) == 1 and cards(bot) == []
    finally:
        hold.set()
    bot.settle()
    assert len(scans.scopes) == 2  # flood A's, then one for everything that waited meanwhile
    order = ["db-0" if "db-0" in c else "db-1" if "db-1" in c else "A" if "ip-10-0-0 " in c
             or "ip-10-0-0`" in c else "B" for c in texts(cards(bot))]
    assert order == ["A", "db-0", "db-1", "B"]  # the few alerts are drawn before the flood
    # flood C was recorded nowhere: delivered again, every alert is new to the bot
    status, _, answer = send(bot, flood_c)
    bot.settle()
    assert (status, json.loads(answer)["suggested"]) == (200, 100)
    assert len(scans.scopes) == 3
