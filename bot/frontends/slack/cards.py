"""Where each run's Slack messages are, and which Slack deliveries were already handled.

A run card is edited in place for the whole life of a run, across restarts and replicas, so the
channel and ``ts`` of the card (and of its approval, progress and summary replies) are stored next
to the runs, in the same database, in tables of the Slack front-end's own: the run store knows
nothing of Slack. The same goes for deliveries: Slack redelivers a request it thinks was not
acknowledged (``X-Slack-Retry-Num``), and bolt does not deduplicate, so every handled delivery's
key is recorded and a second arrival with the same key is dropped, by whichever replica gets it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import Column, Float, MetaData, String, Table, delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

metadata = MetaData()

slack_messages = Table(
    "slack_messages", metadata,
    Column("run_id", String(16), primary_key=True),
    Column("key", String(200), primary_key=True),  # "card", "approval:STEP:HASH", "progress:STEP"
    Column("channel", String(40), nullable=False),
    Column("ts", String(40), nullable=False),
)

slack_deliveries = Table(
    "slack_deliveries", metadata,
    Column("key", String(200), primary_key=True),
    Column("seen_at", Float, nullable=False),
)


@dataclass(frozen=True)
class Posted:
    channel: str
    ts: str


class CardStore:
    """Message locations per run, and the delivery log, on the run store's database engine."""

    PRUNE_EVERY = 1000  # deliveries recorded between two prunings of old keys
    KEEP_SECONDS = 3600.0  # Slack stops retrying a delivery within minutes

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        metadata.create_all(engine)
        self._recorded = 0

    def get(self, run_id: str, key: str) -> Posted | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(slack_messages.c.channel, slack_messages.c.ts).where(
                slack_messages.c.run_id == run_id, slack_messages.c.key == key)).first()
        return Posted(row[0], row[1]) if row else None

    def put(self, run_id: str, key: str, posted: Posted) -> None:
        with self.engine.begin() as conn:
            done = conn.execute(update(slack_messages).where(
                slack_messages.c.run_id == run_id, slack_messages.c.key == key,
            ).values(channel=posted.channel, ts=posted.ts)).rowcount
            if not done:
                conn.execute(insert(slack_messages).values(run_id=run_id, key=key,
                                                           channel=posted.channel, ts=posted.ts))

    def keys(self, run_id: str, prefix: str = "") -> dict[str, Posted]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(slack_messages.c.key, slack_messages.c.channel,
                                       slack_messages.c.ts).where(
                slack_messages.c.run_id == run_id)).all()
        return {r[0]: Posted(r[1], r[2]) for r in rows if r[0].startswith(prefix)}

    def first_delivery(self, key: str, *, now: float) -> bool:
        """Record a delivery; False when the same key was recorded before (a duplicate)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(slack_deliveries).values(key=key[:200], seen_at=now))
        except IntegrityError:
            return False
        self._recorded += 1
        if self._recorded % self.PRUNE_EVERY == 0:
            self.forget_deliveries(before=now - self.KEEP_SECONDS)
        return True

    def forget_delivery(self, key: str) -> None:
        """Let a delivery count again, e.g. a click that could not be checked."""
        with self.engine.begin() as conn:
            conn.execute(delete(slack_deliveries).where(slack_deliveries.c.key == key[:200]))

    def forget_deliveries(self, *, before: float) -> int:
        """Drop delivery keys older than ``before``: Slack stops retrying after minutes."""
        with self.engine.begin() as conn:
            return int(conn.execute(delete(slack_deliveries).where(
                slack_deliveries.c.seen_at < before)).rowcount)


class Deliveries:
    """Duplicate detection in two steps: in memory on the request thread, durably in the job.

    The acknowledgement must not wait on the database (the engine may be writing to it), so the
    request thread only consults this process's memory, which catches a retry or a double click
    that lands on the same replica. The job then records the key in the database before doing
    anything, which catches the same delivery landing on another replica.
    """

    def __init__(self, cards: CardStore, *, memory: int = 20_000) -> None:
        self.cards = cards
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
        return self.cards.first_delivery(key, now=now)

    def forget(self, key: str) -> None:
        with self._lock:
            self._seen.pop(key, None)
        self.cards.forget_delivery(key)
