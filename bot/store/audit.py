"""The audit chain: append-only events per run, each hashed over its predecessor.

An incident review must be able to trust the record of who approved what, so every event carries
``prev_hash`` and ``hash = SHA-256(prev_hash + canonical JSON)``; with an audit key it is an
HMAC-SHA256, so someone with database access alone cannot recompute a forged chain. Secrets are
redacted *before* hashing, so the chain never depends on (or preserves) a token.

Truncation of the newest rows leaves a valid prefix, so verification also takes the run's stored
head (last seq and hash): a chain shorter than its head is reported at the first missing seq.

This module is pure (no database): ``verify_events`` works equally on rows read from the store and
on the event list of an exported transcript (``audit verify --file``).

Export shape: ``{"run": {...}, "events": [event, ...], "head": {"seq": N, "hash": "..."}}`` where an
event is ``{"seq", "ts", "actor", "type", "payload", "prev_hash", "hash"}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from bot.engine.plan import canonical_json
from bot.engine.redaction import BUILTIN_PATTERNS, REDACTED, Redactor

__all__ = ["BUILTIN_PATTERNS", "GENESIS", "REDACTED", "Event", "Redactor", "Verdict", "event_hash",
           "make_event", "verify_events"]

GENESIS = "0" * 64


@dataclass(frozen=True)
class Event:
    seq: int
    ts: str  # ISO-8601 UTC
    actor: str
    type: str
    payload: Mapping[str, Any]
    prev_hash: str
    hash: str
    # the payload's canonical JSON exactly as stored, set only by the store when reading rows, so
    # verifying a stored chain hashes what is on disk without re-serialising every payload
    payload_text: str = field(default="", compare=False, repr=False)

    def canonical_payload(self) -> str:
        return self.payload_text or canonical_json(self.payload)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "ts": self.ts, "actor": self.actor, "type": self.type,
                "payload": dict(self.payload), "prev_hash": self.prev_hash, "hash": self.hash}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Event:
        return cls(seq=int(raw["seq"]), ts=str(raw["ts"]), actor=str(raw["actor"]),
                   type=str(raw["type"]), payload=raw.get("payload") or {},
                   prev_hash=str(raw["prev_hash"]), hash=str(raw["hash"]))


_PLAIN = re.compile(r'^[^"\\\x00-\x1f\x7f\u2028\u2029]*$')


@lru_cache(maxsize=4096)
def _s(text: str) -> str:
    """``json.dumps(text, ensure_ascii=False)``; plain text (the usual case) skips the encoder."""
    if _PLAIN.match(text):
        return f'"{text}"'
    return json.dumps(text, ensure_ascii=False)


def event_hash(*, run_id: str, seq: int, ts: str, actor: str, type_: str, payload_json: str,
               prev_hash: str, key: bytes | None) -> str:
    """The hash of one event over ``prev_hash`` and its canonical JSON body.

    The body is ``canonical_json({"actor", "payload", "run", "seq", "ts", "type"})``, assembled
    from the payload's canonical text so verifying a stored chain never re-parses payloads. The
    run id is inside the body, so an event cannot be transplanted into another run's chain.
    """
    body = (f'{{"actor":{_s(actor)},"payload":{payload_json},"run":{_s(run_id)},"seq":{seq},'
            f'"ts":{_s(ts)},"type":{_s(type_)}}}')
    data = (prev_hash + body).encode()
    if key:
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


def make_event(*, run_id: str, prev: Event | None, ts: str, actor: str, type_: str,
               payload: Mapping[str, Any], key: bytes | None, redact: Redactor) -> Event:
    """The next event of a chain, redacted and hashed."""
    clean = redact(dict(payload))
    text = canonical_json(clean)
    seq = prev.seq + 1 if prev else 1
    prev_hash = prev.hash if prev else GENESIS
    h = event_hash(run_id=run_id, seq=seq, ts=ts, actor=actor, type_=type_, payload_json=text,
                   prev_hash=prev_hash, key=key)
    return Event(seq=seq, ts=ts, actor=actor, type=type_, payload=clean, prev_hash=prev_hash, hash=h)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    first_bad_seq: int | None = None
    reason: str = ""
    count: int = 0


def verify_events(*, run_id: str, events: Sequence[Event], head_seq: int | None,
                  head_hash: str | None, key: bytes | None) -> Verdict:
    """Check a run's chain in stored order; name the first seq that is wrong or missing."""
    prev_hash = GENESIS
    for expected, ev in enumerate(events, start=1):
        if ev.seq != expected:
            return Verdict(False, expected, f"expected seq {expected}, found {ev.seq}", expected - 1)
        if ev.prev_hash != prev_hash:
            return Verdict(False, expected, "prev_hash does not match the previous event", expected - 1)
        h = event_hash(run_id=run_id, seq=ev.seq, ts=ev.ts, actor=ev.actor, type_=ev.type,
                       payload_json=ev.canonical_payload(), prev_hash=ev.prev_hash, key=key)
        if not hmac.compare_digest(h, ev.hash):
            return Verdict(False, expected, "hash does not match the event's contents", expected - 1)
        prev_hash = ev.hash
    n = len(events)
    if head_seq is not None:
        if n < head_seq:
            return Verdict(False, n + 1, f"chain ends at seq {n} but its head is seq {head_seq}", n)
        if n > head_seq or (head_hash is not None and n and events[-1].hash != head_hash):
            return Verdict(False, head_seq if n >= head_seq else n, "chain does not end at its head", n)
    return Verdict(True, None, "", n)
