"""Refused requests: an append-only hash chain of its own, for what was refused before any run
existed (a start the policy does not allow, an API call without valid credentials).

A refused request has no run, so no run's chain can hold it. Each row (``refusals``, revision
store_0007) says who asked, what, why it was refused and via what (front-end, channel, host...),
and when; it is chained like a run's events (``audit.event_hash`` over the previous row's hash and
the canonical JSON of the row, with the run id ``refusals``), an HMAC under the audit key when one
is set. The row records the id of the key that signed it (``kid``; empty: plain SHA-256), so a key
rotated later still verifies what it signed while it is held (``audit_previous_keys``), and a plain
row after a signed one is refused as tampering. What is stored is redacted first with the store's
redactor: a token in a header or a reason is never kept.

Appending is a compare-and-set on the next seq (its primary key): two replicas appending at once
never fork the chain; the one that loses reads the new head and tries again. What this chain does
not catch without a head published elsewhere: deleting its newest rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from bot.engine.plan import canonical_json
from bot.store.audit import GENESIS, Keyring, Redactor, event_hash, key_id
from bot.store.schema import refusals_t as t

CHAIN_ID = "refusals"  # the run id the rows are hashed under: a row cannot pass as a run's event
TYPE = "request.refused"
_TRIES = 20


@dataclass(frozen=True)
class Refusal:
    seq: int
    ts: str
    actor: str
    what: str
    reason: str
    via: Mapping[str, Any]
    kid: str
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class RefusalsVerdict:
    ok: bool
    count: int
    first_bad_seq: int | None = None
    reason: str = ""
    kind: str = ""  # "tampered", or "key" (signed with a key not given: nothing known)


def _body(what: str, reason: str, via: Mapping[str, Any]) -> str:
    return canonical_json({"reason": reason, "via": dict(via), "what": what})


def _hash(r: Refusal, key: bytes | None) -> str:
    return event_hash(run_id=CHAIN_ID, seq=r.seq, ts=r.ts, actor=r.actor, type_=TYPE,
                      payload_json=_body(r.what, r.reason, r.via), prev_hash=r.prev_hash, key=key)


class Refusals:
    """Implements ``bot.engine.ports.RefusalLog`` over the store's engine; reads and verifies."""

    def __init__(self, engine: Engine, *, keyring: Keyring, redact: Redactor) -> None:
        self.engine = engine
        self.keyring = keyring
        self.redact = redact

    def record(self, *, ts: str, actor: str, what: str, reason: str,
               via: Mapping[str, Any]) -> None:
        """Append one refusal, redacted, chained onto the newest row."""
        key = self.keyring.current
        kid = key_id(key) if key else ""
        actor, what, reason = (str(self.redact(v))[:2000] for v in (actor, what, reason))
        clean: dict[str, Any] = json.loads(canonical_json(self.redact(dict(via))))
        for _ in range(_TRIES):
            with self.engine.begin() as conn:
                last = conn.execute(select(t.c.seq, t.c.hash).order_by(t.c.seq.desc())
                                    .limit(1)).first()
            seq, prev = (int(last.seq) + 1, str(last.hash)) if last else (1, GENESIS)
            row = Refusal(seq=seq, ts=ts, actor=actor[:200], what=what, reason=reason, via=clean,
                          kid=kid, prev_hash=prev, hash="")
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(t).values(
                        seq=seq, ts=ts, actor=row.actor, what=what, reason=reason,
                        via=canonical_json(clean), kid=kid, prev_hash=prev, hash=_hash(row, key)))
                return
            except IntegrityError:
                continue  # another writer took this seq: chain onto theirs
        raise RuntimeError("could not append to the refusals chain")  # pragma: no cover

    def rows(self, *, limit: int | None = None) -> list[Refusal]:
        """Every row in seq order, or the newest ``limit`` (still oldest first)."""
        q = select(t).order_by(t.c.seq.desc() if limit else t.c.seq)
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            found = [Refusal(seq=int(r.seq), ts=r.ts, actor=r.actor, what=r.what,
                             reason=r.reason, via=json.loads(r.via), kid=r.kid or "",
                             prev_hash=r.prev_hash, hash=r.hash)
                     for r in conn.execute(q)]
        return sorted(found, key=lambda r: r.seq)

    def verify(self) -> RefusalsVerdict:
        return verify_refusals(self.rows(), self.keyring)


def verify_refusals(rows: Sequence[Refusal], keyring: Keyring) -> RefusalsVerdict:
    """Check the chain from its first row: seqs in order from 1, each row linked to the one before
    and hashed with the key that signed it; name the first row that is wrong."""
    prev, signed = GENESIS, False
    for n, r in enumerate(rows, start=1):
        key = keyring.get(r.kid) if r.kid else None
        why, kind = "", "tampered"
        if r.seq != n:
            why = f"seq {n} is missing (found {r.seq})"
        elif r.prev_hash != prev:
            why = f"refusal {n} does not follow refusal {n - 1}"
        elif signed and not r.kid:
            why = f"refusal {n} is not signed, but an earlier one is"
        elif r.kid and key is None:
            why, kind = f"refusal {n} is signed with audit key {r.kid}, which was not given", "key"
        elif _hash(r, key) != r.hash:
            why = f"refusal {n} was changed after it was recorded"
        if why:
            return RefusalsVerdict(False, n - 1, n, why, kind)
        prev, signed = r.hash, signed or bool(r.kid)
    return RefusalsVerdict(True, len(rows))
