"""``Draft``: a finding as a rule yields it, before the scan fills in its params and command.

Kept apart from the rules so that rule modules (``rules.py``, ``node_health.py``) share it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.diagnose.model import Evidence, Severity


@dataclass
class Draft:
    kind: str
    severity: Severity
    summary: str
    subject: dict[str, str]
    evidence: list[Evidence]
    runbook: str | None
    params: dict[str, str]  # candidates; the scan keeps those the runbook declares
    command: str | None = None  # for findings without a runbook: what to look at
    related: set[str] = field(default_factory=set)  # node:N, pod:NS/P, namespace:NS
