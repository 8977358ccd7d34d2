"""Rehearsals: run a shipped runbook against a sandbox scenario, end to end, on the sandbox clock.

This is what a game day, the rehearsal tests and ``runbook-bot demo`` share. The product is wired
exactly as in production (settings with a cluster whose kubeconfig points at the fake API server
with the bot's own ServiceAccount token, so RBAC from ``deploy/rbac.yaml`` applies; the real action
catalog, the runner, a state store); only time is simulated: when a run waits,
the rehearsal moves the sandbox clock to the run's next check and lets the controllers act, so a
six-minute detach wait takes milliseconds.

Rehearsals on the shipped actions share one cache of parsed runbooks (``shipped_parse_cache``):
a process that rehearses one scenario after another parses each runbook text once.

Approvals come from a script: by default a second identity approves each step (two for a
two-person step), and a test can pass ``decide`` to reject, break glass, or change the world
between approval and apply.
"""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.actions.builtin import builtin_actions
from bot.actions.catalog import ClusterClients, build_catalog
from bot.actions.registry import Registry
from bot.clients.ec2 import Ec2Client, bind_backoff, boto3_client
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig, PolicyConfig, Settings
from bot.engine.commands import Approve, Command, Confirm, Outcome, StartRun
from bot.engine.ports import ManualClock
from bot.engine.runstate import RunState, StepState
from bot.engine.state import RUN_TERMINAL
from bot.runbook.source import DirectorySource, ParseCache
from bot.runtime.runner import Runner
from bot.sim.iam import CREDENTIALS
from bot.sim.sandbox import BOT_CONTEXT, Sandbox
from bot.sim.verdict import Verdict, judge
from bot.store.db import Database
from bot.store.integrity import verify_run

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "sandbox"
REQUESTER = "alice"
APPROVERS = ("bob", "carol")
GROUP = "sre-oncall"
REHEARSAL_INFORMER_LAG = 0.2  # seconds

# (run state, the step waiting for people) -> a command to submit, or None to leave it waiting
Decide = Callable[[RunState, StepState], Command | None]


def default_settings(sb: Sandbox, *, database_url: str, audit_key: str | None,
                     runbooks_dir: str | None = None, role_arn: str | None = None) -> Settings:
    people = (REQUESTER, *APPROVERS)
    return Settings(
        database_url=database_url, audit_key=audit_key,
        runbooks_dir=(runbooks_dir or str(REPO / "runbooks"),),
        clusters={CLUSTER: ClusterConfig(name=CLUSTER, kubeconfig=str(sb.kubeconfig_path),
                                         context=BOT_CONTEXT, region=sb.region,
                                         role_arn=role_arn)},
        policy=PolicyConfig(groups={GROUP: people}, allow_impersonation=True))


@functools.cache
def shipped_parse_cache() -> ParseCache:
    """Parsed runbooks checked against the shipped actions, kept by file and text, for every
    rehearsal of this process that runs on those actions."""
    return ParseCache(builtin_actions())


