"""Run and step statuses, and the one table of every legal move between them.

The conductor and the runner change a status only through ``advance_run`` / ``advance_step``, so an
illegal move (applying a rejected step, resuming a finished run) fails loudly instead of silently
corrupting a run that a person is about to trust.
"""

from __future__ import annotations

from enum import StrEnum

from bot.errors import IllegalTransition


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    # every step finished, but the runbook's own outcome rules (spec.outcome) say the incident
    # is only partly resolved: never reported as a success, nor as a run that stopped early
    PARTIAL = "partial"
    FAILED = "failed"
    ABORTED = "aborted"


class StepStatus(StrEnum):
    PENDING = "pending"
    SKIPPED = "skipped"
    PLANNING = "planning"
    AWAITING_APPROVAL = "awaiting_approval"
    APPLYING = "applying"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    ABORTED = "aborted"


R = RunStatus
S = StepStatus

RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    R.PENDING: frozenset({R.RUNNING, R.ABORTED, R.FAILED}),
    # running -> partial: the last step is done and a spec.outcome rule says so
    R.RUNNING: frozenset({R.WAITING, R.AWAITING_APPROVAL, R.SUCCEEDED, R.PARTIAL, R.FAILED,
                          R.ABORTED}),
    R.WAITING: frozenset({R.RUNNING, R.FAILED, R.ABORTED}),
    R.AWAITING_APPROVAL: frozenset({R.RUNNING, R.FAILED, R.ABORTED}),
    R.SUCCEEDED: frozenset(),
    R.PARTIAL: frozenset(),
    R.FAILED: frozenset(),
    R.ABORTED: frozenset(),
}

STEP_TRANSITIONS: dict[StepStatus, frozenset[StepStatus]] = {
    # pending -> failed: its when, foreach or with cannot be evaluated (an error, or over a limit)
    S.PENDING: frozenset({S.PLANNING, S.SKIPPED, S.FAILED, S.ABORTED}),
    # planning may fail (a guard, an interlock without break-glass) or be skipped (a no-op plan)
    S.PLANNING: frozenset({S.AWAITING_APPROVAL, S.APPLYING, S.WAITING, S.SUCCEEDED, S.SKIPPED,
                           S.FAILED, S.ABORTED}),
    # back to planning: the plan changed before apply, so the approval was void;
    # straight to succeeded: a manual step (no action) that a person confirmed;
    # to waiting: the plan just before apply failed temporarily and is retried after a backoff
    S.AWAITING_APPROVAL: frozenset({S.APPLYING, S.PLANNING, S.WAITING, S.SUCCEEDED, S.REJECTED,
                                    S.EXPIRED, S.FAILED, S.ABORTED}),
    # applying -> applying: a run interrupted mid-apply re-applies (idempotent) on resume;
    # applying -> awaiting_approval: an interlock refused at apply time; only break-glass goes on;
    # applying -> skipped: a dry run reads, and stops short of waiting
    S.APPLYING: frozenset({S.APPLYING, S.AWAITING_APPROVAL, S.WAITING, S.SUCCEEDED, S.SKIPPED,
                           S.FAILED, S.ABORTED}),
    # waiting -> planning: a retry with backoff, or the next poll of a wait_until
    S.WAITING: frozenset({S.APPLYING, S.PLANNING, S.SUCCEEDED, S.FAILED, S.ABORTED}),
    # a failed or rejected step may be retried by a person; a goto may re-enter a finished step
    S.FAILED: frozenset({S.PENDING}),
    S.REJECTED: frozenset(),
    S.EXPIRED: frozenset(),
    S.ABORTED: frozenset(),
    S.SUCCEEDED: frozenset({S.PENDING}),
    S.SKIPPED: frozenset({S.PENDING}),
}

RUN_TERMINAL = frozenset(s for s, nxt in RUN_TRANSITIONS.items() if not nxt)
STEP_FINAL = frozenset({S.SKIPPED, S.SUCCEEDED, S.FAILED, S.REJECTED, S.EXPIRED, S.ABORTED})


def advance_run(current: RunStatus, target: RunStatus) -> RunStatus:
    """Return ``target`` if the table allows the move, else raise IllegalTransition."""
    if target not in RUN_TRANSITIONS[current]:
        raise IllegalTransition(f"a run cannot go from {current} to {target}")
    return target


def advance_step(current: StepStatus, target: StepStatus) -> StepStatus:
    """Return ``target`` if the table allows the move, else raise IllegalTransition."""
    if target not in STEP_TRANSITIONS[current]:
        raise IllegalTransition(f"a step cannot go from {current} to {target}")
    return target
