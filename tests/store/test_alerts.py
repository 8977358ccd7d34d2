"""The alert log: one answer per alert across replicas sharing the database, and pruning."""

from __future__ import annotations

import threading

from bot.store.alerts import KEEP_AFTER, AlertLog
from bot.store.db import Database

NOW = 1_796_000_000.0


def note(log: AlertLog, status: str = "firing", starts: str = "2026-12-03T03:01:12Z",
         key: str = "prod/5ef77f1f7cbe2a1d", now: float = NOW) -> str:
    return log.note(key=key, group_key="g" * 64, status=status, starts_at=starts,
                    data={"labels": {"alertname": "KubeNodeNotReady"}}, now=now)


def test_an_alert_is_new_once_resolved_once_and_new_again_when_it_fires_again(db_url: str):
    db = Database(db_url)
    log = AlertLog(db.engine)
    assert note(log) == "new"
    assert note(log) == "same"
    assert note(log, "resolved") == "resolved"
    assert note(log, "resolved") == "same"
    assert note(log, starts="2026-12-03T05:00:00Z") == "new"
    db.close()


def test_two_replicas_on_one_database_agree_each_change_is_seen_once(db_url: str):
    """Two store instances (two replicas) receive the same deliveries at the same moment."""
    a, b = Database(db_url), Database(db_url)
    logs = [AlertLog(a.engine), AlertLog(b.engine)]
    for status in ("firing", "resolved"):
        seen: list[str] = []
        barrier = threading.Barrier(8)

        def deliver(log: AlertLog, status: str = status, seen: list[str] = seen,
                    barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            seen.append(note(log, status))

        threads = [threading.Thread(target=deliver, args=(logs[i % 2],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        want = "new" if status == "firing" else "resolved"
        assert sorted(seen) == sorted([want] + ["same"] * 7), seen
    claims = [logs[i % 2].claim_card("g" * 64, "{}:{}", now=NOW) for i in range(4)]
    assert claims.count(True) == 1
    a.close()
    b.close()


def test_an_alert_is_kept_a_day_after_it_was_last_heard_of(db_url: str):
    db = Database(db_url)
    log = AlertLog(db.engine)
    note(log)
    log.claim_card("g" * 64, "{}:{}", now=NOW)
    log.set_card("g" * 64, channel="C1", ts="1.0")
    assert log.prune(now=NOW + KEEP_AFTER - 1) == 0
    note(log, "resolved", now=NOW + 3600)  # heard of again: kept a day from now
    assert log.prune(now=NOW + KEEP_AFTER + 1) == 0 and log.card("g" * 64) == ("C1", "1.0")
    assert log.prune(now=NOW + 3600 + KEEP_AFTER + 1) == 1
    assert log.group("g" * 64) == [] and log.card("g" * 64) is None
    assert note(log) == "new"  # forgotten: a new firing is news again
    db.close()
