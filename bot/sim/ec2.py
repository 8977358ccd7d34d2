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
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.moto_api._internal import mock_random
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from bot.sim.consistency import StaleReads
from bot.sim.ec2_instances import Ec2Refusal, InstanceLifecycle, Timing, refuse_dry_run
from bot.sim.ec2_managed import ManagedInstances
from bot.sim.ec2_multiattach import MultiAttach
from bot.sim.ec2_snapshots import PendingSnapshots
from bot.sim.ec2_status import StatusChecks
from bot.sim.ec2_zone import ZoneFailure, ZoneFailures
from bot.sim.iam import ADMIN_KEY, Policy, access_key, implicit_checks, resources_of
from bot.sim.net import POLL, Server, no_delay
from bot.sim.sts import StsLog, assume_role_actions, is_sts, trust_context
from bot.sim.sts import error_xml as sts_error_xml
from bot.sim.trust import TrustPolicy

log = logging.getLogger(__name__)
NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
IN_PROCESS_ENDPOINT = "http://ec2.sandbox.invalid"  # what an in-process proxy is called
AMI = "ami-12c6146b"


def error_xml(code: str, message: str) -> bytes:
    rid = str(uuid.uuid4())
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}'
            f"</Code><Message>{escape(message)}</Message></Error></Errors>"
            f"<RequestID>{rid}</RequestID></Response>").encode()


class _MotoHandler(MotoRequestHandler):
    def setup(self) -> None:
        super().setup()
        no_delay(self.connection)


class MotoServer:
    """moto's WSGI application on a werkzeug server in a thread (ThreadedMotoServer, minus Nagle)."""

    def __init__(self) -> None:
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> tuple[str, int]:
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_MotoHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(POLL,), name="sim-moto",
                                        daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class _MotoApp:
    """moto's server application, called in-process (``inprocess.wsgi``).

    moto's dispatcher finds a request's service anew on every request, listing and stat-ing the
    ~180 directories of its package; here the application it picks is kept per signing service
    (every request the sandbox forwards is signed). What else moto recomputes per request although
    no request changes it is memoised (``moto_speed``).
    """

    def __init__(self) -> None:
        from bot.sim import moto_speed

        moto_speed.install()  # until a sandbox starts over HTTP in this process
        self._dispatcher = DomainDispatcherApplication(create_backend_app)
        self._apps: dict[str, Any] = {}

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        auth = str(environ.get("HTTP_AUTHORIZATION") or "")
        scope = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
        service = scope[3] if "Credential=" in auth and len(scope) == 5 else ""
        app = self._apps.get(service) if service else None
        if app is None:
            app = self._dispatcher.get_application(environ)
            if service:
                self._apps[service] = app
        return app(environ, start_response)


Ec2Error = Ec2Refusal


@dataclass(frozen=True)
class WireCall:
    """One EC2 request as it crossed the endpoint: the action and the access key that signed it."""

    action: str
    access_key: str
    dry_run: bool = False


