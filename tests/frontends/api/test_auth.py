"""The API's authentication, attacked: every way to present a token that is not what it claims to be
is ``Unauthenticated`` with a reason that never quotes the token.

OIDC ID tokens are signed here with RSA keys made for the test and checked against a JWKS served by
a local HTTP server (the issuer's discovery document too), so the path is pyjwt's real one. The
Kubernetes method is fed TokenReview statuses shaped as an API server returns them; the sandbox's
own TokenReview is in tests/sim/test_token_review.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec as ec_keys
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.config import settings_from_mapping
from bot.engine.approvals import is_system
from bot.engine.provenance import check_identity
from bot.errors import ConfigError
from bot.frontends.api.auth import (
    Caller,
    Unauthenticated,
    build_authenticator,
    hash_token,
    normalise,
)

STATIC = "rbt_0123456789abcdefghijklmnopqrstuv"
AUDIENCE = "runbook-bot"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class _Issuer:
    """An OIDC issuer on 127.0.0.1: its discovery document and its JWKS."""

    def __init__(self) -> None:
        self.key = _key()
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = {"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}
        issuer = self
        self.fetches = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    doc: Any = {"issuer": issuer.url, "jwks_uri": issuer.url + "/keys"}
                elif self.path == "/keys":
                    issuer.fetches += 1
                    doc = issuer.jwks
                else:
                    self.send_error(404)
                    return
                data = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def issuer() -> Iterator[_Issuer]:
    i = _Issuer()
    yield i
    i.close()


@pytest.fixture(scope="module")
def stranger() -> rsa.RSAPrivateKey:
    return _key()


def _claims(issuer: _Issuer, **over: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": issuer.url, "aud": AUDIENCE, "sub": "alice@example.com", "iat": now,
            "exp": now + 300, "groups": ["sre", "on call"], **over}


def _sign(key: Any, claims: dict[str, Any], *, kid: str = "k1", alg: str = "RS256") -> str:
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


class Reviews:
    """TokenReview statuses by token, as the identity cluster's API server would return them."""

    def __init__(self, known: Mapping[str, Mapping[str, Any]]) -> None:
        self.known = known
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def __call__(self, token: str, audiences: Sequence[str]) -> Mapping[str, Any]:
        self.asked.append((token, tuple(audiences)))
        user = self.known.get(token)
        if user is None:
            return {"authenticated": False, "error": "invalid bearer token"}
        return {"authenticated": True, "user": dict(user), "audiences": list(audiences)}


def _user(name: str, *groups: str) -> dict[str, Any]:
    return {"username": name, "groups": [*groups, "system:authenticated"]}


SSO = "arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_SRE_0123456789abcdef/alice"
KUBE_USERS = {
    "tok-alice": _user(SSO, "sre"),
    "tok-fixed": _user("bob", "sre"),
    "tok-mallory-as-alice": _user("arn:aws:sts::111122223333:assumed-role/oncall/alice"),
    "tok-mallory-as-bob": _user("arn:aws:sts::111122223333:assumed-role/oncall/bob"),
    "tok-ci": _user("system:serviceaccount:ci:deployer", "system:serviceaccounts"),
    "tok-other-sa": _user("system:serviceaccount:kube-system:default", "system:serviceaccounts"),
    "tok-bot": _user("system:serviceaccount:runbook-bot:runbook-bot", "system:serviceaccounts"),
    "tok-node": _user("system:node:ip-10-0-0-1", "system:nodes"),
}


def _settings(issuer: _Issuer | None = None, **api: Any) -> Any:
    section: dict[str, Any] = {"tokens": {"ci-nightly": hash_token(STATIC)}, **api}
    if issuer is not None:
        section["oidc"] = {"issuer": issuer.url, "audience": AUDIENCE}
    section.setdefault("kubernetes", {"cluster": "prod",
                                      "pinned_session_roles": ["AWSReservedSSO_*"],
                                      "service_accounts": ["ci:deployer"]})
    return settings_from_mapping({"clusters": {"prod": {}}, "api": section}, {})


@pytest.fixture(scope="module")
def reviews() -> Reviews:
    return Reviews(KUBE_USERS)


@pytest.fixture(scope="module")
def auth(issuer: _Issuer, reviews: Reviews) -> Any:
    return build_authenticator(_settings(issuer), token_reviewer=reviews)


