"""Verifying a whole run, not just its chain: the header, the seal, the published head, exports.

``bot.store.audit`` checks a list of events against a head. What people read about a run comes
from more than that list: ``status`` and ``runs`` show the stored header (requester, runbook,
params, status), a transcript shows sections built from the events, and the head itself sits in a
database row. This module ties them to the chain:

- the header a run shows must say what its ``run.created`` event says (requester, runbook, file,
  params, dry run, origin), its owner and links what its ``run.handed_over`` and ``run.linked``
  events say, and, once finished, the status its ``run.finished`` event says;
- a head published out of the database's reach (``audit head``, the Slack summary, the
  transcript) is compared with the chain when given;
- an exported JSON document is sealed as a whole (``seal``: an HMAC with the chain's key, the one
  in effect at its head after any key rotation, over the canonical JSON of every other member),
  so editing its ``run``, ``steps`` or ``timeline`` fails verification; without a key the seal is
  a plain SHA-256, which catches accidents only, and the ``run`` section is still checked against
  the events.

Each takes the audit key or a ``Keyring`` (the current key and the previous ones), which a chain
rotated while its run was open needs.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from bot.engine.plan import canonical_json
from bot.engine.state import RUN_TERMINAL
from bot.runbook.params import shown_as_recorded
from bot.store.audit import (
    HMAC_MODE,
    Event,
    Keyring,
    Keys,
    Redactor,
    Verdict,
    key_id,
    payload_of,
    verify_events,
)

TERMINAL = frozenset(str(s) for s in RUN_TERMINAL)


class RunReader(Protocol):
    redact: Redactor

    def signed_head(self, run_id: str) -> tuple[int, str | None, str | None]: ...
    def header_row(self, run_id: str) -> dict[str, Any]: ...
    def events(self, run_id: str, *, payloads: bool = True, after: int = 0,
               limit: int | None = None) -> list[Event]: ...


def params_agree(shown: Any, recorded: Any, *, written: bool) -> bool:
    """Whether params shown agree with those ``run.created`` recorded: in the normal form
    (``bot.runbook.params``), or with ``written``, each value as written or as recorded."""
    if canonical_json(shown) == canonical_json(recorded):
        return True
    if not (written and isinstance(shown, Mapping) and isinstance(recorded, Mapping)
            and set(shown) == set(recorded)):
        return False
    return all(shown_as_recorded(shown[k], recorded[k]) for k in recorded)


def header_problem(header: Mapping[str, Any], events: Sequence[Event],
                   redact: Redactor, *, written_params: bool = False) -> str:
    """Why the header a run shows disagrees with its ``run.created`` event ("" if it agrees).

    ``written_params``: the header may show a param as written (``6m``) instead of as recorded
    (360.0), which exports did while their run section showed params that way."""
    if not events or events[0].type != "run.created":
        return "the chain does not start with run.created"
    first = events[0]
    said = payload_of(first)
    expect: dict[str, Any] = {"requester": first.actor, "runbook": said.get("runbook"),
                              "params": said.get("params"), "dry_run": said.get("dry_run")}
    if "file" in said:
        expect["runbook_file"] = said["file"]
    if "title" in said:
        expect["title"] = said["title"]
    columns = header.get("_columns") or {}
    # both sides redacted with today's patterns: a chain written before a pattern was added holds
    # what it did not redact then, and a header redacted now still agrees with it
    expect = {name: redact(want) for name, want in expect.items()}
    for name, want in expect.items():
        for where, shown in (("header", header.get(name)), ("row", columns.get(name, want))):
            agree = (params_agree(redact(shown), want, written=written_params) if name == "params"
                     else canonical_json(redact(shown)) == canonical_json(want))
            if not agree:
                return (f"the run's {name} ({where}) says {shown!r} but its run.created event "
                        f"says {want!r}")
    if "params_written" in header and not params_agree(
            redact(header["params_written"]), expect["params"], written=True):
        return (f"the run's params as written say {header['params_written']!r} but its "
                f"run.created event says {expect['params']!r}")
    origin = header.get("origin") or {}
    for name, want in (said.get("origin") or {}).items():
        if canonical_json(redact(origin.get(name))) != canonical_json(redact(want)):
            return (f"the run's origin.{name} says {origin.get(name)!r} but its run.created "
                    f"event says {want!r}")
    problem = _links_problem(header, events, first.actor)
    if problem:
        return problem
    status = str(header.get("status", ""))
    if str(columns.get("status", status)) != status:
        return f"the run's status column says {columns.get('status')} but its header says {status}"
    return ""


def _links_problem(header: Mapping[str, Any], events: Sequence[Event], requester: str) -> str:
    """Why the owner and links a run shows disagree with its ``run.linked`` and
    ``run.handed_over`` events ("" if they agree; a header from before provenance shows none)."""
    said: dict[str, Any] = {"owner": requester, "parent": None, "incident": None,
                            "suggested_by": None}
    for ev in events:
        if ev.type == "run.linked":
            links = payload_of(ev)
            said |= {k: links.get(k) for k in ("parent", "incident", "suggested_by")}
        elif ev.type == "run.handed_over":
            said["owner"] = payload_of(ev).get("to")
    for name, want in said.items():
        if name not in header or (name == "owner" and not header[name]):
            continue
        if header[name] != want:
            where = "run.handed_over" if name == "owner" else "run.linked"
            return (f"the run's {name} says {header[name]!r} but its {where} events say "
                    f"{want!r}")
    return ""


def _published(verdict: Verdict, events: Sequence[Event],
               published: tuple[int, str] | None) -> Verdict:
    if published is None or not verdict.ok:
        return verdict
    seq, hash_ = published
    if len(events) < seq:
        return replace(verdict, ok=False, first_bad_seq=len(events) + 1, kind="tampered",
                       reason=f"the published head is seq {seq} but the chain ends at seq "
                       f"{len(events)}")
    if not events[seq - 1].hash.startswith(hash_.lower()) or len(hash_) < 12:
        return replace(verdict, ok=False, first_bad_seq=seq, kind="tampered",
                       reason=f"seq {seq} is not the event whose hash was published")
    return verdict


def verify_run(store: RunReader, run_id: str, *, key: Keys,
               published: tuple[int, str] | None = None) -> Verdict:
    """The chain of a stored run, its signed head, its seal and the header it shows."""
    seq, hash_, mac = store.signed_head(run_id)
    header = store.header_row(run_id)
    events = store.events(run_id, payloads=False)
    status = str(header.get("status", ""))
    verdict = verify_events(run_id=run_id, events=events, head_seq=seq, head_hash=hash_, key=key,
                            head_mac_=mac, finished=status if status in TERMINAL else None)
    if verdict.ok:
        problem = header_problem(header, events, store.redact)
        if problem:
            verdict = replace(verdict, ok=False, first_bad_seq=1, kind="tampered", reason=problem)
    return _published(verdict, events, published)


# -- exported documents -------------------------------------------------------------------------

def sealing_key(verdict: Verdict, keys: Keys) -> bytes | None:
    """The key a document is sealed with: the chain's own at its head when held (a run written
    before a key rotation is sealed with the old key), else the current one."""
    ring = Keyring.of(keys)
    held = ring.get(verdict.key_id) if verdict.key_id else None
    return held or ring.current


def document_seal(doc: Mapping[str, Any], key: bytes | None) -> dict[str, str]:
    """The seal of an exported document over every member but ``seal``."""
    body = canonical_json({k: v for k, v in doc.items() if k != "seal"}).encode()
    if key:
        return {"mode": "hmac-sha256", "key_id": key_id(key),
                "mac": hmac.new(key, body, hashlib.sha256).hexdigest()}
    return {"mode": "sha256", "mac": hashlib.sha256(body).hexdigest()}


def verify_document(doc: Mapping[str, Any], *, key: Keys,
                    published: tuple[int, str] | None = None) -> Verdict:
    """An exported JSON transcript: its chain, head, seal, and the run section it shows."""
    run = doc["run"]
    run_id = str(run["run_id"] if "run_id" in run else run["id"])
    events = [Event.from_dict(e) for e in doc["events"]]
    head = doc.get("head") or {}
    status = str(run.get("status", ""))
    verdict = verify_events(run_id=run_id, events=events, head_seq=head.get("seq"),
                            head_hash=head.get("hash"), key=key, head_mac_=head.get("mac"),
                            finished=status if status in TERMINAL else None)
    if not verdict.ok:
        return verdict
    # exports that carry params_written show run.params in the normal form; older ones showed
    # them as written there, which still verifies for them
    problem = header_problem(run, events, Redactor(), written_params="params_written" not in run)
    if problem:
        return replace(verdict, ok=False, first_bad_seq=1, kind="tampered", reason=problem)
    seal = doc.get("seal")
    if seal is None:
        if verdict.mode is not None:  # documents exported since chains record their mode are sealed
            return replace(verdict, ok=False, kind="tampered",
                           reason="the document's seal is missing")
        return replace(verdict, notes=(*verdict.notes, "document not sealed (older export): "
                                       "only its events and run section are checked"))
    if Keyring.of(key) and isinstance(seal, Mapping) and seal.get("mode") != HMAC_MODE:
        # exported without the key: anyone can recompute a plain seal, so the sections it covers
        # cannot be vouched for; neither intact nor tampered
        return replace(verdict, ok=False, kind="key",
                       reason="the document was sealed without the audit key (exported without "
                       "RUNBOOK_BOT_AUDIT_KEY): its events verify, its other sections cannot be; "
                       "export it again with the key")
    if seal != document_seal(doc, sealing_key(verdict, key)):
        return replace(verdict, ok=False, kind="tampered",
                       reason="the document's seal does not match: a section other than the "
                       "events (run, steps, timeline...) was edited")
    return _published(verdict, events, published)


# -- what a verdict means to a person and to a shell ---------------------------------------------

INTACT, BROKEN, UNVERIFIED = "intact", "broken", "unverified"


def verdict_status(verdict: Verdict) -> str:
    """``intact``; ``unverified`` when the chain (or a document's seal) was written with a key that
    was not given, which says nothing about tampering; else ``broken``."""
    if verdict.ok:
        return INTACT
    return UNVERIFIED if verdict.kind == "key" else BROKEN


def exit_status(verdict: Verdict) -> int:
    """The exit status of ``audit verify`` and ``export``: 0 intact, 1 tampered, 2 cannot verify."""
    return {INTACT: 0, BROKEN: 1, UNVERIFIED: 2}[verdict_status(verdict)]
