"""What a run acts on and as whom, resolved once when it first touches a cluster.

A postmortem has to know which cluster a run changed (also when the run named none and the only
configured cluster was used), through which kube context and API server, in which AWS account and
as which identity. The runner asks for this before a run's first step on a cluster and records it
as an audited event (``run.context``), so the transcript's claims verify with the chain.

Nothing here names a file of the bot's host: the kubeconfig's path is neither recorded nor left in
an error message. ``sts:GetCallerIdentity`` needs no IAM permission, so asking it never fails for
lack of a grant.
"""

from __future__ import annotations

from typing import Any

from bot import __version__
from bot.actions.env import ClusterClients, acting_for
from bot.config import ClusterConfig
from bot.engine.ports import StepContext

# actions whose names start so reach a cluster's Kubernetes API or its AWS account
CLUSTER_ACTION_PREFIXES = ("k8s.", "aws.")


def _without_paths(text: str, cfg: ClusterConfig) -> str:
    return text.replace(cfg.kubeconfig, "<kubeconfig>") if cfg.kubeconfig else text


def resolved_context(cfg: ClusterConfig, clients: ClusterClients, ctx: StepContext) -> dict[str, Any]:
    """The run's context on ``cfg``: what was found, and in ``problems`` what could not be."""
    problems: list[str] = []
    kube_context = api_server = account = caller_arn = ""
    try:
        kube = clients.kube
        kube_context, api_server = kube.context_name or (cfg.context or ""), kube.api_server
    except Exception as e:  # recorded, never fatal: the run's own steps report it as they plan
        problems.append(f"kubernetes: {_without_paths(str(e), cfg)}")
    try:
        who = clients.ec2.bound(ctx.calls, read_only=True).caller_identity()
        account, caller_arn = who["account"], who["arn"]
    except Exception as e:
        problems.append(f"aws: {_without_paths(str(e), cfg)}")
    writes_as: dict[str, str] = {}
    if cfg.role_arn:
        run = acting_for(ctx)
        writes_as = {"role_arn": cfg.role_arn, "session_name": run.session_name,
                     "source_identity": run.source_identity}
    return {"cluster": cfg.name, "region": cfg.region, "kube_context": kube_context,
            "api_server": api_server, "account": account, "caller_arn": caller_arn,
            "writes_as": writes_as, "bot_version": __version__, "problems": problems}
