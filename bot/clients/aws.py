"""How the bot reaches AWS with boto3 and botocore: clients, sessions, an in-process transport,
and botocore's backoff on a simulated clock.

``boto3_client`` builds a raw botocore client (retry mode, timeouts, endpoint, profile; ``send``:
the sandbox's in-process transport). ``Reach`` is where and as whom a cluster's calls start: its
base session, and the sessions of the cluster's ``role_arn`` assumed through STS with credentials
that refresh before they expire. ``bind_backoff`` puts botocore's sleeps between retried attempts
on a rehearsal's clock. ``EksTokens`` makes the bearer tokens EKS accepts (a presigned STS
``GetCallerIdentity``) with a cluster's session, so no ``aws eks get-token`` binary is needed.
Every session reads the service models through one loader.

``bot.clients.ec2`` (the EC2 client of the actions: batching, errors, records, shared reads) is
built on this module; the two are the only importers of boto3/botocore in the product. They are
apart so that each stays one subject, within the module-size budget (docs/architecture.md);
``boto3_client`` and ``bind_backoff`` are also importable from ``bot.clients.ec2``.
"""

from __future__ import annotations

import base64
import hmac
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import boto3
import botocore.utils
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.config import Config
from botocore.credentials import (
    CredentialProvider,
    CredentialResolver,
    Credentials,
    RefreshableCredentials,
)
from botocore.exceptions import BotoCoreError, ClientError, ConnectionClosedError
from botocore.loaders import create_loader
from botocore.session import get_session

from bot.config import ClusterConfig
from bot.errors import PermanentError, RetryableError


