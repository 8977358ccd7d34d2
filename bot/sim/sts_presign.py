"""The sandbox's STS checks a presigned request's SigV4 signature, as AWS's does.

An EKS token is a presigned ``GetCallerIdentity``; every cluster of a region sends it to the same
STS, replaying ``x-k8s-aws-id`` as its own name, and only the signature over that header keeps a
token to the cluster it was made for. moto answers presigned requests without checking them, so
the sandbox checks first: the request is signed again with the secret of its access key (the
sandbox's static keys, or a session moto's STS issued) and must match to the last hex digit.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlsplit

from bot.clients.aws import presigned_signature
from bot.sim.iam import ADMIN_KEY

STATIC_SECRETS = {"testing": "testing", ADMIN_KEY: "testing"}  # the sandbox's own key pairs


def _secret(access_key: str) -> str | None:
    if access_key in STATIC_SECRETS:
        return STATIC_SECRETS[access_key]
    from moto.sts.models import sts_backends  # deferred: moto is loaded only when a sandbox runs

    for by_partition in sts_backends.values():
        for backend in by_partition.values():
            for role in backend.assumed_roles:
                if role.access_key_id == access_key:
                    return str(role.secret_access_key)
    return None


def refusal(url: str, headers: Mapping[str, str]) -> str:
    """Why STS refuses this presigned GET (``""``: it does not); ``headers``: those sent."""
    params = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    access_key = params.get("X-Amz-Credential", "").split("/", 1)[0]
    secret = _secret(access_key)
    if secret is None:
        return f"the access key {access_key or '(none)'} is not known"
    expected = presigned_signature(url, headers, secret)
    if expected is None:
        return "not a presigned request"
    if not hmac.compare_digest(expected, params.get("X-Amz-Signature", "")):
        return "the signature does not match the request it was made for"
    return ""
