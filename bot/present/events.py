"""One line per audit event, in words: what a timeline shows for each entry of the chain.

Transcripts, and any front-end that lists a run's history, describe an event the same way, from
its type and payload alone (the payloads are those the engine records, see
``bot/engine/conductor.py`` and ``bot/engine/apply_commands.py``). An event type this module does
not know yet is shown as its payload's fields, so a newer engine never breaks an older export.
"""

from __future__ import annotations

import json
from typing import Any

from bot.store.audit import Event


def value_text(v: Any) -> str:
    """Plain data as one line of text: strings as they are, anything else as compact JSON."""
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)


def short_hash(h: Any) -> str:
    """The first 12 characters of a hash, enough to tell plans apart when reading."""
    return str(h)[:12] if h else "-"


def describe(ev: Event) -> str:
    """One line saying what an audit event records, for the timeline."""
    p = ev.payload
    t = ev.type
    if t == "run.created":
        params = ", ".join(f"{k}={value_text(v)}" for k, v in (p.get("params") or {}).items())
        return (f"started runbook {p.get('runbook', '')}" + (f" with {params}" if params else "")
                + (" (dry run)" if p.get("dry_run") else ""))
    if t == "step.planned":
        return f"planned {short_hash(p.get('plan_hash'))}: {p.get('summary', '')}"
    if t == "guard.passed":
        return f"guard passed: {p.get('expr', '')}"
    if t == "guard.failed":
        return f"guard failed: {p.get('expr', '')}: {p.get('message', '')}"
    if t in ("approval.requested", "confirmation.requested"):
        if "text" in p:
            return f"asked a person to confirm: {p['text']}"
        groups = ", ".join(p.get("groups") or ()) or "any approver group"
        return (f"asked {p.get('min_approvers', 0)} approver(s) from {groups} for plan "
                f"{short_hash(p.get('plan_hash'))}" + (f", until {p['expires_at']}" if p.get("expires_at")
                                                    else "") + f": {p.get('reason', '')}")
    if t == "approval.granted":
        return (f"approved plan {short_hash(p.get('plan_hash'))} "
                f"({p.get('count', '?')} of {p.get('needed', '?')})")
    if t == "approval.rejected":
        return f"rejected plan {short_hash(p.get('plan_hash'))}: {p.get('reason', '')}"
    if t == "approval.expired":
        return f"approval expired at {p.get('expires_at', '')}"
    if t == "approval.invalidated":
        voided = ", ".join(p.get("voided") or ()) or "none"
        return (f"plan changed {short_hash(p.get('old_hash'))} → {short_hash(p.get('new_hash'))}; "
                f"approvals voided: {voided}")
    if t == "step.confirmed":
        return "confirmed" + (f": {p['note']}" if p.get("note") else "")
    if t == "interlock.blocked":
        return f"interlock {p.get('rule', '')} refused at {p.get('phase', '')}: {p.get('message', '')}"
    if t == "interlock.override_requested":
        return (f"break-glass for {p.get('rule', '')} ({p.get('count', '?')} of "
                f"{p.get('needed', '?')}): {p.get('reason', '')}")
    if t == "interlock.override_granted":
        return f"break-glass granted for {p.get('rule', '')} by {', '.join(p.get('approvers') or ())}"
    if t == "interlock.overridden":
        return f"interlock {p.get('rule', '')} overridden at apply"
    if t == "step.applying":
        approvers = ", ".join(p.get("approvers") or ())
        return (f"applying plan {short_hash(p.get('plan_hash'))} (attempt {p.get('attempt', 1)})"
                + (f", approved by {approvers}" if approvers else ""))
    if t in ("step.applied", "step.polled"):
        calls = p.get("calls") or []
        what = "applied" if t == "step.applied" else "polled"
        extra = p.get("message") or p.get("progress") or ""
        return (f"{what}: {len(calls)} API call(s)" + (" (already done)" if p.get("already_done")
                                                        else "")
                + ("" if p.get("done", True) else ", not done yet") + (f": {extra}" if extra else ""))
    if t == "step.retrying":
        return (f"{p.get('phase', '')} failed (try {p.get('attempt', '?')}), retrying in "
                f"{p.get('delay', '?')}s: {p.get('error', '')}")
    if t == "step.succeeded":
        return "succeeded" + (f": {p['message']}" if p.get("message") else "")
    if t == "step.failed":
        return f"failed: {p.get('error', '')}"
    if t == "step.skipped":
        return f"skipped: {p.get('reason', '')}"
    if t == "step.goto":
        return f"going back to step {p.get('target', '')}"
    if t == "command.refused":
        return f"refused {p.get('command', '')}: {p.get('reason', '')}"
    if t.startswith("command."):
        args = ", ".join(f"{k}={value_text(v)}" for k, v in p.items() if k != "step")
        return f"{t[len('command.'):].replace('_', '-')}" + (f" ({args})" if args else "")
    if t == "run.aborted":
        return f"aborted: {p.get('reason', '')}"
    if t == "run.finished":
        return f"finished {p.get('status', '')}: {p.get('outcome', '')}"
    return ", ".join(f"{k}={value_text(v)}" for k, v in p.items())
