"""Who is calling the API: a bearer token, checked by the one method it belongs to.

The bot owns the credentials; a caller only proves who they are (docs/api.md, "Authentication"):

- **API tokens** (``api.tokens``: NAME -> ``sha256:HEX``), for automation. Only the hash is
  configured (``runbook-bot api hash-token``); a presented token is hashed and compared with every
  configured hash in constant time. The caller is ``token:NAME``.
- **OIDC ID tokens** (``api.oidc``), for people: a JWT whose signature verifies against the
  issuer's JWKS (pyjwt's ``PyJWKClient``; the URL from the issuer's discovery document unless
  ``jwks_url`` names it), with an asymmetric algorithm (never ``none`` nor an HMAC one), this
  ``audience``, this ``issuer``, and ``exp``/``iat`` present and current. The caller is
  ``oidc:<username_claim>``.
- **Kubernetes tokens** (``api.kubernetes``): the bearer token of the caller's kubeconfig, sent
  in a ``TokenReview`` to the identity cluster, asking for ``audiences`` (``runbook-bot`` by
  default, so a token minted for the bot, ``kubectl create token --audience runbook-bot``, and not
  a full cluster credential). The caller is ``k8s:<username>`` as the API server returns it,
  with these refusals: an EKS assumed-role username whose session name the caller chose
  (``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`` with ROLE outside
  ``pinned_session_roles``), a ServiceAccount not listed in ``service_accounts``, and any other
  ``system:`` user (a cluster component). The bot's own ServiceAccount (``bot_service_account``)
  is let in as a system actor (``system:k8s:serviceaccount:NS:NAME``), which the engine never lets
  approve or break glass.

Identities are written in the engine's alphabet (``bot.engine.provenance.check_identity``:
letters, digits and ``. _ @ : + -``): every other character of a username, a claim or a group
(``/`` in an ARN, a space), and ``+`` itself, is written ``+HH`` per UTF-8 byte (``normalise``),
so the mapping is deterministic and one-to-one: two usernames never become one identity.
``policy.aliases`` then joins one person's identities (``k8s:alice`` -> ``slack:U0123``), and the
engine counts them as one person. Groups are prefixed the same way (``k8s:GROUP``,
``oidc:GROUP``); API tokens have none.

A token is never logged, stored or echoed: ``Unauthenticated.reason`` says what was wrong and how
to fix it, never the token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import string
import threading
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol

import jwt

from bot.config import Settings
from bot.config_api import ApiConfig, KubernetesAuthConfig, OidcConfig
from bot.engine.approvals import SYSTEM_PREFIX
from bot.engine.provenance import check_identity
from bot.errors import ConfigError, ParamError, RunbookBotError

log = logging.getLogger(__name__)
DOCS = "docs/api.md#authentication"
MAX_TOKEN = 16 * 1024  # characters: an EKS token is ~1 KB, an ID token a few KB
# asymmetric only (an HMAC "key" would be the issuer's public key), by the JWK's key type: a token
# may not name an algorithm of another family than the key its kid names
FAMILIES = {"RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
            "EC": ("ES256", "ES384", "ES512"), "OKP": ("EdDSA",)}
ALGORITHMS = tuple(a for family in FAMILIES.values() for a in family)
LEEWAY = 30.0  # seconds of clock skew allowed on exp/iat/nbf
_KEPT = frozenset(string.ascii_letters + string.digits + "._@:-")
_ASSUMED_ROLE = re.compile(r"arn:aws[a-z-]*:sts::(\d{12}):assumed-role/([^/]+)/(.+)")
_SERVICE_ACCOUNT = "system:serviceaccount:"

# (token, audiences) -> the TokenReview's status ({"authenticated": ..., "user": {...}, ...})
TokenReviewer = Callable[[str, Sequence[str]], Mapping[str, Any]]


@dataclass(frozen=True)
class Caller:
    """Who is calling: an identity the engine accepts, their groups, and how they proved it."""

    identity: str  # k8s:USERNAME, oidc:SUBJECT (or the configured claim), token:NAME
    groups: tuple[str, ...] = ()
    method: str = "token"  # "kubernetes" | "oidc" | "token"


class Unauthenticated(RunbookBotError):
    """The request does not prove who sent it: ``reason`` says what was wrong and how to fix it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Authenticator(Protocol):
    def authenticate(self, headers: Mapping[str, str]) -> Caller: ...


