"""What the API reads of a run's record beside the facade: its transcript and its audit chain.

Both come from the store, as ``runbook-bot export`` and ``runbook-bot audit verify`` read them;
``api serve`` builds them here and hands them to the app (``exporter=``, ``audit=``), so the app
itself reaches runs only through the runtime facade and a test can give its own. A verdict reads
as ``audit verify`` prints it: intact (0), tampered (1), or cannot verify (2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from bot.store.audit import Keyring, Verdict
from bot.store.integrity import exit_status, verdict_status, verify_run

# (run id, format: md, html or json) -> (file name, bytes); the shape of Slack's exporter
Exporter = Callable[[str, str], tuple[str, bytes]]


class AuditStore(Protocol):
    """What verifying a stored run reads (``bot.store.db.Database``)."""

    redact: Any

    def signed_head(self, run_id: str) -> tuple[int, str | None, str | None]: ...
    def head_mode(self, run_id: str) -> Any: ...
    def header_row(self, run_id: str) -> dict[str, Any]: ...
    def events(self, run_id: str, *, payloads: bool = True, after: int = 0,
               limit: int | None = None) -> Any: ...


class AuditReader(Protocol):
    """A run's audit chain checked (``verify``) and its head, to publish (``head``)."""

    def verify(self, run_id: str) -> dict[str, Any]: ...
    def head(self, run_id: str) -> dict[str, Any]: ...


def store_exporter(store: Any) -> Exporter:
    """Transcripts rendered from the store, the chain verified on the way (``export``)."""
    from bot.present import transcript

    def export(run_id: str, fmt: str) -> tuple[str, bytes]:
        text = transcript.export(store, run_id, fmt=fmt)
        return f"{run_id}.{fmt}", text.encode("utf-8")

    return export


def verdict_text(where: str, verdict: Verdict, head_hash: str | None, *, keyed: bool) -> str:
    """The line ``runbook-bot audit verify`` prints for a verdict."""
    notes = "".join(f" ({n})" for n in verdict.notes)
    code = exit_status(verdict)
    if code == 0:
        how = (f"HMAC-SHA256, key {verdict.key_id}" if verdict.key_id
               else "HMAC-SHA256" if keyed else "plain SHA-256, not HMAC: no RUNBOOK_BOT_AUDIT_KEY")
        return (f"{where}: audit chain intact: {verdict.count} events, head {head_hash or '-'} "
                f"({how}){notes}")
    if code == 2:
        return f"{where}: cannot verify: {verdict.reason}"
    at = f" at seq {verdict.first_bad_seq}" if verdict.first_bad_seq is not None else ""
    return (f"{where}: audit chain BROKEN{at}: {verdict.reason} "
            f"({verdict.count} events before it verify){notes}")


class StoreAudit:
    """``AuditReader`` over the store, with the audit keys (current and previous)."""

    def __init__(self, store: AuditStore, key: Keyring) -> None:
        self._store = store
        self._key = key

    def verify(self, run_id: str) -> dict[str, Any]:
        verdict = verify_run(self._store, run_id, key=self._key)
        head_hash = self._store.signed_head(run_id)[1]
        return {"run_id": run_id, "verdict": verdict_status(verdict),
                "exit_status": exit_status(verdict), "intact": verdict.ok,
                "events": verdict.count, "first_bad_seq": verdict.first_bad_seq,
                "reason": verdict.reason, "notes": list(verdict.notes),
                "message": verdict_text(run_id, verdict, head_hash,
                                        keyed=bool(self._key.current))}

    def head(self, run_id: str) -> dict[str, Any]:
        seq, hash_, mac = self._store.signed_head(run_id)
        mode = self._store.head_mode(run_id)
        kid = mode.get("key_id") if mode else None
        line = (f"{run_id} audit head {seq}:{hash_ or '-'}" + (f" key {kid}" if kid else "")
                + (f" mac {mac}" if mac else ""))
        return {"run_id": run_id, "seq": seq, "hash": hash_, "mac": mac, "key_id": kid,
                "line": line}
