"""Which processes drive runs right now: each ``worker`` and ``slack serve`` keeps a row in the
store's ``workers`` table fresh as its loop goes round, so a terminal that approves a step knows
whether it can let go of the run (a worker carries it on) or must drive it itself.

A worker counts as live when it beat less than ``LIVE_WITHIN`` seconds ago and, if it runs on
this host, its process still exists (``bot.runtime.leases.owner_alive``, the test run leases use).
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime
from typing import Protocol

from bot.runtime.leases import HOST, owner_alive

log = logging.getLogger(__name__)

BEAT_EVERY = 5.0  # seconds between two writes of a worker's beat
LIVE_WITHIN = 30.0  # a worker whose last beat is older is not counted on


class WorkerTable(Protocol):
    def worker_beat(self, worker: str, now: datetime) -> None: ...
    def worker_gone(self, worker: str) -> None: ...
    def workers(self, *, now: datetime, within: float) -> list[str]: ...


class WorkerRecord:
    """This process's row: a heartbeat listener (``Runner.heartbeat.listeners``) that writes the
    beat at most every ``every`` seconds, and ``close`` when the loop stops."""

    def __init__(self, table: WorkerTable, *, every: float = BEAT_EVERY) -> None:
        self.table = table
        self.every = every
        self.id = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._last: datetime | None = None

    def __call__(self, now: datetime) -> None:
        if self._last is not None and (now - self._last).total_seconds() < self.every:
            return
        try:
            self.table.worker_beat(self.id, now)
            self._last = now
        except Exception:  # the database is away: runs go on, the beat is written next time
            log.warning("could not record this worker's heartbeat", exc_info=True)

    def close(self) -> None:
        try:
            self.table.worker_gone(self.id)
        except Exception:
            log.warning("could not remove this worker's row", exc_info=True)


def live_workers(table: WorkerTable, now: datetime) -> list[str]:
    """The workers known to be driving runs at ``now``."""
    return [w for w in table.workers(now=now, within=LIVE_WITHIN) if owner_alive(w)]
