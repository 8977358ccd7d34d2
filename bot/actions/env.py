"""What an action's ``plan`` and ``apply`` work with: the step, the policy, the cluster's clients.

``Env`` is built by the catalog for every plan and apply: the step's context (clock, dry run,
interlock refusals, the list every API call is recorded in, the reads shared in the run's pass),
the settings (policy limits), the
cluster the step targets, and that cluster's clients bound to the step. A dry run gets clients that
refuse every write before it is sent.

``ClusterClients`` holds one cluster's clients, built on first use and reused across steps. The
client modules (and with them the Kubernetes and AWS SDKs) are imported only when a cluster's
clients are first built, so defining, listing and validating actions never loads an SDK.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.clients.attribution import Attribution
from bot.config import ClusterConfig, Settings
from bot.engine.plan import Fact
from bot.engine.ports import StepContext

if TYPE_CHECKING:
    from bot.clients.ec2 import Ec2Client
    from bot.clients.kube import KubeClient


@dataclass
class ClusterClients:
    """One cluster's clients, built on first use (a kube-only action never builds an EC2 client)."""

    make_kube: Callable[[], KubeClient]
    make_ec2: Callable[[], Ec2Client]
    _kube: KubeClient | None = field(default=None, repr=False)
    _ec2: Ec2Client | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def of(cls, *, kube: KubeClient, ec2: Ec2Client) -> ClusterClients:
        return cls(make_kube=lambda: kube, make_ec2=lambda: ec2)

    @classmethod
    def from_config(cls, cfg: ClusterConfig) -> ClusterClients:
        def kube() -> KubeClient:
            from bot.clients.cluster import kube_client  # a kubeconfig, or EKS tokens

            return kube_client(cfg)

        def ec2() -> Ec2Client:
            from bot.clients.ec2 import Ec2Client

            return Ec2Client.from_cluster(cfg)

        return cls(make_kube=kube, make_ec2=ec2)

    @property
    def kube(self) -> KubeClient:
        with self._lock:
            if self._kube is None:
                self._kube = self.make_kube()
            return self._kube

    @property
    def ec2(self) -> Ec2Client:
        with self._lock:
            if self._ec2 is None:
                self._ec2 = self.make_ec2()
            return self._ec2


ClientsFactory = Callable[[ClusterConfig], ClusterClients]


def acting_for(ctx: StepContext) -> Attribution:
    """Who a step's AWS writes are made for: its run, requester and approvers (CloudTrail)."""
    return Attribution.of(run_id=ctx.run_id, requester=ctx.requester, approvers=ctx.approvers)


@dataclass
class Env:
    """What an action implementation works with: the step, the policy, and recording clients."""

    ctx: StepContext
    settings: Settings
    cluster: ClusterConfig
    clients: ClusterClients

    @property
    def kube(self) -> KubeClient:
        return self.clients.kube.bound(self.ctx.calls, read_only=self.ctx.dry_run,
                                       reads=self.ctx.reads)

    @property
    def ec2(self) -> Ec2Client:
        """EC2 bound to the step; a real write is made for the run and the step's approvers."""
        return self.clients.ec2.bound(self.ctx.calls, read_only=self.ctx.dry_run,
                                      acting_for=acting_for(self.ctx), reads=self.ctx.reads)

    def now_iso(self) -> str:
        return self.ctx.clock.now().isoformat()

    def fact(self, subject: str, name: str, value: Any) -> Fact:
        return Fact(subject=subject, name=name, value=value, read_at=self.now_iso())
