"""What a runbook expression can read: ``params``, earlier ``steps``, ``run``, and locals.

The step entries are cached and only rebuilt for steps whose state changed, so a long run does not
re-walk every earlier step for every template it renders. A ``foreach`` step reads as the list of
its elements' results, and each output as the list of the elements' outputs; ``items`` gives each
element's own outcome (item, status, result, outputs, error), so a later step can say which
elements failed while the others went on.
"""

from __future__ import annotations

from typing import Any

from bot.engine.runstate import RunState, StepState
from bot.engine.state import StepStatus


def _aggregate_status(instances: list[StepState]) -> str:
    statuses = {s.status for s in instances}
    for bad in (StepStatus.FAILED, StepStatus.REJECTED, StepStatus.EXPIRED, StepStatus.ABORTED):
        if bad in statuses:
            return str(bad)
    if statuses == {StepStatus.SKIPPED}:
        return str(StepStatus.SKIPPED)
    if statuses <= {StepStatus.SUCCEEDED, StepStatus.SKIPPED}:
        return str(StepStatus.SUCCEEDED)
    return str(next(iter(statuses)))


def _outcome(s: StepState) -> dict[str, Any]:
    return {"item": s.item, "status": str(s.status), "result": s.result,
            "outputs": dict(s.outputs), "error": s.error}


class Scope:
    def __init__(self, state: RunState, foreach_steps: frozenset[str]) -> None:
        self._state = state
        self._foreach = foreach_steps
        self._steps: dict[str, dict[str, Any]] = {}
        self._stale: set[str] = {s.step_id for s in state.steps.values()}
        self.run = {"id": state.run_id, "requester": state.requester,
                    "started_at": state.started_at or state.created_at}

    def touch(self, step_id: str) -> None:
        self._stale.add(step_id)

    def reset(self) -> None:
        self._steps.clear()
        self._stale = {s.step_id for s in self._state.steps.values()}

    def _entry(self, step_id: str) -> dict[str, Any] | None:
        instances = self._state.instances(step_id)
        if not instances:
            return None
        if step_id not in self._foreach:
            s = instances[0]
            return {"result": s.result, "outputs": dict(s.outputs), "status": str(s.status),
                    "items": [_outcome(s)]}
        names = sorted({k for s in instances for k in s.outputs})
        real = [s for s in instances if s.index is not None]
        return {"result": [s.result for s in real],
                "outputs": {n: [s.outputs.get(n) for s in real] for n in names},
                "status": _aggregate_status(instances),
                "items": [_outcome(s) for s in real]}

    def steps(self) -> dict[str, Any]:
        for step_id in self._stale:
            entry = self._entry(step_id)
            if entry is None:
                self._steps.pop(step_id, None)
            else:
                self._steps[step_id] = entry
        self._stale.clear()
        return self._steps

    def context(self, **local: Any) -> dict[str, Any]:
        ctx: dict[str, Any] = {"params": self._state.params, "steps": self.steps(), "run": self.run}
        ctx.update(local)
        return ctx
