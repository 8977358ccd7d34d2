"""The auto-run limit in the store: replicas taking slots at the same moment never take one twice.

Two engines on one database stand for two replicas; twenty threads ask at once. Exactly the limit
is granted, on SQLite and on PostgreSQL, and a slot frees one window after it was taken.
"""

from __future__ import annotations

import threading

from bot.store.auto_runs import AutoRunLimit
from bot.store.db import Database, make_engine


def test_replicas_asking_at_once_are_granted_exactly_the_limit(db_url: str) -> None:
    db = Database(db_url)
    other = make_engine(db_url)
    replicas = [AutoRunLimit(e, limit=10, window=600) for e in (db.engine, other)]
    go = threading.Barrier(20)
    granted: list[bool] = []

    def ask(limit: AutoRunLimit) -> None:
        go.wait(timeout=30)
        granted.append(limit.take("look-at-node", now=1000.0))

    threads = [threading.Thread(target=ask, args=(replicas[i % 2],)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert (granted.count(True), granted.count(False)) == (10, 10)
    assert not replicas[0].take("look-at-node", now=1599.0)  # every slot taken at 1000
    assert replicas[1].take("look-at-node", now=1600.0)  # one window later
    assert replicas[0].take("look-at-pod", now=1000.0)  # each runbook has its own
    other.dispose()
    db.close()
