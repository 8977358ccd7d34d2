"""Which conditions of a runbook a person will see without words: ``validate``'s warnings.

The views show a skipped step's ``when.because``, a wait's ``wait_until.waiting_for`` and a
destructive step's ``guards[].checks`` in place of their expressions (docs/runbook-language.md,
"Words"). A runbook without them still runs, and its views fall back to plain generic sentences,
but the on-call engineer learns less: so ``validate`` warns, at the line, and does not fail.
"""

from __future__ import annotations

from bot.errors import Problem
from bot.runbook.model import Runbook
from bot.runbook.validate import Catalog, Locator, _nowhere


def unworded(runbook: Runbook, *, catalog: Catalog | None,
             locate: Locator = _nowhere) -> list[Problem]:
    """A warning for each ``when``, wait and destructive step's guard that has no words."""
    out: list[Problem] = []
    for index, step in enumerate(runbook.spec.steps):
        at = ("spec", "steps", index)
        if step.when is not None and step.when_because is None:
            out.append(locate((*at, "when"), f"step {step.id!r}: 'when' has no words: a skipped "
                              "step shows them; write when: {expr: ..., because: \"why the step "
                              "is not needed\"}"))
        if step.wait_until is not None and step.wait_until.waiting_for is None:
            out.append(locate((*at, "wait_until"), f"step {step.id!r}: the wait has no words: add "
                              "wait_until.waiting_for (what it waits for, e.g. \"{{ result.ready }} "
                              "of {{ result.count }} volumes attached\")"))
        destructive = (catalog is not None and step.action is not None and step.action in catalog
                       and catalog.get(step.action).destructive)
        if not destructive:
            continue
        for g, guard in enumerate(step.guards):
            if guard.checks is None:
                out.append(locate((*at, "guards", g), f"step {step.id!r}: guard {g + 1} of a "
                                  "destructive step has no words: add checks (what it makes sure "
                                  "of, e.g. \"the instance is powered off\")"))
    return sorted(out, key=lambda p: (p.file, p.line, p.col))