def boto3_client(
    *,
    region: str,
    endpoint_url: str | None = None,
    profile: str | None = None,
    retry_mode: str = "standard",
    max_attempts: int = 5,
    timeout: float = 30.0,
    credentials: dict[str, str] | None = None,
    service: str = "ec2",
    send: Send | None = None,
) -> Any:
    """A raw botocore client (EC2 unless ``service``): retry mode, timeouts, endpoint, profile.

    ``send`` takes each signed request instead of the network and answers it (the sandbox's
    in-process transport): botocore's retries, parsing and errors are as over HTTP."""
    session = _session(profile_name=profile, **(credentials or {}))
    config = Config(
        region_name=region,
        retries={"mode": retry_mode, "max_attempts": max_attempts},
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    client = session.client(service, endpoint_url=endpoint_url, config=config)
    if send is not None:
        client.meta.events.register("before-send", _sender(send))
    return client


# (method, url, headers, body) -> (status, headers, body)
Send = Callable[[str, str, list[tuple[str, Any]], bytes], tuple[int, Any, bytes]]


class _Raw:
    """A response body as botocore reads one off the network (``stream``)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


def _sender(send: Send) -> Callable[..., AWSResponse]:
    def before_send(request: Any, **_: Any) -> AWSResponse:
        body = request.body
        if hasattr(body, "read"):
            body = body.read()
        data = body.encode() if isinstance(body, str) else bytes(body or b"")
        try:
            status, headers, answer = send(request.method, request.url,
                                           list(request.headers.items()), data)
        except ConnectionError as e:  # what botocore makes of a connection dropped unanswered
            raise ConnectionClosedError(endpoint_url=request.url) from e
        return AWSResponse(request.url, status, dict(headers), _Raw(answer))
    return before_send


class _AssumedRole(CredentialProvider):  # type: ignore[misc]  # botocore is untyped
    """A botocore credential provider: STS AssumeRole credentials that refresh before they expire.

    It is the only provider in its session's resolver, so nothing from the environment or the
    shared config files is used in its place.
    """

    METHOD = "runbook-bot-assume-role"
    CANONICAL_NAME = "custom-runbook-bot-assume-role"  # botocore asks custom providers for custom-

    def __init__(self, fetch: Callable[[], dict[str, str]]) -> None:
        super().__init__()
        self._fetch = fetch

    def load(self) -> RefreshableCredentials:
        return RefreshableCredentials.create_from_metadata(
            metadata=self._fetch(), refresh_using=self._fetch, method=self.METHOD)


@lru_cache(maxsize=1)
def _models() -> Any:
    """One botocore data loader (it caches the service models it has read) for every session."""
    return create_loader()


@lru_cache(maxsize=4096)
def _parsed(value: str) -> datetime:
    parsed: datetime = botocore.utils.parse_timestamp(value)
    return parsed


def parse_timestamp(value: Any) -> datetime:
    """botocore's timestamp parser, each text parsed once: botocore hands every timestamp to
    dateutil's general parser (a tenth of a millisecond each), and the same few recur in every
    answer (an instance's LaunchTime, a volume's AttachTime). A datetime is immutable, so the
    answer kept is the answer botocore gives."""
    if isinstance(value, str):
        return _parsed(value)
    parsed: datetime = botocore.utils.parse_timestamp(value)
    return parsed


def _session(botocore_session: Any = None, **kwargs: Any) -> Any:
    """A boto3 session reading the service models through the process's one loader: building a
    client then costs no new parse of the EC2 model (a third of a second each time); its clients
    read timestamps with ``parse_timestamp``."""
    core = botocore_session or get_session()
    core.register_component("data_loader", _models())
    core.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=parse_timestamp)
    session = boto3.session.Session(botocore_session=core, **kwargs)
    paths = _models().search_paths  # each boto3 session adds its own data path again
    paths[:] = list(dict.fromkeys(paths))
    return session


@dataclass(frozen=True)
class Reach:
    """Where and as whom a cluster's AWS calls start: endpoints and the base credentials."""

    cfg: ClusterConfig
    endpoint_url: str | None = None  # EC2; None: the standard environment / AWS
    sts_endpoint_url: str | None = None
    credentials: dict[str, str] | None = None  # None: the default chain (IRSA, profile, env)

    def config(self) -> Config:
        return Config(region_name=self.cfg.region,
                      retries={"mode": self.cfg.retry_mode, "max_attempts": self.cfg.max_attempts},
                      connect_timeout=self.cfg.request_timeout,
                      read_timeout=self.cfg.request_timeout)

    def base_session(self) -> Any:
        return _session(profile_name=self.cfg.profile, region_name=self.cfg.region,
                        **(self.credentials or {}))

    @cached_property
    def base_sts(self) -> Any:
        """STS on the base identity, what every session of the role is assumed with (one per
        cluster: building a client reads the endpoint and service models)."""
        return self.base_session().client("sts", endpoint_url=self.sts_endpoint_url,
                                          config=self.config())

    def role_session(self, **assume: Any) -> tuple[Any, Callable[[], str]]:
        """A boto3 session on ``role_arn`` (``assume``: the AssumeRole arguments), and the request
        id of the AssumeRole that gave its current credentials."""
        sts = self.base_sts
        last = {"request_id": ""}

        def refresh() -> dict[str, str]:
            resp = sts.assume_role(RoleArn=self.cfg.role_arn, DurationSeconds=3600, **assume)
            last["request_id"] = request_id_of(resp)
            creds = resp["Credentials"]
            return {"access_key": creds["AccessKeyId"], "secret_key": creds["SecretAccessKey"],
                    "token": creds["SessionToken"], "expiry_time": creds["Expiration"].isoformat()}

        botocore_session = get_session()
        if self.cfg.profile:  # the profile's settings (its endpoints) hold for the role's sessions
            botocore_session.set_config_variable("profile", self.cfg.profile)
        botocore_session.register_component(
            "credential_provider", CredentialResolver(providers=[_AssumedRole(refresh)]))
        # a run's session costs its AssumeRole, not another parse of the EC2 model
        session = _session(botocore_session, region_name=self.cfg.region)
        return session, lambda: last["request_id"]

    def ec2(self, session: Any) -> Any:
        return session.client("ec2", endpoint_url=self.endpoint_url, config=self.config())

    def sts(self, session: Any) -> Any:
        return session.client("sts", endpoint_url=self.sts_endpoint_url, config=self.config())


def request_id_of(resp: Any) -> str:
    """The AWS request id of a botocore response (a dict), or ""."""
    meta = resp.get("ResponseMetadata", {}) if isinstance(resp, dict) else {}
    return str(meta.get("RequestId", ""))


# -- botocore's backoff on a simulated clock --------------------------------------------------

_backoff = threading.local()


class _BackoffTime:
    """``time`` as botocore's endpoint sees it: ``sleep`` goes to the thread's bound clock."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        bound: Callable[[float], None] | None = getattr(_backoff, "sleep", None)
        (bound or time.sleep)(seconds)


def bind_backoff(sleep: Callable[[float], None] | None) -> None:
    """Make botocore's backoff between the attempts of a retried call, in this thread, call
    ``sleep`` instead of sleeping (None: sleep for real again).

    botocore sleeps inside its endpoint (``time.sleep``) whatever the retry mode, and no client
    option changes what it sleeps on. A rehearsal's time is simulated: a throttled call must cost
    the run its backoff in sandbox seconds, as every other wait of a rehearsal does, not seconds
    of the machine running it. Every other thread, and a process that never binds, sleeps for
    real; the stand-in forwards everything else to ``time``.
    """
    import botocore.endpoint

    if not isinstance(botocore.endpoint.time, _BackoffTime):
        botocore.endpoint.time = _BackoffTime()
    _backoff.sleep = sleep


# -- EKS bearer tokens ------------------------------------------------------------------------

EKS_TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"  # signed: a token names the one cluster it is good for
EKS_PRESIGN_SECONDS = 60  # what aws-iam-authenticator and `aws eks get-token` presign for
EKS_TOKEN_REFRESH = 600.0  # EKS accepts a token for 15 minutes from its signing; renew well before


class EksTokens:
    """The bearer tokens EKS's authenticator accepts for one cluster, renewed before they expire.

    A token is ``k8s-aws-v1.`` and the unpadded base64url of a presigned STS ``GetCallerIdentity``
    URL (GET, 60 s presign) whose signature covers the ``x-k8s-aws-id`` header naming the cluster:
    the API server replays the URL with that header and maps the ARN STS answers to a Kubernetes
    user (an access entry). ``sts`` is a botocore STS client of the identity to present (the
    cluster's role session, or the base credentials); ``now`` (seconds) says when to renew.
    Calling the object gives the current token: the Kubernetes client asks before each request.
    """

    def __init__(self, sts: Any, cluster: str, *, now: Callable[[], float] = time.time,
                 refresh_after: float = EKS_TOKEN_REFRESH) -> None:
        self.sts, self.cluster, self.now, self.refresh_after = sts, cluster, now, refresh_after
        self._token, self._made = "", float("-inf")
        self._lock = threading.Lock()
        self.minted = 0
        events = sts.meta.events
        events.register("provide-client-params.sts.GetCallerIdentity", _keep_cluster_id,
                        unique_id="runbook-bot-eks-cluster-id")
        events.register("before-sign.sts.GetCallerIdentity", _sign_cluster_id,
                        unique_id="runbook-bot-eks-cluster-header")

    def __call__(self) -> str:
        with self._lock:
            if self.now() - self._made >= self.refresh_after:
                made = self.now()
                try:  # with a role, presigning first assumes it (or renews its credentials)
                    url = self.sts.generate_presigned_url(
                        "get_caller_identity", Params={CLUSTER_ID_HEADER: self.cluster},
                        ExpiresIn=EKS_PRESIGN_SECONDS, HttpMethod="GET")
                except ClientError as e:
                    raise PermanentError(f"EKS token for {self.cluster}: {e}", service="sts",
                                         operation="AssumeRole", code=str(
                                             e.response.get("Error", {}).get("Code", ""))) from e
                except BotoCoreError as e:
                    raise RetryableError(f"EKS token for {self.cluster}: {e}", service="sts",
                                         operation="AssumeRole", code=type(e).__name__) from e
                encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
                self._token, self._made = EKS_TOKEN_PREFIX + encoded, made
                self.minted += 1
            return self._token


def _keep_cluster_id(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """GetCallerIdentity takes no parameters: the cluster's name rides in the request context."""
    if CLUSTER_ID_HEADER in params:
        context[CLUSTER_ID_HEADER] = params.pop(CLUSTER_ID_HEADER)


def _sign_cluster_id(request: Any, **_: Any) -> None:
    if CLUSTER_ID_HEADER in request.context:
        request.headers[CLUSTER_ID_HEADER] = request.context[CLUSTER_ID_HEADER]


def presigned_refusal(url: str, headers: Mapping[str, str],
                      secret_of: Callable[[str], str | None]) -> str:
    """Why STS refuses a presigned GET ``url`` (an EKS token's, say) sent with ``headers``
    (``""``: it does not): its SigV4 signature is computed again, as botocore signs, with the
    secret ``secret_of`` gives for its access key, and must match. For a server that plays STS
    (the sandbox)."""
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    given = params.pop("X-Amz-Signature", "")
    try:
        access_key, _date, region, service, _end = params["X-Amz-Credential"].split("/")
        expires = int(params["X-Amz-Expires"])
        timestamp = params["X-Amz-Date"]
    except (KeyError, ValueError):
        return "not a presigned request"
    secret = secret_of(access_key)
    if secret is None:
        return f"the access key {access_key} is not known"
    sent = {k.lower(): v for k, v in headers.items()}
    signed = {"host": parts.netloc, **{h: sent.get(h, "") for h in
                                       params.get("X-Amz-SignedHeaders", "").split(";")
                                       if h and h != "host"}}
    request = AWSRequest(method="GET", url=urlunsplit((parts.scheme, parts.netloc,
                                                       parts.path or "/", "", "")),
                         headers=signed, params=params)
    request.context["timestamp"] = timestamp
    auth = SigV4QueryAuth(Credentials(access_key, secret, params.get("X-Amz-Security-Token")),
                          service, region, expires=expires)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)),
                              request)
    if not hmac.compare_digest(str(expected), given):
        return "the signature does not match the request it was made for"
    return ""
