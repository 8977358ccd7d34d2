"""The Slack front-end's own tables: where each run's messages are, how far Slack has caught up
with each run, and the log of Slack deliveries already handled.

A run card is edited in place for the whole life of a run, across restarts and replicas, so the
channel and ``ts`` of the card (and of its approval, progress and summary replies) are stored next
to the runs, in the same database, in tables of the Slack front-end's own: the run store knows
nothing of Slack.

``slack_runs`` is the outbox's durable cursor: per run, the store version last drawn in Slack and
the last audit event turned into a thread reply, a retry time after Slack failed, and a short
claim so that two replicas never draw the same run at once. A run whose version or audit head is
ahead of its cursor is *lagging*; whichever replica scans next draws it, so a change made by the
terminal, by another replica, or just before a restart still reaches Slack.

``slack_deliveries`` is the durable half of dropping repeated deliveries (``dedupe.py``): every
handled delivery's key, so a second arrival with the same key is dropped by whichever replica
gets it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    and_,
    bindparam,
    delete,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from bot.store.db import ACTIVE
from bot.store.db import runs as runs_t
from bot.store.migrate import Component, ensure_schema

log = logging.getLogger(__name__)

metadata = MetaData()

slack_messages = Table(
    "slack_messages", metadata,
    Column("run_id", String(16), primary_key=True),
    Column("key", String(200), primary_key=True),  # "card", "approval:STEP:HASH", "progress:STEP"
    Column("channel", String(40), nullable=False),
    Column("ts", String(40), nullable=False),
)

slack_runs = Table(
    "slack_runs", metadata,
    Column("run_id", String(16), primary_key=True),
    Column("drawn_version", Integer, nullable=False, default=0),  # runs.version last drawn
    Column("replied_seq", Integer, nullable=False, default=0),  # last audit seq given its reply
    Column("retry_at", Float, nullable=True),  # Slack failed: not before this (epoch seconds)
    Column("failures", Integer, nullable=False, default=0),  # in a row, for the back-off
    Column("owner", String(200), nullable=True),  # the replica drawing it now
    Column("owner_until", Float, nullable=True),
    # a finished run drawn to its summary: scans skip it, so they stay small as history grows
    Column("done", Boolean, nullable=False, default=False, index=True),
)

slack_deliveries = Table(
    "slack_deliveries", metadata,
    Column("key", String(200), primary_key=True),
    Column("seen_at", Float, nullable=False),
)


# registered with the store's migration environment: revisions in ./migrations, own version table
SLACK = Component(name="slack", metadata=metadata, versions=Path(__file__).with_name("migrations"),
                  version_table="alembic_version_slack")


@dataclass(frozen=True)
class Posted:
    channel: str
    ts: str


@dataclass(frozen=True)
class Cursor:
    """How far Slack shows a run: its store version drawn, its audit events replied."""

    drawn_version: int
    replied_seq: int
    failures: int = 0


_MSG = and_(slack_messages.c.run_id == bindparam("rid"), slack_messages.c.key == bindparam("k"))
_GET = select(slack_messages.c.channel, slack_messages.c.ts).where(_MSG)
_KEYS = select(slack_messages.c.key, slack_messages.c.channel, slack_messages.c.ts).where(
    slack_messages.c.run_id == bindparam("rid"))
_ADD = insert(slack_messages).values(run_id=bindparam("rid"), key=bindparam("k"),
                                     channel=bindparam("ch"), ts=bindparam("at"))
_MOVE = update(slack_messages).where(_MSG).values(channel=bindparam("ch"), ts=bindparam("at"))

_RUN = slack_runs.c.run_id == bindparam("rid")
_CLAIM = update(slack_runs).where(and_(_RUN, or_(
    slack_runs.c.owner.is_(None), slack_runs.c.owner_until < bindparam("now"),
    slack_runs.c.owner == bindparam("who")))).values(owner=bindparam("who"),
                                                     owner_until=bindparam("until"))
_CURSOR = select(slack_runs.c.drawn_version, slack_runs.c.replied_seq,
                 slack_runs.c.failures).where(_RUN)
_NEW_CURSOR = insert(slack_runs).values(run_id=bindparam("rid"), drawn_version=0, replied_seq=0,
                                        failures=0, owner=bindparam("who"),
                                        owner_until=bindparam("until"), done=False)
_RELEASE = update(slack_runs).where(and_(_RUN, slack_runs.c.owner == bindparam("who"))).values(
    drawn_version=bindparam("version"), replied_seq=bindparam("seq"),
    failures=bindparam("fails"), retry_at=bindparam("again"),
    done=or_(slack_runs.c.done, bindparam("finished", type_=Boolean)),  # once done, done
    owner=None, owner_until=None)


class SlackStore:
    """Message locations, drawing cursors and the delivery log, on the run store's database engine."""

    PRUNE_EVERY = 1000  # deliveries recorded between two prunings of old keys
    KEEP_SECONDS = 3600.0  # Slack stops retrying a delivery within minutes

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        ensure_schema(engine, SLACK)  # a new cursor table adopts the runs already there
        self._recorded = 0

    def get(self, run_id: str, key: str) -> Posted | None:
        with self.engine.connect() as conn:
            row = conn.execute(_GET, {"rid": run_id, "k": key}).first()
        return Posted(row[0], row[1]) if row else None

    def put(self, run_id: str, key: str, posted: Posted) -> None:
        params = {"rid": run_id, "k": key, "ch": posted.channel, "at": posted.ts}
        try:  # a key is nearly always new: a message is posted once and then edited
            with self.engine.begin() as conn:
                conn.execute(_ADD, params)
        except IntegrityError:
            with self.engine.begin() as conn:
                conn.execute(_MOVE, params)

    def keys(self, run_id: str, prefix: str = "") -> dict[str, Posted]:
        with self.engine.connect() as conn:
            rows = conn.execute(_KEYS, {"rid": run_id}).all()
        return {r[0]: Posted(r[1], r[2]) for r in rows if r[0].startswith(prefix)}

    # -- the outbox's cursor ----------------------------------------------------------------------

    def claim_drawing(self, run_id: str, *, owner: str, now: float, ttl: float) -> Cursor | None:
        """Take the run for drawing and return its cursor; None while another replica draws it."""
        params = {"rid": run_id, "who": owner, "now": now, "until": now + ttl}
        with self.engine.begin() as conn:
            taken = conn.execute(_CLAIM, params).rowcount
            row = conn.execute(_CURSOR, params).first()
        if taken and row is not None:
            return Cursor(int(row[0]), int(row[1]), int(row[2]))
        if row is not None:
            return None  # another replica holds it
        try:  # a run new to Slack: nothing drawn yet
            with self.engine.begin() as conn:
                conn.execute(_NEW_CURSOR, params)
        except IntegrityError:
            return None  # another replica created it a moment ago, and holds it
        return Cursor(0, 0, 0)

    def release_drawing(self, run_id: str, *, owner: str, cursor: Cursor,
                        retry_at: float | None, done: bool = False) -> None:
        """Record how far the run was drawn, when to try again if Slack failed, and whether the
        run is over and shown to its end (``done``: later scans skip it)."""
        with self.engine.begin() as conn:
            kept = conn.execute(_RELEASE, {"rid": run_id, "who": owner,
                                           "version": cursor.drawn_version,
                                           "seq": cursor.replied_seq, "fails": cursor.failures,
                                           "again": retry_at, "finished": done}).rowcount
        if not kept:
            log.warning("the claim on drawing run %s ran out before its drawing ended; another "
                        "replica may have drawn it too", run_id)

    def lagging(self, *, now: float, limit: int = 200, thorough: bool = False) -> list[str]:
        """Runs shown in Slack whose store is ahead of what Slack shows, and that are due.

        Two small queries rather than one join over all history: runs Slack is still following
        (not ``done``), and active runs Slack has never drawn (their replica stopped first);
        ``thorough`` looks at finished runs never drawn too, which reads every run's id.
        """
        cur = slack_runs
        ahead = or_(runs_t.c.version > cur.c.drawn_version, runs_t.c.audit_seq > cur.c.replied_seq)
        due = and_(or_(cur.c.retry_at.is_(None), cur.c.retry_at <= now),
                   or_(cur.c.owner.is_(None), cur.c.owner_until < now))
        following = (select(runs_t.c.id, runs_t.c.created_at)
                     .select_from(cur.join(runs_t, runs_t.c.id == cur.c.run_id))
                     .where(and_(cur.c.done.is_(False), ahead, due)))
        never_drawn = (select(runs_t.c.id, runs_t.c.created_at)
                       .where(and_(runs_t.c.channel.is_not(None),
                                   ~select(cur.c.run_id).where(cur.c.run_id == runs_t.c.id)
                                   .exists())))
        if not thorough:
            never_drawn = never_drawn.where(runs_t.c.status.in_(ACTIVE))
        with self.engine.connect() as conn:
            rows = [*conn.execute(following.limit(limit)).all(),
                    *conn.execute(never_drawn.limit(limit)).all()]
        return [r[0] for r in sorted(rows, key=lambda r: r[1])[:limit]]

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
