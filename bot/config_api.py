"""The config's ``api:`` section: how callers of the API prove who they are (docs/api.md, "Authentication").

A module apart from ``bot/config.py``, which reads it into ``Settings.api`` and re-exports its
classes, only because that module is at the size budget (scripts/module_size.py). It follows the
same style: frozen dataclasses the product reads, and strict pydantic models the file is checked
with (a quoted "false" is an error, unknown keys are errors).

    api:
      tokens:          # automation: NAME -> "sha256:HEX" of the token (runbook-bot api hash-token)
        ci-deploy: "sha256:9f86d0..."
      oidc:            # people, with an ID token of the company's identity provider
        issuer: https://login.example.com
        audience: runbook-bot
        jwks_url: ...  # default: the jwks_uri of the issuer's /.well-known/openid-configuration
        username_claim: sub      # the identity is oidc:<this claim>
        groups_claim: groups
      kubernetes:      # people and automation, with the bearer token of their kubeconfig
        cluster: prod            # a name under clusters: whose API server answers the TokenReview
        audiences: [runbook-bot] # [] accepts tokens for the API server itself (see docs/api.md)
        pinned_session_roles: ["AWSReservedSSO_*"]  # assumed roles whose session name IAM pins
        service_accounts: ["ci:deployer"]           # NAMESPACE:NAME allowed in, as automation
        bot_service_account: "runbook-bot:runbook-bot"  # the bot's own: a system actor
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

TOKEN_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
HASHED_TOKEN = r"^sha256:[0-9a-f]{64}$"
CIDR = r"^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$"  # an address or a network; checked as one when read
SERVICE_ACCOUNT = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?:[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"
ROLE_PATTERN = r"^[\w+=,.@*?-]{1,64}$"  # an IAM role name, * and ? as wildcards


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    audience: str
    jwks_url: str | None = None  # None: the jwks_uri of the issuer's discovery document
    username_claim: str = "sub"
    groups_claim: str = "groups"


@dataclass(frozen=True)
class KubernetesAuthConfig:
    cluster: str
    audiences: tuple[str, ...] = ("runbook-bot",)
    pinned_session_roles: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()  # NAMESPACE:NAME, let in as automation
    bot_service_account: str = "runbook-bot:runbook-bot"


@dataclass(frozen=True)
class ApiConfig:
    """Who may call the API: each method is off until configured."""

    tokens: Mapping[str, str] = field(default_factory=dict)  # NAME -> sha256:HEX
    oidc: OidcConfig | None = None
    kubernetes: KubernetesAuthConfig | None = None
    # requests per second per caller (per address before it is known), in bursts of rate_burst
    rate_limit: float = 20.0
    rate_burst: int = 40
    # CIDRs of the proxies in front of the API (the Ingress, a load balancer): only from them is
    # X-Forwarded-For read for the caller's address (bot/frontends/api/clientaddr.py)
    trusted_proxies: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.tokens or self.oidc or self.kubernetes)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


_Text = Annotated[str, Field(min_length=1)]
_Url = Annotated[str, Field(pattern=r"^https?://\S+$")]


class _Oidc(_Strict):
    issuer: _Url
    audience: _Text
    jwks_url: _Url | None = None
    username_claim: _Text = "sub"
    groups_claim: _Text = "groups"


class _Kubernetes(_Strict):
    cluster: _Text
    audiences: list[_Text] = ["runbook-bot"]
    pinned_session_roles: list[Annotated[str, Field(pattern=ROLE_PATTERN)]] = []
    service_accounts: list[Annotated[str, Field(pattern=SERVICE_ACCOUNT)]] = []
    bot_service_account: Annotated[str, Field(pattern=SERVICE_ACCOUNT)] = "runbook-bot:runbook-bot"


class ApiModel(_Strict):
    tokens: dict[Annotated[str, Field(pattern=TOKEN_NAME)],
                 Annotated[str, Field(pattern=HASHED_TOKEN)]] = {}
    oidc: _Oidc | None = None
    kubernetes: _Kubernetes | None = None
    rate_limit: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 20.0
    rate_burst: Annotated[int, Field(ge=1)] = 40
    trusted_proxies: list[Annotated[str, Field(pattern=CIDR)]] = []

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, cidrs: list[str]) -> list[str]:
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not an address or a network "
                                 "(like 10.0.0.0/8 or fd00::/8)") from None
        return cidrs


API_SECTIONS: dict[str, type[BaseModel]] = {"api": ApiModel, "api.oidc": _Oidc,
                                            "api.kubernetes": _Kubernetes}


def api_config(a: ApiModel) -> ApiConfig:
    o, k = a.oidc, a.kubernetes
    return ApiConfig(
        tokens=dict(a.tokens),
        oidc=None if o is None else OidcConfig(
            issuer=o.issuer, audience=o.audience, jwks_url=o.jwks_url,
            username_claim=o.username_claim, groups_claim=o.groups_claim),
        kubernetes=None if k is None else KubernetesAuthConfig(
            cluster=k.cluster, audiences=tuple(k.audiences),
            pinned_session_roles=tuple(k.pinned_session_roles),
            service_accounts=tuple(k.service_accounts), bot_service_account=k.bot_service_account),
        rate_limit=a.rate_limit, rate_burst=a.rate_burst,
        trusted_proxies=tuple(a.trusted_proxies))