class Ec2Sim(InstanceLifecycle, ZoneFailures):
    """moto + the behaviour proxy. ``endpoint`` is what AWS_ENDPOINT_URL_EC2 (and _STS) point at."""

    def __init__(self, *, region: str, seed: int = 0, throttle_rate: float = 0.0,
                 enforce_volume_in_use: bool = True,
                 on_change: Callable[[], None] | None = None,
                 now: Callable[[], datetime] | None = None, timing: Timing | None = None,
                 policy: Policy | None = None, trust: TrustPolicy | None = None,
                 in_process: bool = False) -> None:
        self.region = region
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
        self._handler: type[_ProxyHandler] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def backend(self) -> Any:
        return ec2_backends[DEFAULT_ACCOUNT_ID][self.region]

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
        from bot.sim import moto_speed

        if self.in_process:
            self._app = _MotoApp()
        else:
            moto_speed.uninstall()  # over HTTP, moto as shipped: the explorer's reference
            self._moto = MotoServer()
            self._moto_addr = self._moto.start()
        # One request first, so whatever moto builds lazily (the region's default VPC, the app for
        # the service) exists before seeding: then the ids it draws for the scenario's objects
        # depend on the seed alone, not on what this process did before.
        MotoQuery(self).call("DescribeVpcs", {})
        mock_random.seed(f"ec2-{self.seed}")  # moto draws ids from this: same seed, same ids
        if self.in_process:
            return
        self._httpd = Server(("127.0.0.1", 0), self.handler_class())
        self._serving = threading.Thread(target=self._httpd.serve_forever, args=(POLL,), name="sim-ec2",
                                         daemon=True)
        self._serving.start()

    def handler_class(self) -> type[_ProxyHandler]:
        """The proxy's request handler, for its socket server or the in-process transport."""
        if self._handler is None:
            sim = self

            class Handler(_ProxyHandler):
                ec2 = sim

            self._handler = Handler
        return self._handler

    def send(self, method: str, url: str, headers: Any, body: bytes) -> tuple[
            int, list[tuple[str, str]], bytes]:
        """One request to the proxy without a socket (the in-process transport's EC2 and STS)."""
        from bot.sim.inprocess import send
        return send(self.handler_class(), method, url, headers, body)

    def stop(self) -> None:
        if self._httpd is not None:
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
        if self.in_process:
            from bot.sim.inprocess import wsgi
            return wsgi(self._app, method, path, headers, body)
        conn = http.client.HTTPConnection(*self._moto_addr, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k: v for k, v in resp.getheaders()}, data
        finally:
            conn.close()


class MotoQuery:
    """Arranging calls straight to moto in the EC2 Query API, without botocore.

    A scenario arranges its instances and spare volumes before anyone connects; building a botocore
    client for that costs a third of a second per sandbox. moto reads the region and service from
    the credential scope of the Authorization header and does not check the signature.
    """

    def __init__(self, sim: Ec2Sim) -> None:
        self.sim = sim

    def raw(self, action: str, params: dict[str, Any]) -> bytes:
        """moto's answer as it would reach a client (the status is the caller's to check)."""
        return self._send(action, params)[1]

    def _send(self, action: str, params: dict[str, Any]) -> tuple[int, bytes]:
        from urllib.parse import urlencode

        body = urlencode({"Action": action, "Version": "2016-11-15", **params}).encode()
        auth = (f"AWS4-HMAC-SHA256 Credential={ADMIN_KEY}/20260101/{self.sim.region}/ec2/"
                "aws4_request, SignedHeaders=host, Signature=0")
        status, _, data = self.sim.forward("POST", "/", {
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
            "Authorization": auth, "Host": f"ec2.{self.sim.region}.amazonaws.com"}, body)
        return status, data

    def call(self, action: str, params: dict[str, Any]) -> Any:
        from xml.etree import ElementTree

        status, data = self._send(action, params)
        root = ElementTree.fromstring(data)
        for el in root.iter():
            el.tag = el.tag.rsplit("}", 1)[-1]
        if status >= 300:
            code = root.findtext(".//Code") or "InternalError"
            raise SeedError(code, root.findtext(".//Message") or "")
        return root

    def run_instances(self, *, ImageId: str, MinCount: int, MaxCount: int, InstanceType: str,
                      Placement: dict[str, str], Tags: dict[str, str] | None = None,
                      Spot: bool = False) -> dict[str, Any]:
        params: dict[str, Any] = {"ImageId": ImageId, "MinCount": MinCount, "MaxCount": MaxCount,
                                  "InstanceType": InstanceType,
                                  "Placement.AvailabilityZone": Placement["AvailabilityZone"]}
        for n, (k, v) in enumerate(sorted((Tags or {}).items()), 1):
            params |= {"TagSpecification.1.ResourceType": "instance",
                       f"TagSpecification.1.Tag.{n}.Key": k, f"TagSpecification.1.Tag.{n}.Value": v}
        if Spot:
            params["InstanceMarketOptions.MarketType"] = "spot"
        root = self.call("RunInstances", params)
        items = root.find("instancesSet")
        assert items is not None
        return {"Instances": [{"InstanceId": i.findtext("instanceId"),
                               "AmiLaunchIndex": int(i.findtext("amiLaunchIndex") or 0)}
                              for i in items.findall("item")]}

    def create_volume(self, *, AvailabilityZone: str, Size: int) -> dict[str, Any]:
        root = self.call("CreateVolume", {"AvailabilityZone": AvailabilityZone, "Size": Size})
        return {"VolumeId": root.findtext("volumeId")}

    def attach_volume(self, *, VolumeId: str, InstanceId: str, Device: str) -> dict[str, Any]:
        self.call("AttachVolume", {"VolumeId": VolumeId, "InstanceId": InstanceId, "Device": Device})
        return {"VolumeId": VolumeId, "InstanceId": InstanceId, "State": "attached"}

    def delete_volume(self, *, VolumeId: str) -> dict[str, Any]:
        self.call("DeleteVolume", {"VolumeId": VolumeId})
        return {}


