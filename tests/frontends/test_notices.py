"""The node watcher's notices without Slack: a log line naming the command, metrics, the table of
``runbook-bot notices``, and which processes watch (``NodeWatchers``)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.config import ClusterConfig, Settings
from bot.engine.node_watch import NodeNotice, Suggestion
from bot.frontends.metrics import Metrics
from bot.frontends.notices import LogNotices, command, notice_handler, notices_table

STALE = datetime(2026, 12, 4, 3, 0, 0, tzinfo=UTC)
NODE = "ip-10-0-1-2.ec2.internal"


def _notice(verdict: str = "dead", runbook: str = "node-dead-ngns") -> NodeNotice:
    return NodeNotice(cluster="prod", node=NODE, verdict=verdict,  # type: ignore[arg-type]
                      detected_at=STALE, noticed_at=datetime(2026, 12, 4, 3, 0, 30, tzinfo=UTC),
                      reason="its Lease is stale and EC2 says it is stopped",
                      suggestion=Suggestion(runbook, {"cluster": "prod", "node": NODE}))


def test_without_slack_a_notice_is_a_log_line_naming_the_command(
        caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    with caplog.at_level(logging.INFO, logger="bot.frontends.notices"):
        notice_handler(LogNotices().on_notice, metrics=metrics)(_notice())
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"watcher: node {NODE} on prod is dead: its Lease is stale")
    assert (f"runbook-bot run node-dead-ngns -p cluster=prod -p node={NODE} "
            f"--suggested-by watcher:prod/{NODE}") in line
    text = metrics.exposition().decode()
    assert 'runbook_bot_node_notices_total{verdict="dead"} 1.0' in text
    assert 'runbook_bot_notice_seconds_bucket{le="30.0"} 1.0' in text


def test_a_sick_node_is_never_told_to_fence() -> None:
    assert command(_notice("sick")) is None
    assert command(_notice("sick", "node-not-ready-triage")) is not None


def test_a_failure_to_show_a_notice_never_reaches_the_watcher() -> None:
    def broken(_: object) -> None:
        raise RuntimeError("Slack is down")

    notice_handler(broken)(_notice())  # logged, not raised


def test_the_notices_table_reads_the_claimed_keys() -> None:
    n = _notice()
    [_, row] = notices_table([(n.noticed_at.timestamp(), n.key)]).splitlines()
    assert row.split() == ["2026-12-04", "03:00:30", "prod", NODE, "dead", STALE.isoformat()]
    assert "no notices" in notices_table([])


def test_watchers_run_for_each_configured_cluster_only_where_enabled(tmp_path: Path) -> None:
    from bot.cli.wiring import NodeWatchers, open_store
    from bot.config_watcher import WatcherConfig

    settings = Settings(database_url=f"sqlite:///{tmp_path / 's.db'}",
                        clusters={c: ClusterConfig(name=c) for c in ("prod", "dev")})
    store = open_store(settings)
    try:
        on = NodeWatchers(settings, store, LogNotices().on_notice)
        assert sorted(w.cluster for w in on.watchers) == ["dev", "prod"]
        off = NodeWatchers(replace(settings, watcher=WatcherConfig(enabled=False)), store,
                           LogNotices().on_notice)
        assert off.watchers == []
        off.start()
        off.stop()
    finally:
        store.close()



def test_without_slack_the_log_line_says_what_became_of_the_auto_run(
        caplog: pytest.LogCaptureFixture) -> None:
    def auto(n: object, *, now: float) -> str:
        return "started by the bot as run rb-abcde (it only reads)"

    with caplog.at_level(logging.INFO, logger="bot.frontends.notices"):
        LogNotices(auto).on_notice(_notice("sick", "node-not-ready-triage"))  # type: ignore[arg-type]
    [line] = [r.getMessage() for r in caplog.records]
    assert line.endswith("(started by the bot as run rb-abcde (it only reads))")
