"""The sandbox's STS checks a presigned request's SigV4 signature, as AWS's does.

An EKS token is a presigned ``GetCallerIdentity``; every cluster of a region sends it to the same
STS, replaying ``x-k8s-aws-id`` as its own name, and only the signature over that header keeps a
token to the cluster it was made for. moto answers presigned requests without checking them, so
the sandbox checks first (``bot.clients.aws.presigned_refusal``), with the secret of the request's
access key: one of the sandbox's own key pairs, or a session moto's STS issued.
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.clients.aws import presigned_refusal
from bot.sim.iam import ADMIN_CREDENTIALS, CREDENTIALS

_STATIC = {c["aws_access_key_id"]: c["aws_secret_access_key"]
           for c in (CREDENTIALS, ADMIN_CREDENTIALS)}


def _secret(access_key: str) -> str | None:
    if access_key in _STATIC:
        return _STATIC[access_key]
    from moto.sts.models import sts_backends  # deferred: moto is loaded only when a sandbox runs

    for by_partition in sts_backends.values():
        for backend in by_partition.values():
            for role in backend.assumed_roles:
                if role.access_key_id == access_key:
                    return str(role.secret_access_key)
    return None


def refusal(url: str, headers: Mapping[str, str]) -> str:
    """Why STS refuses this presigned GET (``""``: it does not); ``headers``: those sent."""
    return presigned_refusal(url, headers, _secret)