class SeedError(Exception):
    """An EC2 refusal in the shape botocore's ClientError has (``response["Error"]``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"An error occurred ({code}): {message}")
        self.response = {"Error": {"Code": code, "Message": message}}


class SeedClient:
    """The three calls the provisioner and attacher make, answered in-process by the same rules.

    A scenario builds its healthy cluster before anyone connects: hundreds of CreateVolume and
    AttachVolume calls over HTTP would take seconds each hundred, so the build talks to moto's
    backend directly, through the proxy's behaviour checks. ``Sandbox.start`` swaps in the boto3
    client once the scenario is built; from then on every EC2 call crosses the endpoint.
    """

    def __init__(self, sim: Ec2Sim) -> None:
        self.sim = sim

    def _check(self, params: dict[str, str]) -> bytes | None:
        fn = getattr(self.sim, f"_do_{params['Action']}")
        try:
            with self.sim._lock:
                self.sim.seeding = True
                try:
                    return fn(params)
                finally:
                    self.sim.seeding = False
        except Ec2Error as e:
            raise SeedError(e.code, e.message) from e
        finally:
            self.sim.notify()

    def create_volume(self, *, AvailabilityZone: str, Size: int, VolumeType: str = "gp3",
                      TagSpecifications: list[dict[str, Any]] | None = None,
                      **_: Any) -> dict[str, Any]:
        vol = self.sim.backend.create_volume(size=Size, zone_name=AvailabilityZone,
                                             volume_type=VolumeType)
        tags = {t["Key"]: t["Value"] for spec in TagSpecifications or ()
                for t in spec.get("Tags") or ()}
        if tags:
            self.sim.backend.create_tags([vol.id], tags)
        return {"VolumeId": vol.id, "AvailabilityZone": AvailabilityZone, "Size": Size,
                "State": "available"}

    def attach_volume(self, *, VolumeId: str, InstanceId: str, Device: str) -> dict[str, Any]:
        if self._check({"Action": "AttachVolume", "VolumeId": VolumeId, "InstanceId": InstanceId,
                        "Device": Device}) is None:  # None: not a Multi-Attach holder kept aside
            self.sim.backend.attach_volume(VolumeId, InstanceId, Device)
        return {"VolumeId": VolumeId, "InstanceId": InstanceId, "Device": Device, "State": "attached"}

    def detach_volume(self, *, VolumeId: str, InstanceId: str = "", Force: bool = False) -> dict[str, Any]:
        params = {"Action": "DetachVolume", "VolumeId": VolumeId, "InstanceId": InstanceId,
                  "Force": "true" if Force else "false"}
        if self._check(params) is not None:
            return {"VolumeId": VolumeId, "InstanceId": params["InstanceId"], "State": "detaching"}
        self.sim.backend.detach_volume(VolumeId, params["InstanceId"], "")
        return {"VolumeId": VolumeId, "InstanceId": params["InstanceId"], "State": "detached"}

    def delete_volume(self, *, VolumeId: str) -> dict[str, Any]:
        """The EBS CSI controller's delete of a released volume: EC2 refuses an attached one."""
        vol = self.sim.volume(VolumeId)
        if vol is None:
            raise SeedError("InvalidVolume.NotFound", f"The volume '{VolumeId}' does not exist.")
        if vol.attachment is not None:
            raise SeedError("VolumeInUse", f"Volume {VolumeId} is currently attached to "
                                           f"{vol.attachment.instance.id}")
        self.sim.backend.delete_volume(VolumeId)
        return {}


