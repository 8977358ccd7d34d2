"""Plain-text rendering of run views for the terminal: status, tables, plans, progress lines.

Text only, no colours and no cursor tricks beyond a carriage return for in-place progress, so the
output reads the same in a terminal, a pipe, a CI log or a pasted incident channel.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from bot.engine.provenance import suggested_words
from bot.present import times
from bot.present.agents import agent_words
from bot.present.views import RunView, StepView, relative
from bot.present.words import Skipped, collapse, wait_text


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
                   + (f" (read {clock_text(f.read_at)})" if f.read_at else ""))
    return out


def step_line(step: StepView, *, width: int = 22) -> str:
    line = f"  {step.icon} {step.key:<{width}} {step.status:<18} {step.title}"
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


def waiting_line(view: RunView, step: StepView, now: datetime) -> str:
    """Who waits for whom at this step, in words, with the expiry relative to ``now``."""
    if step.status == "awaiting_approval" and not step.blocked:
        if step.needs_confirmation and not step.needs_approval:
            return f"{view.owner or view.requester} waits for a person to confirm it is done"
        got = len(step.approvers)
        if got >= step.min_approvers:
            return "approved; applies next"
        need = step.min_approvers - got
        groups = ", ".join(step.groups) or "any approver group"
        expiry = f", expires {relative(step.expires_at, now)}" if step.expires_at else ""
        return (f"{view.owner or view.requester} waits for {need} approval{'s' if need > 1 else ''} "
                f"from {groups}{expiry}")
    if step.status == "waiting":
        return wait_text(step, now=now, at=short_clock)
    return step.pending


def short_clock(ts: str | None) -> str:
    """A time later today, as a person at this terminal says it: ``16:45 CET``."""
    return times.clock(ts, times.local_zone(), date=False)


def local_clock(ts: str | None) -> str:
    """A time to the second in the terminal's zone (``TZ``): ``2026-01-01 01:06:00 CET``."""
    return times.clock(ts, times.local_zone())


def _command_hint(view: RunView, step: StepView) -> str:
    if step.status != "awaiting_approval":
        return ""
    if step.blocked:
        return (f"runbook-bot retry {view.run_id} --step {step.key}, "
                f"or abort/break-glass {view.run_id} --reason TEXT")
    verb = "confirm" if step.needs_confirmation and not step.needs_approval else "approve"
    return f"runbook-bot {verb} {view.run_id} --step {step.key}"


def _agent_lines(view: RunView) -> list[str]:
    """``requested by agent holmes (on behalf of k8s:alice): <reason>``, on one line, for a run an
    AI agent asked for (its words were made inert when stored: no control character, no link)."""
    words = agent_words(view.agent_request)
    return [f"  {' '.join(words.split())[:300]}"] if words else []


def status(view: RunView, now: datetime | None = None, *, verbose: bool = False) -> str:
    """``runbook-bot status``: each step by id, who approved what, who waits for whom; consecutive
    skipped steps as one line, unless ``verbose``, which also shows the expressions behind the
    words."""
    now = now or datetime.now(UTC)
    started = view.started_at or view.created_at
    head = [f"{view.run_id}  {view.title}",
            f"  runbook: {view.runbook}   status: {view.status}   requester: {view.requester}"
            + ("   DRY RUN" if view.dry_run else ""),
            "  params: " + (", ".join(f"{k}={v}" for k, v in view.params.items() if v is not None)
                            or "(none)"),
            f"  started: {local_clock(started)} ({relative(started, now)})"
            + (f"   finished: {local_clock(view.finished_at)} ({relative(view.finished_at, now)})"
               if view.finished_at else ""),
            *provenance_lines(view), *_agent_lines(view), ""]
    width = max([len(s.key) for s in view.steps] + [len(k) for k, _ in view.not_reached] + [4])
    body: list[str] = []
    for s in (view.steps if verbose else collapse(view.steps)):
        if isinstance(s, Skipped):
            body.append(f"  ⤼ {s.line()}")
            continue
        body.append(step_line(s, width=width))
        waiting = waiting_line(view, s, now)
        if waiting:
            body.append(f"      waiting: {waiting}")
        if s.error:
            body.append(f"      error: {s.error}")
        elif s.message and s.status in ("skipped", "succeeded"):
            body.append(f"      {s.message}")
        body += [f"      {'✓' if g.get('ok') else '✗'} {w}"
                 for g, w in zip(s.guards, s.guard_words, strict=False) if w]
        if verbose:
            body += [f"      ({d})" for d in s.details]
        if s.status in ("awaiting_approval",):
            if s.approval_text:
                body.append(f"      why: {s.approval_text}")
            body += plan_lines(s, indent="      ")
            hint = _command_hint(view, s)
            if hint:
                body.append(f"      to decide: {hint}")
    for key, title in view.not_reached:
        body.append(f"  · {key:<{width}} {'not reached':<18} {title}")
    tail: list[str] = []
    if view.outcome:
        tail += ["", f"  outcome: {view.outcome}"]
    for c in view.compensations:
        tail.append(f"  still in place: {c}")
    return "\n".join(head + body + tail)


def clock_text(ts: str | None) -> str:
    """An ISO timestamp to the second, in UTC, as people read it: ``2026-01-01 00:06:00 UTC``."""
    return times.clock(ts)


def runs_table(views: Iterable[RunView], now: datetime | None = None, *,
               finished: int | None = None) -> str:
    """``runbook-bot runs``; ``finished`` is how many finished runs ``--all`` would add."""
    now = now or datetime.now(UTC)
    rows = [("RUN", "STATUS", "RUNBOOK", "OWNER", "STARTED", "WAITING FOR")]
    for v in views:
        waiting = v.waiting_on
        rows.append((v.run_id, v.status + (" (dry run)" if v.dry_run else ""), v.runbook,
                     v.owner + (f" (from {v.requester})" if v.handed_over else "")
                     if v.owner else v.requester, relative(v.started_at or v.created_at, now),
                     f"{waiting.key}: {waiting_line(v, waiting, now)}" if waiting else ""))
    if len(rows) == 1:
        if finished:
            return (f"no active runs; {finished} finished run{'s' if finished > 1 else ''}: "
                    "`runbook-bot runs --all` shows them")
        return "no runs yet: `runbook-bot run NAME -p key=value` starts one"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)