def _refused(auth: Any, headers: Mapping[str, str], *words: str) -> str:
    with pytest.raises(Unauthenticated) as e:
        auth.authenticate(headers)
    reason = e.value.reason
    token = headers.get("authorization", "").partition(" ")[2].strip()
    assert not token or token not in reason, "the reason quotes the token"
    for w in words:
        assert w in reason, reason
    return reason


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_no_token_or_a_malformed_header_is_refused_saying_how_to_send_one(auth):
    _refused(auth, {}, "Authorization: Bearer TOKEN")
    _refused(auth, {"authorization": ""}, "no credentials")
    _refused(auth, {"authorization": "Basic dXNlcjpwYXNz"}, "Bearer scheme, not Basic")
    # a token sent without its scheme is not echoed back (nor logged by whoever logs the reason)
    reason = _refused(auth, {"authorization": STATIC}, "Bearer scheme")
    assert STATIC[:8] not in reason
    _refused(auth, {"authorization": "Bearer"}, "malformed")
    _refused(auth, {"authorization": "Bearer two words"}, "malformed")
    _refused(auth, _bearer("x" * 20_000), "malformed")


def test_an_api_token_is_its_name_and_a_wrong_one_is_refused(auth, reviews):
    assert auth.authenticate(_bearer(STATIC)) == Caller("token:ci-nightly", (), "token")
    asked = len(reviews.asked)
    _refused(auth, _bearer(STATIC[:-1] + "w"), "does not accept")
    # a wrong API token went on to the cluster, which said no: never a match by prefix or case
    assert len(reviews.asked) == asked + 1
    _refused(auth, _bearer(STATIC.upper()))


def test_an_oidc_id_token_is_its_subject_with_its_groups(auth, issuer):
    caller = auth.authenticate(_bearer(_sign(issuer.key, _claims(issuer))))
    assert caller == Caller("oidc:alice@example.com", ("oidc:sre", "oidc:on+20call"), "oidc")


def test_forged_expired_foreign_unsigned_and_misaddressed_id_tokens_are_refused(
        auth, issuer, stranger, reviews):
    asked = len(reviews.asked)
    # signed by someone else's key under the issuer's key id, with the issuer's claims
    _refused(auth, _bearer(_sign(stranger, _claims(issuer))), "signature does not verify")
    # ... or under a key id the issuer never published
    _refused(auth, _bearer(_sign(stranger, _claims(issuer), kid="k2")), "signature does not verify")
    # a token edited after signing: another subject, the issuer's signature kept
    header, _, signature = _sign(issuer.key, _claims(issuer)).split(".")
    payload = jwt.utils.base64url_encode(json.dumps(_claims(issuer, sub="root")).encode()).decode()
    _refused(auth, _bearer(f"{header}.{payload}.{signature}"), "signature does not verify")
    _refused(auth, _bearer(_sign(issuer.key, _claims(issuer, exp=int(time.time()) - 3600))),
             "expired")
    _refused(auth, _bearer(_sign(issuer.key, _claims(issuer, aud="another-app"))),
             f"audience must be {AUDIENCE!r}")
    _refused(auth, _bearer(jwt.encode(_claims(issuer), None, algorithm="none",
                                      headers={"kid": "k1"})))
    # the issuer's public key used as an HMAC secret (algorithm confusion)
    public = issuer.key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo)
    signing = ".".join(jwt.utils.base64url_encode(json.dumps(part).encode()).decode() for part in (
        {"alg": "HS256", "typ": "JWT", "kid": "k1"}, _claims(issuer)))
    mac = hmac.new(public, signing.encode(), hashlib.sha256).digest()
    _refused(auth, _bearer(f"{signing}.{jwt.utils.base64url_encode(mac).decode()}"))
    # another algorithm family under the issuer's RSA key id
    ec = ec_keys.generate_private_key(ec_keys.SECP256R1())
    _refused(auth, _bearer(_sign(ec, _claims(issuer), alg="ES256")), "algorithm is not accepted")
    _refused(auth, _bearer(_sign(issuer.key, {k: v for k, v in _claims(issuer).items()
                                              if k != "exp"})), "'exp'")
    # an access token of the same issuer and audience (RFC 9068's at+jwt) is not an ID token
    access = jwt.encode(_claims(issuer), issuer.key, algorithm="RS256",
                        headers={"kid": "k1", "typ": "at+jwt"})
    _refused(auth, _bearer(access), "not an ID token")
    # none of them was sent to the cluster: they name the OIDC issuer, which alone decides
    assert len(reviews.asked) == asked


def test_an_id_token_of_another_issuer_is_refused(issuer, stranger):
    other = {**_claims(issuer), "iss": "https://evil.example.com"}
    only_oidc = build_authenticator(_settings(issuer, kubernetes=None))
    _refused(only_oidc, _bearer(_sign(stranger, other)), "not an API token nor an ID token of")
    # signed by the other issuer's key while naming ours: its signature does not verify
    _refused(only_oidc, _bearer(_sign(stranger, _claims(issuer))), "signature does not verify")


