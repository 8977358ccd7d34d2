"""Prints a run as it changes: step by step, plans before approval, progress in place on waits.

It is a Notifier (``bot.engine.ports``): the runner calls it after every durable save, so what is
printed is always what the store holds. On a terminal, a wait's progress rewrites one line; in a
pipe or log, each change of progress is its own line.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from bot.engine.runstate import AuditDraft, RunState
from bot.present.console import plan_lines
from bot.present.views import step_view


class TerminalPrinter:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._progress: dict[str, str] = {}
        self._inline = False

    def _print(self, text: str) -> None:
        if self._inline:
            self.out.write("\n")
            self._inline = False
        self.out.write(text + "\n")
        self.out.flush()

    def _progress_line(self, text: str) -> None:
        if self.out.isatty():
            self.out.write("\r\x1b[2K" + text)
            self._inline = True
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def run_changed(self, state: RunState, *, events: Sequence[AuditDraft],
                    messages: Sequence[str]) -> None:
        for ev in events:
            self._event(state, ev)
        for m in messages:
            self._print(f"  message: {m}")
        for s in state.steps.values():
            if s.status == "waiting" and s.progress and self._progress.get(s.key) != s.progress:
                self._progress[s.key] = s.progress
                self._progress_line(f"    ⏳ {s.key}: {s.progress} (next check {s.next_check_at})")

    def _event(self, state: RunState, ev: AuditDraft) -> None:
        p: dict[str, Any] = dict(ev.payload)
        key = str(p.get("step", ""))
        s = state.steps.get(key)
        t = ev.type
        if t == "run.created":
            self._print(f"run {state.run_id}: {state.title}"
                        + (" (DRY RUN: plans only, nothing is changed)" if state.dry_run else ""))
        elif t == "step.planned" and s is not None:
            view = step_view(s)
            if view.changes:  # a change to make: show exactly what, and the evidence for it
                self._print(f"  ▶ {s.title}")
                for line in plan_lines(view):
                    self._print(line)
        elif t == "guard.failed":
            self._print(f"    ✗ guard: {p.get('message')}")
        elif t in ("approval.requested", "confirmation.requested") and s is not None:
            if s.blocked:
                return
            if t == "confirmation.requested":
                text = p.get("text") or s.message or s.title
                self._print(f"  ? {key} needs a person to confirm: {text}")
                self._print(f"    confirm with: runbook-bot confirm {state.run_id} --step {key}")
                return
            self._print(f"  ? {key} needs {p.get('min_approvers')} approval(s) from "
                        f"{', '.join(p.get('groups') or []) or 'any approver group'} "
                        f"({p.get('reason')}); expires {p.get('expires_at')}")
            if s.approval_text:
                self._print(f"    why: {s.approval_text}")
            self._print(f"    approve with: runbook-bot approve {state.run_id} --step {key}")
        elif t == "approval.granted":
            self._print(f"    ✓ approved by {ev.actor} ({p.get('count')} of {p.get('needed')})")
        elif t == "approval.invalidated":
            self._print(f"    ! the plan of {key} changed since it was approved: approval void, "
                        "asking again")
        elif t == "interlock.blocked":
            self._print(f"    ✗ interlock {p.get('rule')}: {p.get('message')}")
        elif t == "interlock.overridden":
            self._print(f"    ! BREAK GLASS: interlock {p.get('rule')} overridden by "
                        f"{', '.join(p.get('approvers') or [])}")
        elif t == "command.refused":
            self._print(f"    refused for {ev.actor}: {p.get('reason')}")
        elif t == "step.succeeded" and s is not None:
            self._progress.pop(key, None)
            said = p.get("message") and (s.plan or {}).get("action") != "notify"  # posted below
            self._print(f"  ✓ {s.title}" + (f": {p.get('message')}" if said else ""))
        elif t == "step.skipped":
            self._print(f"  ⤼ {s.title if s else key}: skipped ({p.get('reason')})")
        elif t == "step.failed":
            self._print(f"  ✗ {s.title if s else key}: failed: {p.get('error')}")
        elif t == "step.retrying":
            self._print(f"    retrying {key} in {p.get('delay'):.0f}s: {p.get('error')}")
        elif t == "run.finished":
            self._print(f"run {state.run_id} {p.get('status')}: {p.get('outcome')}")
            for c in p.get("compensations") or []:
                self._print(f"  still in place: {c}")
