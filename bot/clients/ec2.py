"""The EC2 client: the only importer of boto3/botocore in the product.

``boto3_client`` builds a botocore EC2 client with the configured retry mode; endpoints come from
the standard environment (``AWS_ENDPOINT_URL_EC2``) unless given, so production and the sandbox are
reached the same way. ``Ec2Client`` wraps it for the actions:

- plain dicts out, the botocore response shapes (``State``, ``Attachments`` ...) unchanged;
- batching: many instances or volumes in one paginated Describe call. Ids go in as *filters*, not
  ``InstanceIds``/``VolumeIds``, because one unknown id fails the whole id-list call with
  ``InvalidInstanceID.NotFound`` while a filter simply leaves it out ("exists: false");
- errors translated once: throttling and server faults are ``RetryableError`` (after botocore's
  own ``standard`` retries gave up), everything else ``PermanentError`` with the AWS code kept;
- every request recorded as an ``ApiCall`` with its AWS request id: each page of a Describe, and
  each attempt botocore's retries made (a throttled attempt is recorded with its error code, then
  the attempt that succeeded), so the audit shows the throttling an action went through;
- secrets redacted (``redact``) from every error message and record;
- a read-only view (``bound(calls, read_only=True)``, what a dry run gets) refuses every write
  before it is sent, EC2's own ``DryRun`` checks excepted; an endpoint that ignores ``DryRun``
  (answers success instead of ``DryRunOperation``) is an error, never "permitted".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.credentials import CredentialProvider, CredentialResolver, RefreshableCredentials
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.session import get_session

from bot.clients.redact import redact
from bot.config import ClusterConfig
from bot.engine.plan import ApiCall
from bot.errors import PermanentError, PolicyError, RetryableError

SERVICE = "ec2"
RETRYABLE_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
    "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable",
})
DRY_RUN_OK = "DryRunOperation"
ATTEMPTS_HANDLER = "runbook-bot-record-attempts"


def boto3_client(
    *,
    region: str,
    endpoint_url: str | None = None,
    profile: str | None = None,
    retry_mode: str = "standard",
    max_attempts: int = 5,
    timeout: float = 30.0,
    credentials: dict[str, str] | None = None,
) -> Any:
    """A raw botocore EC2 client (retry mode, timeouts, optional endpoint and profile)."""
    session = boto3.session.Session(profile_name=profile, **(credentials or {}))
    config = Config(
        region_name=region,
        retries={"mode": retry_mode, "max_attempts": max_attempts},
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    return session.client("ec2", endpoint_url=endpoint_url, config=config)


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


def _assumed_role_client(cfg: ClusterConfig, *, endpoint_url: str | None) -> Any:
    """An EC2 client whose credentials come from STS AssumeRole and refresh before they expire."""
    base = boto3.session.Session(profile_name=cfg.profile, region_name=cfg.region)
    sts = base.client("sts", config=Config(retries={"mode": cfg.retry_mode,
                                                    "max_attempts": cfg.max_attempts}))

    def refresh() -> dict[str, str]:
        creds = sts.assume_role(RoleArn=cfg.role_arn, RoleSessionName=f"runbook-bot-{cfg.name}",
                                DurationSeconds=3600)["Credentials"]
        return {"access_key": creds["AccessKeyId"], "secret_key": creds["SecretAccessKey"],
                "token": creds["SessionToken"], "expiry_time": creds["Expiration"].isoformat()}

    botocore_session = get_session()
    botocore_session.register_component("credential_provider",
                                        CredentialResolver(providers=[_AssumedRole(refresh)]))
    session = boto3.session.Session(botocore_session=botocore_session, region_name=cfg.region)
    config = Config(region_name=cfg.region,
                    retries={"mode": cfg.retry_mode, "max_attempts": cfg.max_attempts},
                    connect_timeout=cfg.request_timeout, read_timeout=cfg.request_timeout)
    return session.client("ec2", endpoint_url=endpoint_url, config=config)


def translate(e: Exception, *, operation: str) -> Exception:
    """The ``bot.errors`` exception for a botocore failure (raise it ``from e``)."""
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        code = str(err.get("Code", "Unknown"))
        text = redact(f"{operation}: {code}: {err.get('Message', '')}")
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in RETRYABLE_CODES or status >= 500:
            return RetryableError(text, service=SERVICE, operation=operation, code=code)
        return PermanentError(text, service=SERVICE, operation=operation, code=code)
    if isinstance(e, ConnectTimeoutError | ReadTimeoutError):
        return RetryableError(redact(f"{operation}: timed out: {e}"), service=SERVICE,
                              operation=operation, code="Timeout")
    if isinstance(e, BotoCoreError):
        return RetryableError(redact(f"{operation}: {e}"), service=SERVICE, operation=operation,
                              code=type(e).__name__)
    return e


def _request_id(resp: Any) -> str:
    meta = resp.get("ResponseMetadata", {}) if isinstance(resp, dict) else {}
    return str(meta.get("RequestId", ""))


# botocore retries inside one client call; this thread's list of the attempts it made so far, so
# ``_call`` can record each one (calls are synchronous, so the attempts of one call are all made on
# the thread that makes it)
_attempts = threading.local()


def _on_attempt(response: Any = None, caught_exception: Any = None, **_: Any) -> None:
    """botocore ``needs-retry`` handler: note one attempt's outcome; never decides the retry."""
    log: list[tuple[str, str]] | None = getattr(_attempts, "log", None)
    if log is None:
        return
    if caught_exception is not None:
        log.append((type(caught_exception).__name__, ""))
    elif response is not None:
        http, parsed = response
        code = "ok" if http.status_code < 300 else str(
            (parsed.get("Error") or {}).get("Code") or http.status_code)
        log.append((code, _request_id(parsed)))


