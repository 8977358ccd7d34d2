"""The config's ``agents:`` section: which API callers are AI agents, and what agents may request
(docs/agents.md).

An agent (HolmesGPT, kagent, any MCP client) authenticates like any caller of the API; this
section says which authenticated identities are agents and names them, so the bot records them as
agent actors (``agent:NAME``), never lets them approve, and holds their requests to a policy of
their own. A module apart from ``bot/config.py`` (which reads it into ``Settings.agents``) because
that module is at its size budget; same style: frozen dataclasses the product reads, strict
pydantic models the file is checked with.

    agents:
      identities:                # an API identity (GET /api/v1/whoami) -> the agent's name
        "k8s:system:serviceaccount:holmes:holmes": holmes
        "token:kagent": kagent
      read_only_runbooks: true   # agents may request any runbook that has no destructive step
      runbooks:                  # and these, each param held to a rule
        node-dead-ngns:
          node: triage           # only a value the triage suggests for this runbook (diagnose)
          cluster: any
        pod-stuck-terminating:
          namespace: [payments, checkout]   # one of these values
      rate_limit: 0.5            # requests a second per agent, every endpoint
      rate_burst: 10
      max_active_runs: 2         # runs an agent requested that have not finished

A param a listed runbook declares but the entry does not name may not be given by the agent (its
default applies); ``any`` lets it through as the runbook's own checks allow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

AGENT_NAME = r"^[a-z0-9]([a-z0-9._-]{0,38}[a-z0-9])?$"
ANY, TRIAGE = "any", "triage"
# a rule: "any", "triage" (a value the diagnosis suggests for the runbook), or the values allowed
ParamRule = str | tuple[str, ...]


@dataclass(frozen=True)
class AgentsConfig:
    """Who is an agent, and what agents may ask for."""

    identities: Mapping[str, str] = field(default_factory=dict)  # API identity -> agent name
    read_only_runbooks: bool = True
    runbooks: Mapping[str, Mapping[str, ParamRule]] = field(default_factory=dict)
    rate_limit: float = 0.5
    rate_burst: int = 10
    max_active_runs: int = 2


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


_Name = Annotated[str, Field(pattern=AGENT_NAME)]
_Rule = Literal["any", "triage"] | Annotated[list[Annotated[str, Field(min_length=1)]],
                                                Field(min_length=1)]


class AgentsModel(_Strict):
    identities: dict[Annotated[str, Field(min_length=1, max_length=200)], _Name] = {}
    read_only_runbooks: bool = True
    runbooks: dict[Annotated[str, Field(min_length=1, max_length=63)], dict[str, _Rule]] = {}
    rate_limit: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 0.5
    rate_burst: Annotated[int, Field(ge=1)] = 10
    max_active_runs: Annotated[int, Field(ge=1, le=100)] = 2


AGENTS_SECTIONS: dict[str, type[BaseModel]] = {"agents": AgentsModel}


def agents_config(a: AgentsModel) -> AgentsConfig:
    return AgentsConfig(
        identities=dict(a.identities), read_only_runbooks=a.read_only_runbooks,
        runbooks={name: {p: rule if isinstance(rule, str) else tuple(rule)
                         for p, rule in params.items()} for name, params in a.runbooks.items()},
        rate_limit=a.rate_limit, rate_burst=a.rate_burst, max_active_runs=a.max_active_runs)