class ProxyClient:
    """The controllers' EC2 calls over the in-process transport, as botocore would send them.

    The four calls the EBS CSI driver's controller makes (create, attach, detach, delete) are
    written in the Query API as botocore writes them (the same parameters, an idempotency token
    on CreateVolume, the sandbox's own access key in the credential scope) and cross the proxy's
    request handler like any request: recorded on the wire, throttled, answered by the proxy's
    rules or by moto. A refusal raises with botocore's ``response["Error"]``; nothing is retried
    (the controllers' botocore client makes a single attempt). botocore's client side costs about
    a millisecond a call, and the attacher retries a stuck detach on every controller pass.
    """

    def __init__(self, sim: Ec2Sim, *, key: str = ADMIN_KEY) -> None:
        self.sim, self.key = sim, key

    def _call(self, action: str, params: list[tuple[str, str]]) -> Any:
        from urllib.parse import quote, urlencode
        from xml.etree import ElementTree

        body = urlencode([("Action", action), ("Version", "2016-11-15"), *params],
                         quote_via=quote, safe="-_.~").encode()
        now = datetime.now(UTC)
        headers = [("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"),
                   ("X-Amz-Date", now.strftime("%Y%m%dT%H%M%SZ")),
                   ("Authorization", f"AWS4-HMAC-SHA256 Credential={self.key}/{now:%Y%m%d}/"
                                     f"{self.sim.region}/ec2/aws4_request, "
                                     "SignedHeaders=content-type;host;x-amz-date, Signature=0")]
        status, _headers, data = self.sim.send("POST", f"{self.sim.endpoint}/", headers, body)
        try:
            root = ElementTree.fromstring(data)
        except ElementTree.ParseError:
            root = None
        if root is not None:
            for el in root.iter():
                el.tag = el.tag.rsplit("}", 1)[-1]
        if status >= 300:
            code = (root.findtext(".//Code") if root is not None else None) or str(status)
            raise SeedError(code, (root.findtext(".//Message") if root is not None else "") or "")
        return root

    def create_volume(self, *, AvailabilityZone: str, Size: int, VolumeType: str = "gp3",
                      TagSpecifications: list[dict[str, Any]] | None = None,
                      **_: Any) -> dict[str, Any]:
        params = [("AvailabilityZone", AvailabilityZone), ("Size", str(Size)),
                  ("VolumeType", VolumeType)]
        for i, spec in enumerate(TagSpecifications or (), 1):
            params.append((f"TagSpecification.{i}.ResourceType", str(spec["ResourceType"])))
            for j, tag in enumerate(spec.get("Tags") or (), 1):
                params += [(f"TagSpecification.{i}.Tag.{j}.Key", str(tag["Key"])),
                           (f"TagSpecification.{i}.Tag.{j}.Value", str(tag["Value"]))]
        params.append(("ClientToken", str(uuid.uuid4())))
        root = self._call("CreateVolume", params)
        return {"VolumeId": root.findtext("volumeId"), "AvailabilityZone": AvailabilityZone,
                "Size": Size, "State": root.findtext("status")}

    def attach_volume(self, *, VolumeId: str, InstanceId: str, Device: str) -> dict[str, Any]:
        root = self._call("AttachVolume", [("VolumeId", VolumeId), ("InstanceId", InstanceId),
                                           ("Device", Device)])
        return {"VolumeId": VolumeId, "InstanceId": InstanceId, "Device": Device,
                "State": root.findtext("status")}

    def detach_volume(self, *, VolumeId: str, InstanceId: str | None = None,
                      Force: bool | None = None) -> dict[str, Any]:
        params = [("VolumeId", VolumeId)]
        if InstanceId is not None:
            params.append(("InstanceId", InstanceId))
        if Force is not None:
            params.append(("Force", "true" if Force else "false"))
        root = self._call("DetachVolume", params)
        return {"VolumeId": root.findtext("volumeId"), "InstanceId": root.findtext("instanceId"),
                "Device": root.findtext("device"), "State": root.findtext("status")}

    def delete_volume(self, *, VolumeId: str) -> dict[str, Any]:
        self._call("DeleteVolume", [("VolumeId", VolumeId)])
        return {}