def _take_attempts() -> list[tuple[str, str]]:
    log: list[tuple[str, str]] = getattr(_attempts, "log", None) or []
    _attempts.log = None
    return log


@dataclass
class Ec2Client:
    """One account and region's EC2 API for the actions; ``bound(calls)`` records into ``calls``."""

    client: Any  # a botocore EC2 client
    recorder: list[ApiCall] | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        events = getattr(getattr(self.client, "meta", None), "events", None)
        if events is not None:  # unique_id: registering again for another view is a no-op
            events.register_first("needs-retry.ec2", _on_attempt, unique_id=ATTEMPTS_HANDLER)

    @classmethod
    def from_cluster(cls, cfg: ClusterConfig, *, endpoint_url: str | None = None) -> Ec2Client:
        """Region, profile, retry mode and (optionally) an assumed role from the cluster's config."""
        if cfg.role_arn:
            raw = _assumed_role_client(cfg, endpoint_url=endpoint_url)
        else:
            raw = boto3_client(region=cfg.region, endpoint_url=endpoint_url, profile=cfg.profile,
                               retry_mode=cfg.retry_mode, max_attempts=cfg.max_attempts,
                               timeout=cfg.request_timeout)
        return cls(client=raw)

    def bound(self, calls: list[ApiCall], *, read_only: bool = False) -> Ec2Client:
        return Ec2Client(client=self.client, recorder=calls, read_only=read_only)

    # -- plumbing -----------------------------------------------------------------------------

    def _record(self, operation: str, targets: Sequence[str], outcome: str, request_id: str) -> None:
        if self.recorder is not None:
            self.recorder.append(ApiCall(service=SERVICE, operation=operation,
                                         targets=tuple(redact(t) for t in targets),
                                         outcome=redact(outcome), request_id=request_id))

    def _call(self, operation: str, targets: Sequence[str], fn: Callable[[], Any]) -> Any:
        _attempts.log = []
        try:
            resp = fn()
        except ClientError as e:
            self._record_retries(operation, targets, _take_attempts())
            code = str(e.response.get("Error", {}).get("Code", "Unknown"))
            self._record(operation, targets, code, _request_id(e.response))
            raise translate(e, operation=operation) from e
        except BotoCoreError as e:
            self._record_retries(operation, targets, _take_attempts())
            self._record(operation, targets, type(e).__name__, "")
            raise translate(e, operation=operation) from e
        retried = _take_attempts()
        if resp is not None:  # None: a paginator ran out of pages, no request was made
            self._record_retries(operation, targets, retried)
            self._record(operation, targets, "ok", _request_id(resp))
        return resp

    def _record_retries(self, operation: str, targets: Sequence[str],
                        attempts: list[tuple[str, str]]) -> None:
        """One record per attempt botocore retried; the final attempt is recorded by ``_call``."""
        for outcome, request_id in attempts[:-1]:
            self._record(operation, targets, outcome, request_id)

    def _write(self, operation: str, targets: Sequence[str], *, dry_run: bool) -> None:
        if self.read_only and not dry_run:
            raise PolicyError(f"{operation} {', '.join(targets)}: refused, this is a read-only "
                              "(dry-run) client")

    def _paginate(self, operation: str, method: str, targets: Sequence[str],
                  **kwargs: Any) -> Iterator[dict[str, Any]]:
        pages = iter(self.client.get_paginator(method).paginate(**kwargs))
        while True:
            page = self._call(operation, targets, lambda: next(pages, None))
            if page is None:
                return
            yield page

    # -- reads --------------------------------------------------------------------------------

    def describe_instances(self, instance_ids: Sequence[str] = (), *,
                           filters: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]]:
        """Instances by id (absent ids are simply missing) and/or filters, in one paginated call."""
        flt = list(filters)
        if instance_ids:
            flt.append({"Name": "instance-id", "Values": sorted(set(instance_ids))})
        out: dict[str, dict[str, Any]] = {}
        for page in self._paginate("DescribeInstances", "describe_instances", list(instance_ids),
                                   Filters=flt):
            for res in page.get("Reservations", ()):
                for inst in res.get("Instances", ()):
                    out[inst["InstanceId"]] = inst
        return out

    def describe_instance_status(self, instance_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Status checks; ``IncludeAllInstances`` so stopped instances are listed too."""
        if not instance_ids:
            return {}
        out: dict[str, dict[str, Any]] = {}
        flt = [{"Name": "instance-id", "Values": sorted(set(instance_ids))}]
        for page in self._paginate("DescribeInstanceStatus", "describe_instance_status",
                                   list(instance_ids), Filters=flt, IncludeAllInstances=True):
            for st in page.get("InstanceStatuses", ()):
                out[st["InstanceId"]] = st
        return out

    def stop_protected(self, instance_id: str) -> bool:
        """The instance's ``disableApiStop`` attribute: with it EC2 refuses StopInstances and
        TerminateInstances (``OperationNotPermitted``)."""
        resp = self._call("DescribeInstanceAttribute", [instance_id],
                          lambda: self.client.describe_instance_attribute(
                              InstanceId=instance_id, Attribute="disableApiStop"))
        return bool((resp.get("DisableApiStop") or {}).get("Value"))

    def describe_volumes(self, volume_ids: Sequence[str] = (), *,
                         filters: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]]:
        """Volumes by id (absent ids are simply missing) and/or filters, in one paginated call."""
        flt = list(filters)
        if volume_ids:
            flt.append({"Name": "volume-id", "Values": sorted(set(volume_ids))})
        out: dict[str, dict[str, Any]] = {}
        for page in self._paginate("DescribeVolumes", "describe_volumes", list(volume_ids),
                                   Filters=flt):
            for vol in page.get("Volumes", ()):
                out[vol["VolumeId"]] = vol
        return out

    # -- writes -------------------------------------------------------------------------------

    def _dry_run(self, operation: str, targets: Sequence[str], fn: Callable[[], Any]) -> bool:
        """True when EC2 says the call would have succeeded (``DryRunOperation``)."""
        try:
            self._call(operation, targets, fn)
        except PermanentError as e:
            if e.code == DRY_RUN_OK:
                return True
            raise
        # the call was carried out: this endpoint ignores DryRun, so nothing it answers to a
        # dry run can be trusted as a check, and it may have made the change
        raise PermanentError(f"{operation} {', '.join(targets)}: the EC2 endpoint ignored DryRun "
                             "and answered as if it had made the call; it cannot be used to "
                             "check permissions", service=SERVICE, operation=operation,
                             code="DryRunIgnored")

    def stop_instances(self, instance_ids: Sequence[str], *, force: bool,
                       dry_run: bool = False) -> dict[str, Any]:
        ids = list(instance_ids)
        self._write("StopInstances", ids, dry_run=dry_run)
        fn = lambda: self.client.stop_instances(InstanceIds=ids, Force=force, DryRun=dry_run)  # noqa: E731
        if dry_run:
            return {"DryRun": self._dry_run("StopInstances", ids, fn)}
        return dict(self._call("StopInstances", ids, fn))

    def terminate_instances(self, instance_ids: Sequence[str], *,
                            dry_run: bool = False) -> dict[str, Any]:
        ids = list(instance_ids)
        self._write("TerminateInstances", ids, dry_run=dry_run)
        fn = lambda: self.client.terminate_instances(InstanceIds=ids, DryRun=dry_run)  # noqa: E731
        if dry_run:
            return {"DryRun": self._dry_run("TerminateInstances", ids, fn)}
        return dict(self._call("TerminateInstances", ids, fn))

    def detach_volume(self, *, volume_id: str, instance_id: str | None, force: bool,
                      dry_run: bool = False) -> dict[str, Any]:
        kw: dict[str, Any] = {"VolumeId": volume_id, "Force": force, "DryRun": dry_run}
        if instance_id:
            kw["InstanceId"] = instance_id
        targets = [volume_id] + ([instance_id] if instance_id else [])
        self._write("DetachVolume", targets, dry_run=dry_run)
        fn = lambda: self.client.detach_volume(**kw)  # noqa: E731
        if dry_run:
            return {"DryRun": self._dry_run("DetachVolume", targets, fn)}
        return dict(self._call("DetachVolume", targets, fn))

    def delete_volume(self, *, volume_id: str, dry_run: bool = False) -> dict[str, Any]:
        self._write("DeleteVolume", [volume_id], dry_run=dry_run)
        fn = lambda: self.client.delete_volume(VolumeId=volume_id, DryRun=dry_run)  # noqa: E731
        if dry_run:
            return {"DryRun": self._dry_run("DeleteVolume", [volume_id], fn)}
        return dict(self._call("DeleteVolume", [volume_id], fn))

    def create_snapshot(self, *, volume_id: str, description: str, tags: dict[str, str],
                        dry_run: bool = False) -> dict[str, Any]:
        """``CreateSnapshot`` of one volume, tagged at creation (``TagSpecifications``)."""
        self._write("CreateSnapshot", [volume_id], dry_run=dry_run)
        kw: dict[str, Any] = {"VolumeId": volume_id, "Description": description, "DryRun": dry_run}
        if tags:  # EC2 refuses an empty tag specification
            kw["TagSpecifications"] = [{"ResourceType": "snapshot", "Tags": [
                {"Key": k, "Value": v} for k, v in sorted(tags.items())]}]
        fn = lambda: self.client.create_snapshot(**kw)  # noqa: E731
        if dry_run:
            return {"DryRun": self._dry_run("CreateSnapshot", [volume_id], fn)}
        return dict(self._call("CreateSnapshot", [volume_id], fn))

    def describe_snapshots(self, *, filters: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The account's own snapshots matching the filters, in one paginated call."""
        out: dict[str, dict[str, Any]] = {}
        targets = [v for f in filters if f.get("Name") == "volume-id" for v in f.get("Values") or ()]
        for page in self._paginate("DescribeSnapshots", "describe_snapshots", targets,
                                   Filters=list(filters), OwnerIds=["self"]):
            for snap in page.get("Snapshots", ()):
                out[snap["SnapshotId"]] = snap
        return out


def iso(value: Any) -> str | None:
    """An ISO-8601 UTC string for a botocore timestamp (datetime) or None."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return None if value is None else str(value)


def caller_identity(cfg: ClusterConfig) -> dict[str, str]:
    """Who AWS sees for this cluster's config (``sts get-caller-identity``), after ``role_arn``.

    Raises ``RetryableError`` when STS cannot be reached and ``PermanentError`` when it answers no
    (no credentials, an expired token, a role that cannot be assumed).
    """
    config = Config(region_name=cfg.region, retries={"mode": cfg.retry_mode, "max_attempts": 2},
                    connect_timeout=min(cfg.request_timeout, 10), read_timeout=cfg.request_timeout)
    try:
        session = boto3.session.Session(profile_name=cfg.profile, region_name=cfg.region)
        sts = session.client("sts", config=config)
        if cfg.role_arn:
            creds = sts.assume_role(RoleArn=cfg.role_arn, RoleSessionName=f"runbook-bot-{cfg.name}",
                                    DurationSeconds=900)["Credentials"]
            sts = boto3.session.Session(
                aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                aws_session_token=creds["SessionToken"], region_name=cfg.region,
            ).client("sts", config=config)
        found = sts.get_caller_identity()
    except NoCredentialsError as e:
        raise PermanentError("no AWS credentials found (IRSA, Pod Identity, a profile or the "
                             "environment)", service="sts", operation="GetCallerIdentity",
                             code="NoCredentials") from e
    except (ClientError, BotoCoreError) as e:
        raise translate(e, operation="sts:GetCallerIdentity") from e
    return {"account": str(found.get("Account", "")), "arn": str(found.get("Arn", ""))}
