"""How a run that finished every step ends: the runbook's own outcome rules (``spec.outcome``).

Finishing every step is not the same as resolving the incident. A runbook whose steps go on after
a failure (``on_failure: continue``) reaches its last step with nodes unfenced or claims still
unplaced, and "succeeded" would then tell dashboards, metrics and the audit trail something false.
Only the runbook knows which of its results mean "resolved", so it declares it: ordered rules,
``{when, outcome, reason}``, evaluated once when the last step is done; the first whose ``when``
holds decides (``succeeded``, ``partial`` or ``failed``) and its rendered ``reason`` says why.

A runbook that declares no rule, or whose rules all miss, ends as it always did: ``succeeded``,
"every step finished". A run that stopped early (a step failed under ``on_failure: abort``, a
rejection, an expiry, an abort) never reaches the rules. A rule that cannot be evaluated cannot
vouch for the run, so the run ends ``failed`` with the error as its reason, as a step whose
``when`` cannot be evaluated fails. Pure: the conductor hands in the expression context.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.engine.state import RunStatus
from bot.errors import RunbookBotError
from bot.runbook.model import OutcomeRule
from bot.runbook.templating import evaluate, render

DEFAULT_REASON = "every step finished"
MAX_REASON = 1000  # a reason is one line on a card, in `runs` and in the audit event
_UNRENDERED = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)


@dataclass(frozen=True)
class Verdict:
    """How the run ends, why, and which rule decided (1-based; None: no rule matched)."""

    status: RunStatus
    reason: str
    rule: int | None = None
    when: str = ""


def _one_line(text: str) -> str:
    words = " ".join(text.split())
    return words if len(words) <= MAX_REASON else words[: MAX_REASON - 1] + "…"


def decide(rules: tuple[OutcomeRule, ...], context: Mapping[str, Any]) -> Verdict:
    """The verdict of the first rule whose ``when`` holds in ``context``, else today's result."""
    for number, rule in enumerate(rules, 1):
        try:
            hit = evaluate(rule.when, context)
        except RunbookBotError as e:
            return Verdict(RunStatus.FAILED, _one_line(
                f"outcome rule {number} could not be evaluated, so the run cannot be called a "
                f"success: {e}"), number, rule.when)
        if not hit:
            continue
        try:
            reason = _one_line(render(rule.reason, context))
        except RunbookBotError as e:
            reason = _one_line(f"{_UNRENDERED.sub('…', rule.reason)} (the reason could not be "
                               f"rendered: {e})")
        return Verdict(RunStatus(rule.outcome), reason or f"outcome rule {number}", number,
                       rule.when)
    return Verdict(RunStatus.SUCCEEDED, DEFAULT_REASON)
