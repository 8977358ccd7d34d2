"""The sandbox facade: one object that starts a simulated Kubernetes-on-AWS cluster and drives it.

``Sandbox`` owns the fake API server, EC2 (moto plus the behaviour proxy), the controllers, the
clock and the invariant log. Tests use ``advance()`` on a ManualClock for deterministic hours in
milliseconds; ``sim up`` uses ``start_background()`` to run on real time times a scale. The
product reaches it only through ``kubeconfig_path`` and ``env`` (``AWS_ENDPOINT_URL_EC2`` and
``AWS_ENDPOINT_URL_STS``, whose credentials are held to deploy/iam-policy.json).

``transport="inprocess"`` serves neither over a socket: the clients the sandbox builds
(``ec2_client``, ``kube_transport``) run the servers' request handlers in their own thread
(``bot.sim.inprocess``), and no thread is started. The explorer uses it; the default is HTTP.

moto keeps state in process-wide backends, keyed by account and region, so one Sandbox per
process runs at a time, unless another is given an ``account`` of its own: each then has its own
API server, EC2 and STS endpoint, and moto's backends of its account (two clusters from one bot).
``accept_eks_tokens`` makes the API server take EKS tokens, checked against this sandbox's STS.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.clients.ec2 import boto3_client
from bot.engine.ports import Clock, ManualClock
from bot.sim.apiserver import ApiServer
from bot.sim.authz import ADMIN_TOKEN, BOT_TOKEN, RBAC_FILE, Authorizer, load_grants
from bot.sim.controllers import Context, run_all
from bot.sim.controllers.cloud import schedule
from bot.sim.controllers.context import SimEvent, instance_id
from bot.sim.ec2 import Ec2Sim
from bot.sim.ec2_clients import ProxyClient, SeedClient
from bot.sim.ec2_instances import Timing
from bot.sim.ec2_moto import MotoQuery
from bot.sim.eks_auth import EksTokenReview
from bot.sim.iam import ACCOUNT, ADMIN_CREDENTIALS, CREDENTIALS, sandbox_policy
from bot.sim.inprocess import KubePool
from bot.sim.invariants import InvariantLog, Violation
from bot.sim.resources import BY_KIND, Resource
from bot.sim.scenarios import SCENARIOS
from bot.sim.staging import REGION
from bot.sim.store import Store, ts
from bot.sim.tls import client_context, make_certificates, server_context
from bot.sim.trust import sandbox_trust

BOT_CONTEXT = "runbook-bot"  # the kubeconfig context with the bot's ServiceAccount token
MAX_PASSES = 60
TRANSPORTS = ("http", "inprocess")
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")
# the namespaces every cluster has from the start; kube-node-lease holds the kubelets' Leases
SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")


# No botocore retries for the controllers: a retry would sleep inside a controller pass. A refused
# call is reported (attachError, an Event) and tried again after the attacher's back-off
# (controllers/attach_backoff.py), as the CSI sidecars do.
CONTROLLERS_EC2: dict[str, Any] = {"max_attempts": 0, "timeout": 10}


def _client_key(as_bot: bool, kw: dict[str, Any]) -> tuple[Any, ...]:
    """One botocore client per identity and arguments (``max_attempts`` 1 unless given);
    ``kw`` gets that default."""
    kw.setdefault("max_attempts", 1)
    return (as_bot, *sorted(kw.items()))


class _Lazy:
    """A client built on first use: a botocore client costs ~0.3 s, and many sandboxes never call."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._client: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._client is None:
            self._client = self._build()
        return getattr(self._client, name)