def normalise(text: str) -> str:
    """``text`` in the engine's identity alphabet: every character outside letters, digits and
    ``. _ @ : -`` (``+`` included) as ``+HH`` per UTF-8 byte. One-to-one, so never a collision."""
    return "".join(c if c in _KEPT else "".join(f"+{b:02X}" for b in c.encode()) for c in text)


def hash_token(token: str) -> str:
    """What ``api.tokens`` holds for ``token``."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def _identity(prefix: str, name: str, *, what: str) -> str:
    try:
        return check_identity(prefix + normalise(name))
    except ParamError:
        raise Unauthenticated(f"{what} is too long to be an identity (at most 200 characters "
                              "once written in the engine's alphabet)") from None


def bearer(headers: Mapping[str, str]) -> str:
    """The token of ``authorization: Bearer TOKEN``, or Unauthenticated saying what is wrong."""
    value = headers.get("authorization")
    if not value:
        raise Unauthenticated("no credentials: send 'Authorization: Bearer TOKEN' with an API "
                              f"token, an OIDC ID token or your kubeconfig's token ({DOCS})")
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        # named only when it is a scheme's word: a token sent without "Bearer " is not echoed
        named = f", not {scheme}" if scheme.isalpha() and len(scheme) <= 10 else ""
        raise Unauthenticated(f"the Authorization header must use the Bearer scheme{named}: "
                              "'Authorization: Bearer TOKEN'")
    if not token or len(token) > MAX_TOKEN or any(c not in string.printable or c.isspace()
                                                   for c in token):
        raise Unauthenticated("the bearer token is malformed: one word of printable characters, "
                              f"at most {MAX_TOKEN}, after 'Bearer '")
    return token


# -- API tokens ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class StaticTokens:
    hashes: Mapping[str, str]  # NAME -> sha256:HEX

    def find(self, token: str) -> Caller | None:
        """The caller whose token this is; every hash is compared, in constant time."""
        presented = hash_token(token).encode()
        found = None
        for name, expected in sorted(self.hashes.items()):
            if hmac.compare_digest(presented, expected.encode()):
                found = name
        return None if found is None else Caller(f"token:{found}", (), "token")


# -- OIDC ID tokens -----------------------------------------------------------------------------

def _discover(issuer: str, timeout: float) -> str:
    """The ``jwks_uri`` of the issuer's discovery document, whose ``issuer`` must be ``issuer``."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            doc = json.loads(resp.read(1 << 20))
    except (OSError, ValueError) as e:
        raise Unauthenticated(f"cannot read the OIDC discovery document {url}: {e}; set "
                              "api.oidc.jwks_url to the issuer's JWKS") from None
    if not isinstance(doc, dict) or doc.get("issuer") != issuer or not isinstance(
            doc.get("jwks_uri"), str):
        raise Unauthenticated(f"the OIDC discovery document {url} does not name issuer "
                              f"{issuer!r} and a jwks_uri; check api.oidc.issuer")
    return str(doc["jwks_uri"])


