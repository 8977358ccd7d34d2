"""A run's live lines at a terminal, with consecutive skipped steps gathered into one line.

``bot.present.events.live_lines`` says what one event prints. A recovery skips many steps in a
row (the instance was already stopped, nothing was stuck), and fifteen lines of "skipped" bury the
two that matter, so the terminal front-ends (the printer of a local run, ``follow``, a remote
run's stream) print through ``LiveText``: skipped steps wait until something else happens and are
then said at once, "6 steps not needed: <why>, <why>", in the runbook's words
(``bot.present.words``). ``status --verbose`` and the transcript still list each one.
"""

from __future__ import annotations

from datetime import datetime

from bot.engine.events import EventType
from bot.engine.ports import StoredEvent
from bot.engine.runstate import AuditDraft, RunState, StepState
from bot.present import times
from bot.present.events import live_lines
from bot.present.views import StepView, step_view, stored_runbook
from bot.present.words import NOT_NEEDED, Skipped, wait_text, words_for
from bot.runbook.model import Runbook


class LiveText:
    """``live_lines`` for one terminal, holding back skipped steps to say them together."""

    def __init__(self) -> None:
        self._held: list[StepView] = []
        self._runbooks: dict[str, Runbook | None] = {}

    def _runbook(self, state: RunState) -> Runbook | None:
        if not state.runbook_text:
            return None
        if state.run_id not in self._runbooks:
            self._runbooks[state.run_id] = stored_runbook(state)
        return self._runbooks[state.run_id]

    def view(self, state: RunState, s: StepState) -> StepView:
        """One step's view, in its runbook's words when the run carries its runbook."""
        return step_view(s, words_for(state, self._runbook(state), s.key))

    def lines(self, state: RunState, ev: AuditDraft | StoredEvent) -> list[str]:
        """What to print for ``ev``: nothing yet for a skipped step, else the skipped steps held
        back so far, then the event's own lines."""
        if ev.type == EventType.STEP_SKIPPED:
            s = state.steps.get(str(ev.payload.get("step", "")))
            view = self.view(state, s) if s is not None else None
            if view is not None and view.not_needed:
                self._held.append(view)
                return []
        return [*self.flush(), *live_lines(state, ev)]

    def flush(self) -> list[str]:
        """The skipped steps held back, as one line (or the step's own, for just one)."""
        held, self._held = self._held, []
        if not held:
            return []
        if len(held) == 1:
            s = held[0]
            return [f"  ⤼ {s.title}: not needed: {s.message or NOT_NEEDED}"]
        return [f"  ⤼ {Skipped(tuple(held)).line()}"]

    def progress(self, state: RunState, s: StepState, now: datetime | None) -> str:
        """The in-place line of a wait: what it waits for, next check, when it gives up."""
        view = self.view(state, s)
        here = times.local_zone()
        return f"    ⏳ {s.key}: {wait_text(view, now=now, at=lambda t: times.clock(t, here, date=False))}"
