"""The serialisable state of one run: what the conductor decides from and the store persists.

A run is a header (``RunState``) plus one ``StepState`` per step instance (a ``foreach`` step has
one instance per element, keyed ``id[0]``, ``id[1]``...). Everything is plain JSON-able data, so a
run survives a restart exactly as it was, and the store can write only the step rows that changed
in a tick instead of the whole run.

The runbook's source text is kept with the run: a run that resumes after a restart, or after the
runbook file was edited, continues with the document it started with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from bot.engine.state import RunStatus, StepStatus

_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    """The field names of the dataclass ``cls``: ``fields`` walks them again on every call, and a
    load parses every step of a run."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return names


def json_copy(value: Any) -> Any:
    """A deep copy of plain data, cheaper than ``copy.deepcopy`` for JSON-like values (parsed
    API answers too: their datetimes, like every scalar, are immutable and shared)."""
    t = type(value)
    if t is dict:
        return {k: json_copy(v) for k, v in value.items()}
    if t is list:
        return [json_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_copy(v) for v in value]
    return value


@dataclass
class Vote:
    """One person's decision on a step: an approval, a rejection, or a break-glass override."""

    by: str
    at: str  # ISO-8601 UTC
    kind: str  # approve, reject, break_glass, confirm
    plan_hash: str | None = None  # the plan the person was shown (None: bound at the next plan)
    reason: str = ""
    rule: str = ""  # for break_glass: the interlock overridden
    nodes: int | None = None  # for break_glass of a counted rule: how many nodes it allows


@dataclass
class StepState:
    key: str  # "taint", or "force_detach[1]" for a foreach element
    step_id: str
    position: int  # order of the instance in the run (index of the step, then of the element)
    action: str | None = None  # the action it calls; None for a manual step
    destructive: bool = False  # whether that action is declared destructive
    status: StepStatus = StepStatus.PENDING
    title: str = ""
    index: int | None = None  # foreach element index
    item: Any = None
    attempt: int = 0  # applies tried so far (retries)
    polls: int = 0
    plan: dict[str, Any] | None = None
    plan_hash: str | None = None
    guards: list[dict[str, Any]] = field(default_factory=list)  # last evaluation: expr, ok, message
    needs_approval: bool = False
    needs_confirmation: bool = False
    approval_reason: str = ""  # why a person must approve, in words
    approval_text: str = ""  # the runbook's approval description, rendered
    min_approvers: int = 0
    groups: list[str] = field(default_factory=list)
    allow_self: bool = False
    requested_at: str | None = None
    expires_at: str | None = None
    votes: list[Vote] = field(default_factory=list)
    approved: bool = False  # quorum reached for plan_hash; re-checked just before apply
    blocked: dict[str, Any] | None = None  # {"rule", "message", "count"?}: an interlock refused
    overrides: list[str] = field(default_factory=list)  # interlock rules broken-glass
    result: dict[str, Any] | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    error: str = ""
    progress: str = ""
    started_at: str | None = None
    applying_since: str | None = None  # the step's timeout counts from here, not from approval
    poll_started_at: str | None = None
    finished_at: str | None = None
    next_check_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # hand-rolled: asdict() deep-copies every value and is the largest cost of a save
        out = dict(self.__dict__)
        out["status"] = str(self.status)
        out["votes"] = [dict(v.__dict__) for v in self.votes]
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StepState:
        known = _field_names(cls)
        data = {k: v for k, v in raw.items() if k in known}
        data["status"] = StepStatus(data.get("status", "pending"))
        data["votes"] = [Vote(**v) for v in data.get("votes") or ()]
        return cls(**data)

    def approvals(self) -> list[Vote]:
        return [v for v in self.votes if v.kind in ("approve", "break_glass")]


@dataclass
class RunState:
    run_id: str
    runbook: str  # the runbook's name
    runbook_text: str  # the YAML it started with
    runbook_file: str
    title: str
    params: dict[str, Any]
    requester: str
    created_at: str
    dry_run: bool = False
    status: RunStatus = RunStatus.PENDING
    origin: dict[str, Any] = field(default_factory=dict)  # front-end, channel, thread
    # provenance (``engine/provenance.py``): who answers for the run and what it is linked to
    owner: str = ""  # the incident commander; "" means the requester (runs from before owners)
    parent: str | None = None  # the run this one follows on from
    incident: str | None = None  # INC-123, a Slack channel, a PagerDuty link
    suggested_by: str | None = None  # alert:<ref> or diagnosis:<ref>
    cursor: int = 0  # index of the runbook step being worked on
    steps: dict[str, StepState] = field(default_factory=dict)  # in run order
    started_at: str | None = None
    finished_at: str | None = None
    next_check_at: str | None = None
    outcome: str = ""  # one line: why the run ended as it did
    compensations: list[str] = field(default_factory=list)  # what stays in place, in words
    gotos: int = 0  # on_failure jumps taken, bounded so a loop cannot run forever
    contexts: list[str] = field(default_factory=list)  # clusters whose context is on record
    version: int = 0  # bumped by the store on every save

    def header(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name != "steps"}
        copied: dict[str, Any] = json_copy(out)
        return copied

    def to_dict(self) -> dict[str, Any]:
        out = self.header()
        out["steps"] = [s.to_dict() for s in self.steps.values()]
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], steps: list[StepState] | None = None) -> RunState:
        known = _field_names(cls)
        data = {k: v for k, v in raw.items() if k in known and k != "steps"}
        data["status"] = RunStatus(data.get("status", "pending"))
        if steps is None:
            steps = [StepState.from_dict(s) for s in raw.get("steps") or ()]
        data["steps"] = {s.key: s for s in sorted(steps, key=lambda s: s.position)}
        return cls(**data)

    @property
    def current_owner(self) -> str:
        """Who answers for the run now: the last person it was handed to, else its requester."""
        return self.owner or self.requester

    def nothing_applied(self, key: str) -> str:
        """What a run that stops at step ``key`` before applying it leaves: "nothing was applied",
        or, once earlier steps applied changes, that nothing of this step was and which did."""
        at = self.steps[key].position
        changed = [s.key for s in self.steps.values() if s.position < at and s.applying_since
                   and (s.plan or {}).get("changes")
                   and s.status in (StepStatus.SUCCEEDED, StepStatus.FAILED)]
        if not changed:
            return "nothing was applied"
        named = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        return (f"nothing of {key} was applied, but earlier steps applied changes ({named}): see "
                "what stays in place")

    def instances(self, step_id: str) -> list[StepState]:
        """A step's instances by key (``id``, or ``id[0]``, ``id[1]``...), without a scan."""
        one = self.steps.get(step_id)
        if one is not None:
            return [one]
        out: list[StepState] = []
        while (s := self.steps.get(f"{step_id}[{len(out)}]")) is not None:
            out.append(s)
        return out


@dataclass(frozen=True)
class AuditDraft:
    """An audit event before the store chains it (assigns seq, prev_hash and hash)."""

    type: str
    actor: str
    ts: str
    payload: Mapping[str, Any] = field(default_factory=dict)
