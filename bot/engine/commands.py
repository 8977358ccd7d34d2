"""Commands: what a person's gesture becomes, whichever front-end it came from.

Slack buttons, slash commands and terminal commands all build one of these and hand it to the
runner, so the same policy applies to all of them. ``step`` may be None when there is only one step
waiting for a decision; ``plan_hash`` is the plan the person was shown (a Slack button carries it),
so a click on an out-of-date approval message is refused instead of approving a different change.
``via`` says where a decision came from (the front-end and, for the terminal, the OS uid, host and
tty); it is recorded in the command's audit event, next to the actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.engine.provenance import Provenance


@dataclass(frozen=True)
class StartRun:
    runbook: str
    params: Mapping[str, Any]
    requester: str
    dry_run: bool = False
    origin: Mapping[str, Any] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=Provenance)


@dataclass(frozen=True)
class Approve:
    run_id: str
    actor: str
    step: str | None = None
    plan_hash: str | None = None
    via: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Reject:
    run_id: str
    actor: str
    reason: str
    step: str | None = None
    via: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Confirm:
    """A person confirms a manual step (or a ``manual.confirm`` checklist item) is done."""

    run_id: str
    actor: str
    step: str | None = None
    note: str = ""
    via: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class BreakGlass:
    """Override the interlock blocking a step; two distinct people with reasons are needed.

    ``nodes``: for a rule that counts nodes (blast-radius), how many nodes the override allows
    out of service at once; such a rule is not overridden without it."""

    run_id: str
    actor: str
    reason: str
    step: str | None = None
    via: Mapping[str, Any] | None = None
    nodes: int | None = None


@dataclass(frozen=True)
class Retry:
    """Plan a blocked or waiting-for-approval step again, e.g. after fencing was done by hand."""

    run_id: str
    actor: str
    step: str | None = None
    via: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Abort:
    run_id: str
    actor: str
    reason: str
    via: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Handover:
    """Make ``to`` the run's owner (incident commander); the current owner or the requester may."""

    run_id: str
    actor: str
    to: str
    reason: str = ""
    via: Mapping[str, Any] | None = None


Command = Approve | Reject | Confirm | BreakGlass | Retry | Abort | Handover


@dataclass(frozen=True)
class Outcome:
    """What a command did, for the person who sent it."""

    ok: bool
    message: str
    run_id: str = ""
    step: str | None = None
