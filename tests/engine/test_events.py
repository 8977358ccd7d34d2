"""The audit event vocabulary: the type strings are fixed, and only ``bot.engine.events`` builds events.

A type string is hashed into every stored chain that holds it, so renaming one would make old runs
fail verification: the list below is the released vocabulary, and may only grow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bot.engine import events as ev
from bot.engine.events import COMMANDS, EventType

RELEASED = [
    "run.created", "run.aborted", "run.finished", "step.planned", "guard.passed", "guard.failed",
    "approval.requested", "confirmation.requested", "approval.granted", "approval.rejected",
    "approval.expired", "approval.invalidated", "step.confirmed", "interlock.blocked",
    "interlock.override_requested", "interlock.override_granted", "interlock.overridden",
    "step.applying", "step.applied", "step.polled", "step.retrying", "step.succeeded",
    "step.failed", "step.skipped", "step.goto", "command.approve", "command.reject",
    "command.confirm", "command.break_glass", "command.retry", "command.abort", "command.refused",
    "run.linked", "run.handed_over", "command.handover", "audit.key_rotated",
]
BOT = Path(__file__).resolve().parents[2] / "bot"


def test_every_released_type_string_is_in_the_enum_byte_for_byte():
    values = [t.value for t in EventType]
    assert len(values) == len(set(values))
    assert set(RELEASED) <= set(values), "a released event type was renamed or removed"


def test_commands_are_the_command_types_but_the_refusal():
    assert {t.value for t in COMMANDS} == {
        "command.approve", "command.reject", "command.confirm", "command.break_glass",
        "command.retry", "command.abort", "command.handover"}


def test_a_command_outside_the_vocabulary_is_refused():
    assert ev.command_given("break_glass", {"reason": "r"}).type is EventType.COMMAND_BREAK_GLASS
    with pytest.raises(ValueError, match="is not a"):
        ev.command_given("reboot", {})
    with pytest.raises(ValueError, match="is not a command"):
        ev.command_given("refused", {})


def test_a_draft_stores_the_plain_type_string():
    draft = ev.step_skipped("a", reason="r").draft(actor="x", ts="t")
    assert type(draft.type) is str and draft.type == "step.skipped"
    assert dict(draft.payload) == {"step": "a", "reason": "r"}


def test_only_the_vocabulary_module_builds_audit_events():
    """Every producer goes through a constructor of ``bot.engine.events``: no module builds an
    ``AuditDraft`` itself, and no ``event(...)`` call is given a type string."""
    offenders = []
    for path in sorted(BOT.rglob("*.py")):
        if path == BOT / "engine" / "events.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            literal = any(isinstance(a, ast.Constant | ast.JoinedStr | ast.IfExp) for a in node.args[1:2])
            if name == "AuditDraft" or (name == "event" and literal):
                offenders.append(f"{path.relative_to(BOT.parent)}:{node.lineno}")
    assert offenders == []
