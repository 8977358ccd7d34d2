"""The node watcher's claims: every replica watches, one of them posts each notice.

A notice is claimed by inserting its key (``NodeNotice.key``: cluster, node or zone, verdict and
when the Lease went stale) into ``node_notices``; the primary key lets one insert through, on
SQLite as on PostgreSQL, and every other replica's insert fails and it stays quiet. A claim is
kept for a week (``KEEP``), past which ``claim`` prunes it.
"""

from __future__ import annotations

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from bot.store.schema import node_notices_t as t

KEEP = 7 * 86400.0


class NoticeLog:
    """``claim(key, now=...)``: True for the one replica whose insert went through."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def claim(self, key: str, *, now: float) -> bool:
        try:
            with self.engine.begin() as conn:
                conn.execute(delete(t).where(t.c.expires_at < now))
                conn.execute(insert(t).values(key=key, claimed_at=now, expires_at=now + KEEP))
        except IntegrityError:
            return False
        return True

    def recent(self, *, limit: int = 50) -> list[tuple[float, str]]:
        """The notices claimed last, newest first: (claimed_at, key) (``runbook-bot notices``)."""
        with self.engine.begin() as conn:
            rows = conn.execute(select(t.c.claimed_at, t.c.key)
                                .order_by(t.c.claimed_at.desc(), t.c.key).limit(limit)).all()
        return [(float(r.claimed_at), str(r.key)) for r in rows]
