"""AI agents as callers of the API: recognised after authentication, named ``agent:NAME``, held to
a rate of their own, and kept away from every decision route.

An agent authenticates like any caller (an API token, an OIDC client's token, a ServiceAccount
token); ``agents.identities`` in the config names the identities that are agents, and a request
that says it comes from an agent (``X-Runbook-Bot-Agent``, which the MCP server always sends) is
taken as one whatever its identity: the header can only take rights away, never give any. The
agent's caller (``AgentCaller``) carries the identity it authenticated as and the person it says it
acts for (``X-On-Behalf-Of``: unverified, it only makes that person a requester), which every run
it requests records (``bot.engine.agents.AgentRequest``, in the run's origin).

What agents may request is the runtime's rule (``Runtime.start``); who may approve is the
engine's. Here: the decision routes answer an agent 403 (recorded), and an agent's requests are
limited per agent (``agents.rate_limit``, ``agents.rate_burst``) on top of the limit per
identity, a flood answered 429 with a sentence saying so and recorded at most once a second.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.config_agents import AgentsConfig
from bot.diagnose import Report, Scope
from bot.engine.agents import (
    MAX_EVIDENCE,
    MAX_REASON,
    MIN_REASON,
    AgentRequest,
    Triage,
    agent_identity,
    is_agent,
    neutralise,
)
from bot.engine.provenance import check_identity
from bot.errors import ParamError
from bot.frontends.api.ratelimit import RateLimiter
from bot.frontends.api.routing import ApiError, Caller

AGENT_HEADER = "x-runbook-bot-agent"  # any value: the caller is an agent
BEHALF_HEADER = "x-on-behalf-of"  # the identity of the person the agent acts for
RECORD_EVERY = 1.0  # seconds: a flood is recorded at most this often per agent


@dataclass(frozen=True)
class AgentCaller:
    """An agent, as the API and the engine see it: ``agent:NAME``, no groups."""

    identity: str
    runs_as: str
    method: str
    on_behalf_of: str | None = None
    via_mcp: bool = False
    groups: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.identity.removeprefix("agent:")

    @property
    def recorded_via(self) -> dict[str, Any]:
        return via(self)


class AgentGate:
    """Who is an agent, and the per-agent rate limit."""

    def __init__(self, config: AgentsConfig, *, clock: Callable[[], float]) -> None:
        self.config = config
        self.limiter = RateLimiter(rate=config.rate_limit, burst=config.rate_burst, clock=clock)
        self._clock = clock
        self._recorded: dict[str, float] = {}

    def caller(self, caller: Caller, headers: Mapping[str, str]) -> Caller:
        """``caller`` as an agent when it is one, else as it is."""
        name = self.config.identities.get(caller.identity)
        declared = AGENT_HEADER in headers
        if name is None and not declared:
            if BEHALF_HEADER in headers:
                raise ApiError(400, "bad_request", f"{BEHALF_HEADER} is for agents: "
                               f"{caller.identity} is not one (agents.identities)")
            return caller
        if name is None:  # an agent the config does not name: known by who it authenticated as
            name = caller.identity
        behalf = headers.get(BEHALF_HEADER, "").strip() or None
        if behalf is not None:
            try:
                behalf = check_identity(behalf, what=BEHALF_HEADER)
            except ParamError:
                behalf = None
            if behalf is None or ":" not in behalf or is_agent(behalf):
                raise ApiError(400, "bad_request", f"{BEHALF_HEADER} names a person as the bot "
                               "knows them, like k8s:alice or slack:U0123ABCD (GET "
                               "/api/v1/whoami shows one's own)")
        return AgentCaller(identity=agent_identity(name), runs_as=caller.identity,
                           method=caller.method, on_behalf_of=behalf,
                           via_mcp=headers.get(AGENT_HEADER, "").lower() == "mcp")

    def flooded(self, caller: AgentCaller) -> tuple[float, bool]:
        """(seconds to wait, 0.0 when there is a token; whether to record this refusal)."""
        wait = self.limiter.take(caller.identity)
        if not wait:
            return 0.0, False
        now = self._clock()
        last = self._recorded.get(caller.identity)
        record = last is None or now - last >= RECORD_EVERY
        if record:
            self._recorded[caller.identity] = now
        return wait, record


def via(caller: AgentCaller) -> dict[str, Any]:
    """What an agent's requests record beside its identity."""
    out: dict[str, Any] = {"frontend": "api", "method": caller.method, "agent": caller.name,
                           "runs_as": caller.runs_as}
    if caller.via_mcp:
        out["through"] = "mcp"
    if caller.on_behalf_of:
        out["on_behalf_of"] = caller.on_behalf_of
    return out


def request_origin(caller: AgentCaller, *, reason: str | None, evidence: str | None,
                   dry_run: bool, redact: Callable[[str], str]) -> dict[str, Any]:
    """The origin of a run an agent requests: who, for whom, why and on what evidence, redacted
    and made inert. A request that can change something needs a reason."""
    texts = {"reason": (reason or "", MAX_REASON), "evidence": (evidence or "", MAX_EVIDENCE)}
    kept = {name: neutralise(redact(text), limit=limit) for name, (text, limit) in texts.items()}
    if not dry_run and len(" ".join(kept["reason"].split())) < MIN_REASON:
        raise ApiError(400, "bad_request", f"an agent's request needs a reason of at least "
                       f"{MIN_REASON} characters: the approvers read it")
    request = AgentRequest(agent=caller.name, runs_as=caller.runs_as,
                           on_behalf_of=caller.on_behalf_of, reason=kept["reason"],
                           evidence=kept["evidence"])
    # what had mentions, links or secrets taken out is said so, for whoever reads the record
    altered = [n for n, (text, limit) in texts.items() if kept[n] != text.strip()[:limit]]
    return {**via(caller), **request.origin(), **({"neutralised": altered} if altered else {})}


def triage_from(diagnoser: Callable[[Scope], Report]) -> Triage:
    """The triage port (``bot.engine.agents.Triage``) over the diagnosis: for a runbook and a
    cluster, the params of every finding that names that runbook, from one scan."""

    def suggested(runbook: str, cluster: str) -> Sequence[Mapping[str, str]]:
        report = diagnoser(Scope(cluster=cluster))
        return [f.params for f in report.findings if f.runbook == runbook]

    return suggested
