"""The queue between the Alertmanager webhook and the work its deliveries leave: bounded, coalescing.

A delivery is recorded on the request thread (its answer counts what it did); what it changed is
followed up after it: one scan per cluster, the group's card, the auto-runs. Unqueued, each
delivery's follow-up went to the worker pool on its own, so one flood's follow-ups filled the
pool and the next delivery's card waited behind them for a minute. Here:

- a group waits at most once: a later delivery of a group already waiting joins it (its auto-runs
  added, its drop counts replacing the older ones, since each delivery carries the whole group);
- one drainer at a time takes everything waiting as one batch (``handle``), so the alerts that
  arrive while a batch is scanned make the next batch, with one more scan per cluster, not one
  per alert;
- within a batch the smallest groups go first, so a real alert's card is not drawn after a
  flood's hundred annotations;
- backpressure: ``admit(n)`` says whether ``n`` more alerts fit beside those waiting
  (``capacity``); the webhook asks before it records anything and answers 503 when they do not,
  and Alertmanager delivers again later. A delivery of a few alerts fits where a flood does not.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# alerts waiting for their follow-up: ten deliveries at the per-delivery limit (alerts.MAX_TAKEN)
CAPACITY = 1000


@dataclass
class FollowUp:
    """What the deliveries of one group left to do: its card, its auto-runs, what was dropped."""

    group_key: str
    label: str
    alerts: int = 0  # alerts the deliveries changed: the room it takes
    starts: list[Any] = field(default_factory=list)  # StartRun commands the limit let through
    held: dict[str, dict[str, str]] = field(default_factory=dict)  # alert -> runbook -> the limit
    dropped: Mapping[str, int] = field(default_factory=dict)  # reason -> alerts not looked at
    seq: int = 0  # arrival order, among groups of one size
    incident: str | None = None  # the incident the group's runs are linked to (a PagerDuty one)

    def merge(self, later: FollowUp) -> None:
        self.label = later.label
        self.alerts += later.alerts
        self.starts.extend(later.starts)
        for key, runbooks in later.held.items():
            self.held.setdefault(key, {}).update(runbooks)
        self.dropped = later.dropped
        self.incident = later.incident or self.incident


class AlertQueue:
    """``put`` a group's follow-up; a drainer in ``submit``'s pool hands batches to ``handle``."""

    def __init__(self, handle: Callable[[list[FollowUp]], None], *,
                 submit: Callable[..., Any], capacity: int | None = None) -> None:
        self.handle = handle
        self.submit = submit
        self.capacity = CAPACITY if capacity is None else capacity
        self._waiting: dict[str, FollowUp] = {}
        self._size = 0  # alerts waiting (the batch being handled is no longer waiting)
        self._seq = 0
        self._draining = False
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Alerts waiting for their follow-up."""
        return self._size

    def admit(self, alerts: int) -> bool:
        """Whether a delivery of ``alerts`` alerts fits beside those waiting."""
        with self._lock:
            return alerts == 0 or self._size + alerts <= self.capacity

    def put(self, item: FollowUp) -> None:
        with self._lock:
            self._seq += 1
            waiting = self._waiting.get(item.group_key)
            if waiting is None:
                item.seq = self._seq
                self._waiting[item.group_key] = item
            else:
                waiting.merge(item)
            self._size += item.alerts
            if self._draining:
                return  # the drainer takes it with its next batch
            self._draining = True
        self.submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch = sorted(self._waiting.values(), key=lambda f: (f.alerts, f.seq))
                self._waiting = {}
                self._size -= sum(f.alerts for f in batch)
                if not batch:
                    self._draining = False
                    return
            try:
                self.handle(batch)
            except Exception:  # the next batch still goes; the store keeps what was recorded
                log.exception("could not follow up %d alert groups", len(batch))
