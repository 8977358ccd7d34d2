"""EKS token authentication for the fake API server: the tokens ``aws eks get-token`` makes.

An EKS API server takes a bearer token ``k8s-aws-v1.`` + the unpadded base64url of a presigned STS
``GetCallerIdentity`` URL, and its authenticator (aws-iam-authenticator) checks it so:

- the URL is STS's (here: the sandbox's STS endpoint, and nothing else), path ``/``, GET,
  ``Action=GetCallerIdentity`` and ``Version=2011-06-15``, nothing else;
- ``X-Amz-SignedHeaders`` includes ``x-k8s-aws-id``, which is replayed as this cluster's name, so a
  token made for another cluster fails STS's signature check (moto checks no signature: here each
  sandbox has an STS endpoint of its own, and a token of another's fails the endpoint check);
- the token is at most 15 minutes old (``X-Amz-Date``, on the sandbox's clock) and was not
  presigned for longer than that;
- STS answers the replayed URL; the ARN it names (an assumed-role session ARN read as its role's
  ARN) is mapped to a Kubernetes user and groups (an access entry or the aws-auth ConfigMap).

``EksTokenReview`` does exactly that with the sandbox's STS (``send``: one request to its
endpoint) and its own ``access`` map; anything wrong is a ``TokenRefused`` whose text is what the
fake API server logs, while the client sees a plain 401 as from EKS.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from bot.sim.sts_presign import refusal

PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
VALID_FOR = timedelta(minutes=15)
_ARN = re.compile(rb"<Arn>([^<]+)</Arn>")
_ASSUMED = re.compile(r"arn:aws:sts::(\d{12}):assumed-role/([^/]+)/.+")
ALLOWED_PARAMS = {"Action", "Version", "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date",
                  "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Security-Token"}

# (method, url, headers, body) -> (status, headers, body): one request to the sandbox's STS
Send = Callable[[str, str, list[tuple[str, str]], bytes], tuple[int, object, bytes]]


class TokenRefused(Exception):
    """Why a token is not accepted (logged; the caller gets 401 Unauthorized)."""


def canonical_arn(arn: str) -> str:
    """An assumed-role session's ARN as its role's (what access entries name); others as given."""
    m = _ASSUMED.fullmatch(arn)
    return f"arn:aws:iam::{m[1]}:role/{m[2]}" if m else arn


class EksTokenReview:
    """Accepts the EKS tokens of one cluster (``cluster``: its name as the tokens sign it)."""

    def __init__(self, *, cluster: str, sts_url: str, send: Send, now: Callable[[], datetime],
                 access: Mapping[str, tuple[str, tuple[str, ...]]]) -> None:
        self.cluster, self.send, self.now = cluster, send, now
        self.sts = urlsplit(sts_url)
        self.access = dict(access)  # IAM ARN -> (username, groups): the cluster's access entries
        self.accepted: list[str] = []  # the ARNs of the tokens accepted, in order
        self._known: dict[str, tuple[datetime, str]] = {}  # token -> (signed at, ARN) once checked

    def owns(self, token: str) -> bool:
        return token.startswith(PREFIX)

    def identify(self, token: str) -> tuple[str, tuple[str, ...]]:
        """(username, groups) of a token; a token STS already vouched for is not asked again
        until it expires, as EKS caches its authenticator's answers."""
        known = self._known.get(token)
        if known is not None and self.now() <= known[0] + VALID_FOR:
            return self.access[known[1]]
        url, signed = self._url(token)
        why = refusal(url, {CLUSTER_ID_HEADER: self.cluster})
        if why:  # what AWS's STS answers 403 SignatureDoesNotMatch for
            raise TokenRefused(f"STS refused the token's request: {why}")
        status, _, body = self.send("GET", url, [(CLUSTER_ID_HEADER, self.cluster)], b"")
        found = _ARN.search(body) if status == 200 else None
        if found is None:
            raise TokenRefused(f"STS refused the token's request (HTTP {status})")
        arn = canonical_arn(found[1].decode())
        if arn not in self.access:
            raise TokenRefused(f"{arn} has no access entry in cluster {self.cluster}")
        self.accepted.append(arn)
        self._known[token] = (signed, arn)
        return self.access[arn]

    def _url(self, token: str) -> tuple[str, datetime]:
        encoded = token[len(PREFIX):]
        try:
            url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise TokenRefused("not base64url") from None
        parts = urlsplit(url)
        if (parts.scheme, parts.netloc) != (self.sts.scheme, self.sts.netloc) or parts.path not in ("", "/"):
            raise TokenRefused(f"not this cluster's STS endpoint: {parts.scheme}://{parts.netloc}")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if set(query) - ALLOWED_PARAMS:
            raise TokenRefused(f"unexpected parameters: {sorted(set(query) - ALLOWED_PARAMS)}")
        if (query.get("Action"), query.get("Version")) != ("GetCallerIdentity", "2011-06-15"):
            raise TokenRefused("not a GetCallerIdentity request")
        if CLUSTER_ID_HEADER not in query.get("X-Amz-SignedHeaders", "").split(";"):
            raise TokenRefused(f"the {CLUSTER_ID_HEADER} header is not signed")
        try:
            signed = datetime.strptime(query.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            expires = int(query.get("X-Amz-Expires", ""))
        except ValueError:
            raise TokenRefused("no valid X-Amz-Date or X-Amz-Expires") from None
        if expires > VALID_FOR.total_seconds() or expires <= 0:
            raise TokenRefused(f"presigned for {expires} s")
        if not signed - timedelta(minutes=1) <= self.now() <= signed + VALID_FOR:
            raise TokenRefused(f"expired: signed at {signed.isoformat()}")
        return url, signed
