"""Notes owed to PagerDuty incidents, kept in the shared database until PagerDuty took them.

When a run linked to a PagerDuty incident finishes, its note (the outcome and the transcript's
link) is recorded here first (``owe``: once per run, whichever replica saw it finish), then posted
by any replica (``claim_due``: a short claim so two replicas do not post it twice). A failure
leaves the row pending with a later ``due_at`` (``failed_once``); a restart finds it still owed.
A note PagerDuty refuses for good (a 4xx: the incident is gone, the From user unknown), or that
failed ``give_up_after`` times, is marked ``failed`` with its error: kept, logged, counted, never
silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from bot.store.schema import pagerduty_notes_t as t


@dataclass(frozen=True)
class OwedNote:
    run_id: str
    incident_id: str
    content: str
    state: str
    attempts: int
    error: str | None = None
    note_id: str | None = None


class NoteLog:
    """The ``pagerduty_notes`` table of the state database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def owe(self, *, run_id: str, incident_id: str, content: str, now: float) -> bool:
        """Record the note a finished run owes; False if it was already recorded."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(t).values(run_id=run_id, incident_id=incident_id,
                                              content=content, state="pending", attempts=0,
                                              due_at=now))
        except IntegrityError:
            return False
        return True

    def claim_due(self, *, now: float, hold: float, limit: int = 20) -> list[OwedNote]:
        """Pending notes due now, each claimed for ``hold`` seconds by this caller."""
        with self.engine.begin() as conn:
            rows = conn.execute(select(t).where(and_(
                t.c.state == "pending", t.c.due_at <= now,
                or_(t.c.claim_until.is_(None), t.c.claim_until < now)))
                .order_by(t.c.due_at).limit(limit)).all()
        out = []
        for r in rows:
            with self.engine.begin() as conn:
                took = conn.execute(update(t).where(and_(
                    t.c.run_id == r.run_id, t.c.state == "pending",
                    or_(t.c.claim_until.is_(None), t.c.claim_until < now)))
                    .values(claim_until=now + hold)).rowcount
            if took:
                out.append(OwedNote(run_id=r.run_id, incident_id=r.incident_id,
                                    content=r.content, state=r.state, attempts=r.attempts))
        return out

    def posted(self, run_id: str, *, note_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(t).where(t.c.run_id == run_id).values(
                state="posted", note_id=note_id, claim_until=None, error=None,
                attempts=t.c.attempts + 1))

    def failed_once(self, run_id: str, *, error: str, retry_at: float | None) -> None:
        """A failed try: again at ``retry_at``, or given up on (``failed``) when None."""
        values: dict[str, Any] = {"error": error[:500], "claim_until": None,
                                  "attempts": t.c.attempts + 1}
        values |= {"state": "failed"} if retry_at is None else {"due_at": retry_at}
        with self.engine.begin() as conn:
            conn.execute(update(t).where(t.c.run_id == run_id).values(**values))

    def get(self, run_id: str) -> OwedNote | None:
        with self.engine.begin() as conn:
            r = conn.execute(select(t).where(t.c.run_id == run_id)).first()
        if r is None:
            return None
        return OwedNote(run_id=r.run_id, incident_id=r.incident_id, content=r.content,
                        state=r.state, attempts=r.attempts, error=r.error, note_id=r.note_id)

    def pending(self) -> int:
        with self.engine.begin() as conn:
            return len(conn.execute(select(t.c.run_id).where(t.c.state == "pending")).all())
