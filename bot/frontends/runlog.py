"""The log of runs: every audit event of a saved tick logged once, with its run, step and actor.

``RunLog`` is a notifier (``bot.engine.ports.Notifier``) on the logger ``bot.runs``. Each event
is one record whose message is the sentence the timeline shows (``bot.present.events``) and whose
fields ``run_id``, ``step``, ``actor``, ``event`` and ``runbook`` the JSON log format carries as keys.
Run transitions, approvals and applies are INFO; refusals, interlocks, retries, failures, expiries,
aborts and runs that end other than succeeded are WARNING; planning, passing guards and polls are DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from bot.engine.events import EventType as T
from bot.engine.runstate import AuditDraft, RunState
from bot.present.events import text_of

log = logging.getLogger("bot.runs")

_WARNING = frozenset({T.COMMAND_REFUSED, T.INTERLOCK_BLOCKED, T.STEP_RETRYING, T.STEP_FAILED,
                      T.APPROVAL_EXPIRED, T.APPROVAL_REJECTED, T.APPROVAL_INVALIDATED, T.GUARD_FAILED,
                      T.RUN_ABORTED, T.INTERLOCK_OVERRIDDEN})
_DEBUG = frozenset({T.STEP_PLANNED, T.GUARD_PASSED, T.STEP_POLLED})


def _level(type_: str, payload: Mapping[str, Any]) -> int:
    if type_ in _WARNING or (type_ == T.RUN_FINISHED and payload.get("status") != "succeeded"):
        return logging.WARNING
    if type_ in _DEBUG:
        return logging.DEBUG
    return logging.INFO


def _sentence(e: AuditDraft) -> str:
    text = text_of(e.type)
    try:
        return text.line(e.payload) if text else e.type
    except Exception:  # a log line must never break a run
        return e.type


class RunLog:
    """A notifier that logs every audit event once, with run id, step and actor as fields."""

    def run_changed(self, state: RunState, *, events: Sequence[AuditDraft],
                    messages: Sequence[str]) -> None:
        for e in events:
            level = _level(e.type, e.payload)
            if not log.isEnabledFor(level):
                continue
            step = e.payload.get("step") if isinstance(e.payload, Mapping) else None
            where = f" step {step}" if step else ""
            log.log(level, "run %s (%s)%s: %s", state.run_id, state.runbook, where, _sentence(e),
                    extra={"run_id": state.run_id, "step": step, "actor": e.actor,
                           "event": e.type, "runbook": state.runbook})