WRITES = {"DetachVolume", "AttachVolume", "StartInstances", "StopInstances", "TerminateInstances",
          "RebootInstances", "DeleteVolume", "CreateVolume"}


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ec2: Ec2Sim

    def setup(self) -> None:
        super().setup()
        no_delay(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("ec2: " + format, *args)

    def _reply(self, status: int, body: bytes, ctype: str = "text/xml") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        query = self.path.split("?", 1)[1] if "?" in self.path else ""
        params = {k: v[-1] for k, v in parse_qs(raw.decode() or query).items()}
        action = params.get("Action", "")
        auth = self.headers.get("Authorization") or ""
        key = access_key(auth)
        scope = auth.split("Credential=", 1)[-1].split(",", 1)[0].split("/")
        if is_sts(params, scope[3] if len(scope) > 3 else ""):
            denied = self.ec2.authorize_sts(params, key)
            if denied:
                self.ec2.sts.record(params, access_key=key)
                self._reply(403, sts_error_xml("AccessDenied", denied))
                return
            self._forward(method, raw, action, before_reply=lambda data: self.ec2.sts.record(
                params, access_key=key, answer=data))
            return
        call = WireCall(action=action, access_key=key,
                        dry_run=params.get("DryRun", "").lower() == "true")
        self.ec2.wire.append(call)
        try:
            answer = self.ec2.handle(params, key=key)
        except Ec2Error as e:
            self.ec2.answered_error.append(call)
            self._reply(e.status, error_xml(e.code, e.message))
            return
        if answer is not None:
            self._reply(200, answer)
            return
        if params.get("Action") == "DetachVolume" and "InstanceId=" not in raw.decode():
            raw = (raw.decode() + "&InstanceId=" + params["InstanceId"]).encode()
        self._forward(method, raw, action)

    def _forward(self, method: str, raw: bytes, action: str,
                 before_reply: Callable[[bytes], object] | None = None) -> bytes:
        """Moto's answer, rewritten; ``before_reply`` sees it before the caller does, so what it
        records is there once the caller has its answer."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "host")}
        headers["Host"] = f"{self.ec2._moto_addr[0]}:{self.ec2._moto_addr[1]}"
        status, resp_headers, data = self.ec2.forward(method, self.path, headers, raw)
        data = self.ec2.rewrite(action, data)
        # the controllers react before the caller hears back, as with the fake API server: once a
        # write returns, the cluster has followed and any invariant it broke is on record
        if action in WRITES and status < 300:
            self.ec2.on_change()
        if before_reply is not None:
            before_reply(data)
        self._reply(status, data, resp_headers.get("Content-Type", "text/xml"))
        return data

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")
