"""EC2 for the sandbox: moto's server in-process, behind a proxy that adds what moto lacks.

moto makes every transition instant and ignores ``Force``; real incidents depend on the opposite.
The proxy speaks the EC2 Query API and answers these actions itself, in EC2's XML error shape so
botocore parses them, before or instead of forwarding to moto (DOMAIN.md §4):

- DetachVolume: a normal detach from a *hung* running instance leaves the attachment ``detaching``;
  an attachment marked stuck (``busy``/``detaching``) stays so until ``Force=true``; a missing
  ``InstanceId`` is filled from the attachment (moto crashes on it); nothing attached -> IncorrectState.
- AttachVolume on an attached volume -> ``VolumeInUse`` (moto silently overwrites).
  An io2 Multi-Attach volume takes more holders instead, each detached on its own
  (``ec2_multiattach``).
- Stop, start and terminate take simulated time, and refuse as EC2 does (``ec2_instances``).
- DescribeInstances and DescribeVolumes lag a change by ``describe_lag`` seconds (``consistency``).
- DescribeInstanceStatus reports the instance check ``impaired`` for stopping instances, and for
  hung ones once ``status_check_delay`` has passed; the system check of a failed host; and
  scheduled events (``ec2_status``).
- A failed zone (``ec2_zone``): stops and terminations held on stuck hosts, RunInstances refused
  for lack of capacity, DescribeVolumeStatus (moto lacks it) with impaired volumes.
- A snapshot is ``pending``, its progress climbing, for ``snapshot_seconds`` (``ec2_snapshots``).
- Every caller but the sandbox itself is held to deploy/iam-policy.json (``iam``), and an
  AssumeRole also to the role's trust policy, deploy/role-trust-policy.json (``trust``), its
  conditions on the request's SourceIdentity and session tags included.
- STS requests (``AWS_ENDPOINT_URL_STS`` may point here too) are recorded, then answered by moto
  (``sts``); every EC2 request is recorded with the access key that signed it (``wire``), so a
  test sees which credentials (which assumed-role session) made each call.
- Optional ``RequestLimitExceeded`` throttling at a configured rate (seeded, so reproducible).

The sandbox inspects state through moto's backend objects directly (fast, and the truth the
invariants check) and arranges a scenario's instances with plain Query calls straight to moto
(``MotoQuery``); while a scenario builds, the controllers' calls are answered in-process by the same
rules (``SeedClient``). Everything the product does, and every controller call once the sandbox is
ready, goes through the proxy endpoint. All three servers send with TCP_NODELAY (see ``net``).
In-process (``in_process``, ``bot.sim.inprocess``) no server runs: ``send`` hands a request to the
proxy's handler, the proxy calls moto's WSGI application, and the controllers' calls are written
without botocore (``ProxyClient``).

This module is the proxy: ``Ec2Sim`` (its state, rules and authorization) and its request
handler. moto underneath it (its server, its in-process application, ``MotoQuery``) is in
``ec2_moto``; the clients that call the proxy without botocore (``SeedClient``, ``ProxyClient``)
are in ``ec2_clients``.
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.moto_api._internal import mock_random

from bot.sim import moto_speed
from bot.sim.consistency import StaleReads
from bot.sim.ec2_instances import InstanceLifecycle, Timing, refuse_dry_run
from bot.sim.ec2_managed import ManagedInstances
from bot.sim.ec2_moto import MotoApp, MotoQuery, MotoServer
from bot.sim.ec2_multiattach import MultiAttach
from bot.sim.ec2_proxy import Ec2Error, ProxyHandler, WireCall
from bot.sim.ec2_snapshots import PendingSnapshots
from bot.sim.ec2_status import StatusChecks
from bot.sim.ec2_zone import ZoneFailure, ZoneFailures
from bot.sim.iam import ADMIN_KEY, Policy, implicit_checks, resources_of
from bot.sim.inprocess import send, wsgi
from bot.sim.net import POLL, Server
from bot.sim.sts import StsLog, assume_role_actions, trust_context
from bot.sim.trust import TrustPolicy

log = logging.getLogger(__name__)
NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
IN_PROCESS_ENDPOINT = "http://ec2.sandbox.invalid"  # what an in-process proxy is called
AMI = "ami-12c6146b"




class Ec2Sim(InstanceLifecycle, ZoneFailures):
    """moto + the behaviour proxy. ``endpoint`` is what AWS_ENDPOINT_URL_EC2 (and _STS) point at."""

    def __init__(self, *, region: str, seed: int = 0, throttle_rate: float = 0.0,
                 enforce_volume_in_use: bool = True,
                 on_change: Callable[[], None] | None = None,
                 now: Callable[[], datetime] | None = None, timing: Timing | None = None,
                 policy: Policy | None = None, trust: TrustPolicy | None = None,
                 in_process: bool = False, account: str = DEFAULT_ACCOUNT_ID) -> None:
        self.region, self.account = region, account  # moto keeps a backend per account and region
        # no server, no socket (``bot.sim.inprocess``): clients call ``send``, and the proxy calls
        # moto's WSGI application instead of its server
        self.in_process = in_process
        # without a sandbox clock there is no simulated time to spend: moto's instant transitions,
        # except that a hung guest still never finishes its OS shutdown
        self.now = now or (lambda: datetime.now(UTC))
        self.timing = timing or (Timing() if now else Timing.instant())
        self.policy = policy  # None: every caller may do everything (moto's way)
        self.trust = trust  # the trust policy of any role assumed here; None: trusted by all
        self.transitions = {}
        self.boots = {}
        self.launched: set[str] = set()  # instances whose LaunchTime is on the sandbox clock
        self.sts = StsLog()
        self.wire: list[WireCall] = []  # every EC2 request that crossed the endpoint, in order
        self.answered_error: list[WireCall] = []  # those the proxy refused (throttled, IAM, ...)
        self.refused: list[tuple[str, str, str]] = []  # (access key, action, message) IAM refused
        self.seeding = False  # a scenario is arranging through SeedClient: no stale views kept
        self.stale = StaleReads(lag=lambda: self.timing.describe_lag, now=self.now,
                                fetch=lambda action, params: MotoQuery(self).raw(action, params))
        self.snapshots = PendingSnapshots(seconds=lambda: self.timing.snapshot_seconds, now=self.now)
        self.status = StatusChecks(delay=lambda: self.timing.status_check_delay, now=self.now)
        self.seed = seed
        self.throttle_rate = throttle_rate
        self.enforce_volume_in_use = enforce_volume_in_use
        self.on_change = on_change or (lambda: None)
        self.hung: set[str] = set()  # instance ids that run but answer nothing
        self.managed = ManagedInstances()  # EKS Auto Mode's instances: only EKS stops them
        self.zone = ZoneFailure()  # stuck hosts, zones out of capacity, impaired volumes
        self.live_fences: list[tuple[datetime, str]] = []  # stops/terminates of live guests
        self.stuck: dict[str, str] = {}  # volume id -> "busy"/"detaching": needs Force
        self.hang_stuck: set[str] = set()  # stuck only because the guest hung: clears once it stops
        self.shadow: dict[str, list[str]] = {}  # volume id -> extra instance ids (multi-attach)
        self.multi = MultiAttach()  # io2 Multi-Attach holders besides moto's one attachment
        self.requests = 0
        self.throttled = 0
        self._rng = random.Random(f"ec2-throttle-{seed}")
        self._lock = threading.RLock()
        self._dirty = False  # a change noted under the lock, not yet told to on_change
        self._moto: MotoServer | None = None
        self._moto_addr: tuple[str, int] = ("127.0.0.1", 0)
        self._httpd: Server | None = None
        self._serving: threading.Thread | None = None
        self._app: Any = None  # moto's WSGI application, called in-process
        self._handler: type[ProxyHandler] | None = None
        self._backend: Any = None

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def backend(self) -> Any:
        # moto finds an account's backend under a lock on every lookup; a reset clears the
        # backend in place, so the object found once stays the one to use
        if self._backend is None:
            self._backend = ec2_backends[self.account][self.region]
        return self._backend

    @property
    def endpoint(self) -> str:
        if self.in_process:
            return IN_PROCESS_ENDPOINT
        assert self._httpd is not None, "start() first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!r}:{port}".replace("'", "")

    def start(self) -> None:
        # moto keeps its state in process-wide backends: start each sandbox from a clean region,
        # without moto's catalogue of public AMIs (a fifth of a second per sandbox; the sandbox
        # launches from one image id, which moto does not check)
        os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
        self.backend.reset()
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        if self.in_process:
            self._app = MotoApp()
        else:
            moto_speed.uninstall()  # over HTTP, moto as shipped: the explorer's reference
            self._moto = MotoServer()
            self._moto_addr = self._moto.start()
        # One request first, so whatever moto builds lazily (the region's default VPC, the app for
        # the service) exists before seeding: then the ids it draws for the scenario's objects
        # depend on the seed alone, not on what this process did before.
        MotoQuery(self).call("DescribeVpcs", {})
        mock_random.seed(f"ec2-{self.seed}")  # moto draws ids from this: same seed, same ids
        if not self.in_process:
            self._serve_proxy()

    def bind(self) -> str:
        """The proxy's socket bound, and not served yet: the endpoint it will answer at once
        served (``serve_over_http``), so clients for it can be built before."""
        if self._httpd is None:
            self._httpd = Server(("127.0.0.1", 0), self.handler_class())
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve_over_http(self) -> None:
        """From now on, serve as a proxy started over HTTP does: moto as shipped, on its own
        server, behind the proxy's socket server (bound before, or now); the state (moto's
        backend, the proxy's memory) stays as it is. For a fork of an in-process sandbox, which
        serves nothing yet."""
        if not self.in_process:
            return
        self.in_process = False
        self._app = None
        moto_speed.uninstall()
        self._moto = MotoServer()
        self._moto_addr = self._moto.start()
        self._serve_proxy()

    def _serve_proxy(self) -> None:
        self.bind()
        assert self._httpd is not None
        self._serving = threading.Thread(target=self._httpd.serve_forever, args=(POLL,), name="sim-ec2",
                                         daemon=True)
        self._serving.start()

    def handler_class(self) -> type[ProxyHandler]:
        """The proxy's request handler, for its socket server or the in-process transport."""
        if self._handler is None:
            sim = self

            class Handler(ProxyHandler):
                ec2 = sim

            self._handler = Handler
        return self._handler

    def send(self, method: str, url: str, headers: Any, body: bytes) -> tuple[
            int, list[tuple[str, str]], bytes]:
        """One request to the proxy without a socket (the in-process transport's EC2 and STS)."""
        return send(self.handler_class(), method, url, headers, body)

    def stop(self) -> None:
        if self._httpd is not None:
            if self._serving is not None:  # a socket bound and never served has no loop to end
                self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd.close_connections()
            self._httpd = None
        if self._serving is not None:
            self._serving.join(timeout=5)
            self._serving = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None

    # -- state, read and seeded directly -------------------------------------------------------

    def instance(self, instance_id: str) -> Any | None:
        for reservation in self.backend.reservations.values():
            for inst in reservation.instances:
                if inst.id == instance_id:
                    return inst
        return None

    def instance_state(self, instance_id: str) -> str:
        inst = self.instance(instance_id)
        return "missing" if inst is None else str(inst._state.name)

    def volume(self, volume_id: str) -> Any | None:
        return self.backend.volumes.get(volume_id)

    def attachments(self) -> dict[str, list[tuple[str, str]]]:
        """volume id -> [(instance id, attachment state)], including shadow attachments."""
        out: dict[str, list[tuple[str, str]]] = {}
        for vid, vol in self.backend.volumes.items():
            rows = []
            if vol.attachment is not None:
                rows.append((vol.attachment.instance.id, str(vol.attachment.status)))
            rows += [(i, "attached") for i in self.shadow.get(vid, [])]
            rows += [(i, "attached") for i, _ in self.multi.others(vid)]
            out[vid] = rows
        return out

    def multi_attach(self, volume_id: str) -> bool:
        """Whether the volume is io2 Multi-Attach: several holders are its purpose."""
        return MultiAttach.enabled(self.volume(volume_id))

    def set_hung(self, instance_id: str, hung: bool = True) -> None:
        """The guest hangs (or comes back): it answers nothing, and its status check fails
        ``status_check_delay`` seconds after the hang."""
        if hung and instance_id not in self.hung:
            self.status.hung_at[instance_id] = self.now()
        self.status.host_failed.discard(instance_id)
        (self.hung.add if hung else self.hung.discard)(instance_id)

    def set_host_failed(self, instance_id: str) -> None:
        """The physical host fails (power, network): the instance stays ``running``, its guest is
        unreachable (hung), and after ``status_check_delay`` both status checks fail."""
        self.set_hung(instance_id)
        self.status.host_failed.add(instance_id)

    def schedule_event(self, instance_id: str, code: str, *, in_seconds: float = 7 * 86400,
                       duration: float | None = None, description: str | None = None,
                       completed: bool = False) -> str:
        """Give an instance a scheduled event (DescribeInstanceStatus ``eventsSet``); its id."""
        assert self.instance(instance_id) is not None, instance_id
        return self.status.schedule(instance_id, code, in_seconds=in_seconds, duration=duration,
                                    description=description, completed=completed)

    def rebase(self, delta: timedelta) -> None:
        super().rebase(delta)
        self.status.rebase(delta)
        self.zone.rebase(delta)

    def tags(self, resource_id: str) -> dict[str, str]:
        return {t["key"]: t["value"] for t in self.backend.describe_tags(
            filters={"resource-id": [resource_id]})}

    def _stale_before(self, kind: str, ident: str) -> None:
        if not self.seeding:
            self.stale.before_change(kind, ident)

    def mark_stuck(self, volume_id: str, state: str = "busy") -> None:
        vol = self.volume(volume_id)
        assert vol is not None and vol.attachment is not None, f"{volume_id} is not attached"
        vol.attachment.status = state
        self.stuck[volume_id] = state

    # -- the intercepted actions ----------------------------------------------------------------

    def handle(self, params: dict[str, str], *, key: str = ADMIN_KEY) -> bytes | None:
        """A response body for actions answered here, or None to forward to moto.

        ``on_change`` runs after the lock is released, never under it: the sandbox's controllers
        react inside that callback, and their own EC2 calls cross this endpoint on other threads,
        which must be able to take the lock.
        """
        action = params.get("Action", "")
        try:
            with self._lock:
                self.requests += 1
                if self.throttle_rate and self._rng.random() < self.throttle_rate:
                    self.throttled += 1
                    raise Ec2Error("RequestLimitExceeded", "Request limit exceeded.", 503)
                if self.tick():
                    self.changed()
                if self.policy is not None and key != ADMIN_KEY:
                    self._authorize(action, params, key)
                if key != ADMIN_KEY:
                    self._note_fence(action, params)
                fn = getattr(self, f"_do_{action}", None)
                return fn(params) if fn else None
        finally:
            self.notify()

    def changed(self) -> None:
        """Note, under the lock, that state changed: ``notify`` tells the sandbox once it is free."""
        self._dirty = True

    def notify(self) -> None:
        """Run ``on_change`` if a change was noted; call it without holding the lock."""
        with self._lock:
            dirty, self._dirty = self._dirty, False
        if dirty:
            self.on_change()

    def _authorize(self, action: str, params: dict[str, str], key: str) -> None:
        assert self.policy is not None
        scoped = dict(params)
        vol = self.volume(params.get("VolumeId", "")) if action == "DetachVolume" else None
        if vol is not None and vol.attachment is not None and not params.get("InstanceId"):
            scoped["InstanceId"] = vol.attachment.instance.id  # EC2 authorizes the attached one
        resources = resources_of(action, scoped, region=self.region, tags=self.tags)
        principal = f"arn:aws:sts::123456789012:assumed-role/runbook-bot/{key}"
        denied = self.policy.evaluate(action, resources, principal=principal)
        for implied, more in implicit_checks(action, scoped, region=self.region):
            denied = denied or self.policy.evaluate(implied, more, principal=principal)
        if denied is not None:
            self.refused.append((key, action, denied.message))
            raise Ec2Error("UnauthorizedOperation", denied.message, 403)

    def authorize_sts(self, params: dict[str, str], key: str) -> str:
        """Why IAM refuses this STS request ("" when it does not): AssumeRole and its tags and
        SourceIdentity are held to the policy file, like the bot's EC2 calls, and to the role's
        trust policy (``trust``)."""
        if key == ADMIN_KEY or params.get("Action") != "AssumeRole":
            return ""
        principal = f"arn:aws:sts::123456789012:assumed-role/runbook-bot/{key}"
        role = params.get("RoleArn", "")
        context = trust_context(params)  # its SourceIdentity and session tags, as condition keys
        tags = {k: v for k, v in context.items() if isinstance(v, str) and k.startswith("aws:")}
        for action in assume_role_actions(params):
            denied = self.policy.evaluate(action, [(role, tags)], principal=principal) \
                if self.policy is not None else None
            why = denied.message if denied is not None else (
                self.trust.refuses(action, principal, role, context) if self.trust is not None
                else "")
            if why:
                self.refused.append((key, action, why))
                return why
        return ""

    def _note_fence(self, action: str, params: dict[str, str]) -> None:
        """A stop or terminate of a machine whose guest still runs (not hung, its host alive) is
        the harm a fence exists to avoid: recorded for the invariants (``live_fence``), whoever
        allowed it. A break-glass override of rule 8 explains it; nothing else does."""
        if action not in ("StopInstances", "TerminateInstances") or self._flag(params, "DryRun"):
            return
        for iid in self._ids(params, "InstanceId"):
            if self.instance_state(iid) == "running" and iid not in self.hung:
                self.live_fences.append((self.now(), f"{action} of {iid}, whose guest still runs"))

    def _flag(self, params: dict[str, str], name: str) -> bool:
        return params.get(name, "false").lower() == "true"

    def _ids(self, params: dict[str, str], prefix: str) -> list[str]:
        return [v for k, v in sorted(params.items()) if k.startswith(prefix + ".")]

    def _do_DetachVolume(self, params: dict[str, str]) -> bytes | None:
        vid = params.get("VolumeId", "")
        vol = self.volume(vid)
        if vol is None:
            raise Ec2Error("InvalidVolume.NotFound", f"The volume '{vid}' does not exist.")
        att = vol.attachment
        if att is None:
            raise Ec2Error("IncorrectState", f"Volume '{vid}' is in the 'available' state.")
        iid = params.get("InstanceId") or att.instance.id
        if self.multi.holds(vid, iid):  # another holder of a Multi-Attach volume: its own detach
            refuse_dry_run(params)
            device = dict(self.multi.others(vid))[iid]
            self.multi.drop(vid, iid)
            self._stale_before("volume", vid)
            self.changed()
            return self._attachment_xml("DetachVolumeResponse", vid, iid, device, "detaching")
        if iid != att.instance.id:
            raise Ec2Error("InvalidAttachment.NotFound",
                           f"The volume '{vid}' is not attached to instance '{iid}'.")
        params["InstanceId"] = iid
        force = self._flag(params, "Force")
        refuse_dry_run(params)
        if vid in self.hang_stuck and self.instance_state(iid) not in ("running", "stopping"):
            self.stuck.pop(vid, None)  # the instance stopped: the pending unplug completes
            self.hang_stuck.discard(vid)
        if not force:
            if vid in self.stuck:
                return self._attachment_xml("DetachVolumeResponse", vid, iid, att.device, "detaching")
            if iid in self.hung and self.instance_state(iid) in ("running", "stopping"):
                # The guest never acknowledges the unplug: EC2 waits for it indefinitely.
                self._stale_before("volume", vid)
                att.status = "detaching"
                self.stuck[vid] = "detaching"
                self.hang_stuck.add(vid)
                self.changed()
                return self._attachment_xml("DetachVolumeResponse", vid, iid, att.device, "detaching")
        self.stuck.pop(vid, None)
        self.hang_stuck.discard(vid)
        if self.shadow.get(vid):
            self.shadow[vid].pop()
        self._stale_before("volume", vid)
        if self.multi.others(vid):  # others hold it (Multi-Attach): it stays attached to them
            self.multi.hand_over(self.backend, vol)
            self.changed()
            return self._attachment_xml("DetachVolumeResponse", vid, iid, att.device, "detaching")
        return None  # moto detaches; on_change runs after the forward, before the reply

    def _do_AttachVolume(self, params: dict[str, str]) -> bytes | None:
        vid, iid = params.get("VolumeId", ""), params.get("InstanceId", "")
        vol = self.volume(vid)
        if vol is None:
            raise Ec2Error("InvalidVolume.NotFound", f"The volume '{vid}' does not exist.")
        inst = self.instance(iid)
        if inst is None:
            raise Ec2Error("InvalidInstanceID.NotFound", f"The instance ID '{iid}' does not exist")
        if inst._state.name in ("terminated", "shutting-down"):
            raise Ec2Error("IncorrectInstanceState",
                           f"The instance '{iid}' is not in a valid state for this operation.")
        if vol.zone.name != inst.availability_zone:
            raise Ec2Error("InvalidVolume.ZoneMismatch",
                           f"The volume '{vid}' is not in the same availability zone as instance "
                           f"'{iid}'")
        if vol.attachment is not None and self.multi.enabled(vol):
            if iid == vol.attachment.instance.id or self.multi.holds(vid, iid):
                raise Ec2Error("VolumeInUse", f"{vid} is already attached to {iid}")
            refuse_dry_run(params)
            self.multi.add(vid, iid, params.get("Device") or "/dev/xvdf")
            self._stale_before("volume", vid)
            self.changed()
            return self._attachment_xml("AttachVolumeResponse", vid, iid,
                                        params.get("Device") or "/dev/xvdf", "attaching")
        if vol.attachment is not None:
            if self.enforce_volume_in_use:
                raise Ec2Error("VolumeInUse", f"{vid} is already attached to an instance")
            self.shadow.setdefault(vid, []).append(vol.attachment.instance.id)
            # moto overwrites the attachment; remember the one it forgets (for the invariants).
        self._stale_before("volume", vid)
        return None

    def _attachment_xml(self, tag: str, vid: str, iid: str, device: str, state: str) -> bytes:
        return (f'<{tag} xmlns="{NS}"><requestId>{uuid.uuid4()}</requestId><volumeId>{vid}'
                f"</volumeId><instanceId>{iid}</instanceId><device>{device}</device>"
                f"<status>{state}</status><attachTime>2026-01-01T00:00:00.000Z</attachTime>"
                f"</{tag}>").encode()

    def rewrite(self, action: str, body: bytes) -> bytes:
        """Adjust moto's answer where its model is too simple (snapshots, instance status).

        A hung guest fails the *instance* reachability check, once the checks have caught it; the
        system check (AWS's side) stays ok, as on EC2 when a kernel panics, unless the host failed.
        """
        if action in ("CreateSnapshot", "DescribeSnapshots"):
            return self.snapshots.rewrite(action, body)
        if action == "DescribeInstances":  # a lagging view of a managed instance keeps its operator
            return self.managed.rewrite(self.stale.rewrite(action, body))
        if action == "DescribeVolumes":
            return self.multi.rewrite(self.stale.rewrite(action, body))
        if action != "DescribeInstanceStatus":
            return self.stale.rewrite(action, body)
        return self.status.rewrite(body, hung=set(self.hung), stopping=self._stopping())

    def _stopping(self) -> set[str]:
        return {i.id for r in self.backend.reservations.values() for i in r.instances
                if i._state.name == "stopping"}

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[
            int, dict[str, str], bytes]:
        headers = {**headers, "x-moto-account-id": self.account}  # moto's backends of this account
        if self.in_process:
            answer = wsgi(self._app, method, path, headers, body)
        else:
            conn = http.client.HTTPConnection(*self._moto_addr, timeout=30)
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                answer = resp.status, {k: v for k, v in resp.getheaders()}, resp.read()
            finally:
                conn.close()
        if b"Action=RunInstances" in body and answer[0] < 300:
            self._launched()
        return answer
