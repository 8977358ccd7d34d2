"""Prints a run as it changes: step by step, plans before approval, progress in place on waits.

It is a Notifier (``bot.engine.ports``): the runner calls it after every durable save, so what is
printed is always what the store holds. On a terminal, a wait's progress rewrites one line; in a
pipe or log, each change of progress is its own line. What an event says is decided in
``bot.present.events``; this module only lays it out.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from bot.engine.events import EventType
from bot.engine.runstate import AuditDraft, RunState
from bot.present import times
from bot.present.live import LiveText


class TerminalPrinter:
    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._progress: dict[str, str] = {}
        self._inline = False
        self._live = LiveText()  # skipped steps in a row said as one line, in the runbook's words

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
        # the run's own clock (simulated in the sandbox): when its last event was recorded
        now = times.instant(events[-1].ts) if events else None
        for m in messages:
            self._print(f"  message: {m}")
        for s in state.steps.values():
            if s.status == "waiting" and s.progress and self._progress.get(s.key) != s.progress:
                self._progress[s.key] = s.progress
                for line in self._live.flush():
                    self._print(line)
                self._progress_line(self._live.progress(state, s, now=now))

    def _event(self, state: RunState, ev: AuditDraft) -> None:
        key = str(ev.payload.get("step", ""))
        if ev.type == EventType.STEP_SUCCEEDED and key in state.steps:
            self._progress.pop(key, None)  # the step's wait is over
        for line in self._live.lines(state, ev):
            self._print(line)
