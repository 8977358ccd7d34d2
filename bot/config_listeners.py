"""The front-ends' settings: Slack, the Alertmanager webhook, and the ports each audience is
served on (``slack:``, ``alerts:``, ``listen:`` of the config file).

A module apart from ``bot/config.py``, which reads the file and re-exports these, so that each
stays within the module-size budget; what each key means is documented there and in
docs/deploy.md ("Ports").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Text = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


@dataclass(frozen=True)
class SlackConfig:
    # secrets stay out of the printed form (tracebacks, debug logs, crash reports)
    bot_token: str | None = field(default=None, repr=False)
    signing_secret: str | None = field(default=None, repr=False)
    app_token: str | None = field(default=None, repr=False)
    api_url: str | None = None  # e.g. http://127.0.0.1:8900/api/ (trailing slash matters)
    allowed_channels: tuple[str, ...] = ()
    usergroup_ttl: float = 300.0


@dataclass(frozen=True)
class AlertsConfig:
    """The Alertmanager webhook: who may post to it, and where its suggestions go."""

    bearer_tokens: tuple[str, ...] = field(default=(), repr=False)  # Authorization: Bearer <token>
    # username -> password
    basic_auth: Mapping[str, str] = field(default_factory=dict, repr=False)
    cluster_label: str = "cluster"  # the label naming an alert's cluster
    channel: str | None = None  # the Slack channel of suggestion cards
    # at most this many auto-runs of one runbook in any auto_run_window seconds, on all replicas
    auto_run_limit: int = 10
    auto_run_window: float = 600.0

    @property
    def enabled(self) -> bool:
        """The webhook is served only with credentials to check: never open to anyone."""
        return bool(self.bearer_tokens or self.basic_auth)


# one listener per audience (docs/deploy.md, "Ports"); the manifests in deploy/ use these numbers
SLACK_PORT = 3000  # /slack/events: Slack's requests, public through the Ingress
OPS_PORT = 9464  # /healthz, /readyz, /metrics: probes and scraping, inside the cluster
ALERTS_PORT = 9095  # /alertmanager: Alertmanager's webhook, inside the cluster
API_PORT = 8080  # /api/v1/: the authenticated API (terminals, scripts), inside the cluster
MCP_PORT = 8090  # /mcp: the MCP server for AI agents (mcp serve), inside the cluster


@dataclass(frozen=True)
class ListenConfig:
    """Where the serving commands listen: each audience on a port of its own, so a route or a
    NetworkPolicy rule that lets one in lets in nothing else."""

    host: str = "0.0.0.0"
    slack_port: int = SLACK_PORT
    ops_port: int = OPS_PORT
    alerts_port: int = ALERTS_PORT
    api_port: int = API_PORT
    mcp_port: int = MCP_PORT


class SlackModel(_Strict):
    bot_token: Text | None = None
    signing_secret: Text | None = None
    app_token: Text | None = None
    api_url: Text | None = None
    allowed_channels: list[Text] = []
    usergroup_ttl: Seconds = 300.0


class AlertsModel(_Strict):
    bearer_tokens: list[Annotated[str, Field(min_length=16)]] = []
    basic_auth: dict[Text, Annotated[str, Field(min_length=16)]] = {}
    cluster_label: Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")] = "cluster"
    channel: Text | None = None
    auto_run_limit: Annotated[int, Field(ge=0)] = 10  # 0: alerts start nothing, only suggest
    auto_run_window: Seconds = 600.0


Port = Annotated[int, Field(ge=1, le=65535)]


class ListenModel(_Strict):
    host: Text = "0.0.0.0"
    slack_port: Port = SLACK_PORT
    ops_port: Port = OPS_PORT
    alerts_port: Port = ALERTS_PORT
    api_port: Port = API_PORT
    mcp_port: Port = MCP_PORT

    @model_validator(mode="after")
    def _apart(self) -> ListenModel:
        ports = {"slack_port": self.slack_port, "ops_port": self.ops_port,
                 "alerts_port": self.alerts_port, "api_port": self.api_port,
                 "mcp_port": self.mcp_port}
        for name, port in ports.items():
            same = [n for n, p in ports.items() if p == port and n != name]
            if same:
                raise ValueError(f"{name} and {same[0]} are both {port}: each listener needs a "
                                 "port of its own")
        return self