@dataclass
class Rehearsal:
    """A sandbox plus a runner wired to it; ``run()`` plays a runbook to its end."""

    scenario: str = "node-dead"
    options: dict[str, Any] = field(default_factory=dict)
    workdir: Path | None = None
    database_url: str | None = None
    audit_key: str | None = "rehearsal"
    notifiers: Sequence[Any] = ()
    ec2_attempts: int = 8
    wall_clock: bool = False  # start the simulated clock at the real time (the demo's records)
    actions: Registry | None = None  # the shipped actions unless given (an action being added)
    runbooks_dir: str | None = None  # the shipped runbooks unless given
    policy: dict[str, Any] = field(default_factory=dict)  # policy keys to set, e.g. limits
    # reach the sandbox through these instead (a proxy that counts requests on the wire)
    kubeconfig: str | None = None
    ec2_endpoint: str | None = None
    role_arn: str | None = None  # the cluster's role_arn: EC2 through assumed-role sessions
    # "http": the product reaches the sandbox over sockets, as in production; "inprocess": its
    # clients run the sandbox's request handlers without a socket or thread (the explorer's forks)
    transport: str = "http"

    def __post_init__(self) -> None:
        if self.transport != "http" and (self.kubeconfig or self.ec2_endpoint or self.role_arn):
            raise ValueError("the in-process transport reaches the sandbox through its own "
                             "clients: no kubeconfig, ec2_endpoint or role_arn")
        self.workdir = Path(self.workdir or tempfile.mkdtemp(prefix="runbook-bot-rehearsal-"))
        self.clock = ManualClock()
        # controllers see a write 200 ms after it returned, as informers do, unless told otherwise
        self.sandbox = Sandbox(self.scenario, workdir=self.workdir / "sandbox", clock=self.clock,
                               options={"informer_lag": REHEARSAL_INFORMER_LAG, **self.options},
                               transport=self.transport)
        self.submitted: list[tuple[Command, Outcome]] = []

    def __enter__(self) -> Rehearsal:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        assert self.workdir is not None
        self.sandbox.start()
        if self.wall_clock:
            self.sandbox.rebase(datetime.now(UTC))
        url = self.database_url or f"sqlite:///{self.workdir / 'state.db'}"
        self.settings = default_settings(self.sandbox, database_url=url, audit_key=self.audit_key,
                                         runbooks_dir=self.runbooks_dir, role_arn=self.role_arn)
        if self.policy:
            self.settings = dataclasses.replace(
                self.settings, policy=dataclasses.replace(self.settings.policy, **self.policy))
        self._wire_runner(url)

    def _wire_runner(self, url: str, *, engine: Any = None) -> None:
        clients = self.clients()
        self.store = Database(url, audit_key=self.audit_key, engine=engine)
        catalog = build_catalog(self.settings, clients_factory=lambda _cfg: clients,
                                actions=self.actions)
        parsed = shipped_parse_cache() if self.actions is None else None
        # the catalog and the runbook source the runner is handed: a harness arms or reads them
        # here, never through the runner
        self.catalog = catalog
        self.runbooks = DirectorySource(self.settings.runbooks_dir, catalog=catalog.actions,
                                        parsed=parsed)
        self.runner = Runner(store=self.store, catalog=catalog, runbooks=self.runbooks,
                             policy=self.settings.policy, clock=self.clock,
                             notifiers=list(self.notifiers), lease_wait=0.0)

    def clients(self) -> ClusterClients:
        """The sandbox's own clients: its kubeconfig, and botocore pointed at its EC2 and STS
        endpoint with the product's retry mode (throttling is retried, as in production); with a
        ``role_arn``, the product's own client assuming the role from the bot's identity."""
        sb = self.sandbox
        endpoint = self.ec2_endpoint or sb.ec2.endpoint
        if self.role_arn:
            cfg = replace(self.settings.cluster(CLUSTER), max_attempts=self.ec2_attempts)
            ec2 = Ec2Client.from_cluster(cfg, endpoint_url=endpoint, sts_endpoint_url=endpoint,
                                         credentials=CREDENTIALS)
        elif self.ec2_endpoint is None:
            ec2_kw, sts_kw = self._bot_clients()
            ec2 = Ec2Client(client=sb.ec2_client(**ec2_kw), sts=sb.ec2_client(**sts_kw))
        else:
            ec2 = Ec2Client(client=boto3_client(region=sb.region, endpoint_url=endpoint,
                                                credentials=CREDENTIALS,
                                                max_attempts=self.ec2_attempts),
                            sts=boto3_client(region=sb.region, endpoint_url=endpoint,
                                             credentials=CREDENTIALS, service="sts"))
        # the clients' backoff between retries passes on the sandbox clock, as every other wait
        # of a rehearsal does
        bind_backoff(self.clock.advance)
        return ClusterClients.of(
            kube=KubeClient.from_config(kubeconfig=self.kubeconfig or str(sb.kubeconfig_path),
                                        context=BOT_CONTEXT, sleep=self.clock.advance,
                                        pool=sb.kube_transport()),
            ec2=ec2)

    def resume(self) -> None:
        """A new worker in place of one that died: fresh clients, database connection and runner
        over the same database; the dead worker's lease is left to expire. Its connections are
        closed; its engine's compiled statements serve the new worker (what a new process would
        compile again, to the same SQL)."""
        self.store.close()
        self._wire_runner(self.store.url, engine=self.store.engine)

    def ready_for_http(self) -> None:
        """Before forks of this in-process rehearsal serve it over HTTP: the EC2 clients the
        runner will reach it with are built now, once (``Sandbox.ready_for_http``)."""
        self.sandbox.ready_for_http(*self._bot_clients())

    def _bot_clients(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The arguments of the sandbox's EC2 and STS clients the bot reaches it with."""
        return {"as_bot": True, "max_attempts": self.ec2_attempts}, {"as_bot": True,
                                                                     "service": "sts"}

    def serve_over_http(self) -> None:
        """The sandbox served over sockets from now on (``Sandbox.serve_over_http``), and the
        runner wired again with clients that reach it so, over the same database (closed first).
        Before a run starts: what a rehearsal staged in-process is then played over HTTP."""
        self.sandbox.serve_over_http()
        self.transport = "http"
        self.store.close()
        self._wire_runner(self.store.url)

    def stop(self) -> None:
        bind_backoff(None)
        self.sandbox.stop()
        if hasattr(self, "store"):
            self.store.close()

    @property
    def facts(self) -> dict[str, Any]:
        return self.sandbox.facts

    def start_run(self, runbook: str, *, requester: str = REQUESTER, dry_run: bool = False,
                  **params: Any) -> str:
        params.setdefault("cluster", CLUSTER)
        state = self.runner.start(StartRun(runbook=runbook, params=params, requester=requester,
                                           dry_run=dry_run, origin={"frontend": "rehearsal"}))
        return state.run_id

    def submit(self, cmd: Command) -> Outcome:
        out = self.runner.submit(cmd)
        self.submitted.append((cmd, out))
        return out

    def approve_all(self, state: RunState, s: StepState) -> Command | None:
        """The default script: confirm manual steps, approve with the next eligible approver."""
        if s.blocked:
            return None
        if s.needs_confirmation and not s.needs_approval:
            return Confirm(run_id=state.run_id, actor=APPROVERS[0], step=s.key)
        given = {v.by for v in s.approvals() if v.plan_hash == s.plan_hash}
        for who in APPROVERS:
            if who not in given:
                return Approve(run_id=state.run_id, actor=who, step=s.key, plan_hash=s.plan_hash)
        return None

    def play(self, run_id: str, *, decide: Decide | None = None, max_rounds: int = 500,
             each_round: Callable[[RunState], None] | None = None) -> RunState:
        """Drive the run to its end (or until ``decide`` leaves it waiting for people);
        ``each_round(state)`` sees the run after each drive, its end included."""
        decide = decide or self.approve_all
        state = self.runner.drive(run_id)
        for _ in range(max_rounds):
            if each_round is not None:
                each_round(state)
            if state.status in RUN_TERMINAL:
                return state
            if state.status == "awaiting_approval":
                s = next((x for x in state.steps.values() if x.status == "awaiting_approval"), None)
                cmd = decide(state, s) if s is not None else None
                if cmd is None:
                    return state
                self.submit(cmd)
            elif state.next_check_at:
                due = datetime.fromisoformat(state.next_check_at)
                self.sandbox.advance(max(0.0, (due - self.clock.now()).total_seconds()))
            state = self.runner.drive(run_id)
        raise AssertionError(f"run {run_id} did not finish in {max_rounds} rounds ({state.status})")

    def run(self, runbook: str, *, decide: Decide | None = None, **params: Any) -> RunState:
        return self.play(self.start_run(runbook, **params), decide=decide)

    def events(self, run_id: str) -> list[Any]:
        return self.store.events(run_id)

    def judge(self, run_id: str) -> Verdict:
        """The sandbox's violations, as the run's recorded break-glass overrides explain them."""
        return judge(self.sandbox.violations, self.events(run_id))

    def verified(self, run_id: str) -> bool:
        return verify_run(self.store, run_id, key=self.store.key).ok
