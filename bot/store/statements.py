"""The run store's statements, built once (``bot.store.db``): SQLAlchemy caches their compiled
form, so a tick spends no time building or compiling them; each takes its values as bound
parameters (``rid`` the run id, ``owner`` the lease owner)."""

from __future__ import annotations

from sqlalchemy import and_, bindparam, delete, insert, or_, select, update

from bot.store.audit import ROTATED
from bot.store.schema import events_t, runs, steps_t

HEAD = select(runs.c.audit_seq, runs.c.audit_hash).where(runs.c.id == bindparam("rid"))
OWNED = and_(runs.c.id == bindparam("rid"), runs.c.lease_owner == bindparam("owner"))
SAVE = update(runs).where(OWNED).values(
    status=bindparam("status"), header=bindparam("header"), version=runs.c.version + 1,
    next_check_at=bindparam("next_check_at"), lease_until=bindparam("lease_until"))
SAVE_WITH_HEAD = SAVE.values(audit_seq=bindparam("audit_seq"), audit_hash=bindparam("audit_hash"),
                            audit_mac=bindparam("audit_mac"))
STEP = and_(steps_t.c.run_id == bindparam("rid"), steps_t.c.key == bindparam("k"))
UPDATE_STEP = update(steps_t).where(STEP).values(position=bindparam("position"),
                                                 state=bindparam("state"))
DELETE_STEP = delete(steps_t).where(STEP)
INSERT_STEP = insert(steps_t).values(run_id=bindparam("rid"), key=bindparam("k"),
                                     position=bindparam("position"), state=bindparam("state"))
INSERT_EVENT = insert(events_t)
# a save guessed from what the store kept of the run (``bot.store.known``): it matches no row when
# anything wrote the run since
AS_KNOWN = and_(runs.c.version == bindparam("v"), runs.c.audit_seq == bindparam("seq0"),
                runs.c.audit_hash == bindparam("hash0"))
SAVE_KNOWN = SAVE.where(AS_KNOWN)
SAVE_KNOWN_WITH_HEAD = SAVE_WITH_HEAD.where(AS_KNOWN)
RUN_ROW = (runs.c.header, runs.c.version, runs.c.audit_seq, runs.c.audit_hash)
RUN = select(*RUN_ROW).where(runs.c.id == bindparam("rid"))
RUN_WITH_TEXT = RUN.add_columns(runs.c.runbook_text)
STEPS = (select(steps_t.c.key, steps_t.c.position, steps_t.c.state)
         .where(steps_t.c.run_id == bindparam("rid")).order_by(steps_t.c.position))
CLAIM = update(runs).values(lease_owner=bindparam("owner"), lease_until=bindparam("until"))
FREE = or_(runs.c.lease_owner.is_(None), runs.c.lease_until < bindparam("t"),
           runs.c.lease_owner == bindparam("owner"))
CLAIM_FREE = CLAIM.where(runs.c.id == bindparam("rid"), FREE)
CLAIM_REPLACE = CLAIM.where(runs.c.id == bindparam("rid"),
                             or_(FREE, runs.c.lease_owner == bindparam("replace")))
# a claim that answers with the run's row, which the load that follows it then need not read
CLAIM_FREE_ROW = CLAIM_FREE.returning(*RUN_ROW)
CLAIM_REPLACE_ROW = CLAIM_REPLACE.returning(*RUN_ROW)
RENEW = update(runs).where(OWNED).values(lease_until=bindparam("until"))
RELEASE = update(runs).where(OWNED).values(lease_owner=None, lease_until=None)
EVENTS = (select(events_t.c.seq, events_t.c.ts, events_t.c.actor, events_t.c.type,
                 events_t.c.payload, events_t.c.prev_hash, events_t.c.hash)
          .where(events_t.c.run_id == bindparam("rid")).order_by(events_t.c.seq))
# the event that says how a run's chain is written now: its last key rotation, else its first
MODE = (select(events_t.c.payload)
        .where(events_t.c.run_id == bindparam("rid"),
               or_(events_t.c.seq == 1, events_t.c.type == ROTATED))
        .order_by(events_t.c.seq.desc()).limit(1))
