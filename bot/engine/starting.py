"""Who may start a runbook, and from where: ``policy.start`` and a runbook's ``metadata.starters``.

The rule for a runbook is ``policy.start[NAME]``, else ``policy.start["*"]``; with ``start:`` in the
config but neither, nobody may start it. With no ``start:`` at all, anyone may start any runbook,
as before the rule existed. A rule names ``groups`` (``policy.groups`` names: members resolved as
for approvals, aliases and Slack user groups included) and ``channels`` (Slack channel ids):

- ``groups`` only: a member, from anywhere;
- ``channels`` only: anyone in Slack, from one of those channels; a request with no channel (the
  terminal, the API) is refused;
- both: a member, and from Slack only in those channels;
- neither (``{}``): anyone, from anywhere.

A runbook's ``metadata.starters`` narrows the rule's groups the way a step's ``approval.groups``
narrows its runbook's (the same code, ``approvals._narrowed``): starters outside the rule's groups
do not count, so a runbook never widens who may start it; under a rule with no groups its starters
are the groups. A dry run needs the same right as a run.

The bot's own identity (an alert's auto-run, ``system:alert:…``) is no person in any group: it
may start only a runbook that auto-runs and only reads (``may_auto_run``, the intake's own rule),
whatever ``policy.start`` says, so alerts keep working and a forged system requester starts
nothing that writes.
"""

from __future__ import annotations

from bot.config import PolicyConfig, StartRule
from bot.engine.approvals import Membership, _narrowed, is_system
from bot.runbook.autorun import may_auto_run
from bot.runbook.model import Runbook

ANYONE = StartRule()


def start_rule(name: str, policy: PolicyConfig) -> StartRule | None:
    """The rule for runbook ``name`` (None: ``start:`` is there but names neither it nor ``*``)."""
    if policy.start is None:
        return ANYONE
    return policy.start.get(name) or policy.start.get("*")


def _either(items: tuple[str, ...], one: str, many: str) -> str:
    return f"{one} {items[0]}" if len(items) == 1 else f"{many} {', '.join(items[:-1])} or {items[-1]}"


def start_refusal(*, runbook: Runbook, requester: str, channel: str | None,
                  policy: PolicyConfig, membership: Membership) -> str | None:
    """Why ``requester`` may not start ``runbook`` from ``channel`` (None: outside Slack), naming
    what would be needed; None when they may."""
    name = runbook.name
    if is_system(requester):
        if may_auto_run(runbook):
            return None
        return (f"starting {name} needs a person: the bot's own identity ({requester}) starts "
                "only runbooks that auto-run and only read")
    rule = start_rule(name, policy)
    if rule is None:
        return (f"nobody may start {name}: policy.start names neither it nor '*' (ask whoever "
                "runs the bot to add a rule)")
    groups = _narrowed(tuple(runbook.metadata.starters or ()), rule.groups)
    member = not groups or any(membership(requester, g) for g in groups)
    if channel is not None:
        where = not rule.channels or channel in rule.channels
    else:
        where = not rule.channels or bool(groups)  # outside Slack, only as a member
    if member and where:
        return None
    needs = [_either(groups, "a member of", "a member of")] if groups else []
    if rule.channels:
        needs.append(_either(rule.channels, "from channel", "from one of channels")
                     + ("" if groups else " in Slack"))
    undefined = [g for g in groups if g not in policy.groups]
    hint = f"; not defined in policy.groups: {', '.join(undefined)}" if undefined else ""
    at = f", in channel {channel}" if channel is not None else ", outside Slack"
    return f"starting {name} needs {', '.join(needs)} (you are {requester}{at}{hint})"
