"""Durable state: runs, their steps and their audit chains, in SQLite or PostgreSQL.

SQLAlchemy Core with a portable schema (text, integers, floats; JSON stored as text), so the same
code runs on the default SQLite file and on a shared PostgreSQL for several replicas:

- ``runs``: one row per run: the header as JSON, the status, the lease (owner and expiry as epoch
  seconds), ``next_check_at`` (epoch seconds; what the workers poll for), and the audit head (last
  seq and hash, and with an audit key its signature ``audit_mac``), which is what lets ``audit
  verify`` detect a truncated chain (a database from before signed heads gets the column from
  migration store_0002);
  The run's parent and incident are columns too (migration store_0004), so a run's children and
  an incident's runs are one indexed query;
- ``steps``: one row per step instance, so a tick writes only the rows it changed;
- ``events``: the append-only audit chain, primary key (run_id, seq).

The store signs with the current audit key and holds the previous ones (``Keyring``): a run whose
chain was written with another key it holds (the key was rotated while the run was open) gets an
``audit.key_rotated`` event signed with that key before the first event signed with the current
one; a run written with a key it does not hold is not written to at all (``ConfigError``).

The tables are defined in ``bot.store.schema`` (and importable from here); their changes are
revisions in ``migrations/versions`` (Alembic), applied at start by ``bot.store.migrate`` under a
lock, so replicas starting together and databases from an older version both come up at the newest
schema.

The database URL's password is never shown: ``masked`` replaces it in every message.

A save is one transaction guarded by the lease (``UPDATE runs ... WHERE lease_owner = :me``): a
worker that lost its lease writes nothing. Claiming is one conditional UPDATE, which is atomic on
both databases. SQLite runs in WAL mode with ``synchronous=NORMAL``: a commit survives the process
being killed (what crash-resume needs) without an fsync per tick. The writes a tick repeats (the
save, the lease's renewal and release, step rows, audit events) run on the DB-API cursor inside
the SQLAlchemy transaction, from SQL compiled once (``bot.store.prepared``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import (
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError, DBAPIError, IntegrityError, InternalError, OperationalError
from sqlalchemy.pool import StaticPool

from bot.engine.approvals import SYSTEM_ACTOR
from bot.engine.events import audit_key_rotated
from bot.engine.runstate import AuditDraft, RunState, StepState
from bot.engine.state import RUN_TERMINAL, RunStatus
from bot.errors import ConfigError, LeaseHeld, NotFound, RunIdTaken
from bot.store import prepared
from bot.store import statements as sql
from bot.store.audit import (
    CHAIN,
    HMAC_MODE,
    PLAIN_MODE,
    Event,
    Keyring,
    Redactor,
    chain_mode,
    head_mac,
    made_event,
)
from bot.store.engines import make_engine, masked, without_password
from bot.store.known import Known, KnownRuns, step_writes
from bot.store.migrate import ensure_schema
from bot.store.refusals import Refusals
from bot.store.schema import (
    STORE,
    alerts_t,
    auto_runs_t,
    events_t,
    groups_t,
    metadata,
    runs,
    steps_t,
    workers_t,
)

# the tables stay importable from here, where they were defined before bot.store.schema
__all__ = ["ACTIVE", "STORE", "Database", "alerts_t", "auto_runs_t", "events_t", "groups_t",
           "make_engine", "masked", "metadata", "runs", "steps_t", "workers_t"]

ACTIVE = tuple(str(s) for s in RunStatus if s not in RUN_TERMINAL)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _header(state: RunState) -> str:
    head = state.header()
    head.pop("runbook_text", None)
    return _dumps(head)


def _epoch(when: datetime | None) -> float | None:
    return when.timestamp() if when is not None else None


class Database:
    """Implements ``bot.engine.ports.RunStore`` and reads the audit chain back."""

    def __init__(self, url: str, *, audit_key: str | None = None, previous_keys: Iterable[str] = (),
                 redact_patterns: Iterable[str] = (), engine: Engine | None = None) -> None:
        self.url = url
        self.engine = engine or make_engine(url)
        self.key = audit_key.encode() if audit_key else None
        # the current key signs; previous ones verify, and sign the rotation of an open run's chain
        self.keyring = Keyring(self.key, tuple(k.encode() for k in previous_keys if k))
        # run id -> (a head hash, how the chain is written at it): one query per run, not per save
        self._modes: dict[str, tuple[str, Mapping[str, Any] | None]] = {}
        # what this store last read or wrote of recent runs: a tick and a load skip the statements
        # whose answers it holds, checked against the run's version and head (``bot.store.known``)
        self._known = KnownRuns()
        self._returning = bool(self.engine.dialect.update_returning)
        self.redact = Redactor(redact_patterns)
        # requests refused before any run existed: a chain of their own (``RefusalLog``)
        self.refusals = Refusals(self.engine, keyring=self.keyring, redact=self.redact)
        self._sqlite_lock = threading.Lock() if self.engine.dialect.name == "sqlite" else None
        # SQLite: the connection this store's writes go through, one after another under the lock,
        # kept between them (no pool checkout and return per transaction); closed by ``close``
        self._writer: Connection | None = None
        self._memory = isinstance(self.engine.pool, StaticPool)  # sqlite:// is one connection
        self._shown = masked(url)
        try:
            self._ensure_schema()
        except ConfigError:  # a schema newer than this code
            self.engine.dispose()
            raise
        except DatabaseError as e:  # unreachable, not a database (corrupt), or not writable
            self.engine.dispose()
            raise ConfigError(f"cannot open the state database {self._shown}: "
                              f"{without_password(str(e.orig), url)}") from None

    def _ensure_schema(self) -> None:
        """Migrate to the newest schema. SQLite answers "database is locked" at once, without
        its busy timeout, to a replica that opens the file while another is switching it to WAL
        or migrating it; that replica tries again (for up to 30 s) instead of failing to start."""
        deadline = time.monotonic() + 30
        while True:
            try:
                ensure_schema(self.engine, STORE, shown=self._shown)
                return
            except OperationalError as e:
                if (self.engine.dialect.name != "sqlite" or "locked" not in str(e.orig)
                        or time.monotonic() > deadline):
                    raise
                self.engine.dispose()
                time.sleep(0.1)

    def _mac(self, run_id: str, seq: int, hash_: str) -> str | None:
        return head_mac(run_id=run_id, seq=seq, hash_=hash_, key=self.key)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            # SQLite allows one writer; serialising in-process writers avoids busy-waiting on its lock
            if self._sqlite_lock is None:
                with self.engine.begin() as conn:
                    yield conn
                return
            with self._sqlite_lock:
                if self._writer is None or self._writer.closed or self._writer.invalidated:
                    self._writer = self.engine.connect()
                conn = self._writer
                try:
                    with conn.begin():
                        yield conn
                except DBAPIError:
                    # the database failed the write: the next one starts on a new connection, not
                    # this one back from the pool (an in-memory database has one, kept: closing
                    # it would lose the database); anything else was rolled back, and it is kept
                    self._writer = None
                    if not self._memory:
                        conn.invalidate()
                    conn.close()
                    raise
        except (OperationalError, InternalError) as e:  # read-only, locked, disk full, gone
            raise ConfigError(f"cannot write the state database {self._shown}: "
                              f"{without_password(str(e.orig), self.url)}") from None

    # -- writing --------------------------------------------------------------------------------

    def create(self, state: RunState, events_: Sequence[AuditDraft]) -> None:
        rid = state.run_id
        rows = self._chain(rid, None, events_)
        seq, hash_ = (rows[-1]["seq"], rows[-1]["hash"]) if rows else (0, None)
        steps = {s.key: (s.position, _dumps(s.to_dict())) for s in state.steps.values()}
        try:
            with self._tx() as conn:
                conn.execute(insert(runs).values(
                    id=rid, runbook=state.runbook, status=str(state.status),
                    requester=state.requester, channel=state.origin.get("channel"),
                    parent_id=state.parent, incident=state.incident,
                    dry_run=state.dry_run, created_at=state.created_at,
                    header=_header(state), runbook_text=state.runbook_text, version=1,
                    next_check_at=None, audit_seq=seq, audit_hash=hash_,
                    audit_mac=self._mac(rid, seq, hash_) if hash_ is not None else None))
                if rows:
                    prepared.execute(conn, sql.INSERT_EVENT, rows)
                if steps:
                    prepared.execute(conn, sql.INSERT_STEP, [
                        {"rid": rid, "k": k, "position": p, "state": j} for k, (p, j) in steps.items()])
        except IntegrityError as e:
            raise RunIdTaken(rid) from e
        state.version = 1
        if hash_ is not None:
            self._known.put(rid, Known(1, seq, hash_, state.runbook_text, steps))

    def claim(self, run_id: str, *, owner: str, now: datetime, ttl: float,
              replace: str | None = None) -> bool:
        """Take the run's lease if it is free, expired, ours, or held by ``replace``."""
        t = now.timestamp()
        values = {"rid": run_id, "owner": owner, "t": t, "until": t + ttl, "replace": replace}
        with self._tx() as conn:
            if not self._returning:
                return bool(prepared.execute(
                    conn, sql.CLAIM_FREE if replace is None else sql.CLAIM_REPLACE, values))
            row = prepared.first(
                conn, sql.CLAIM_FREE_ROW if replace is None else sql.CLAIM_REPLACE_ROW, values)
        if row is not None:  # the load that follows at once need not read the row again
            self._known.claimed(run_id, row, within=ttl / 3)
        return row is not None

    def renew(self, run_id: str, *, owner: str, now: datetime, ttl: float) -> bool:
        """Extend the lease to ``now + ttl`` if ``owner`` still holds it (the heartbeat)."""
        with self._tx() as conn:
            return bool(prepared.execute(conn, sql.RENEW, {"rid": run_id, "owner": owner,
                                                           "until": now.timestamp() + ttl}))

    def lease_of(self, run_id: str) -> tuple[str | None, float | None]:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs.c.lease_owner, runs.c.lease_until)
                               .where(runs.c.id == run_id)).first()
        if row is None:
            raise NotFound(f"no run {run_id}")
        return row[0], row[1]

    def release(self, run_id: str, *, owner: str) -> None:
        self._known.fresh(run_id)  # forget the row its claim returned
        with self._tx() as conn:
            prepared.execute(conn, sql.RELEASE, {"rid": run_id, "owner": owner})

    def save(self, state: RunState, *, owner: str, steps: Iterable[str],
             events: Sequence[AuditDraft], next_check_at: datetime | None,
             lease_until: datetime) -> None:
        """Write the header, the changed step rows and new events, if ``owner`` holds the lease."""
        rid = state.run_id
        values: dict[str, Any] = {
            "rid": rid, "owner": owner, "status": str(state.status), "header": _header(state),
            "next_check_at": _epoch(next_check_at), "lease_until": lease_until.timestamp()}
        keys = set(steps)
        known = self._known.pop(rid)  # put back only once this save is written as it says
        self._known.fresh(rid)  # and the row a claim returned is no longer the run's
        with self._tx() as conn:
            after = (self._save_known(conn, state, known, keys, events, dict(values))
                     if known is not None else None)
            if after is None:
                self._save_read(conn, state, keys, events, values)
        if after is not None:
            self._known.put(rid, after)
        state.version += 1

    def _save_known(self, conn: Connection, state: RunState, known: Known, keys: set[str],
                    events: Sequence[AuditDraft], values: dict[str, Any]) -> Known | None:
        """``save`` from what the store kept of the run: None, having written nothing, when the
        run is no longer as kept (or the lease is lost)."""
        rid = state.run_id
        values |= {"v": known.version, "seq0": known.seq, "hash0": known.hash}
        rows: list[dict[str, Any]] = []
        seq, hash_ = known.seq, known.hash
        if events:
            prev = Event(seq=seq, ts="", actor="", type="", payload={}, prev_hash="", hash=hash_)
            rows = self._chain(rid, prev, events, self._mode(conn, rid, hash_))
            seq, hash_ = rows[-1]["seq"], rows[-1]["hash"]
            values |= {"audit_seq": seq, "audit_hash": hash_, "audit_mac": self._mac(rid, seq, hash_)}
        if not prepared.execute(conn, sql.SAVE_KNOWN_WITH_HEAD if rows else sql.SAVE_KNOWN, values):
            return None
        wanted: dict[str, tuple[int, str] | None] = {}
        for key in keys:
            s = state.steps.get(key)
            wanted[key] = (s.position, _dumps(s.to_dict())) if s is not None else None
        stored, gone, changed, new = step_writes(known.steps, wanted)
        if gone:
            prepared.execute(conn, sql.DELETE_STEP, [{"rid": rid, "k": k} for k in gone])
        for statement, which in ((sql.UPDATE_STEP, changed), (sql.INSERT_STEP, new)):
            if which:
                prepared.execute(conn, statement, [{"rid": rid, "k": k, "position": stored[k][0],
                                                    "state": stored[k][1]} for k in which])
        if rows:
            prepared.execute(conn, sql.INSERT_EVENT, rows)
        return Known(known.version + 1, seq, hash_, known.text, stored)

    def _save_read(self, conn: Connection, state: RunState, keys: set[str],
                   events: Sequence[AuditDraft], values: dict[str, Any]) -> None:
        """``save`` reading the run's head and trying each step row as an update first."""
        rid = state.run_id
        rows: list[dict[str, Any]] = []
        if events:
            head = conn.execute(sql.HEAD, {"rid": rid}).one()
            prev = (Event(seq=head[0], ts="", actor="", type="", payload={}, prev_hash="",
                          hash=head[1]) if head[0] else None)
            rows = self._chain(rid, prev, events,
                               self._mode(conn, rid, head[1]) if prev is not None else None)
            values["audit_seq"], values["audit_hash"] = rows[-1]["seq"], rows[-1]["hash"]
            values["audit_mac"] = self._mac(rid, rows[-1]["seq"], rows[-1]["hash"])
            saved = prepared.execute(conn, sql.SAVE_WITH_HEAD, values)
        else:
            saved = prepared.execute(conn, sql.SAVE, values)
        if not saved:
            raise LeaseHeld(f"run {rid}: this worker no longer holds its lease")
        for key in keys:
            self._write_step(conn, rid, state.steps.get(key), key)
        if rows:
            prepared.execute(conn, sql.INSERT_EVENT, rows)

    def _write_step(self, conn: Connection, run_id: str, s: StepState | None, key: str) -> None:
        if s is None:
            prepared.execute(conn, sql.DELETE_STEP, {"rid": run_id, "k": key})
            return
        params = {"rid": run_id, "k": key, "position": s.position, "state": _dumps(s.to_dict())}
        if not prepared.execute(conn, sql.UPDATE_STEP, params):
            prepared.execute(conn, sql.INSERT_STEP, params)

    def _chain(self, run_id: str, prev: Event | None, drafts: Sequence[AuditDraft],
               mode: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The rows of ``drafts`` after ``prev``, whose chain is written as ``mode`` says (None:
        a new chain, or a legacy one that does not say); if that is not with the current key,
        the chain's key rotation first, signed with the key it was written with."""
        now = chain_mode(self.key)
        signed: list[tuple[AuditDraft, bytes | None]] = [(d, self.key) for d in drafts]
        if prev is not None and mode is not None and drafts and dict(mode) != now:
            rotation = audit_key_rotated(previous=mode, chain=now).draft(actor=SYSTEM_ACTOR,
                                                                           ts=drafts[0].ts)
            signed.insert(0, (rotation, self._old_key(run_id, mode)))
        rows: list[dict[str, Any]] = []
        for d, key in signed:
            ev, text = made_event(run_id=run_id, prev=prev, ts=d.ts, actor=d.actor, type_=d.type,
                                  payload=d.payload, key=key, redact=self.redact)
            rows.append({"run_id": run_id, "seq": ev.seq, "ts": ev.ts, "actor": ev.actor,
                         "type": ev.type, "payload": text,
                         "prev_hash": ev.prev_hash, "hash": ev.hash})
            prev = ev
        if rows and (mode is not None or rows[0]["seq"] == 1):
            if len(self._modes) >= 4096:
                self._modes.pop(next(iter(self._modes)))
            self._modes[run_id] = (rows[-1]["hash"], now)
        return rows

    def _old_key(self, run_id: str, mode: Mapping[str, Any]) -> bytes | None:
        """The key ``run_id``'s chain was written with, to sign its rotation to the current one."""
        how = "" if mode.get("mode") == PLAIN_MODE else f"key {mode.get('key_id')}"
        if self.key is None:  # never from a key back to plain SHA-256, which anyone can forge
            raise ConfigError(f"run {run_id}: its audit chain is written with {how}, and a run "
                              "cannot go on without it: set RUNBOOK_BOT_AUDIT_KEY (docs/security.md, "
                              "\"Rotate the audit key\")")
        if not how:
            return None  # a key set for the first time: the rotation is plain SHA-256
        key = self.keyring.get(str(mode.get("key_id")))
        if key is None:
            raise ConfigError(f"run {run_id}: its audit chain is written with {how}, which this "
                              "bot does not hold, so it cannot hand the chain on to the current "
                              "key: keep the old key in RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS "
                              "(docs/security.md, \"Rotate the audit key\")")
        return key

    def _mode(self, conn: Connection, run_id: str, head_hash: str) -> Mapping[str, Any] | None:
        """How ``run_id``'s chain is written at its head ``head_hash`` (None: a legacy chain)."""
        known = self._modes.get(run_id)
        if known is not None and known[0] == head_hash:
            return known[1]
        row = conn.execute(sql.MODE, {"rid": run_id}).first()
        said = json.loads(row[0]).get(CHAIN) if row is not None else None
        if isinstance(said, dict) and said.get("mode") in (HMAC_MODE, PLAIN_MODE):
            return said
        return None

    # -- reading --------------------------------------------------------------------------------

    def load(self, run_id: str) -> RunState:
        """The run as stored; its step rows, and its runbook text (written once), from what the
        store kept of it when the run's row says it is still at that version (``bot.store.known``);
        the row itself as the claim of its lease returned it, when this store just claimed it."""
        known = self._known.get(run_id)
        row: Any = self._known.fresh(run_id)
        if known is not None and row is not None and known.at(row[1], int(row[2]), row[3]):
            text, steps = known.text, known.steps
        else:
            row, text, steps = self._read(run_id, known)
        header = json.loads(row[0])
        header["runbook_text"] = text
        state = RunState.from_dict(header, [StepState.from_dict(json.loads(j))
                                            for _position, j in steps.values()])
        state.version = row[1]
        return state

    def _read(self, run_id: str, known: Known | None) -> tuple[Any, str, Mapping[str, Any]]:
        """The run's row, runbook text and step rows, read unless ``known`` has them."""
        with self.engine.connect() as conn:
            row = conn.execute(sql.RUN if known is not None else sql.RUN_WITH_TEXT,
                               {"rid": run_id}).first()
            if row is None:
                raise NotFound(f"no run {run_id}; `runbook-bot runs` lists the runs")
            version, seq, hash_ = row[1], int(row[2]), row[3]
            text = known.text if known is not None else row[-1]
            if known is not None and known.at(version, seq, hash_):
                return row, text, known.steps
            steps = {r[0]: (r[1], r[2]) for r in conn.execute(sql.STEPS, {"rid": run_id})}
        if hash_ is not None:
            self._known.put(run_id, Known(version, seq, hash_, text, steps))
        return row, text, steps

    def due(self, *, now: datetime, limit: int = 100) -> list[str]:
        """Active runs whose next check is due, or that no worker holds (e.g. after a crash)."""
        t = now.timestamp()
        unleased = or_(runs.c.lease_owner.is_(None), runs.c.lease_until < t)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(runs.c.id).where(and_(
                    runs.c.status.in_(ACTIVE), unleased,
                    # a run waiting for people with no expiry has nothing due until they act
                    or_(runs.c.next_check_at <= t,
                        and_(runs.c.next_check_at.is_(None),
                             runs.c.status != str(RunStatus.AWAITING_APPROVAL)))))
                .order_by(runs.c.next_check_at).limit(limit)).all()
        return [r[0] for r in rows]

    def runs(self, *, active: bool | None = None, channel: str | None = None,
             limit: int = 50) -> list[RunState]:
        """Run headers (without steps), newest first."""
        q = select(runs.c.header, runs.c.version).order_by(runs.c.created_at.desc()).limit(limit)
        if active is True:
            q = q.where(runs.c.status.in_(ACTIVE))
        elif active is False:
            q = q.where(runs.c.status.notin_(ACTIVE))
        if channel is not None:
            q = q.where(runs.c.channel == channel)
        return self._headers(q)

    def _headers(self, q: Any) -> list[RunState]:
        """Run headers (without steps or runbook text) from a query of (header, version) rows."""
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        out = []
        for header, version in rows:
            st = RunState.from_dict(json.loads(header) | {"runbook_text": ""}, [])
            st.version = version
            out.append(st)
        return out

    def children(self, run_id: str, *, limit: int = 50) -> list[RunState]:
        """The headers (without steps) of the runs that name ``run_id`` as their parent, oldest
        first."""
        q = (select(runs.c.header, runs.c.version).where(runs.c.parent_id == run_id)
             .order_by(runs.c.created_at).limit(limit))
        return self._headers(q)

    def holding(self, compensation: str, *, lifted_by: str) -> str | None:
        """The newest run (not a dry run) that left ``compensation`` in place, unless a child run
        of ``lifted_by`` succeeded since (it lifted it, and what older runs left with it); None
        when no run holds it open."""
        inner = json.dumps(compensation, ensure_ascii=False)[1:-1]
        pattern = "%" + re.sub(r"([\\%_])", r"\\\1", inner) + "%"
        q = (select(runs.c.id, runs.c.header)
             .where(runs.c.dry_run.is_(False), runs.c.header.like(pattern, escape="\\"))
             .order_by(runs.c.created_at.desc()).limit(20))
        with self.engine.connect() as conn:
            for rid, header in conn.execute(q).all():
                if compensation not in (json.loads(header).get("compensations") or ()):
                    continue
                lifted = conn.execute(select(runs.c.id).where(
                    runs.c.parent_id == rid, runs.c.runbook == lifted_by,
                    runs.c.status == str(RunStatus.SUCCEEDED)).limit(1)).first()
                return None if lifted is not None else str(rid)
        return None

    # -- workers ---------------------------------------------------------------------------------

    def worker_beat(self, worker: str, now: datetime) -> None:
        """Record that ``worker`` went round its loop at ``now``."""
        at = now.timestamp()
        with self.engine.begin() as conn:
            if conn.execute(update(workers_t).where(workers_t.c.id == worker)
                            .values(beat_at=at)).rowcount:
                return
            try:
                with conn.begin_nested():
                    conn.execute(insert(workers_t).values(id=worker, started_at=now.isoformat(),
                                                          beat_at=at))
            except IntegrityError:  # another thread of the same worker inserted it first
                pass

    def worker_gone(self, worker: str) -> None:
        """``worker`` stopped: it no longer counts as live."""
        with self.engine.begin() as conn:
            conn.execute(delete(workers_t).where(workers_t.c.id == worker))

    def workers(self, *, now: datetime, within: float) -> list[str]:
        """The workers that beat less than ``within`` seconds before ``now``, newest beat first."""
        q = (select(workers_t.c.id).where(workers_t.c.beat_at >= now.timestamp() - within)
             .order_by(workers_t.c.beat_at.desc()))
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(q)]

    def count_runs(self, *, active: bool) -> int:
        """How many runs are active (or finished, ``active=False``)."""
        cond = runs.c.status.in_(ACTIVE) if active else runs.c.status.notin_(ACTIVE)
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(runs).where(cond)).scalar_one())

    def events(self, run_id: str, *, payloads: bool = True, after: int = 0,
               limit: int | None = None) -> list[Event]:
        """The run's chain in seq order, from ``after + 1`` (at most ``limit`` of them);
        ``payloads=False`` skips parsing them (for verify)."""
        q = sql.EVENTS.where(events_t.c.seq > after) if after else sql.EVENTS
        with self.engine.connect() as conn:
            rows = conn.execute(q if limit is None else q.limit(limit), {"rid": run_id}).all()
        loads = json.loads
        return [Event(seq=r[0], ts=r[1], actor=r[2], type=r[3],
                      payload=loads(r[4]) if payloads else {}, prev_hash=r[5], hash=r[6],
                      payload_text=r[4]) for r in rows]

    def head(self, run_id: str) -> tuple[int, str | None]:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs.c.audit_seq, runs.c.audit_hash)
                               .where(runs.c.id == run_id)).first()
        if row is None:
            raise NotFound(f"no run {run_id}; `runbook-bot runs` lists the runs")
        return int(row[0]), row[1]

    def head_mode(self, run_id: str) -> Mapping[str, Any] | None:
        """How the run's chain is written at its head: the mode and key id its last key rotation,
        else its first event, records (None for a legacy chain)."""
        with self.engine.connect() as conn:
            head = conn.execute(sql.HEAD, {"rid": run_id}).first()
            if head is None:
                raise NotFound(f"no run {run_id}; `runbook-bot runs` lists the runs")
            return self._mode(conn, run_id, head[1]) if head[0] else None

    def signed_head(self, run_id: str) -> tuple[int, str | None, str | None]:
        """The run's head with its signature (None without a key or before signed heads)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(runs.c.audit_seq, runs.c.audit_hash, runs.c.audit_mac)
                               .where(runs.c.id == run_id)).first()
        if row is None:
            raise NotFound(f"no run {run_id}; `runbook-bot runs` lists the runs")
        return int(row[0]), row[1], row[2]

    def header_row(self, run_id: str) -> dict[str, Any]:
        """The stored run header as shown by ``status`` and ``runs``, with the indexed columns."""
        with self.engine.connect() as conn:
            row = conn.execute(select(runs.c.header, runs.c.requester, runs.c.runbook,
                                      runs.c.status).where(runs.c.id == run_id)).first()
        if row is None:
            raise NotFound(f"no run {run_id}; `runbook-bot runs` lists the runs")
        header: dict[str, Any] = json.loads(row[0])
        header["_columns"] = {"requester": row[1], "runbook": row[2], "status": row[3]}
        return header

    def close(self) -> None:
        if self._sqlite_lock is None:
            self.engine.dispose()
            return
        with self._sqlite_lock:  # after a write under way; none starts until all are closed
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self.engine.dispose()
