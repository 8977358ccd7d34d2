"""What front-ends show about runbooks and runs, answered by the engine so none re-derives it.

A card, an approval message or a runbook listing needs to know which steps are destructive and
what each step is called. The engine already decided the first when a step started (it records
``destructive`` on the step); before that, or for a runbook not yet run, the action catalog says.
Step titles come from the runbook text the run started with, read through the runbook source's
parse cache (``RunbookSource.parse``), the only cache of parsed runbooks in a process.
"""

from __future__ import annotations

from bot.engine.ports import ActionCatalog, RunbookSource
from bot.engine.runstate import RunState
from bot.errors import RunbookBotError
from bot.runbook.model import Runbook


class RunbookFacts:
    """Step titles and destructive flags, from a runbook source and an action catalog."""

    def __init__(self, *, runbooks: RunbookSource, catalog: ActionCatalog) -> None:
        self.runbooks = runbooks
        self.catalog = catalog

    def runbook(self, state: RunState) -> Runbook | None:
        """The run's runbook, from the text it started with; None when that no longer parses."""
        try:
            return self.runbooks.parse(state.runbook_text, file=state.runbook_file)
        except RunbookBotError:
            return None

    def titles(self, state: RunState) -> list[tuple[str, str]] | None:
        """(step id, title) in the runbook's order; None when the runbook cannot be read."""
        runbook = self.runbook(state)
        return None if runbook is None else [(s.id, s.title) for s in runbook.spec.steps]

    def action_destructive(self, action: str | None) -> bool:
        """Whether the catalog declares ``action`` destructive (no action, or an unknown one: no)."""
        if not action:
            return False
        try:
            return bool(self.catalog.spec(action).destructive)
        except (KeyError, RunbookBotError):
            return False

    def step_destructive(self, state: RunState, key: str) -> bool:
        """Whether step ``key`` of a run is destructive: as the engine recorded it once the step
        started, else as its runbook declares; True when neither can say (the careful answer)."""
        s = state.steps.get(key)
        if s is not None and s.action is not None:
            return s.destructive
        runbook = self.runbook(state) if s is not None else None
        if runbook is None or s is None:
            return True
        try:
            action = runbook.step(s.step_id).action
            return bool(action) and bool(self.catalog.spec(str(action)).destructive)
        except (KeyError, RunbookBotError):
            return True  # an action the catalog no longer has
