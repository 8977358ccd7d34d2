"""The EC2 client: with ``bot.clients.aws``, the only importer of boto3/botocore in the product.

``boto3_client`` (``bot.clients.aws``, importable from here too) builds a botocore EC2 client with
the configured retry mode; endpoints come from the standard environment (``AWS_ENDPOINT_URL_EC2``)
unless given, so production and the sandbox are reached the same way. ``Ec2Client`` wraps it for
the actions:

- plain dicts out, the botocore response shapes (``State``, ``Attachments`` ...) unchanged;
- batching: many instances or volumes in one paginated Describe call. Ids go in as *filters*, not
  ``InstanceIds``/``VolumeIds``, because one unknown id fails the whole id-list call with
  ``InvalidInstanceID.NotFound`` while a filter simply leaves it out ("exists: false");
- errors translated once: throttling and server faults are ``RetryableError`` (after botocore's
  own ``standard`` retries gave up), everything else ``PermanentError`` with the AWS code kept;
- every request recorded as an ``ApiCall`` with its AWS request id: each page of a Describe, and
  each attempt botocore's retries made (a throttled attempt is recorded with its error code, then
  the attempt that succeeded), so the audit shows the throttling an action went through;
- shared reads: a view bound to a pass's ``SharedReads`` answers a Describe it already made in that
  pass from there, and a Describe by ids from an earlier one by ids (or of everything) that
  covered them, recorded with the outcome ``cached``, never as a request; every write, a DryRun
  check too, clears the shared reads before and after it is sent;
- secrets redacted (``redact``) from every error message and record;
- a read-only view (``bound(calls, read_only=True)``, what a dry run gets) refuses every write
  before it is sent, EC2's own ``DryRun`` checks excepted; an endpoint that ignores ``DryRun``
  (answers success instead of ``DryRunOperation``) is an error, never "permitted".
"""

from __future__ import annotations

import contextlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    NoCredentialsError,
    ReadTimeoutError,
)

from bot.clients.attribution import BOT_IDENTITY, Attribution, SharedSession
from bot.clients.aws import Reach, Send, bind_backoff, boto3_client, request_id_of
from bot.clients.redact import redact
from bot.config import ClusterConfig
from bot.engine.plan import ApiCall
from bot.engine.ports import SharedReads
from bot.engine.runstate import json_copy
from bot.errors import PermanentError, PolicyError, RetryableError

# boto3_client, bind_backoff and Send are importable from here, where they were defined before
__all__ = ["ATTEMPTS_HANDLER", "DRY_RUN_OK", "RETRYABLE_CODES", "SERVICE", "Ec2Client", "RunSessions",
           "Send", "bind_backoff", "boto3_client", "caller_identity", "iso", "translate"]

SERVICE = "ec2"
RETRYABLE_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled",
    "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable",
})
DRY_RUN_OK = "DryRunOperation"
ATTEMPTS_HANDLER = "runbook-bot-record-attempts"


