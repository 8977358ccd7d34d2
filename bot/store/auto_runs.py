"""The per-runbook limit on auto-runs, kept in the store so that every replica counts the same runs.

An alert flood must not become a flood of runs: at most ``limit`` auto-runs of one runbook start
in any ``window`` seconds, whichever replicas received the alerts (``alerts.auto_run_limit`` and
``alerts.auto_run_window``). The count is ``limit`` slots per runbook (``alert_auto_runs``), each
holding when it was last taken. A start takes a slot last taken ``window`` or more ago, by a
compare-and-set on the time it read (a conditional UPDATE, or the INSERT of a slot never taken),
so two replicas never take the same slot, on SQLite as on PostgreSQL. A slot is taken at most
once a window, so no stretch of ``window`` seconds holds more than ``limit`` starts: a sliding
window, without the double burst at the edge of fixed ones. Replicas compare their own clocks.
"""

from __future__ import annotations

from sqlalchemy import and_, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from bot.store.schema import auto_runs_t as t


class AutoRunLimit:
    """``take(runbook, now=...)``: whether one more auto-run of ``runbook`` may start now."""

    def __init__(self, engine: Engine, *, limit: int, window: float) -> None:
        self.engine = engine
        self.limit = limit
        self.window = window

    def take(self, runbook: str, *, now: float) -> bool:
        """True, and the start is counted, when fewer than ``limit`` started in the last window."""
        # each failed compare-and-set is a slot another replica took: after ``limit`` of them
        # none is left to try
        for _ in range(self.limit + 1):
            with self.engine.begin() as conn:
                rows = conn.execute(select(t.c.slot, t.c.used_at).where(and_(
                    t.c.runbook == runbook, t.c.slot < self.limit))).all()
            taken = {int(r.slot): float(r.used_at) for r in rows}
            free = [k for k in range(self.limit)
                    if k not in taken or taken[k] <= now - self.window]
            if not free:
                return False
            slot = free[0]
            if slot in taken:
                with self.engine.begin() as conn:
                    if conn.execute(update(t).where(and_(
                            t.c.runbook == runbook, t.c.slot == slot,
                            t.c.used_at == taken[slot])).values(used_at=now)).rowcount:
                        return True
                continue
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(t).values(runbook=runbook, slot=slot, used_at=now))
            except IntegrityError:
                continue  # another replica took it first
            return True
        return False
