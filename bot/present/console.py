"""Plain-text rendering of run views for the terminal: status, tables, plans, progress lines.

Text only, no colours and no cursor tricks beyond a carriage return for in-place progress, so the
output reads the same in a terminal, a pipe, a CI log or a pasted incident channel.
"""

from __future__ import annotations

from collections.abc import Iterable

from bot.engine.provenance import suggested_words
from bot.present.views import RunView, StepView


def _value(v: object) -> str:
    text = str(v)
    return text if len(text) <= 80 else text[:77] + "..."


def plan_lines(step: StepView, *, indent: str = "    ") -> list[str]:
    out: list[str] = []
    if step.summary:
        out.append(f"{indent}plan: {step.summary}")
    for c in step.changes:
        out.append(f"{indent}  change: {c}")
    if step.plan_hash and step.changes:
        out.append(f"{indent}  plan hash: {step.plan_hash[:12]}")
    for f in step.facts:
        out.append(f"{indent}  evidence: {f.subject} {f.name} = {_value(f.value)}"
                   + (f" (read {f.read_at})" if f.read_at else ""))
    return out


def step_line(step: StepView) -> str:
    line = f"  {step.icon} {step.key:<22} {step.status:<18} {step.title}"
    if step.approvers:
        line += f"  [approved by {', '.join(step.approvers)}]"
    return line


def provenance_lines(view: RunView) -> list[str]:
    """Who owns the run and what it is linked to: its parent, incident, suggester, children."""
    out = [f"  owner: {view.owner or view.requester}"
           + (f" (handed over; requested by {view.requester})" if view.handed_over else "")]
    links = []
    if view.incident:
        links.append(f"incident: {view.incident}")
    if view.parent:
        links.append(f"follows on from: {view.parent}")
    if view.suggested_by:
        links.append(f"suggested by: {suggested_words(view.suggested_by)}")
    if links:
        out.append("  " + "   ".join(links))
    for c in view.children:
        out.append(f"  followed by: {c.run_id} {c.runbook} ({c.status}"
                   + (", dry run)" if c.dry_run else ")"))
    return out


def status(view: RunView) -> str:
    """``runbook-bot status``: each step, who approved what, what is pending."""
    head = [f"{view.run_id}  {view.title}",
            f"  runbook: {view.runbook}   status: {view.status}   requester: {view.requester}"
            + ("   DRY RUN" if view.dry_run else ""),
            "  params: " + (", ".join(f"{k}={v}" for k, v in view.params.items() if v is not None)
                            or "(none)"),
            f"  started: {view.started_at or view.created_at}"
            + (f"   finished: {view.finished_at}" if view.finished_at else ""),
            *provenance_lines(view), ""]
    body: list[str] = []
    for s in view.steps:
        body.append(step_line(s))
        if s.pending:
            body.append(f"      waiting for: {s.pending}")
        if s.error:
            body.append(f"      error: {s.error}")
        elif s.message and s.status in ("skipped", "succeeded"):
            body.append(f"      {s.message}")
        if s.status in ("awaiting_approval",):
            body += plan_lines(s, indent="      ")
    for title in view.pending_steps:
        body.append(f"  · {'':<22} {'not reached':<18} {title}")
    tail: list[str] = []
    if view.outcome:
        tail += ["", f"  outcome: {view.outcome}"]
    for c in view.compensations:
        tail.append(f"  still in place: {c}")
    return "\n".join(head + body + tail)


def runs_table(views: Iterable[RunView]) -> str:
    rows = [("RUN", "STATUS", "RUNBOOK", "OWNER", "STARTED", "WAITING FOR")]
    for v in views:
        waiting = v.waiting_on
        rows.append((v.run_id, v.status + (" (dry run)" if v.dry_run else ""), v.runbook,
                     v.owner + (f" (from {v.requester})" if v.handed_over else "")
                     if v.owner else v.requester, (v.started_at or v.created_at)[:19].replace("T", " "),
                     f"{waiting.key}: {waiting.pending}"[:60] if waiting else ""))
    if len(rows) == 1:
        return "no runs yet: `runbook-bot run NAME -p key=value` starts one"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)
