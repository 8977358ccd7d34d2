"""Repeated Slack deliveries are dropped: a retried request, or a double click, acts once.

Slack redelivers a request it thinks was not acknowledged (``X-Slack-Retry-Num``), and bolt does
not deduplicate, so every handled delivery's key is recorded (``SlackStore``'s delivery log) and a
second arrival with the same key is dropped, by whichever replica gets it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from bot.frontends.slack.persistence import SlackStore


class Deliveries:
    """Duplicate detection in two steps: in memory on the request thread, durably in the job.

    The acknowledgement must not wait on the database (the engine may be writing to it), so the
    request thread only consults this process's memory, which catches a retry or a double click
    that lands on the same replica. The job then records the key in the database before doing
    anything, which catches the same delivery landing on another replica.
    """

    def __init__(self, slack_store: SlackStore, *, memory: int = 20_000) -> None:
        self.slack_store = slack_store
        self._memory = memory
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def fresh(self, key: str) -> bool:
        """False when this process has seen ``key``; marks it seen."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen[key] = None
            if len(self._seen) > self._memory:
                self._seen.popitem(last=False)
            return True

    def first(self, key: str, *, now: float) -> bool:
        """False when any replica recorded ``key`` before; records it."""
        return self.slack_store.first_delivery(key, now=now)

    def forget(self, key: str) -> None:
        with self._lock:
            self._seen.pop(key, None)
        self.slack_store.forget_delivery(key)
