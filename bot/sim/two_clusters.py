"""A rehearsal of one bot and two EKS clusters: two sandboxes in one process, one runner.

Teams run several clusters from one bot. Here each cluster is a sandbox of its own: its own fake
API server (its own CA and address), EC2 and STS endpoint, and its own AWS account, so moto's
backends (keyed by account and region) keep the two apart in one process (``Sandbox(account=)``).
The bot reaches each exactly as in production with ``auth: eks``: no kubeconfig, a bearer token
made from the cluster's ``role_arn`` session (``bot.clients.cluster``), which that cluster's API
server checks against its own STS and maps, as an EKS access entry does, to the user and group of
``deploy/second-cluster/access-entry.json``, whose grants are ``deploy/second-cluster/rbac.yaml``
(rendered by ``scripts/cluster_access.py``). One settings object, one catalog, one runner, one
state store and one clock serve both; nothing but the cluster's name tells a step where to act.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.actions.catalog import ClusterClients, build_catalog
from bot.clients.cluster import kube_client
from bot.clients.ec2 import Ec2Client, bind_backoff
from bot.config import ClusterConfig, PolicyConfig, Settings
from bot.engine.commands import Approve, Command, Confirm, StartRun
from bot.engine.ports import ManualClock
from bot.engine.runstate import RunState, StepState
from bot.engine.state import RUN_TERMINAL
from bot.runbook.source import DirectorySource
from bot.runtime.runner import Runner
from bot.sim.iam import CREDENTIALS
from bot.sim.rehearsal import APPROVERS, GROUP, REHEARSAL_INFORMER_LAG, REPO, REQUESTER, shipped_parse_cache
from bot.sim.sandbox import Sandbox
from bot.store.db import Database

# cluster -> the AWS account it lives in: neither the bot's own (``ACCOUNT``, where its base
# identity is, and where a one-cluster sandbox of the same process runs), as with a platform team
# whose clusters live in workload accounts
ACCOUNTS = {"east": "111122223333", "west": "444455556666"}
SEEDS = {"east": 101, "west": 202}
ACCESS = REPO / "deploy" / "second-cluster"  # the access entry and RBAC of a cluster reached so
USER = ("runbook-bot", ("runbook-bot",))  # what deploy/second-cluster/access-entry.json maps to
STEP = 5.0  # seconds of sandbox time between controller passes


def role_arn(account: str) -> str:
    return f"arn:aws:iam::{account}:role/runbook-bot"


@dataclass
class TwoClusters:
    """Two sandboxes (``east``, ``west``) and a runner wired to both; ``play`` drives runs."""

    scenario: str = "node-dead"
    workdir: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)  # PolicyConfig keys to set

    def start(self) -> TwoClusters:
        self.workdir = Path(self.workdir or tempfile.mkdtemp(prefix="runbook-bot-two-clusters-"))
        self.clock = ManualClock()
        self.sandboxes: dict[str, Sandbox] = {}
        for name, account in ACCOUNTS.items():
            # seeds of their own: moto draws other instance and volume ids in each cluster
            sb = Sandbox(self.scenario, workdir=self.workdir / name, clock=self.clock, account=account,
                         seed=SEEDS[name],
                         options={"informer_lag": REHEARSAL_INFORMER_LAG, "cluster_name": name,
                                  "rbac": str(ACCESS / "rbac.yaml"), **self.options})
            self.sandboxes[name] = sb
            sb.start()
            sb.accept_eks_tokens(name, {role_arn(account): USER})
        people = (REQUESTER, *APPROVERS)
        self.settings = Settings(
            database_url=f"sqlite:///{self.workdir / 'state.db'}", audit_key="rehearsal",
            runbooks_dir=(str(REPO / "runbooks"),),
            clusters={name: ClusterConfig(
                name=name, auth="eks", server=sb.k8s_url, certificate_authority=str(sb.ca_path),
                region=sb.region, role_arn=role_arn(ACCOUNTS[name]), eks_cluster=name, max_attempts=8)
                for name, sb in self.sandboxes.items()},
            policy=PolicyConfig(groups={GROUP: people}, allow_impersonation=True, **self.policy))
        self.clients = {name: self._clients(self.settings.clusters[name], sb)
                        for name, sb in self.sandboxes.items()}
        bind_backoff(self.clock.advance)
        self.store = Database(self.settings.database_url, audit_key="rehearsal")
        catalog = build_catalog(self.settings, clients_factory=lambda cfg: self.clients[cfg.name])
        self.runner = Runner(store=self.store, catalog=catalog, policy=self.settings.policy,
                             runbooks=DirectorySource(self.settings.runbooks_dir, catalog=catalog.actions,
                                                      parsed=shipped_parse_cache()),
                             clock=self.clock, notifiers=[], lease_wait=0.0)
        return self

    def _clients(self, cfg: ClusterConfig, sb: Sandbox) -> ClusterClients:
        """The product's own clients of one cluster: EKS tokens and EC2 from its role session."""
        endpoint = sb.ec2.endpoint
        return ClusterClients.of(
            kube=kube_client(cfg, sts_endpoint_url=endpoint, credentials=CREDENTIALS,
                             now=lambda: self.clock.now().timestamp(), sleep=self.clock.advance),
            ec2=Ec2Client.from_cluster(cfg, endpoint_url=endpoint, sts_endpoint_url=endpoint,
                                       credentials=CREDENTIALS))

    def stop(self) -> None:
        bind_backoff(None)
        for sb in self.sandboxes.values():
            sb.stop()
        self.store.close()

    def __enter__(self) -> TwoClusters:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def advance(self, seconds: float) -> None:
        """Move the one clock, letting every cluster's controllers act after each step."""
        left = seconds
        for sb in self.sandboxes.values():
            sb.settle()
        while left > 0:
            dt = min(STEP, left)
            self.clock.advance(dt)
            left -= dt
            for sb in self.sandboxes.values():
                sb.settle()

    def start_run(self, runbook: str, *, cluster: str, **params: Any) -> str:
        return self.runner.start(StartRun(runbook=runbook, params={"cluster": cluster, **params},
                                          requester=REQUESTER,
                                          origin={"frontend": "rehearsal"})).run_id

    def play(self, run_ids: list[str], *, decide: Callable[[RunState, StepState], Command | None]
             | None = None, max_rounds: int = 500) -> dict[str, RunState]:
        """Drive several runs together to their ends, approving as the rehearsals do."""
        decide = decide or approve_all
        states = {rid: self.runner.drive(rid) for rid in run_ids}
        for _ in range(max_rounds):
            open_ = [s for s in states.values() if s.status not in RUN_TERMINAL]
            if not open_:
                return states
            dues = []
            for st in open_:
                if st.status == "awaiting_approval":
                    step = next(x for x in st.steps.values() if x.status == "awaiting_approval")
                    cmd = decide(st, step)
                    if cmd is None:
                        return states
                    self.runner.submit(cmd)
                elif st.next_check_at:
                    dues.append(datetime.fromisoformat(st.next_check_at))
            if dues and len(dues) == len(open_):
                self.advance(max(0.0, (min(dues) - self.clock.now()).total_seconds()))
            states = {rid: self.runner.drive(rid) for rid in run_ids}
        raise AssertionError(f"runs did not finish in {max_rounds} rounds")


def approve_all(state: RunState, s: StepState) -> Command | None:
    """Confirm manual steps, approve with the next eligible approver (as ``Rehearsal`` does)."""
    if s.blocked:
        return None
    if s.needs_confirmation and not s.needs_approval:
        return Confirm(run_id=state.run_id, actor=APPROVERS[0], step=s.key)
    given = {v.by for v in s.approvals() if v.plan_hash == s.plan_hash}
    for who in APPROVERS:
        if who not in given:
            return Approve(run_id=state.run_id, actor=who, step=s.key, plan_hash=s.plan_hash)
    return None
