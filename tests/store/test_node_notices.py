"""The node watcher's claims: each notice key is claimed by one replica, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

from bot.store.db import Database
from bot.store.node_notices import KEEP, NoticeLog

NOW = 1_796_000_000.0
KEY = "prod/ip-10-0-1-23.ap-southeast-1.compute.internal/dead/2026-12-03T03:05:35+00:00"


def test_two_replicas_racing_for_one_notice_claim_it_once(db_url: str) -> None:
    a, b = Database(db_url), Database(db_url)
    logs = [NoticeLog(a.engine), NoticeLog(b.engine)] * 4
    won: list[bool] = []
    barrier = threading.Barrier(len(logs))

    def claim(log: NoticeLog) -> None:
        barrier.wait()
        won.append(log.claim(KEY, now=NOW))

    threads = [threading.Thread(target=claim, args=(log,)) for log in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]
    assert NoticeLog(a.engine).claim(KEY.replace("/dead/", "/recovered/"), now=NOW)
    a.close(), b.close()


def test_a_claim_is_kept_a_week_then_pruned(db_url: str) -> None:
    db = Database(db_url)
    log = NoticeLog(db.engine)
    assert log.claim(KEY, now=NOW)
    assert not log.claim(KEY, now=NOW + KEEP - 1)
    assert log.claim("other", now=NOW + KEEP + 1)  # prunes the week-old claim on the way
    assert log.claim(KEY, now=NOW + KEEP + 2)
    db.close()
