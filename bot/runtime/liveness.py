"""The worker loop's heartbeat: proof, for a readiness check, that runs are still being driven.

A worker thread that died, or that is stuck in one run, stops going round its loop; a process
serving Slack without it would acknowledge people while no wait ever ends. The loop beats on each
pass and after each run it drives; ``stalled`` says whether the last beat is older than allowed,
by the runner's clock (so tests move time instead of sleeping). Listeners (the metrics) hear
each beat.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from bot.engine.ports import Clock


class Heartbeat:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.last: datetime | None = None
        self.listeners: list[Callable[[datetime], None]] = []
        self._lock = threading.Lock()

    def beat(self) -> None:
        now = self.clock.now()
        with self._lock:
            self.last = now
        for listen in self.listeners:
            listen(now)

    def stalled(self, *, after: float) -> str | None:
        """Why the loop counts as stalled (never went round, or not for ``after`` seconds), or None."""
        with self._lock:
            last = self.last
        if last is None:
            return "the worker loop has not started"
        age = (self.clock.now() - last).total_seconds()
        if age > after:
            return f"the worker loop last went round {age:.0f} s ago (more than {after:.0f} s)"
        return None
