"""One cluster's Kubernetes client as its config says to reach it: a kubeconfig, or EKS tokens.

With ``auth: kubeconfig`` (the default) the client loads the cluster's kubeconfig and context, else
the default kubeconfig, else the pod's ServiceAccount. With ``auth: eks`` it reaches ``server``
(trusting the CA bundle in ``certificate_authority``) with bearer tokens EKS accepts, made in
process by ``bot.clients.aws.EksTokens`` from the cluster's own AWS identity: its ``role_arn``
assumed for the bot (the shared session, attributed as every session of the role is), or the base
credentials. The token is asked for before every request and renewed before it expires, so one bot
reaches clusters of other accounts without a kubeconfig, an ``aws`` binary or an exec plugin.

This module imports neither SDK: the Kubernetes client takes a ``configure`` callable, and the
tokens come from ``bot.clients.aws``, the importers of each (the import contracts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bot.clients.attribution import BOT_IDENTITY, SharedSession
from bot.clients.aws import EksTokens, Reach
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig

_KEYS = ("BearerToken", "authorization")


def eks_tokens(cfg: ClusterConfig, *, sts_endpoint_url: str | None = None,
               credentials: dict[str, str] | None = None, requester: str = BOT_IDENTITY,
               now: Callable[[], float] = time.time) -> EksTokens:
    """The token source of ``cfg``'s EKS cluster, signed by the cluster's role session (or base)."""
    reach = Reach(cfg, sts_endpoint_url=sts_endpoint_url, credentials=credentials)
    if cfg.role_arn:
        shared = SharedSession(cluster=cfg.name, requester=requester)
        session, _ = reach.role_session(RoleSessionName=shared.session_name,
                                        SourceIdentity=shared.source_identity, Tags=shared.tags())
        sts = reach.sts(session)
    else:
        sts = reach.base_sts
    return EksTokens(sts, cfg.eks_name, now=now)


def token_auth(*, server: str, ca_file: str | None, token: Callable[[], str],
               name: str) -> Callable[[Any], str]:
    """What ``KubeClient.from_config(configure=...)`` sets up: ``server``, its CA, and a bearer
    token asked of ``token`` before each request (the SDK's ``refresh_api_key_hook``)."""
    def refresh(sdk: Any) -> None:
        # the SDK reads "BearerToken" since 36.0 and "authorization" before: both are set
        sdk.api_key = dict.fromkeys(_KEYS, token())

    def configure(sdk: Any) -> str:
        sdk.host = server.rstrip("/")
        sdk.ssl_ca_cert = ca_file
        sdk.api_key_prefix = dict.fromkeys(_KEYS, "Bearer")
        refresh(sdk)
        sdk.refresh_api_key_hook = refresh
        return name
    return configure


def kube_client(cfg: ClusterConfig, *, sts_endpoint_url: str | None = None,
                credentials: dict[str, str] | None = None, requester: str = BOT_IDENTITY,
                now: Callable[[], float] = time.time, **options: Any) -> KubeClient:
    """``cfg``'s Kubernetes client (``options``: those of ``KubeClient.from_config``).

    ``sts_endpoint_url`` and ``credentials`` replace the environment's STS endpoint and the default
    credential chain (a sandbox's); ``now`` is the clock tokens are renewed on."""
    options.setdefault("request_timeout", cfg.request_timeout)
    if cfg.auth != "eks":
        return KubeClient.from_config(kubeconfig=cfg.kubeconfig, context=cfg.context, **options)
    assert cfg.server is not None, "the config requires server with auth: eks"
    tokens = eks_tokens(cfg, sts_endpoint_url=sts_endpoint_url, credentials=credentials,
                        requester=requester, now=now)
    return KubeClient.from_config(configure=token_auth(
        server=cfg.server, ca_file=cfg.certificate_authority, token=tokens,
        name=f"eks:{cfg.eks_name}"), **options)
