"""The CSI external-attacher's back-off: a VolumeAttachment whose attach or detach failed is tried
again only after a delay that doubles with each failure.

The real attacher requeues a failed VolumeAttachment on a rate-limited work queue: the first retry
after ``--retry-interval-start`` (1 s), each next one twice as late, up to ``--retry-interval-max``
(5 min). A success forgets the count. Its own writes of ``attachError``/``detachError`` do not
requeue the object (``shouldEnqueueVAChange``: they would break the back-off), but any other change
to it does, at once: a deletion, a finalizer, its status. So a detach that keeps failing is tried
about ten times in its first ten minutes and then once every five, and once EC2 lets the volume
go, the VolumeAttachment stays until the next try, up to five minutes later. The count is kept
per name, as the work queue keeps it per key, until an attach or detach gets through.

Options ``attacher_retry_start`` and ``attacher_retry_max`` (seconds) set the two intervals.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from bot.sim.controllers.context import Context, seconds_option
from bot.sim.store import clone

KEY = "attacher_backoff"  # ctx.state: VA name -> {"failures", "at" (next try), "seen", "requeued"}
START = 1.0  # --retry-interval-start
MAX = 300.0  # --retry-interval-max


def _as_queued(va: dict[str, Any]) -> dict[str, Any]:
    """What requeues the object when it changes: all of it but its errors and its version (a
    copy, JSON-shaped, so that a rebased clock shifts its times too)."""
    meta = {k: v for k, v in va.get("metadata", {}).items()
            if k not in ("resourceVersion", "managedFields")}
    status = {k: v for k, v in (va.get("status") or {}).items()
              if k not in ("attachError", "detachError")}
    return {"metadata": clone(meta), "spec": clone(va.get("spec")), "status": clone(status)}


def waiting(ctx: Context, va: dict[str, Any]) -> bool:
    """True while ``va`` waits out its back-off; a change other than its errors ends the wait."""
    held: dict[str, dict[str, Any]] = ctx.state.get(KEY) or {}
    entry = held.get(va["metadata"]["name"])
    if entry is None:
        return False
    seen = _as_queued(va)
    if seen != entry["seen"]:
        entry["seen"], entry["requeued"] = seen, True  # requeued by the change: tried now
        return False
    now: datetime = ctx.now
    return bool(now < entry["at"])


def failed(ctx: Context, name: str) -> None:
    """The attach or detach of VolumeAttachment ``name`` failed (its error is written): the next
    try waits ``start * 2**(failures - 1)`` seconds, at most ``max``. A try a change set off
    keeps the earlier retry time when that is sooner, as the work queue keeps the sooner one."""
    va = ctx.find("VolumeAttachment", None, name)
    if va is None:
        return
    start = seconds_option(ctx, "attacher_retry_start", START, positive=True)
    cap = seconds_option(ctx, "attacher_retry_max", MAX, positive=True)
    held: dict[str, dict[str, Any]] = ctx.state.setdefault(KEY, {})
    before = held.get(name)
    failures = (before["failures"] if before else 0) + 1
    at = ctx.now + timedelta(seconds=min(cap, start * 2 ** min(failures - 1, 30)))
    if before and before["requeued"] and ctx.now < before["at"] < at:
        at = before["at"]
    held[name] = {"failures": failures, "at": at, "seen": _as_queued(va), "requeued": False}


def succeeded(ctx: Context, name: str) -> None:
    """The attacher got through ``name``: the count starts again at its next failure."""
    held = ctx.state.get(KEY)
    if held:
        held.pop(name, None)