@dataclass
class OidcTokens:
    cfg: OidcConfig
    timeout: float = 5.0
    _jwks: jwt.PyJWKClient | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def owns(self, token: str) -> bool:
        """Whether ``token`` says it is an ID token of our issuer (unverified: only to route it)."""
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except (jwt.PyJWTError, TypeError, ValueError, KeyError, AttributeError):
            return False
        return isinstance(claims, dict) and claims.get("iss") == self.cfg.issuer

    def _client(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._jwks is None:
                url = self.cfg.jwks_url or _discover(self.cfg.issuer, self.timeout)
                self._jwks = jwt.PyJWKClient(url, cache_keys=True, lifespan=300,
                                             timeout=self.timeout)
            return self._jwks

    def authenticate(self, token: str) -> Caller:
        c = self.cfg
        try:
            key = self._client().get_signing_key_from_jwt(token)
            family = FAMILIES.get(str(key.key_type), ())  # a shared secret in the JWKS: none
            header = jwt.get_unverified_header(token)
            if header.get("alg") not in family:
                raise jwt.InvalidAlgorithmError("not the key's algorithm family")
            if str(header.get("typ") or "JWT").upper() != "JWT":
                # an access token (at+jwt, RFC 9068) or a logout token is not an ID token, even
                # with our audience: it was minted to call an API, not to say who someone is
                raise Unauthenticated(f"the token is a {header.get('typ')!r}, not an ID token: "
                                      "send the identity provider's ID token")
            claims = jwt.decode(token, key.key, algorithms=list(family), audience=c.audience,
                                issuer=c.issuer, leeway=LEEWAY,
                                options={"require": ["exp", "iat", "iss", "aud"]})
        except jwt.PyJWTError as e:
            raise Unauthenticated(self._why(e)) from None
        except (TypeError, ValueError, KeyError, AttributeError):  # what pyjwt did not foresee
            raise Unauthenticated("the ID token is malformed: get a new one") from None
        name = claims.get(c.username_claim)
        if not isinstance(name, str) or not name:
            raise Unauthenticated(f"the ID token has no {c.username_claim!r} claim to name its "
                                  "user: set api.oidc.username_claim to one it has")
        raw = claims.get(c.groups_claim) or []
        groups = tuple(f"oidc:{normalise(g)}" for g in (raw if isinstance(raw, list) else [raw])
                       if isinstance(g, str) and g)
        return Caller(_identity("oidc:", name, what=f"the {c.username_claim!r} claim"), groups,
                      "oidc")

    def _why(self, e: jwt.PyJWTError) -> str:
        c = self.cfg
        if isinstance(e, jwt.ExpiredSignatureError):
            return "the ID token has expired: get a new one from the identity provider"
        if isinstance(e, jwt.InvalidAudienceError):
            return f"the ID token is not for this API: its audience must be {c.audience!r}"
        if isinstance(e, jwt.InvalidIssuerError):
            return f"the ID token was not issued by {c.issuer}"
        if isinstance(e, jwt.InvalidAlgorithmError):
            return ("the ID token's algorithm is not accepted: it must be signed with the "
                    "issuer's key, with an algorithm of that key's type (never none nor HMAC)")
        if isinstance(e, jwt.MissingRequiredClaimError):
            return f"the ID token has no {e.claim!r} claim"
        if isinstance(e, jwt.PyJWKClientConnectionError):
            return f"cannot fetch the signing keys of {c.issuer}: try again later"
        if isinstance(e, jwt.InvalidSignatureError | jwt.PyJWKClientError):
            return f"the ID token's signature does not verify with the keys of {c.issuer}"
        if isinstance(e, jwt.ImmatureSignatureError | jwt.InvalidIssuedAtError):
            return "the ID token is not valid yet: check the clocks"
        return f"the ID token is not valid ({type(e).__name__}): get a new one"


# -- Kubernetes tokens --------------------------------------------------------------------------

@dataclass(frozen=True)
class KubernetesTokens:
    cfg: KubernetesAuthConfig
    review: TokenReviewer

    def authenticate(self, token: str) -> Caller:
        c = self.cfg
        try:
            status = self.review(token, list(c.audiences))
        except RunbookBotError as e:
            # the why (the API server's address, the bot's own RBAC) is for the bot's log, not
            # for whoever sent the token
            log.warning("could not check a token with a TokenReview against cluster %s: %s",
                        c.cluster, str(e).replace(token, "[REDACTED]"))
            raise Unauthenticated(f"the cluster {c.cluster!r} could not check the token just "
                                  "now; try again, and if it persists ask the bot's operators "
                                  "(its log says why)") from None
        if not status.get("authenticated"):
            error = str(status.get("error") or "").replace(token, "[REDACTED]")[:300]
            aud = (f" for the audiences {', '.join(c.audiences)} (kubectl create token SA "
                   f"--audience {c.audiences[0]})") if c.audiences else ""
            raise Unauthenticated(f"the cluster {c.cluster!r} does not accept this token{aud}"
                                  + (f": {error}" if error else ""))
        if c.audiences and not set(status.get("audiences") or ()) & set(c.audiences):
            raise Unauthenticated(f"the cluster {c.cluster!r} accepted the token, but not for "
                                  f"the audiences {', '.join(c.audiences)}")
        user = status.get("user") or {}
        username = str(user.get("username") or "")
        groups = tuple(f"k8s:{normalise(str(g))}" for g in user.get("groups") or ())
        return Caller(self._identity(username), groups, "kubernetes")

    def _identity(self, username: str) -> str:
        c = self.cfg
        if not username:
            raise Unauthenticated(f"the cluster {c.cluster!r} returned no username")
        if username.startswith(_SERVICE_ACCOUNT):
            account = username.removeprefix(_SERVICE_ACCOUNT)
            if account == c.bot_service_account:
                return _identity(f"{SYSTEM_PREFIX}k8s:serviceaccount:", account, what="the bot")
            if account not in c.service_accounts:
                raise Unauthenticated(
                    f"the ServiceAccount {account.replace(':', '/', 1)} is not let in: add "
                    f"{account!r} to api.kubernetes.service_accounts if it is automation that "
                    "should call the API")
            return _identity("k8s:", username, what="the username")
        if username.startswith("system:"):
            raise Unauthenticated(f"{username!r} is a Kubernetes component, not a caller of the API")
        assumed = _ASSUMED_ROLE.fullmatch(username)
        if assumed and not any(fnmatchcase(assumed[2], p) for p in c.pinned_session_roles):
            raise Unauthenticated(
                f"the role {assumed[2]!r} lets whoever assumes it choose the session name in "
                f"{username!r}, so it names no one: map the role's access entry to a fixed "
                "username, pin the session name (an sts:RoleSessionName condition, or IAM "
                "Identity Center's AWSReservedSSO_* roles) and list the role in "
                f"api.kubernetes.pinned_session_roles ({DOCS})")
        return _identity("k8s:", username, what="the username")


def kube_token_reviewer(settings: Settings, cluster: str) -> TokenReviewer:
    """A TokenReview against ``cluster``'s API server, with the bot's own credentials; the client
    is built at the first review, so serving without the cluster configured still starts."""
    made: list[Any] = []
    lock = threading.Lock()

    def review(token: str, audiences: Sequence[str]) -> Mapping[str, Any]:
        from bot.clients.cluster import kube_client
        from bot.clients.kube import KubeClient

        with lock:
            if not made:
                c = settings.cluster(cluster)
                made.append(kube_client(c, request_timeout=min(c.request_timeout, 10.0)))
        client: KubeClient = made[0]
        return client.create_token_review(token, audiences)
    return review


# -- the chain ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Chain:
    """The configured methods, each asked only about the tokens it owns: an API token by its hash,
    an ID token naming the OIDC issuer by the issuer's keys, anything else by the cluster."""

    tokens: StaticTokens | None = None
    oidc: OidcTokens | None = None
    kubernetes: KubernetesTokens | None = None

    def authenticate(self, headers: Mapping[str, str]) -> Caller:
        token = bearer(headers)
        if self.tokens is not None:
            found = self.tokens.find(token)
            if found is not None:
                return found
        if self.oidc is not None and self.oidc.owns(token):
            return self.oidc.authenticate(token)
        if self.kubernetes is not None:
            return self.kubernetes.authenticate(token)
        tried = ["an API token"] if self.tokens is not None else []
        if self.oidc is not None:
            tried.append(f"an ID token of {self.oidc.cfg.issuer}")
        raise Unauthenticated(f"the bearer token is not {' nor '.join(tried)} ({DOCS})")


def build_authenticator(settings: Settings, *,
                        token_reviewer: TokenReviewer | None = None) -> Authenticator:
    """The chain over the methods ``settings.api`` configures; a ConfigError when it configures
    none, so the API is never served open to anyone."""
    api: ApiConfig = settings.api
    if not api.enabled:
        raise ConfigError("the API needs a way to authenticate its callers: configure "
                          "api.tokens, api.oidc or api.kubernetes (docs/api.md, 'Authentication')")
    k = api.kubernetes
    if k is not None:
        settings.cluster(k.cluster)  # an unknown cluster is a ConfigError now, not at a request
    return Chain(
        tokens=StaticTokens(api.tokens) if api.tokens else None,
        oidc=OidcTokens(api.oidc) if api.oidc else None,
        kubernetes=None if k is None else KubernetesTokens(
            k, token_reviewer or kube_token_reviewer(settings, k.cluster)))
