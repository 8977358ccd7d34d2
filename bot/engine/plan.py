"""What an action intends to do (Plan) and what it did (Result).

A Plan is read-only output of ``plan()``: the exact changes, plus the facts read to decide them.
Its hash is what an approval is bound to, so it covers the action, its params, the changes and the
facts' values, but not when they were read: re-reading the same world gives the same hash, and a
changed world (an instance started again) gives a new one and voids the approval.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the form every hash in the product is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Change:
    """One intended change to one target."""

    target_kind: str  # Node, Instance, Volume, PersistentVolume, ...
    target: str  # its name or id
    operation: str  # taint, stop, detach, delete, remove-finalizers, ...
    before: str = ""
    after: str = ""

    def summary(self) -> str:
        arrow = f": {self.before} -> {self.after}" if (self.before or self.after) else ""
        return f"{self.operation} {self.target_kind} {self.target}{arrow}"


@dataclass(frozen=True)
class Fact:
    """Something read from the world while planning, shown to approvers as evidence."""

    subject: str  # e.g. "instance i-0abc..."
    name: str  # e.g. "state"
    value: Any
    read_at: str = ""  # ISO-8601 UTC; excluded from the plan hash


@dataclass(frozen=True)
class Plan:
    action: str
    params: Mapping[str, Any]
    changes: tuple[Change, ...] = ()
    facts: tuple[Fact, ...] = ()
    summary: str = ""  # one line for humans, rendered from the action's summary template
    data: Mapping[str, Any] = field(default_factory=dict)  # what apply() needs, JSON-able

    @property
    def is_noop(self) -> bool:
        return not self.changes

    def hash(self) -> str:
        body = {
            "action": self.action,
            "params": self.params,
            "changes": [asdict(c) for c in self.changes],
            "facts": [[f.subject, f.name, f.value] for f in self.facts],
            "data": self.data,
        }
        return hashlib.sha256(canonical_json(body).encode()).hexdigest()

    def fact(self, subject: str, name: str) -> Any:
        for f in self.facts:
            if f.subject == subject and f.name == name:
                return f.value
        raise KeyError((subject, name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "params": dict(self.params),
            "changes": [asdict(c) for c in self.changes],
            "facts": [asdict(f) for f in self.facts],
            "summary": self.summary,
            "data": dict(self.data),
            "hash": self.hash(),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Plan:
        return cls(
            action=raw["action"],
            params=raw.get("params", {}),
            changes=tuple(Change(**c) for c in raw.get("changes", ())),
            facts=tuple(Fact(**f) for f in raw.get("facts", ())),
            summary=raw.get("summary", ""),
            data=raw.get("data", {}),
        )


def narrowed(approved: Mapping[str, Any] | None, new: Plan) -> dict[str, str] | None:
    """The items a batch plan dropped since ``approved``, when dropping them is all that changed.

    A batch action describes its plan in ``data["batch"]``: ``common`` (a hash of what concerns the
    whole batch), ``items`` (item -> a hash of that item's changes and facts) and ``dropped`` (item
    -> why it is left out). ``new`` narrows ``approved`` when ``common`` is the same, every item it
    keeps is in ``approved`` with the same hash, and nothing outside the batch's items differs
    (``_same_outside``): it does a part of what was approved, nothing else. Returns the dropped
    items with their reasons, or None when the plan changed otherwise.
    """
    if approved is None:
        return None
    old_batch = (approved.get("data") or {}).get("batch")
    new_batch = new.data.get("batch")
    if not isinstance(old_batch, Mapping) or not isinstance(new_batch, Mapping):
        return None
    if approved.get("action") != new.action or dict(approved.get("params") or {}) != dict(new.params):
        return None
    if old_batch.get("common") != new_batch.get("common"):
        return None
    old_items, new_items = dict(old_batch.get("items") or {}), dict(new_batch.get("items") or {})
    if any(old_items.get(k) != h for k, h in new_items.items()):
        return None
    if not _same_outside(approved, new.to_dict(), items=set(old_items), kept=set(new_items)):
        return None
    reasons = dict(new_batch.get("dropped") or {})
    return {k: str(reasons.get(k, "its facts changed")) for k in old_items if k not in new_items}


def _same_outside(old: Mapping[str, Any], new: Mapping[str, Any], *, items: set[str],
                  kept: set[str]) -> bool:
    """Whether ``new`` differs from ``old`` only by the items it dropped: every data entry but the
    batch is the same (an approvers raise above all; a mapping keyed by items is the old one
    without the dropped items), each change it makes was approved, and each fact it shows that
    was not shown is about a dropped item (its subject names the item or a dropped change's
    target)."""
    old_data, new_data = dict(old.get("data") or {}), dict(new.get("data") or {})
    for key in (set(old_data) | set(new_data)) - {"batch"}:
        was, now = old_data.get(key), new_data.get(key)  # stored plans went through JSON: compare so
        if canonical_json(was) == canonical_json(now):
            continue
        if not (isinstance(was, Mapping) and isinstance(now, Mapping) and was
                and set(was) <= items and set(now) <= kept
                and canonical_json(now) == canonical_json({k: v for k, v in was.items() if k in kept})):
            return False
    left = Counter(canonical_json(c) for c in old.get("changes") or ())
    left.subtract(canonical_json(c) for c in new.get("changes") or ())
    if any(n < 0 for n in left.values()):
        return False  # a change that was not approved
    about = (items - kept) | {json.loads(c)["target"] for c, n in left.items() if n > 0}
    shown = {canonical_json([f.get("subject"), f.get("name"), f.get("value")])
             for f in old.get("facts") or ()}
    return all(str(f.get("subject", "")).rsplit(" ", 1)[-1] in about
               for f in new.get("facts") or ()
               if canonical_json([f.get("subject"), f.get("name"), f.get("value")]) not in shown)


@dataclass(frozen=True)
class ApiCall:
    """One call an action made to an outside API, for the audit trail."""

    service: str  # kubernetes, ec2
    operation: str  # e.g. patch_node, StopInstances
    targets: tuple[str, ...] = ()
    outcome: str = "ok"  # ok, or the error code
    request_id: str = ""


@dataclass(frozen=True)
class Result:
    """What ``apply()`` (or a read-only action) returned.

    ``done`` False means the change was made but its post-condition is not met yet (an instance
    still ``stopping``): the engine stores ``retry_after`` as the step's next check and calls
    ``apply()`` again, which must be idempotent. ``progress`` is shown while waiting.
    """

    data: Mapping[str, Any] = field(default_factory=dict)  # exposed as steps.<id>.result
    message: str = ""
    already_done: bool = False
    done: bool = True
    progress: str = ""
    retry_after: float = 5.0
    calls: Sequence[ApiCall] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "data": dict(self.data),
            "message": self.message,
            "already_done": self.already_done,
            "done": self.done,
            "progress": self.progress,
            "calls": [asdict(c) for c in self.calls],
        }