def test_the_jwks_url_comes_from_the_issuers_discovery_document(issuer):
    fresh = build_authenticator(_settings(issuer, kubernetes=None))
    assert fresh.authenticate(_bearer(_sign(issuer.key, _claims(issuer)))).identity == (
        "oidc:alice@example.com")


def test_kubernetes_users_are_what_the_cluster_says_in_the_engines_alphabet(auth, reviews):
    alice = auth.authenticate(_bearer("tok-alice"))
    assert alice.method == "kubernetes"
    assert alice.identity == ("k8s:arn:aws:sts::111122223333:assumed-role+2FAWSReservedSSO_SRE_"
                              "0123456789abcdef+2Falice")
    assert check_identity(alice.identity) == alice.identity
    assert alice.groups == ("k8s:sre", "k8s:system:authenticated")
    assert auth.authenticate(_bearer("tok-fixed")).identity == "k8s:bob"
    assert reviews.asked[-1] == ("tok-fixed", ("runbook-bot",))  # audience-bound by default
    assert auth.authenticate(_bearer("tok-ci")).identity == "k8s:system:serviceaccount:ci:deployer"
    _refused(auth, _bearer("tok-unknown"), "does not accept this token", "--audience runbook-bot")


def test_two_people_on_one_assumed_role_with_chosen_session_names_are_refused(auth):
    for token in ("tok-mallory-as-alice", "tok-mallory-as-bob"):
        _refused(auth, _bearer(token), "choose the session name", "pinned_session_roles",
                 "docs/api.md#authentication")


def test_unlisted_service_accounts_and_cluster_components_are_refused(auth):
    _refused(auth, _bearer("tok-other-sa"), "kube-system/default", "service_accounts")
    _refused(auth, _bearer("tok-node"), "Kubernetes component")


def test_the_bots_own_service_account_is_a_system_actor(auth):
    bot = auth.authenticate(_bearer("tok-bot"))
    assert bot.identity == "system:k8s:serviceaccount:runbook-bot:runbook-bot"
    assert is_system(bot.identity)  # the engine never lets it approve or break glass


def test_a_token_the_cluster_accepted_for_another_audience_is_refused():
    def wrong_audience(token: str, audiences: Sequence[str]) -> Mapping[str, Any]:
        return {"authenticated": True, "user": _user("bob"), "audiences": ["https://kubernetes"]}
    auth = build_authenticator(_settings(), token_reviewer=wrong_audience)
    _refused(auth, _bearer("tok-fixed"), "not for the audiences runbook-bot")


def test_normalisation_is_one_to_one_and_deterministic():
    names = ["a/b", "a+2Fb", "a:b", "a_b", "a+5Fb", "a b", "a+20b", "é", "a+b", "a+2Bb"]
    written = [normalise(n) for n in names]
    assert len(set(written)) == len(names)
    assert written == [normalise(n) for n in names]
    assert all(check_identity("k8s:" + w) for w in written)


def test_an_api_with_no_method_configured_is_not_served():
    with pytest.raises(ConfigError, match=r"api\.tokens, api\.oidc or api\.kubernetes"):
        build_authenticator(settings_from_mapping({}, {}))


def test_hash_token_makes_the_config_line_that_lets_the_token_in(monkeypatch, capsys):
    import io

    from ruamel.yaml import YAML

    from bot.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(STATIC + "\n"))
    assert main(["api", "hash-token", "--name", "ci-nightly"]) == 0
    out = capsys.readouterr().out
    assert STATIC not in out  # only the hash is printed
    auth = build_authenticator(settings_from_mapping(YAML(typ="safe").load(out), {}))
    assert auth.authenticate(_bearer(STATIC)) == Caller("token:ci-nightly", (), "token")
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["api", "hash-token"]) == 2


def test_a_token_review_that_fails_tells_the_caller_nothing_of_the_bots_insides(
        caplog: pytest.LogCaptureFixture) -> None:
    from bot.config_api import KubernetesAuthConfig
    from bot.errors import PermanentError
    from bot.frontends.api.auth import KubernetesTokens, Unauthenticated

    def review(token: str, audiences: Any) -> Any:
        raise PermanentError("https://10.0.7.3:443 said Forbidden: User "
                             "system:serviceaccount:runbook-bot:runbook-bot cannot create tokenreviews")

    tokens = KubernetesTokens(KubernetesAuthConfig(cluster="prod"), review)
    with pytest.raises(Unauthenticated) as refused:
        tokens.authenticate("some-token-value-0123456789")
    said = str(refused.value.reason)
    assert "could not check the token" in said
    assert "10.0.7.3" not in said and "serviceaccount" not in said  # for the log only
    assert "10.0.7.3" in caplog.text and "some-token-value" not in caplog.text
