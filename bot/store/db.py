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
being killed (what crash-resume needs) without an fsync per tick.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, IntegrityError, InternalError, OperationalError
from sqlalchemy.pool import StaticPool

from bot.engine.approvals import SYSTEM_ACTOR
from bot.engine.events import audit_key_rotated
from bot.engine.plan import canonical_json
from bot.engine.runstate import AuditDraft, RunState, StepState
from bot.engine.state import RUN_TERMINAL, RunStatus
from bot.errors import ConfigError, LeaseHeld, NotFound, RunIdTaken
from bot.store.audit import (
    CHAIN,
    HMAC_MODE,
    PLAIN_MODE,
    ROTATED,
    Event,
    Keyring,
    Redactor,
    chain_mode,
    head_mac,
    make_event,
)
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

_HEAD = select(runs.c.audit_seq, runs.c.audit_hash).where(runs.c.id == bindparam("rid"))
_OWNED = and_(runs.c.id == bindparam("rid"), runs.c.lease_owner == bindparam("owner"))
_SAVE = update(runs).where(_OWNED).values(
    status=bindparam("status"), header=bindparam("header"), version=runs.c.version + 1,
    next_check_at=bindparam("next_check_at"), lease_until=bindparam("lease_until"))
_SAVE_WITH_HEAD = _SAVE.values(audit_seq=bindparam("audit_seq"), audit_hash=bindparam("audit_hash"),
                               audit_mac=bindparam("audit_mac"))
_STEP = and_(steps_t.c.run_id == bindparam("rid"), steps_t.c.key == bindparam("k"))
_UPDATE_STEP = update(steps_t).where(_STEP).values(position=bindparam("position"),
                                                  state=bindparam("state"))
_DELETE_STEP = delete(steps_t).where(_STEP)
_INSERT_EVENT = insert(events_t)
_EVENTS = (select(events_t.c.seq, events_t.c.ts, events_t.c.actor, events_t.c.type,
                  events_t.c.payload, events_t.c.prev_hash, events_t.c.hash)
           .where(events_t.c.run_id == bindparam("rid")).order_by(events_t.c.seq))
# the event that says how a run's chain is written now: its last key rotation, else its first
_MODE = (select(events_t.c.payload)
         .where(events_t.c.run_id == bindparam("rid"),
                or_(events_t.c.seq == 1, events_t.c.type == ROTATED))
         .order_by(events_t.c.seq.desc()).limit(1))

ACTIVE = tuple(str(s) for s in RunStatus if s not in RUN_TERMINAL)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _header(state: RunState) -> str:
    head = state.header()
    head.pop("runbook_text", None)
    return _dumps(head)


def _epoch(when: datetime | None) -> float | None:
    return when.timestamp() if when is not None else None


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and logs."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    return parsed.render_as_string(hide_password=True)


