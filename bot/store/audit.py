"""The audit chain: append-only events per run, each hashed over its predecessor.

An incident review must be able to trust the record of who approved what, so every event carries
``prev_hash`` and ``hash = SHA-256(prev_hash + canonical JSON)``; with an audit key it is an
HMAC-SHA256, so someone with database access alone cannot recompute a forged chain. Secrets are
redacted *before* hashing, so the chain never depends on (or preserves) a token.

Truncation of the newest rows leaves a valid prefix, so verification also takes the run's stored
head (last seq and hash): a chain shorter than its head is reported at the first missing seq. With
a key the head is signed (``head_mac``: an HMAC over run id, seq and hash, stored beside it), so a
database writer who deletes the newest events cannot move the head onto the new last one; a
finished run is sealed (its chain ends with ``run.finished``, followed at most by the refusals of
late commands); and the head is published out of the database's reach (the Slack summary, the
transcript, ``runbook-bot audit head``) so ``audit verify --head`` can compare against it.

The first event of a chain records how the chain is written (``payload["chain"]``: the mode,
``hmac-sha256`` or ``sha256``, and for a keyed chain the key id, a fingerprint of the key), so
verification tells "written with key K, you gave none or another" apart from tampering, a chain
rewritten as plain SHA-256 fails when verified with the key, and a chain written under an old key
still verifies with that key. Chains written before the mode was recorded verify as before, with
the note "legacy chain: mode not recorded".

The key may change while a run is open (``Keyring``: the current key signs, previous keys only
verify). The store then writes an ``audit.key_rotated`` event, signed with the key the chain was
written with so far, whose payload names that key (``previous``) and the one that signs from the
next event on (``chain``); from the first event with a key on, a chain never goes back to plain
SHA-256. Verification checks each event with the key in effect at it, and the head with the key
in effect at the head, so whoever holds only the new key can neither rewrite the events before the
rotation nor move it: a chain that changes keys without that event breaks where it changes.

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
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from bot.engine.events import EventType
from bot.engine.plan import canonical_json
from bot.engine.redaction import BUILTIN_PATTERNS, REDACTED, Redactor

__all__ = ["BUILTIN_PATTERNS", "GENESIS", "REDACTED", "Event", "Keyring", "Redactor", "Verdict",
           "event_hash", "make_event", "verify_events"]

GENESIS = "0" * 64
CHAIN = "chain"  # the first event's payload member that records the chain's mode and key id
PREVIOUS = "previous"  # a key rotation's member naming the mode it ends (``chain``: the new one)
ROTATED = EventType.AUDIT_KEY_ROTATED.value
HMAC_MODE = "hmac-sha256"
PLAIN_MODE = "sha256"
LEGACY_NOTE = "legacy chain: mode not recorded"


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


def key_id(key: bytes) -> str:
    """A short fingerprint of an audit key, safe to show: an HMAC of a fixed label under the key."""
    return hmac.new(key, b"runbook-bot audit key id", hashlib.sha256).hexdigest()[:12]


@dataclass(frozen=True)
class Keyring:
    """The audit keys at hand: ``current`` signs (None: new chains are plain SHA-256), ``previous``
    (``RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS``) verify what was written with them and sign only the
    ``audit.key_rotated`` event that hands an open run's chain on to ``current``."""

    current: bytes | None = None
    previous: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, keys: Keys) -> Keyring:
        return keys if isinstance(keys, Keyring) else cls(keys or None)

    def __bool__(self) -> bool:
        return bool(self.current or any(self.previous))

    def get(self, kid: str) -> bytes | None:
        """The key whose id is ``kid``, if held."""
        for key in (self.current, *self.previous):
            if key and key_id(key) == kid:
                return key
        return None

    def ids(self) -> list[str]:
        """The ids of the keys held, the current one first."""
        return list(dict.fromkeys(key_id(k) for k in (self.current, *self.previous) if k))


Keys = bytes | Keyring | None  # a key alone is a keyring of it


def chain_mode(key: bytes | None) -> dict[str, str]:
    """What the first event of a new chain records about how the chain is written."""
    return {"mode": HMAC_MODE, "key_id": key_id(key)} if key else {"mode": PLAIN_MODE}


def head_mac(*, run_id: str, seq: int, hash_: str | None, key: bytes | None) -> str | None:
    """The signature of a run's head (last seq and hash) under the audit key; none without a key."""
    if not key:
        return None
    data = f"runbook-bot audit head\n{run_id}\n{seq}\n{hash_ or ''}".encode()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def make_event(*, run_id: str, prev: Event | None, ts: str, actor: str, type_: str,
               payload: Mapping[str, Any], key: bytes | None, redact: Redactor) -> Event:
    """The next event of a chain, redacted and hashed; the first one records the chain's mode, a
    key rotation the modes it ends and starts (never redacted)."""
    return made_event(run_id=run_id, prev=prev, ts=ts, actor=actor, type_=type_, payload=payload,
                      key=key, redact=redact)[0]