class RunSessions:
    """Each run's own AssumeRole session, the credentials its EC2 writes are made with.

    ``SourceIdentity`` is the run id and the session tags name the requester and the approvers
    (``attribution``). A run keeps its session while the approvers of its writes stay the same;
    another set of approvers gets a new session. The sessions of the last ``limit`` runs are kept.
    """

    def __init__(self, reach: Reach, *, limit: int = 256) -> None:
        self._reach = reach
        self._limit = limit
        self._by_run: OrderedDict[str, tuple[Attribution, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def client(self, who: Attribution) -> tuple[Any, str | None]:
        """The run's EC2 client for ``who``, and the AssumeRole request id if it was just made."""
        with self._lock:
            found = self._by_run.get(who.run_id)
            if found is not None and found[0] == who:
                self._by_run.move_to_end(who.run_id)
                return found[1], None
        session, request_id = self._reach.role_session(
            RoleSessionName=who.session_name, SourceIdentity=who.source_identity, Tags=who.tags())
        raw = self._reach.ec2(session)
        session.get_credentials().get_frozen_credentials()  # assume now: failures surface here
        _watch_attempts(raw)
        with self._lock:
            self._by_run[who.run_id] = (who, raw)
            while len(self._by_run) > self._limit:
                self._by_run.popitem(last=False)
        return raw, request_id()


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
        log.append((code, request_id_of(parsed)))


def _take_attempts() -> list[tuple[str, str]]:
    log: list[tuple[str, str]] = getattr(_attempts, "log", None) or []
    _attempts.log = None
    return log


_watched: weakref.WeakSet[Any] = weakref.WeakSet()  # the botocore clients already watched


def _watch_attempts(raw: Any) -> None:
    """Record each attempt botocore's retries make on this client (``_on_attempt``), once per
    client: every bound view shares its client, and botocore inspects a handler's signature on
    each registration, even one its unique_id then makes a no-op."""
    if raw in _watched:  # False for a client that cannot be weakly referenced
        return
    events = getattr(getattr(raw, "meta", None), "events", None)
    if events is not None:  # unique_id: registering again for another view is a no-op
        events.register_first("needs-retry.ec2", _on_attempt, unique_id=ATTEMPTS_HANDLER)
        with contextlib.suppress(TypeError):
            _watched.add(raw)


@dataclass
class Ec2Client:
    """One account and region's EC2 API for the actions; ``bound(calls)`` records into ``calls``.

    Reads and ``DryRun`` checks use ``client``. With ``run_sessions`` (a cluster ``role_arn``) and
    a view bound to a run (``acting_for``), every write that changes something is made with the
    run's own session instead, so CloudTrail names the run and its approvers.
    """

    client: Any  # a botocore EC2 client
    recorder: list[ApiCall] | None = None
    read_only: bool = False
    sts: Any = None  # a botocore STS client on the same credentials as ``client``
    run_sessions: RunSessions | None = None
    acting_for: Attribution | None = None
    reads: SharedReads | None = None
    # instance types never change: what DescribeInstanceTypes answered is kept for the client's
    # life, shared by every bound view (served as ``cached``, like a pass's shared reads)
    known_types: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        _watch_attempts(self.client)

    @classmethod
    def from_cluster(cls, cfg: ClusterConfig, *, endpoint_url: str | None = None,
                     sts_endpoint_url: str | None = None,
                     credentials: dict[str, str] | None = None,
                     requester: str = BOT_IDENTITY) -> Ec2Client:
        """Region, profile, retry mode and (optionally) an assumed role from the cluster's config.

        ``credentials`` (``aws_access_key_id``...) replace the default chain as the base identity.
        With a ``role_arn``, the shared session is attributed to ``requester`` (the bot, or the
        person running ``config check``): its ``SourceIdentity`` and session tag, which the role's
        trust policy requires of every session (``SharedSession``).
        """
        reach = Reach(cfg, endpoint_url=endpoint_url, sts_endpoint_url=sts_endpoint_url,
                       credentials=credentials)
        if cfg.role_arn:
            shared = SharedSession(cluster=cfg.name, requester=requester)
            session, _ = reach.role_session(RoleSessionName=shared.session_name,
                                            SourceIdentity=shared.source_identity,
                                            Tags=shared.tags())
            return cls(client=reach.ec2(session), sts=reach.sts(session),
                       run_sessions=RunSessions(reach))
        base = reach.base_session()
        return cls(client=reach.ec2(base), sts=reach.sts(base))

    def bound(self, calls: list[ApiCall], *, read_only: bool = False,
              acting_for: Attribution | None = None, reads: SharedReads | None = None) -> Ec2Client:
        return Ec2Client(client=self.client, recorder=calls, read_only=read_only, sts=self.sts,
                         run_sessions=self.run_sessions, acting_for=acting_for, reads=reads,
                         known_types=self.known_types)

    def caller_identity(self) -> dict[str, str]:
        """Who AWS sees for reads (``sts:GetCallerIdentity``, which needs no IAM permission)."""
        if self.sts is None:
            raise PermanentError("GetCallerIdentity: this EC2 client has no STS client",
                                 service="sts", operation="GetCallerIdentity", code="NoStsClient")
        try:
            found = self.sts.get_caller_identity()
        except (ClientError, BotoCoreError) as e:
            if self.recorder is not None:
                self.recorder.append(ApiCall(service="sts", operation="GetCallerIdentity",
                                             targets=(), outcome=type(e).__name__, request_id=""))
            raise _identity_error(e) from e
        if self.recorder is not None:
            self.recorder.append(ApiCall(service="sts", operation="GetCallerIdentity", targets=(),
                                         outcome="ok", request_id=request_id_of(found)))
        return {"account": str(found.get("Account", "")), "arn": str(found.get("Arn", ""))}

    def _writer(self, *, dry_run: bool) -> Any:
        """The client a write is made with: the run's session for a real write, if there is one."""
        if dry_run or self.run_sessions is None or self.acting_for is None:
            return self.client
        who = self.acting_for
        try:
            raw, request_id = self.run_sessions.client(who)
        except (ClientError, BotoCoreError) as e:
            code = (str(e.response.get("Error", {}).get("Code", "Unknown"))
                    if isinstance(e, ClientError) else type(e).__name__)
            if self.recorder is not None:
                self.recorder.append(ApiCall(service="sts", operation="AssumeRole",
                                             targets=(who.session_name,), outcome=code,
                                             request_id=""))
            raise translate(e, operation="sts:AssumeRole") from e
        if request_id is not None and self.recorder is not None:
            self.recorder.append(ApiCall(service="sts", operation="AssumeRole",
                                         targets=(who.session_name,), outcome="ok",
                                         request_id=request_id))
        return raw

    # -- shared reads -------------------------------------------------------------------------

    def _described(self, operation: str, ids: Sequence[str], filters: Sequence[dict[str, Any]],
                   fetch: Callable[[list[str]], dict[str, dict[str, Any]]], *,
                   fresh: bool = False) -> dict[str, dict[str, Any]]:
        """``fetch(request_ids)``, or what an earlier Describe in this pass answered: the same
        call, or one by ids (or of everything, no filter) that covered these ids. ``fresh``:
        asked again whatever the pass read (what a later read of the pass is then answered)."""
        if self.reads is None:
            return fetch([])
        found = None if fresh else self.already_described(operation, ids, filters)
        if found is not None:
            return found
        request_ids: list[str] = []
        out = fetch(request_ids)
        key = (SERVICE, id(self.client), operation, tuple(sorted(set(ids))),
               json.dumps(list(filters), sort_keys=True, default=str))
        self.reads.put(key, (json_copy(out), request_ids[0] if request_ids else ""))
        return out

    def already_described(self, operation: str, ids: Sequence[str],
                          filters: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]] | None:
        """What a Describe made earlier in this pass answered for these ids (recorded as
        ``cached``), or None, without a request: the same call, or one by ids (or of everything,
        no filter) that covered them."""
        if self.reads is None:
            return None
        wanted = tuple(sorted(set(ids)))
        shape = json.dumps(list(filters), sort_keys=True, default=str)
        key = (SERVICE, id(self.client), operation, wanted, shape)
        hit = self.reads.get(key)
        if hit is None and wanted and not filters:
            for other, value in self.reads.items():
                if (other[:3] == key[:3] and other[4:] == ("[]",)
                        and (not other[3] or set(wanted) <= set(other[3]))):
                    hit = ({k: v for k, v in value[0].items() if k in wanted}, value[1])
                    break
        if hit is None:
            return None
        self.reads.served += 1
        self._record(operation, list(ids), "cached", hit[1])
        return dict(json_copy(hit[0]))

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
            self._record(operation, targets, code, request_id_of(e.response))
            raise translate(e, operation=operation) from e
        except BotoCoreError as e:
            self._record_retries(operation, targets, _take_attempts())
            self._record(operation, targets, type(e).__name__, "")
            raise translate(e, operation=operation) from e
        retried = _take_attempts()
        if resp is not None:  # None: a paginator ran out of pages, no request was made
            self._record_retries(operation, targets, retried)
            self._record(operation, targets, "ok", request_id_of(resp))
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
        if self.reads is not None:
            self.reads.clear()

    def _paginate(self, operation: str, method: str, targets: Sequence[str],
                  request_ids: list[str] | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
        pages = iter(self.client.get_paginator(method).paginate(**kwargs))
        while True:
            page = self._call(operation, targets, lambda: next(pages, None))
            if page is None:
                return
            if request_ids is not None:
                request_ids.append(request_id_of(page))
            yield page

    # -- reads --------------------------------------------------------------------------------

    def describe_instances(self, instance_ids: Sequence[str] = (), *,
                           filters: Sequence[dict[str, Any]] = (),
                           fresh: bool = False) -> dict[str, dict[str, Any]]:
        """Instances by id (absent ids are simply missing) and/or filters, in one paginated call;
        ``fresh``: asked of EC2 even if this pass already read them (a check right before a write
        that a machine started meanwhile would make unsafe)."""
        flt = list(filters)
        if instance_ids:
            flt.append({"Name": "instance-id", "Values": sorted(set(instance_ids))})

        def fetch(request_ids: list[str]) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for page in self._paginate("DescribeInstances", "describe_instances",
                                       list(instance_ids), request_ids, Filters=flt):
                for res in page.get("Reservations", ()):
                    for inst in res.get("Instances", ()):
                        out[inst["InstanceId"]] = inst
            return out
        return self._described("DescribeInstances", instance_ids, filters, fetch, fresh=fresh)

    def describe_instance_status(self, instance_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Status checks; ``IncludeAllInstances`` so stopped instances are listed too."""
        if not instance_ids:
            return {}
        flt = [{"Name": "instance-id", "Values": sorted(set(instance_ids))}]

        def fetch(request_ids: list[str]) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for page in self._paginate("DescribeInstanceStatus", "describe_instance_status",
                                       list(instance_ids), request_ids, Filters=flt,
                                       IncludeAllInstances=True):
                for st in page.get("InstanceStatuses", ()):
                    out[st["InstanceId"]] = st
            return out
        return self._described("DescribeInstanceStatus", instance_ids, (), fetch)

    def describe_volume_status(self, volume_ids: Sequence[str] = (), *,
                               filters: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]]:
        """EBS volume status checks by volume id: ``VolumeStatus.Status`` is ``impaired`` with the
        ``io-enabled`` check failed when EBS disabled a volume's I/O (a host failure left its data
        possibly inconsistent). EC2 has no volume-id filter here: the ids are ``VolumeIds``, and an
        id it does not know fails the call (``InvalidVolume.NotFound``); ``filters`` narrow the
        answer (``availability-zone``, ``volume-status.status``, ...)."""
        if not volume_ids and not filters:
            return {}
        ids = sorted(set(volume_ids))
        kwargs: dict[str, Any] = {"Filters": list(filters)}
        if ids:
            kwargs["VolumeIds"] = ids

        def fetch(request_ids: list[str]) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for page in self._paginate("DescribeVolumeStatus", "describe_volume_status", ids,
                                       request_ids, **kwargs):
                for st in page.get("VolumeStatuses", ()):
                    out[st["VolumeId"]] = st
            return out
        return self._described("DescribeVolumeStatus", ids, filters, fetch)

    def stop_protected(self, instance_id: str) -> bool:
        """The instance's ``disableApiStop`` attribute: with it EC2 refuses StopInstances and
        TerminateInstances (``OperationNotPermitted``)."""
        return self._protected(instance_id, "disableApiStop")

    def termination_protected(self, instance_id: str) -> bool:
        """The instance's ``disableApiTermination`` attribute: with it EC2 refuses
        TerminateInstances (``OperationNotPermitted``)."""
        return self._protected(instance_id, "disableApiTermination")

    def _protected(self, instance_id: str, attribute: str) -> bool:
        """One boolean attribute (DescribeInstanceAttribute), shared within the pass."""
        key = (SERVICE, id(self.client), "DescribeInstanceAttribute", (instance_id,), attribute)
        hit = self.reads.get(key) if self.reads is not None else None
        if self.reads is not None and hit is not None:
            self.reads.served += 1
            self._record("DescribeInstanceAttribute", [instance_id], "cached", hit[1])
            return bool(hit[0])
        resp = self._call("DescribeInstanceAttribute", [instance_id],
                          lambda: self.client.describe_instance_attribute(
                              InstanceId=instance_id, Attribute=attribute))
        attr = attribute[0].upper() + attribute[1:]  # disableApiStop -> DisableApiStop
        protected = bool((resp.get(attr) or {}).get("Value"))
        if self.reads is not None:
            self.reads.put(key, (protected, request_id_of(resp)))
        return protected

    def describe_instance_types(self, instance_types: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Instance types by name (unknown names are missing): ``InstanceStorageInfo`` tells which
        come with instance-store disks, which DescribeInstances' BlockDeviceMappings never list.
        A type's facts are fixed: each is asked for once in the client's life."""
        if not instance_types:
            return {}
        wanted = sorted(set(instance_types))
        if all(t in self.known_types for t in wanted):
            # the audit keeps the request id of the answer these facts came from
            self._record("DescribeInstanceTypes", wanted, "cached", self.known_types[wanted[0]][1])
            return {t: json_copy(self.known_types[t][0]) for t in wanted
                    if self.known_types[t][0]}

        def fetch(request_ids: list[str]) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for page in self._paginate("DescribeInstanceTypes", "describe_instance_types",
                                       list(instance_types), request_ids, InstanceTypes=wanted):
                for it in page.get("InstanceTypes", ()):
                    out[it["InstanceType"]] = it
            return out
        request_ids: list[str] = []

        def fetch_noting(ids: list[str]) -> dict[str, dict[str, Any]]:
            out = fetch(ids)
            request_ids.extend(ids)
            return out
        out = self._described("DescribeInstanceTypes", instance_types, (), fetch_noting)
        if request_ids:  # answered by EC2 now; a name it does not know is remembered unknown
            for t in wanted:
                self.known_types[t] = (json_copy(out.get(t) or {}), request_ids[0])
        return out

    def describe_volumes(self, volume_ids: Sequence[str] = (), *,
                         filters: Sequence[dict[str, Any]] = ()) -> dict[str, dict[str, Any]]:
        """Volumes by id (absent ids are simply missing) and/or filters, in one paginated call."""
        flt = list(filters)
        if volume_ids:
            flt.append({"Name": "volume-id", "Values": sorted(set(volume_ids))})

        def fetch(request_ids: list[str]) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            # the audit names what was asked for: the ids, or the filters' values
            targets = list(volume_ids) or [str(v) for f in filters for v in f.get("Values") or ()]
            for page in self._paginate("DescribeVolumes", "describe_volumes", targets,
                                       request_ids, Filters=flt):
                for vol in page.get("Volumes", ()):
                    out[vol["VolumeId"]] = vol
            return out
        return self._described("DescribeVolumes", volume_ids, filters, fetch)

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
        writer = self._writer(dry_run=dry_run)
        fn = lambda: writer.stop_instances(InstanceIds=ids, Force=force, DryRun=dry_run)  # noqa: E731
        if dry_run:
            return {"DryRun": self._dry_run("StopInstances", ids, fn)}
        return dict(self._call("StopInstances", ids, fn))

    def terminate_instances(self, instance_ids: Sequence[str], *,
                            dry_run: bool = False) -> dict[str, Any]:
        ids = list(instance_ids)
        self._write("TerminateInstances", ids, dry_run=dry_run)
        writer = self._writer(dry_run=dry_run)  # the run's session, as every other write
        fn = lambda: writer.terminate_instances(InstanceIds=ids, DryRun=dry_run)  # noqa: E731
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
        writer = self._writer(dry_run=dry_run)
        fn = lambda: writer.detach_volume(**kw)  # noqa: E731
        if dry_run:
            return {"DryRun": self._dry_run("DetachVolume", targets, fn)}
        return dict(self._call("DetachVolume", targets, fn))

    def delete_volume(self, *, volume_id: str, dry_run: bool = False) -> dict[str, Any]:
        self._write("DeleteVolume", [volume_id], dry_run=dry_run)
        writer = self._writer(dry_run=dry_run)
        fn = lambda: writer.delete_volume(VolumeId=volume_id, DryRun=dry_run)  # noqa: E731
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
        writer = self._writer(dry_run=dry_run)
        fn = lambda: writer.create_snapshot(**kw)  # noqa: E731
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


def caller_identity(cfg: ClusterConfig, *, requester: str = BOT_IDENTITY) -> dict[str, str]:
    """Who AWS sees for this cluster's config (``sts get-caller-identity``), after ``role_arn``
    (assumed for ``requester``, its ``SourceIdentity``).

    Raises ``RetryableError`` when STS cannot be reached and ``PermanentError`` when it answers no
    (no credentials, an expired token, a role that cannot be assumed).
    """
    try:
        client = Ec2Client.from_cluster(cfg, requester=requester)  # with role_arn, assumed here
    except (ClientError, BotoCoreError) as e:
        raise _identity_error(e) from e
    return client.caller_identity()


def _identity_error(e: ClientError | BotoCoreError) -> Exception:
    if isinstance(e, NoCredentialsError):
        return PermanentError("no AWS credentials found (IRSA, Pod Identity, a profile or the "
                              "environment)", service="sts", operation="GetCallerIdentity",
                              code="NoCredentials")
    return translate(e, operation="sts:GetCallerIdentity")