def _without_password(text: str, url: str) -> str:
    try:
        password = make_url(url).password
    except ArgumentError:
        password = None
    return text.replace(str(password), "***") if password else text


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and its directory created."""
    if url.startswith("sqlite"):
        memory = url in ("sqlite://", "sqlite:///:memory:")
        if not memory:
            path = Path(url.split("///", 1)[1]) if "///" in url else None
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    why = ("a file is in the way" if isinstance(e, FileExistsError)
                           else e.strerror)
                    raise ConfigError(f"cannot open the state database {url}: cannot create "
                                      f"directory {path.parent}: {why}") from e
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if memory:
            kwargs["poolclass"] = StaticPool
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi: Any, _record: Any) -> None:
            cur = dbapi.cursor()
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    try:
        return create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as e:
        raise ConfigError(f"the database URL {masked(url)!r} needs a driver that is not installed "
                          f"({e.name}); "
                          "for PostgreSQL install runbook-bot[postgres]") from e


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
        self.redact = Redactor(redact_patterns)
        # requests refused before any run existed: a chain of their own (``RefusalLog``)
        self.refusals = Refusals(self.engine, keyring=self.keyring, redact=self.redact)
        self._sqlite_lock = threading.Lock() if self.engine.dialect.name == "sqlite" else None
        self._shown = masked(url)
        try:
            self._ensure_schema()
        except ConfigError:  # a schema newer than this code
            self.engine.dispose()
            raise
        except DatabaseError as e:  # unreachable, not a database (corrupt), or not writable
            self.engine.dispose()
            raise ConfigError(f"cannot open the state database {self._shown}: "
                              f"{_without_password(str(e.orig), url)}") from None

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
            with self._sqlite_lock, self.engine.begin() as conn:
                yield conn
        except (OperationalError, InternalError) as e:  # read-only, locked, disk full, gone
            raise ConfigError(f"cannot write the state database {self._shown}: "
                              f"{_without_password(str(e.orig), self.url)}") from None

    # -- writing --------------------------------------------------------------------------------

    def create(self, state: RunState, events_: Sequence[AuditDraft]) -> None:
        try:
            with self._tx() as conn:
                conn.execute(insert(runs).values(
                    id=state.run_id, runbook=state.runbook, status=str(state.status),
                    requester=state.requester, channel=state.origin.get("channel"),
                    parent_id=state.parent, incident=state.incident,
                    dry_run=state.dry_run, created_at=state.created_at,
                    header=_header(state), runbook_text=state.runbook_text, version=1,
                    next_check_at=None,
                    audit_seq=0, audit_hash=None))
                self._append(conn, state.run_id, None, events_)
                for s in state.steps.values():
                    conn.execute(insert(steps_t).values(run_id=state.run_id, key=s.key,
                                                      position=s.position, state=_dumps(s.to_dict())))
        except IntegrityError as e:
            raise RunIdTaken(state.run_id) from e
        state.version = 1

    def claim(self, run_id: str, *, owner: str, now: datetime, ttl: float,
              replace: str | None = None) -> bool:
        """Take the run's lease if it is free, expired, ours, or held by ``replace``."""
        t = now.timestamp()
        free = or_(runs.c.lease_owner.is_(None), runs.c.lease_until < t, runs.c.lease_owner == owner)
        if replace is not None:
            free = or_(free, runs.c.lease_owner == replace)
        with self._tx() as conn:
            res = conn.execute(update(runs).where(and_(runs.c.id == run_id, free))
                               .values(lease_owner=owner, lease_until=t + ttl))
            return bool(res.rowcount)

    def renew(self, run_id: str, *, owner: str, now: datetime, ttl: float) -> bool:
        """Extend the lease to ``now + ttl`` if ``owner`` still holds it (the heartbeat)."""
        with self._tx() as conn:
            res = conn.execute(update(runs).where(and_(runs.c.id == run_id, runs.c.lease_owner == owner))
                               .values(lease_until=now.timestamp() + ttl))
            return bool(res.rowcount)

    def lease_of(self, run_id: str) -> tuple[str | None, float | None]:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs.c.lease_owner, runs.c.lease_until)
                               .where(runs.c.id == run_id)).first()
        if row is None:
            raise NotFound(f"no run {run_id}")
        return row[0], row[1]

    def release(self, run_id: str, *, owner: str) -> None:
        with self._tx() as conn:
            conn.execute(update(runs).where(and_(runs.c.id == run_id, runs.c.lease_owner == owner))
                         .values(lease_owner=None, lease_until=None))

    def save(self, state: RunState, *, owner: str, steps: Iterable[str],
             events: Sequence[AuditDraft], next_check_at: datetime | None,
             lease_until: datetime) -> None:
        """Write the header, the changed step rows and new events, if ``owner`` holds the lease."""
        rid = state.run_id
        with self._tx() as conn:
            values: dict[str, Any] = {
                "rid": rid, "owner": owner, "status": str(state.status), "header": _header(state),
                "next_check_at": _epoch(next_check_at), "lease_until": lease_until.timestamp()}
            rows: list[dict[str, Any]] = []
            if events:
                head = conn.execute(_HEAD, {"rid": rid}).one()
                prev = (Event(seq=head[0], ts="", actor="", type="", payload={}, prev_hash="",
                              hash=head[1]) if head[0] else None)
                rows = self._chain(rid, prev, events,
                                   self._mode(conn, rid, head[1]) if prev is not None else None)
                values["audit_seq"], values["audit_hash"] = rows[-1]["seq"], rows[-1]["hash"]
                values["audit_mac"] = self._mac(rid, rows[-1]["seq"], rows[-1]["hash"])
                res = conn.execute(_SAVE_WITH_HEAD, values)
            else:
                res = conn.execute(_SAVE, values)
            if not res.rowcount:
                raise LeaseHeld(f"run {rid}: this worker no longer holds its lease")
            for key in set(steps):
                self._write_step(conn, rid, state.steps.get(key), key)
            if rows:
                conn.execute(_INSERT_EVENT, rows)
        state.version += 1

    def _write_step(self, conn: Connection, run_id: str, s: StepState | None, key: str) -> None:
        if s is None:
            conn.execute(_DELETE_STEP, {"rid": run_id, "k": key})
            return
        params = {"rid": run_id, "k": key, "position": s.position, "state": _dumps(s.to_dict())}
        if not conn.execute(_UPDATE_STEP, params).rowcount:
            conn.execute(insert(steps_t).values(run_id=run_id, key=key, position=s.position,
                                                state=params["state"]))

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
            ev = make_event(run_id=run_id, prev=prev, ts=d.ts, actor=d.actor, type_=d.type,
                            payload=d.payload, key=key, redact=self.redact)
            rows.append({"run_id": run_id, "seq": ev.seq, "ts": ev.ts, "actor": ev.actor,
                         "type": ev.type, "payload": canonical_json(ev.payload),
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
        row = conn.execute(_MODE, {"rid": run_id}).first()
        said = json.loads(row[0]).get(CHAIN) if row is not None else None
        if isinstance(said, dict) and said.get("mode") in (HMAC_MODE, PLAIN_MODE):
            return said
        return None

    def _append(self, conn: Connection, run_id: str, prev: Event | None,
                drafts: Sequence[AuditDraft]) -> None:
        rows = self._chain(run_id, prev, drafts)
        if rows:
            conn.execute(_INSERT_EVENT, rows)
            conn.execute(update(runs).where(runs.c.id == run_id)
                         .values(audit_seq=rows[-1]["seq"], audit_hash=rows[-1]["hash"],
                                 audit_mac=self._mac(run_id, rows[-1]["seq"], rows[-1]["hash"])))

    # -- reading --------------------------------------------------------------------------------

    def load(self, run_id: str) -> RunState:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs.c.header, runs.c.version, runs.c.runbook_text)
                               .where(runs.c.id == run_id)).first()
            if row is None:
                raise NotFound(f"no run {run_id}; `runbook-bot runs` lists the runs")
            rows = conn.execute(select(steps_t.c.state).where(steps_t.c.run_id == run_id)
                                .order_by(steps_t.c.position)).all()
        header = json.loads(row[0])
        header["runbook_text"] = row[2]
        state = RunState.from_dict(header, [StepState.from_dict(json.loads(r[0])) for r in rows])
        state.version = row[1]
        return state

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
        q = _EVENTS.where(events_t.c.seq > after) if after else _EVENTS
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
            head = conn.execute(_HEAD, {"rid": run_id}).first()
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
        self.engine.dispose()