def made_event(*, run_id: str, prev: Event | None, ts: str, actor: str, type_: str,
               payload: Mapping[str, Any], key: bytes | None,
               redact: Redactor) -> tuple[Event, str]:
    """``make_event``, and the canonical JSON of its payload that its hash was taken over (what
    the store writes). The event itself does not carry the text: a payload changed afterwards
    must not verify."""
    clean = redact(dict(payload))
    if prev is None:
        clean[CHAIN] = chain_mode(key)
    elif type_ == ROTATED:
        clean[CHAIN], clean[PREVIOUS] = dict(payload[CHAIN]), dict(payload[PREVIOUS])
    text = canonical_json(clean)
    seq = prev.seq + 1 if prev else 1
    prev_hash = prev.hash if prev else GENESIS
    h = event_hash(run_id=run_id, seq=seq, ts=ts, actor=actor, type_=type_, payload_json=text,
                   prev_hash=prev_hash, key=key)
    return Event(seq=seq, ts=ts, actor=actor, type=type_, payload=clean, prev_hash=prev_hash,
                 hash=h), text


@dataclass(frozen=True)
class Verdict:
    ok: bool
    first_bad_seq: int | None = None
    reason: str = ""
    count: int = 0
    # "tampered" (an event, the head or the seal is wrong), "key" (written with another key or with
    # one not given: nothing is known about tampering), "downgrade" (a plain chain verified with a key)
    kind: str = ""
    notes: tuple[str, ...] = ()
    mode: str | None = None  # as recorded in the chain (at its head); None for a legacy chain
    key_id: str | None = None  # the key the chain is written with at its head


def recorded_mode(events: Sequence[Event]) -> Mapping[str, Any] | None:
    """The chain's recorded mode and key id (from its first event), or None for a legacy chain."""
    if not events:
        return None
    mode = payload_of(events[0]).get(CHAIN)
    return mode if isinstance(mode, Mapping) else None


def payload_of(ev: Event) -> Mapping[str, Any]:
    """An event's payload, parsed from its stored text if it was read without payloads."""
    if ev.payload or not ev.payload_text:
        return ev.payload
    loaded = json.loads(ev.payload_text)
    return loaded if isinstance(loaded, Mapping) else {}


def _named(mode: Mapping[str, Any]) -> str:
    return f"key {mode['key_id']}" if mode.get("key_id") else "no key"


def _key_for(mode: Mapping[str, Any], ring: Keyring, seq: int,
             count: int) -> tuple[bytes | None, Verdict | None]:
    """The key that verifies the events written as ``mode`` records, from ``seq`` on (1: the
    whole chain, else after a rotation); or why it is not at hand (which is not tampering)."""
    written = str(mode.get("mode"))
    if written == PLAIN_MODE:
        return None, None
    if written != HMAC_MODE:
        return None, Verdict(False, seq, f"unknown chain mode {written!r}", count, "tampered")
    kid = str(mode.get("key_id"))
    key = ring.get(kid)
    if key is not None:
        return key, None
    where = "written" if seq == 1 else f"from seq {seq} on (after a key rotation) written"
    if not ring:
        reason = f"{where} with key {kid}; you gave none (set RUNBOOK_BOT_AUDIT_KEY to that key)"
    else:
        reason = (f"{where} with key {kid}; you gave another (key {', '.join(ring.ids())}): "
                  "verify with the key that wrote it (a key rotated since goes in "
                  "RUNBOOK_BOT_AUDIT_PREVIOUS_KEYS)")
    return None, Verdict(False, None, reason, count, "key", mode=written, key_id=kid)


