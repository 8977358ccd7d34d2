"""The config's ``policy.start``: who may start which runbook, and from which Slack channels.

A module apart from ``bot/config.py`` (which reads it into ``PolicyConfig.start`` and re-exports
``StartRule``) only because that module is at the size budget. What a rule means is decided in
``bot/engine/starting.py`` (docs/slack.md, "Who may start a run"):

    policy:
      start:
        "*": {groups: [sre-oncall]}                 # every runbook not named
        node-dead-ngns: {groups: [sre-oncall], channels: [C0INCIDENTS]}

With no ``start:`` at all (``PolicyConfig.start`` None) anyone may start any runbook, as before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Text = Annotated[str, Field(min_length=1)]


@dataclass(frozen=True)
class StartRule:
    """Who may start a runbook (members of ``groups``) and from which Slack ``channels``."""

    groups: tuple[str, ...] = ()  # empty: anyone (where ``channels`` allows)
    channels: tuple[str, ...] = ()  # empty: anywhere; set: Slack from these, elsewhere by groups


class StartModel(BaseModel):
    """One rule as the file writes it, strictly (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    groups: list[Text] = []
    channels: list[Text] = []


def undefined_groups(rules: Mapping[str, StartModel] | None, groups: Collection[str]) -> None:
    """Raise ValueError naming the first rule with a group ``policy.groups`` does not define."""
    for name, rule in (rules or {}).items():
        unknown = [g for g in rule.groups if g not in groups]
        if unknown:
            raise ValueError(f"start.{name}: groups {', '.join(unknown)} are not defined in "
                             "policy.groups")


def start_rules(rules: Mapping[str, StartModel] | None) -> dict[str, StartRule] | None:
    """The rules as ``PolicyConfig.start`` holds them (None: no ``start:`` in the file)."""
    if rules is None:
        return None
    return {k: StartRule(groups=tuple(r.groups), channels=tuple(r.channels))
            for k, r in rules.items()}