class Sandbox:
    # moto's backends are process-wide: one sandbox at a time per account (see the docstring)
    _running: dict[str, Sandbox] = {}  # noqa: RUF012  # shared by every sandbox of the process

    def __init__(self, scenario: str = "node-dead", *, seed: int | None = None,
                 workdir: Path | str | None = None, clock: Clock | None = None,
                 time_scale: float = 1.0, options: dict[str, Any] | None = None,
                 transport: str = "http", account: str = ACCOUNT) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; known: {', '.join(TRANSPORTS)}")
        self.transport = transport
        self.scenario = SCENARIOS[scenario]
        self.seed = self.scenario.seed if seed is None else seed
        self.options = {**self.scenario.defaults, **(options or {})}
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="runbook-bot-sim-"))
        self.clock: Clock = clock or ManualClock()
        self.time_scale = time_scale
        self.region, self.account = REGION, account
        self.facts: dict[str, Any] = {}
        self.store = Store(now=self.clock.now, seed=self.seed)
        self.ec2 = Ec2Sim(region=self.region, seed=self.seed,
                          throttle_rate=float(self.options.get("throttle_rate", 0.0)),
                          enforce_volume_in_use=not self.options.get("allow_multi_attach"),
                          on_change=self._on_ec2_change, now=self.clock.now,
                          timing=Timing.from_options(self.options),
                          policy=sandbox_policy(self.options, account=account),
                          trust=sandbox_trust(self.options),
                          in_process=transport == "inprocess", account=account)
        self.api = ApiServer(self.store, on_write=self._on_api_write, authorizer=Authorizer(
            load_grants(Path(self.options.get("rbac") or RBAC_FILE))),
            throttle_rate=float(self.options.get("api_throttle_rate", 0.0)), seed=self.seed)
        self.api.in_process = transport == "inprocess"
        # informer lag: controllers see an API write this many sandbox seconds after it returned
        self.informer_lag = float(self.options.get("informer_lag", 0.0))
        self._unreacted: list[tuple[datetime, str]] = []
        self.invariants = InvariantLog()
        self.api_writes: list[str] = []  # "METHOD path by user" of every API write, in order
        self.ctx: Context | None = None
        self._lock = threading.RLock()
        self._pending = False
        self._in_pass = False
        self._hosts: dict[int, int] = {}
        self._clients: dict[tuple[Any, ...], Any] = {}
        self._over_http: dict[tuple[Any, ...], Any] = {}  # clients built for serve_over_http
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.env_path = self.workdir / "sandbox.env"

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        other = Sandbox._running.get(self.account)
        if other is not None and other is not self:
            raise RuntimeError("another sandbox is running in this process (moto keeps EC2 state "
                               "process-wide): stop it first, or give this one another account")
        Sandbox._running[self.account] = self
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ec2.start()
        self.ca_path, cert, key = make_certificates(self.workdir / "pki")
        self.api.tls = server_context(cert, key)
        if not self.api.in_process:
            self.api.start()
        self.seed_ec2 = MotoQuery(self.ec2)  # arranging, straight to moto
        # without retries (CONTROLLERS_EC2); in-process, the same requests are written without
        # botocore (``ProxyClient``)
        client: Any = ProxyClient(self.ec2) if self.ec2.in_process else self._controllers_ec2()
        self.ctx = Context(store=self.store, ec2=self.ec2, ec2_client=SeedClient(self.ec2),
                           options=self.options)
        with self._lock:
            for ns in SYSTEM_NAMESPACES:
                self.create("Namespace", {"metadata": {"name": ns}, "status": {"phase": "Active"}})
            self.facts = self.scenario.build(self)
            self.ctx.ec2_client = client  # from here on the controllers' EC2 calls cross the endpoint
        self._write_files()

    def _controllers_ec2(self) -> Any:
        return _Lazy(lambda: self.ec2_client(**CONTROLLERS_EC2))

    def serve_over_http(self) -> None:
        """Serve this in-process sandbox over sockets from now on, as one started with
        ``transport="http"`` serves (the API server and the EC2 proxy on their ports, moto as
        shipped on its own server, the controllers' EC2 calls through botocore), the world as it
        is. For a fork of a staged world (the explorer's cross-check over HTTP): the process must
        have no request in flight. Clients made before (``ec2_client``, ``kube_transport``) keep
        the in-process way; make them again."""
        if self.transport == "http":
            return
        assert self.ctx is not None, "start() first"
        with self._lock:
            self.transport = "http"
            self.api.in_process = False
            self.api.start()
            self.ec2.serve_over_http()
            self._clients = dict(self._over_http)  # those ready_for_http built, if it was asked
            self.ctx.ec2_client = self._controllers_ec2()
            self._write_files()

    def rebase(self, now: datetime) -> None:
        """Shift every timestamp so the sandbox clock reads ``now``; ages and durations are kept.

        Building a scenario takes simulated minutes. ``sim up`` rebases onto the wall clock, so
        kubectl, which computes event ages on its own clock, sees the past, not the future.
        """
        if not isinstance(self.clock, ManualClock):
            raise TypeError("only a ManualClock can be rebased")
        assert self.ctx is not None, "start() first"
        delta = now - self.clock.now()

        def shift(value: Any) -> Any:
            if isinstance(value, datetime):
                return value + delta
            if isinstance(value, str) and len(value) in (20, 27) and STAMP.fullmatch(value):
                moved = ts(datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC) + delta)
                return moved if len(value) == 20 else moved[:-1] + value[19:]
            if isinstance(value, dict):
                return {k: shift(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(shift(v) for v in value)
            return value

        with self._lock, self.store.lock:
            self.store.rebase(shift)
            self.ctx.state = shift(self.ctx.state)
            self.ec2.rebase(delta)
            self.ctx.events[:] = [dataclasses.replace(e, time=shift(e.time)) for e in self.ctx.events]
            self.invariants.violations[:] = [dataclasses.replace(v, time=shift(v.time))
                                             for v in self.invariants.violations]
            self.clock.set(now)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.api.stop()
        self.ec2.stop()
        if Sandbox._running.get(self.account) is self:
            del Sandbox._running[self.account]

    def _write_files(self) -> None:
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config", "current-context": "sandbox",
            "clusters": [{"name": "sandbox", "cluster": {
                "server": self.k8s_url,
                "certificate-authority-data": base64.b64encode(self.ca_path.read_bytes()).decode()}}],
            "users": [{"name": "sandbox", "user": {"token": ADMIN_TOKEN}},
                      {"name": BOT_CONTEXT, "user": {"token": BOT_TOKEN}}],
            "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "sandbox"}},
                         {"name": BOT_CONTEXT, "context": {"cluster": "sandbox", "user": BOT_CONTEXT}}],
        }
        self.kubeconfig_path.write_text(json.dumps(kubeconfig, indent=2) + "\n")
        self.env_path.write_text("".join(f"{k}={v}\n" for k, v in self.env.items()))

    def accept_eks_tokens(self, cluster: str,
                          access: dict[str, tuple[str, tuple[str, ...]]]) -> EksTokenReview:
        """Let the API server take EKS tokens made for ``cluster`` (its EKS name), checked against
        this sandbox's STS; ``access``: IAM ARN -> (username, groups), the cluster's access entries.
        A token's age is on the machine's clock: botocore signs on it, whatever the sandbox's says."""
        review = EksTokenReview(cluster=cluster, sts_url=self.ec2.endpoint, send=self.ec2.send,
                                now=lambda: datetime.now(UTC), access=access)
        assert self.api.authorizer is not None
        self.api.authorizer.eks = review
        return review

    # -- what clients need --------------------------------------------------------------------

    @property
    def k8s_url(self) -> str:
        return self.api.url

    def tls_context(self) -> Any:
        """An ssl context that trusts the API server's certificate (for plain HTTPS clients)."""
        return client_context(self.ca_path)

    @property
    def ec2_endpoint(self) -> str:
        return self.ec2.endpoint

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_EC2": self.ec2.endpoint, "AWS_ENDPOINT_URL_STS": self.ec2.endpoint,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "KUBECONFIG": str(self.kubeconfig_path)}

    def ec2_client(self, *, as_bot: bool = False, **kw: Any) -> Any:
        """A botocore EC2 client to the sandbox endpoint (through the behaviour proxy).

        The sandbox's own identity, which IAM does not restrict, unless ``as_bot``: then the bot's
        credentials (those of ``env``), held to deploy/iam-policy.json as in production. One per
        set of arguments and sandbox: building one costs ~0.3 s, and clients are thread-safe.
        """
        key = _client_key(as_bot, kw)
        if key not in self._clients:
            self._clients[key] = self._client(
                as_bot, self.ec2.endpoint, self.ec2.send if self.ec2.in_process else None, kw)
        return self._clients[key]

    def _client(self, as_bot: bool, endpoint: str, send: Any, kw: dict[str, Any]) -> Any:
        return boto3_client(region=self.region, endpoint_url=endpoint,
                            credentials=CREDENTIALS if as_bot else ADMIN_CREDENTIALS, send=send, **kw)

    def ready_for_http(self, *clients: dict[str, Any]) -> None:
        """Before forks serve this in-process sandbox over HTTP (``serve_over_http``): the EC2
        proxy's socket bound, not served, and the botocore clients that will reach it built here,
        once, rather than in each fork (a tenth of a second each): the controllers', and those
        ``clients`` name (``ec2_client``'s arguments). Each fork that serves inherits them."""
        if self.transport == "http":
            return
        endpoint = self.ec2.bind()
        for wanted in (CONTROLLERS_EC2, *clients):
            kw = dict(wanted)
            as_bot = bool(kw.pop("as_bot", False))
            self._over_http[_client_key(as_bot, kw)] = self._client(as_bot, endpoint, None, kw)

    def kube_transport(self) -> Any:
        """What a kubernetes client's connection pool is replaced with to reach an in-process
        sandbox (``KubeClient.from_config(pool=...)``); None on the HTTP transport."""
        if not self.api.in_process:
            return None
        return KubePool(self.api.handler_class)

    @property
    def violations(self) -> list[Violation]:
        return list(self.invariants.violations)

    @property
    def events(self) -> list[SimEvent]:
        assert self.ctx is not None
        return list(self.ctx.events)

    # -- driving ------------------------------------------------------------------------------

    def reconcile(self, *, cause: tuple[str, str] | None = None) -> bool:
        """One pass of every controller at the current time; True if anything changed."""
        assert self.ctx is not None, "start() first"
        with self._lock:
            self._in_pass = True
            try:
                changed = run_all(self.ctx)
            finally:
                self._in_pass = False
            self.invariants.record(self.ctx, cause=cause)
            return changed

    def _lag_due(self) -> datetime | None:
        """When the controllers will have seen the oldest write they have not reacted to."""
        if not self._unreacted:
            return None
        return self._unreacted[0][0] + timedelta(seconds=self.informer_lag)

    def settle(self, *, cause: tuple[str, str] | None = None) -> None:
        """Controller passes until nothing changes (bounded); none while informers lag behind."""
        with self._lock:
            due = self._lag_due()
            if due is not None:
                if self.clock.now() < due:
                    return
                when, what = self._unreacted[-1]
                cause = (ts(when), what)
                self._unreacted.clear()
            for _ in range(MAX_PASSES):
                self._pending = False
                if not self.reconcile(cause=cause) and not self._pending:
                    return

    def advance(self, seconds: float, *, step: float = 5.0) -> None:
        """Move the sandbox clock in steps, settling the controllers after each one."""
        with self._lock:
            self.settle()
            left = float(seconds)
            while left > 0:
                dt = min(step, left)
                due = self._lag_due()
                if due is not None and due > self.clock.now():
                    dt = min(dt, (due - self.clock.now()).total_seconds())
                if isinstance(self.clock, ManualClock):
                    self.clock.advance(dt)
                left -= dt
                self.settle()

    def _on_api_write(self, what: str = "") -> None:
        self.api_writes.append(what)
        if self.informer_lag > 0:
            with self._lock:
                self._unreacted.append((self.clock.now(), what))
            return
        self.settle(cause=(ts(self.clock.now()), what))

    def _on_ec2_change(self) -> None:
        # Called from the EC2 proxy, possibly while a controller pass waits on that very
        # request: never block here, let the running pass loop once more instead.
        if not self._in_pass and self._lock.acquire(blocking=False):
            try:
                self.settle()
            finally:
                self._lock.release()
        else:
            self._pending = True

    def start_background(self, interval: float = 1.0) -> None:
        """Run the controllers on real time times ``time_scale`` in a daemon thread."""
        def loop() -> None:
            last = time.monotonic()
            while not self._stop.wait(interval):
                now = time.monotonic()
                self.advance((now - last) * self.time_scale)
                last = now
        self._thread = threading.Thread(target=loop, name="sim-controllers", daemon=True)
        self._thread.start()

    # -- scenario actions ---------------------------------------------------------------------

    def break_node(self, node: str | None = None, *, hung: bool = False) -> None:
        """Kill (stop) or hang the instance behind a node; the controllers react as time passes."""
        name = node or self.facts.get("node") or self.facts["dead_node"]
        iid = self._instance(name)
        if hung:
            self.ec2.set_hung(iid)
        else:
            self.ec2.set_state(iid, "stopped", reason_code="Server.InternalError",
                               reason_message="Server.InternalError: Internal error on the host")
        self.settle()

    def repair_node(self, node: str | None = None) -> None:
        """Bring the instance back to running and responsive (as a reboot or repair would)."""
        name = node or self.facts.get("dead_node") or self.facts["node"]
        self.ec2.repair(self._instance(name))
        self.settle()

    def recover_guest(self, node: str | None = None) -> None:
        """A hung guest comes back by itself (same boot): its kubelet reports Ready again."""
        self.ec2.set_hung(self._instance(node or self.facts["node"]), False)
        self.settle()

    def sicken_kubelet(self, node: str, cause: str | None) -> None:
        """Make a node's kubelet alive but sick of ``cause`` (``controllers/node_status.py``), or
        well again with None (a repair: it posts Ready=True)."""
        assert self.ctx is not None, "start() first"
        sick: dict[str, str] = self.ctx.state.setdefault("kubelet_sick", {})
        if cause is None:
            sick.pop(node, None)
        else:
            sick[node] = cause
        self.settle()

    def partition(self, node: str, cut: bool = True) -> None:
        """Cut (or restore) the network between a node's machine and the API server; the machine
        runs on and writes."""
        assert self.ctx is not None, "start() first"
        cuts: set[str] = self.ctx.state.setdefault("partitioned", set())
        (cuts.add if cut else cuts.discard)(self._instance(node))
        self.settle()

    def at(self, seconds: float, action: Callable[[], None]) -> None:
        """Run ``action`` when the sandbox clock has moved ``seconds`` on from now."""
        assert self.ctx is not None, "start() first"
        schedule(self.ctx, self.clock.now() + timedelta(seconds=seconds), action)

    def _instance(self, node: str) -> str:
        iid = instance_id(self.get("Node", None, node))
        assert iid, node
        return iid

    # -- store helpers for scenarios and tests ------------------------------------------------

    def res(self, kind: str) -> Resource:
        return BY_KIND[kind]

    def create(self, kind: str, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return self.store.create(BY_KIND[kind], obj, namespace)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self.store.get(BY_KIND[kind], namespace, name)

    def find(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.store.find(BY_KIND[kind], namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.store.list(BY_KIND[kind], namespace)

    def now_ts(self) -> str:
        return ts(self.clock.now())

    def next_host(self, octet: int) -> int:
        """Deterministic last octets for node names, spread like real VPC addresses."""
        n = self._hosts.get(octet, 0)
        self._hosts[octet] = n + 1
        return 23 + (n * 34) % 230