def _rotated_to(ev: Event, mode: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The mode a key rotation hands the chain on to, or why it cannot ("" if it can)."""
    said = payload_of(ev)
    new, old = said.get(CHAIN), said.get(PREVIOUS)
    if not isinstance(new, Mapping) or not isinstance(old, Mapping) or dict(old) != dict(mode):
        return mode, ("the key rotation does not name the key the chain was written with "
                      f"({_named(mode)})")
    if new.get("mode") != HMAC_MODE or not new.get("key_id") or dict(new) == dict(mode):
        return mode, "a key rotation must hand the chain on to another key"
    return new, ""


def verify_events(*, run_id: str, events: Sequence[Event], head_seq: int | None,
                  head_hash: str | None, key: Keys, head_mac_: str | None = None,
                  finished: str | None = None) -> Verdict:
    """Check a run's chain in stored order; name the first seq that is wrong or missing.

    ``key``: the audit key, or a ``Keyring`` (a chain rotated while open needs each key it was
    written with). ``head_mac_`` is the stored signature of the head; ``finished`` the status of a
    run that says it has finished (its chain must then end with ``run.finished`` of that status).
    """
    ring = Keyring.of(key)
    mode = recorded_mode(events)
    notes: tuple[str, ...] = (LEGACY_NOTE,) if mode is None else ()
    seg_key, problem = _first_key(mode, ring, events)
    if problem is not None:
        return problem
    written = str(mode["mode"]) if mode else None
    kid = str(mode["key_id"]) if mode and "key_id" in mode else None

    def bad(seq: int, reason: str, count: int) -> Verdict:
        return Verdict(False, seq, reason, count, "tampered", notes, written, kid)

    prev_hash = GENESIS
    for expected, ev in enumerate(events, start=1):
        broken = _link_problem(run_id, ev, expected, prev_hash, seg_key)
        if broken:
            return bad(expected, broken, expected - 1)
        prev_hash = ev.hash
        if mode is not None and ev.type == ROTATED and expected > 1:
            new, why = _rotated_to(ev, mode)
            if why:
                return bad(expected, why, expected - 1)
            notes += (f"audit key rotated at seq {expected}: {_named(mode)} to {_named(new)}",)
            mode, written, kid = new, str(new["mode"]), str(new["key_id"])
            seg_key, problem = _key_for(new, ring, expected + 1, expected)
            if problem is not None:
                return replace(problem, notes=notes)
    n = len(events)
    off_head = _off_head(events, head_seq, head_hash)
    if off_head is not None:
        return bad(*off_head, n)
    if seg_key and head_seq is not None:  # signed with the key in effect at the head
        expect = head_mac(run_id=run_id, seq=head_seq, hash_=head_hash, key=seg_key)
        if head_mac_ is None and mode is None:
            notes += ("head not signed (written before signed heads)",)
        elif head_mac_ is None or not hmac.compare_digest(head_mac_, expect or ""):
            return bad(n + 1, "the head is not signed by the key: events after seq "
                       f"{n} may have been deleted and the head moved", n)
    if finished is not None:
        sealed = _sealed(events, finished)
        if sealed:
            return bad(n + 1, sealed, n)
    return Verdict(True, None, "", n, "", notes, written, kid)


def _first_key(mode: Mapping[str, Any] | None, ring: Keyring,
               events: Sequence[Event]) -> tuple[bytes | None, Verdict | None]:
    """The key that verifies the chain from its first event on (a legacy chain: the current one);
    or why the chain cannot be verified with the keys given: a plain chain never rotated to a key,
    verified with one (a downgrade), or a key not at hand."""
    if mode is None:
        return ring.current, None
    if mode.get("mode") == PLAIN_MODE and ring and not any(ev.type == ROTATED for ev in events):
        given = ring.current or next(k for k in ring.previous if k)
        return None, Verdict(False, 1, f"written without a key (plain SHA-256) but you gave key "
                             f"{key_id(given)}: either the run predates the key or the chain was "
                             "rewritten without it", 0, "downgrade", mode=PLAIN_MODE)
    return _key_for(mode, ring, 1, 0)


def _link_problem(run_id: str, ev: Event, expected: int, prev_hash: str, key: bytes | None) -> str:
    """Why ``ev`` is not the link at seq ``expected`` after ``prev_hash`` ("" if it is)."""
    if ev.seq != expected:
        return f"expected seq {expected}, found {ev.seq}"
    if ev.prev_hash != prev_hash:
        return "prev_hash does not match the previous event"
    h = event_hash(run_id=run_id, seq=ev.seq, ts=ev.ts, actor=ev.actor, type_=ev.type,
                   payload_json=ev.canonical_payload(), prev_hash=ev.prev_hash, key=key)
    if not hmac.compare_digest(h, ev.hash):
        return "hash does not match the event's contents"
    return ""


def _off_head(events: Sequence[Event], head_seq: int | None,
              head_hash: str | None) -> tuple[int, str] | None:
    """Where and why the chain does not end at its stored head (None if it does, or no head)."""
    n = len(events)
    if head_seq is None:
        return None
    if n < head_seq:
        return n + 1, f"chain ends at seq {n} but its head is seq {head_seq}"
    if n > head_seq or (head_hash is not None and n and events[-1].hash != head_hash):
        return head_seq if n >= head_seq else n, "chain does not end at its head"
    return None


def _sealed(events: Sequence[Event], status: str) -> str:
    """Why a finished run's chain is not sealed by its ``run.finished`` event ("" if it is)."""
    for ev in reversed(events):
        if ev.type == "run.finished":
            said = payload_of(ev).get("status")
            if said != status:
                return f"the run says {status} but its run.finished event says {said}"
            return ""
        # a late command and its refusal may follow, after a key rotation if the key changed
        if not ev.type.startswith("command.") and ev.type != ROTATED:
            break
    return (f"the run has finished ({status}) but its chain does not end with its run.finished "
            "event: the newest events may have been deleted")
