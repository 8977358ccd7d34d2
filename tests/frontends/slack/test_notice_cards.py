"""The node watcher's notices as cards in the fake Slack channel (docs/watcher.md, "In Slack").

The notices are what the watcher hands ``on_notice``; the cards are read from the fake Slack Web
API's channel and every revision of a message, as the alert cards' tests read theirs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config import AlertsConfig
from bot.engine.node_watch import NodeNotice, Suggestion
from bot.engine.provenance import check_detected_at, detected_in
from bot.frontends.notices import instant, notice_handler
from bot.frontends.slack.alert_cards import ACTION_ALERT_DRY_RUN, ACTION_ALERT_RUN
from bot.present import blockkit as bk
from tests.fakes.slack_api import CHANNEL, FakeSlack
from tests.frontends.slack.conftest import ALICE, Bot, button_in, texts
from tests.frontends.slack.test_alert_flood import LOOK_AT_NODE as LOOK

WATCHED = AlertsConfig(channel=CHANNEL)  # cards go to alerts.channel; no webhook needed
STALE = datetime(2026, 12, 4, 3, 0, 0, tzinfo=UTC)


NOTICED = datetime(2026, 12, 4, 3, 0, 40, tzinfo=UTC)
LEASE = "its Lease was last renewed 40 s ago and its Ready condition is Unknown"


def notice(node: str, verdict: Any, *, cluster: str = "prod", reason: str = LEASE,
           suggestion: tuple[str, dict[str, str]] | None = None, noticed_at: datetime = NOTICED,
           nodes: tuple[str, ...] = (), zone: str | None = "us-east-1a") -> NodeNotice:
    """A notice as the watcher makes it (``bot.engine.node_watch.NodeNotice``)."""
    return NodeNotice(cluster=cluster, node=node, verdict=verdict, detected_at=STALE,
                      noticed_at=noticed_at, reason=reason,
                      suggestion=None if suggestion is None else Suggestion(*suggestion),
                      nodes=nodes, zone=zone)


def dead(node: str = "ip-10-0-1-2.ec2.internal") -> NodeNotice:
    return notice(node, "dead", suggestion=("node-dead-ngns", {"node": node, "cluster": "prod"}))


def channel_cards(bot: Bot) -> list[dict[str, Any]]:
    return bot.fake.messages(CHANNEL)


def show(bot: Bot, notice: Any) -> None:
    assert bot.parts.notice_cards is not None
    notice_handler(bot.parts.notice_cards.show, metrics=bot.metrics)(notice)


def test_a_dead_node_gets_a_card_with_its_runbook_and_params_and_a_recovery_updates_it(
        make_bot: Callable[..., Bot]) -> None:
    bot = make_bot(alerts=WATCHED)
    show(bot, dead())
    [card] = channel_cards(bot)
    shown = "\n".join(texts([card]))
    assert "is dead" in shown and "Lease stale since <!date^" in shown and "Ready condition" in shown
    assert "node-dead-ngns" in shown and "ip-10-0-1-2.ec2.internal" in shown
    value = json.loads(button_in(card, ACTION_ALERT_RUN)["value"])
    assert value == {"rb": "node-dead-ngns", "p": {"node": "ip-10-0-1-2.ec2.internal",
                                                   "cluster": "prod"},
                     "a": "watcher:prod/ip-10-0-1-2.ec2.internal@2026-12-04T03:00:00+00:00"}
    # the same notice again (another replica, a repeat) edits the one card
    show(bot, dead())
    assert len(channel_cards(bot)) == 1
    came_back = notice("ip-10-0-1-2.ec2.internal", "recovered",
                       noticed_at=datetime(2026, 12, 4, 3, 2, 5, tzinfo=UTC),
                       reason="its Lease is renewed and it is Ready")
    show(bot, came_back)
    [card] = channel_cards(bot)
    shown = "\n".join(texts([card]))
    assert "recovered at <!date^" in shown and "{time_secs}" in shown
    assert not [b for b in card["blocks"] if b["type"] == "actions"]  # no buttons left
    assert [c.method for c in bot.fake.calls() if c.method.startswith("chat.")].count(
        "chat.postMessage") == 1
    metrics = bot.metrics.exposition().decode()
    assert 'runbook_bot_node_notices_total{verdict="dead"} 2.0' in metrics
    assert 'runbook_bot_node_notices_total{verdict="recovered"} 1.0' in metrics
    assert "runbook_bot_notice_seconds_bucket{le=\"45.0\"} 2.0" in metrics


def test_a_sick_node_is_shown_its_cause_and_never_a_fence(make_bot: Callable[..., Bot]) -> None:
    bot = make_bot(alerts=WATCHED)
    sick = notice("ip-10-0-3-4.ec2.internal", "sick",
                  reason="Ready=False: container runtime network not ready (CNI)",
                  suggestion=("node-dead-ngns", {"node": "ip-10-0-3-4.ec2.internal"}))
    show(bot, sick)
    [card] = channel_cards(bot)
    shown = "\n".join(texts([card]))
    assert "is sick" in shown and "CNI" in shown and "No fence" in shown
    assert not [b for b in card["blocks"] if b["type"] == "actions"]
    triage = notice("ip-10-0-5-6.ec2.internal", "sick", reason="disk pressure",
                    suggestion=("node-not-ready-triage", {"node": "ip-10-0-5-6.ec2.internal"}))
    show(bot, triage)
    value = json.loads(button_in(channel_cards(bot)[-1], ACTION_ALERT_RUN)["value"])
    assert value["rb"] == "node-not-ready-triage"


def test_a_zone_storm_is_one_card_pointing_at_the_zone_runbook(make_bot: Callable[..., Bot]) -> None:
    bot = make_bot(alerts=WATCHED)
    nodes = tuple(f"ip-10-0-1-{i}.ec2.internal" for i in range(40))
    for seen in range(3):  # the zone notice again as more nodes go
        show(bot, notice("", "zone", reason="40 nodes of us-east-1a stopped together",
                         suggestion=("zone-outage-ngns", {"zone": "us-east-1a"}),
                         nodes=nodes[:20 + 10 * seen]))
    [card] = channel_cards(bot)
    shown = "\n".join(texts([card]))
    assert "Zone `us-east-1a`" in shown and "40 nodes down" in shown
    assert json.loads(button_in(card, ACTION_ALERT_RUN)["value"])["rb"] == "zone-outage-ngns"
    # the zone comes back: its one card is edited, no new card, its buttons gone
    show(bot, notice("", "recovered", reason="zone us-east-1a is back", nodes=nodes))
    [card] = channel_cards(bot)
    shown = "\n".join(texts([card]))
    assert "Zone `us-east-1a` on `prod` recovered at" in shown
    assert all(b.get("type") != "actions" for b in card["blocks"])


def test_two_replicas_over_one_store_post_one_card(fake: FakeSlack, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    one = Bot(fake, tmp_path / "one", db_url=url, alerts=WATCHED)
    two = Bot(fake, tmp_path / "two", db_url=url, alerts=WATCHED)
    try:
        show(one, dead())
        show(two, dead())
        assert len(channel_cards(one)) == 1
    finally:
        one.close()
        two.close()


def test_a_dry_run_from_the_card_records_the_watcher_as_what_suggested_it(
        make_bot: Callable[..., Bot]) -> None:
    bot = make_bot(alerts=WATCHED)
    show(bot, notice("web-1", "sick", reason="disk pressure",
                     suggestion=("change-thing", {"name": "web-1"})))
    [card] = channel_cards(bot)
    bot.clock.set(NOTICED + timedelta(minutes=2))  # the person clicks two minutes later
    bot.click(card, ACTION_ALERT_DRY_RUN, user=ALICE)
    [run] = bot.db.runs(limit=5)
    state = bot.db.load(run.run_id)
    assert state.suggested_by == "watcher:prod/web-1@2026-12-04T03:00:00+00:00"
    # its time to recovery starts when the watcher saw the node go, as an auto-run's does
    [linked] = [e for e in bot.db.events(run.run_id) if e.type == "run.linked"]
    assert linked.payload["detected_at"] == "2026-12-04T03:00:00+00:00"


@pytest.fixture(autouse=True)
def _dirs(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()


@pytest.mark.slow
def test_a_dead_node_in_the_sandbox_gets_a_card_to_fence_it_without_any_alert(
        fake: FakeSlack, tmp_path: Path) -> None:
    """``slack serve``'s watchers (``NodeWatchers``) over the sandbox's API server and EC2."""
    pytest.importorskip("moto", reason="the sandbox needs runbook-bot[sim]")
    from bot.actions.env import ClusterClients
    from bot.cli.wiring import NodeWatchers
    from bot.clients.ec2 import Ec2Client
    from bot.clients.kube import KubeClient
    from bot.sim.rehearsal import Rehearsal
    from bot.sim.sandbox import BOT_CONTEXT

    r = Rehearsal("node-dead", workdir=tmp_path / "sandbox")
    r.start()
    bot = Bot(fake, tmp_path, rehearsal=r, alerts=WATCHED, clusters=("sandbox",))
    try:
        sb = r.sandbox
        clients = ClusterClients.of(
            kube=KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT),
            ec2=Ec2Client(client=sb.ec2_client(as_bot=True)))
        assert bot.parts.notice_cards is not None
        watchers = NodeWatchers(bot.settings, bot.db, bot.parts.notice_cards.show,
                                metrics=bot.metrics, clients_factory=lambda _cfg: clients,
                                clock=r.clock, enabled=True)
        [watcher] = watchers.watchers
        # the scenario's kubelet stopped a while ago: its Lease is stale, EC2 says it is stopped
        [noticed] = watcher.step()
        node = r.facts["node"]
        assert (noticed.node, noticed.verdict) == (node, "dead")
        [card] = channel_cards(bot)
        value = json.loads(button_in(card, ACTION_ALERT_RUN)["value"])
        assert {k: value[k] for k in ("rb", "p")} == {
            "rb": "node-dead-ngns", "p": {"cluster": "sandbox", "node": node}}
        # the reference carries when the watcher saw the node go: a run started by a click on
        # the card starts its time to recovery there (run.linked detected_at)
        assert value["a"].startswith(f"watcher:sandbox/{node}@")
        when = instant(noticed.detected_at)
        assert when is not None and detected_in(value["a"]) == check_detected_at(when.isoformat())
        assert bot.alerts_server is None  # no webhook, no alert: the watcher alone
        metrics = bot.metrics.exposition().decode()
        assert 'runbook_bot_watcher_reads_total{kind="list"} 2.0' in metrics
        assert 'runbook_bot_node_notices_total{verdict="dead"} 1.0' in metrics
        # `runbook-bot notices` lists it from the store, without Slack
        from bot.frontends.notices import notices_table
        from bot.store.node_notices import NoticeLog

        [line] = notices_table(NoticeLog(bot.db.engine).recent()).splitlines()[1:]
        assert "sandbox" in line and node in line and " dead " in line
    finally:
        bot.close()
        r.stop()


def test_a_node_that_comes_back_while_a_run_from_its_card_waits_says_so_on_the_card(
        make_bot: Callable[..., Bot]) -> None:
    bot = make_bot(alerts=WATCHED)
    show(bot, notice("web-1", "hung", suggestion=("change-thing", {"name": "web-1"})))
    [card] = channel_cards(bot)
    bot.click(card, ACTION_ALERT_RUN, user=ALICE)  # the params form, prefilled from the card
    [view] = bot.fake.views()
    bot.submit(view, {bk.param_block_id("name"): {"value": {"type": "plain_text_input",
                                                         "value": "web-1"}}}, user=ALICE)
    [run] = bot.db.runs(limit=5)
    assert run.status == "awaiting_approval", bot.db.load(run.run_id)
    show(bot, notice("web-1", "recovered", reason="its Lease is renewed and it is Ready"))
    card = next(m for m in channel_cards(bot) if m["ts"] == card["ts"])
    shown = "\n".join(texts([card]))
    assert f"Run `{run.run_id}`" in shown and "checked again" in shown, shown
    assert bot.db.load(run.run_id).status == "awaiting_approval"  # the watcher left the run be


def test_read_only_auto_runs_are_coalesced_per_zone_so_a_storm_spends_one_slot(
        make_bot: Callable[..., Bot]) -> None:
    bot = make_bot(alerts=AlertsConfig(channel=CHANNEL, auto_run_limit=2),
                   texts={"look-at-node": LOOK})
    for i, zone in enumerate(["us-east-1a"] * 5 + ["us-east-1b"]):
        show(bot, notice(f"web-{i}", "sick", reason="CNI not ready", zone=zone,
                         suggestion=("look-at-node", {"node": f"web-{i}"})))
    bot.settle()
    runs = bot.db.runs(limit=20)
    assert sorted(bot.db.load(r.run_id).params["node"] for r in runs) == ["web-0", "web-5"]
    assert all(r.requester.startswith("system:watcher:prod/") for r in runs)
    # the run's time to recovery starts when the Lease went stale
    linked = [e for r in runs for e in bot.db.events(r.run_id) if e.type == "run.linked"]
    assert {e.payload.get("detected_at") for e in linked} == {STALE.isoformat()}
    shown = [t for t in texts(channel_cards(bot)) if "is sick" in t]  # the run cards are there too
    assert "started by the bot as run" in shown[0] and "started by the bot as run" in shown[5]
    assert all("already auto-ran for zone us-east-1a" in t for t in shown[1:5]), shown[1]


def test_a_worker_with_a_slack_token_posts_the_card_it_claimed(fake: FakeSlack,
                                                               tmp_path: Path) -> None:
    """``runbook-bot worker`` and ``api serve`` show what they claim where Slack is configured:
    the replica that claims a notice is the one that can show it."""
    from bot.cli.wiring import notice_sink, open_store
    from bot.config import Settings, SlackConfig
    from tests.fakes.slack_api import BOT_TOKEN

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'w.db'}", alerts=WATCHED,
                        slack=SlackConfig(bot_token=BOT_TOKEN, api_url=fake.base_url))
    store = open_store(settings)
    try:
        notice_sink(settings, store)(dead())
        [card] = fake.messages(CHANNEL)
        assert json.loads(button_in(card, ACTION_ALERT_RUN)["value"])["rb"] == "node-dead-ngns"
    finally:
        store.close()
