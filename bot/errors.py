"""One exception tree for the whole product.

Every failure a user can see is one of these, so front-ends can render it without knowing where it
came from, and the engine can decide retry versus stop from the class alone. SDK errors (kubernetes,
botocore, slack_sdk) are translated into this tree exactly once, at the client edge, with ``from e``.

    RunbookBotError
    ├── ConfigError                 settings missing or invalid
    ├── RunbookError                a runbook document is invalid (carries every problem found)
    ├── ExpressionError             an expression or template failed to compile or render
    ├── ParamError                  a run parameter is missing or invalid
    ├── PolicyError                 a command is not allowed (approval rights, illegal state move)
    │   └── IllegalTransition       a status change the transition table forbids
    ├── InterlockBlocked            a safety rule no runbook can switch off refused the change
    ├── NotFound                    a run, step or runbook does not exist
    ├── LeaseHeld                   another worker holds the run's lease
    ├── RunIdTaken                  a new run id collided with an existing one
    ├── AuditError                  the audit chain does not verify
    └── ExternalError               a call to Kubernetes, EC2 or Slack failed
        ├── RetryableError          worth trying again (throttling, 409 conflict, 5xx, timeouts)
        └── PermanentError          will fail the same way again (4xx, validation, not found)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class RunbookBotError(Exception):
    """Base of every error the product raises on purpose."""


class ConfigError(RunbookBotError):
    """Settings are missing or invalid; the message names the setting."""


@dataclass(frozen=True)
class Problem:
    """One problem in a runbook document, located as FILE:LINE:COL."""

    file: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.message}"


class RunbookError(RunbookBotError):
    """A runbook is invalid. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ExpressionError(RunbookBotError):
    """An expression or template did not compile, referenced something unknown, or was unsafe."""


class ParamError(RunbookBotError):
    """A run parameter is missing or invalid; the message names it and what is valid."""


class PolicyError(RunbookBotError):
    """A command is not allowed by policy (who may approve, what state the run is in)."""


class IllegalTransition(PolicyError):
    """A status change that the transition table does not allow."""


class InterlockBlocked(RunbookBotError):
    """A safety interlock refused a change. ``rule`` is the interlock's id, e.g. ``oos-taint``."""

    def __init__(self, rule: str, message: str, *, count: int | None = None,
                 plan: Mapping[str, Any] | None = None, recheck_after: float | None = None,
                 until: str = "") -> None:
        self.rule = rule
        self.message = message
        # for a rule that counts (nodes out of service): how many the step would make it; a
        # break-glass override of such a rule must name the number it allows
        self.count = count
        # the plan the action would have made had the rule held (``Plan.to_dict()``), when it
        # knows it: shown with the refusal, so whoever may break glass reads what the change
        # would do and destroy, and the approvers it adds
        self.plan = plan
        # a timed hold: the condition can clear (or harden) by itself, so the step is planned
        # again after this many seconds (never sooner than policy.hold_recheck_seconds) instead
        # of waiting for a person; ``until`` says, in words, what the rechecks wait for
        self.recheck_after = recheck_after
        self.until = until
        super().__init__(f"interlock {rule}: {message}")


class NotFound(RunbookBotError):
    """A run, step, runbook or cluster object does not exist."""


class LeaseHeld(RunbookBotError):
    """Another worker holds the run's lease; try again after it expires."""


class RunIdTaken(RunbookBotError):
    """A freshly drawn run id is already in the store; the caller draws another."""


class AuditError(RunbookBotError):
    """The audit chain failed to verify."""


class ExternalError(RunbookBotError):
    """A call to an outside system failed. ``service`` and ``operation`` say which call."""

    def __init__(
        self, message: str, *, service: str = "", operation: str = "", code: str = ""
    ) -> None:
        self.service = service
        self.operation = operation
        self.code = code
        super().__init__(message)


class RetryableError(ExternalError):
    """Worth retrying: throttling, optimistic-concurrency conflicts, server errors, timeouts."""

    def __init__(
        self,
        message: str,
        *,
        service: str = "",
        operation: str = "",
        code: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, service=service, operation=operation, code=code)
        self.retry_after = retry_after


class PermanentError(ExternalError):
    """Will fail the same way again: bad request, not found, forbidden, invalid state."""
