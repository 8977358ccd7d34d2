"""AI agents as requesters, never approvers: who is an agent, and what an agent may request.

An agent (HolmesGPT, kagent, any MCP client) reaches runs only through the API, authenticated like
any caller; the API records it as the agent actor ``agent:NAME`` (``agent_identity``), with the
identity it authenticated as (``runs_as``), the person it says it acts for (``on_behalf_of``) and
its stated ``reason`` and ``evidence``, all kept in the run's origin (``AgentRequest``), so the
run header, ``run.created`` and every card carry them. The rules, here so that no front-end decides:

- an agent never approves, confirms or breaks glass (``approvals.check_approver`` and
  ``apply_commands`` ask ``is_agent``), whatever the groups or aliases say: a model that can be
  talked into a request must not also be the one that lets it through;
- "on behalf of alice" cannot be checked and grants nothing, but it makes alice a requester for
  the self-approval rule (``check_approver``'s ``on_behalf_of``): alice cannot approve what her
  agent asked for;
- an agent may request only what ``agents:`` allows (``request_refusal``): read-only runbooks
  (when ``read_only_runbooks``) and the runbooks listed, each param held to a rule, ``triage``
  meaning a value the diagnosis itself suggests for that runbook (``Triage``, a port the shell
  fills with ``bot.diagnose``), so an agent cannot point ``node-dead-ngns`` at a node the triage
  calls sick. Dry runs change nothing and are allowed for every runbook;
- what an agent says is text from the world: ``neutralise`` breaks mentions and links before it
  is stored (the redaction of secrets is the runtime's, as for every input).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.config_agents import ANY, TRIAGE, AgentsConfig

AGENT_PREFIX = "agent:"
MAX_REASON = 1000  # characters of a stated reason
MAX_EVIDENCE = 4000  # characters of evidence
MIN_REASON = 8

# (runbook, cluster param or "") -> the params the diagnosis suggests for that runbook, one
# mapping per finding naming it (``bot.diagnose``'s findings, read by the shell)
Triage = Callable[[str, str], Sequence[Mapping[str, str]]]
# (runbook name) -> whether any of its steps is destructive (``RunbookFacts``)
Destructive = Callable[[str], bool]


def is_agent(identity: str | None) -> bool:
    return bool(identity) and str(identity).startswith(AGENT_PREFIX)


def agent_identity(name: str) -> str:
    return AGENT_PREFIX + name


def agent_name(identity: str) -> str:
    return identity.removeprefix(AGENT_PREFIX)


@dataclass(frozen=True)
class AgentRequest:
    """What an agent's request carries beside the run: kept in the run's origin."""

    agent: str  # its name (``agent:NAME`` is the requester)
    runs_as: str  # the identity it authenticated as
    on_behalf_of: str | None = None  # the person it says it acts for (unverified)
    reason: str = ""
    evidence: str = ""

    def origin(self) -> dict[str, Any]:
        out: dict[str, Any] = {"agent": self.agent, "runs_as": self.runs_as}
        if self.on_behalf_of:
            out["on_behalf_of"] = self.on_behalf_of
        if self.reason:
            out["reason"] = self.reason
        if self.evidence:
            out["evidence"] = self.evidence
        return out


def agent_request(origin: Mapping[str, Any]) -> AgentRequest | None:
    """The agent's request recorded in a run's origin; None for a run a person started."""
    agent = origin.get("agent")
    if not agent:
        return None
    return AgentRequest(agent=str(agent), runs_as=str(origin.get("runs_as") or ""),
                        on_behalf_of=str(origin["on_behalf_of"]) if origin.get("on_behalf_of")
                        else None, reason=str(origin.get("reason") or ""),
                        evidence=str(origin.get("evidence") or ""))


_MENTION = re.compile(r"@(here|channel|everyone)\b", re.IGNORECASE)
_SCHEME = re.compile(r"\b(h)(tt)(ps?)(://)", re.IGNORECASE)
_WWW = re.compile(r"\bwww\.", re.IGNORECASE)


def neutralise(text: str, *, limit: int) -> str:
    """An agent's words made inert before they are stored: no mention syntax (``<@U…>``,
    ``<!here>``, ``@channel``), no link a chat or a browser would follow (``hxxps://``), and
    control characters gone. Cut to ``limit`` characters."""
    text = "".join(c if c.isprintable() or c in "\n\t" else " " for c in text)
    text = text.replace("<", "\u2039").replace(">", "\u203a")
    text = _MENTION.sub(lambda m: "@\u200b" + m.group(1), text)
    text = _SCHEME.sub(lambda m: m.group(1) + "xx" + m.group(3) + "[://]", text)
    text = _WWW.sub("www[.]", text)
    return text.strip()[:limit]


def request_refusal(*, runbook: str, params: Mapping[str, Any], dry_run: bool,
                    config: AgentsConfig, destructive: Destructive,
                    triage: Triage | None) -> str | None:
    """Why an agent may not request ``runbook`` with ``params`` (None: it may)."""
    if dry_run:
        return None
    rules = config.runbooks.get(runbook)
    if rules is None:
        if config.read_only_runbooks and not destructive(runbook):
            return None
        allowed = sorted(config.runbooks)
        return (f"agents may not request {runbook}: it changes things, and agents.runbooks "
                f"does not list it (agents may request "
                + ("read-only runbooks" if config.read_only_runbooks else "no read-only runbook")
                + (f" and {', '.join(allowed)}" if allowed else "") + "); a person can start it")
    for name, value in sorted(params.items()):
        rule = rules.get(name)
        if rule is None:
            return (f"agents may not set param {name} of {runbook} (agents.runbooks.{runbook} "
                    "names the params an agent may give)")
        if rule == ANY:
            continue
        if isinstance(rule, tuple):
            if str(value) not in rule:
                return (f"agents may set param {name} of {runbook} only to one of "
                        f"{', '.join(rule)}, not {str(value)[:80]!r}")
            continue
        if rule == TRIAGE:
            why = _triage_refusal(runbook, name, str(value), params, triage)
            if why:
                return why
    return None


def _triage_refusal(runbook: str, name: str, value: str, params: Mapping[str, Any],
                    triage: Triage | None) -> str | None:
    if triage is None:
        return (f"param {name} of {runbook} must be a value the triage suggests, and this bot "
                "scans no cluster here")
    suggested = triage(runbook, str(params.get("cluster") or ""))
    if any(s.get(name) == value for s in suggested):
        return None
    return (f"the triage does not suggest {runbook} for {name}={value[:80]}: agents may request it "
            f"only where the diagnosis does (runbook-bot diagnose --{name} {value[:80]} says why)")
