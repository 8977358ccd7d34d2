"""API calls and wall time per action on the ``az-outage`` sandbox (100 nodes, 500 volumes).

Prints one line per action: the Kubernetes and EC2 requests its plan and apply made, and the time
they took. The figures to watch: listing one node's VolumeAttachments is one paginated list however
many volumes the cluster has, and the EC2 state of every node is one DescribeInstances call.

    .venv/bin/python bench/actions.py
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bot.actions.catalog import ClusterClients, build_catalog
from bot.clients.ec2 import Ec2Client
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig, Settings
from bot.engine.ports import ManualClock, StepContext


def _first(facts: Any, *names: str) -> Any:
    for name in names:
        value = facts.get(name) if hasattr(facts, "get") else getattr(facts, name, None)
        if isinstance(value, list | tuple):
            value = value[0] if value else None
        if value:
            return value
    raise KeyError(f"the az-outage facts have none of {names}")


def main() -> None:
    from bot.sim.sandbox import Sandbox  # the sandbox pulls in moto: only when benchmarking

    clock = ManualClock()
    with tempfile.TemporaryDirectory() as tmp, Sandbox(scenario="az-outage", workdir=Path(tmp),
                                                       clock=clock) as sb:
        facts = sb.facts
        node = _first(facts, "dead_node", "dead_nodes")
        iid = _first(facts, "instance_id", "instance_ids")
        pod, ns = _first(facts, "pod", "pods"), _first(facts, "namespace")
        settings = Settings(database_url="sqlite://", clusters={
            "sandbox": ClusterConfig(name="sandbox", kubeconfig=str(sb.kubeconfig_path))})
        clients = ClusterClients.of(kube=KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path)),
                                    ec2=Ec2Client(client=sb.ec2_client()))
        catalog = build_catalog(settings, clients_factory=lambda _cfg: clients)
        cases: list[tuple[str, dict[str, Any], bool]] = [
            ("k8s.node.get", {"node": node}, True),
            ("k8s.pods.list", {"node": node}, True),
            ("k8s.pod.events", {"pod": pod, "namespace": ns}, True),
            ("k8s.volumeattachments.list", {"node": node}, True),
            ("k8s.volumeattachments.wait_gone", {"node": node}, True),
            ("k8s.pv.list", {}, True),
            ("k8s.storageclasses.audit", {}, True),
            ("aws.ec2.instance.get", {"instance_id": iid}, True),
            ("aws.ec2.volumes.list", {"instance_id": iid}, True),
            ("aws.ec2.instance.stop", {"instance_id": iid}, False),  # plan only: no fencing here
            ("k8s.node.taint", {"node": node}, False),
        ]
        print(f"{'action':36} {'phase':6} {'k8s':>4} {'ec2':>4} {'ms':>8}  operations")
        for name, params, do_apply in cases:
            ctx = StepContext(run_id="bench", step_id=name, requester="bench", clock=clock,
                              overrides=frozenset({"oos-taint", "blast-radius"}))
            start = time.perf_counter()
            plan = catalog.plan(name, params, ctx)
            if do_apply:
                catalog.apply(name, plan, StepContext(run_id="bench", step_id=name,
                                                       requester="bench", clock=clock,
                                                       calls=ctx.calls))
            ms = (time.perf_counter() - start) * 1000
            by_service = Counter(c.service for c in ctx.calls)
            ops = ", ".join(f"{op} x{n}" for op, n in Counter(c.operation for c in ctx.calls).items())
            print(f"{name:36} {'apply' if do_apply else 'plan':6} {by_service['kubernetes']:>4} "
                  f"{by_service['ec2']:>4} {ms:>8.1f}  {ops}")
        ids = [i for i in (KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path)).list_nodes())]
        calls: list[Any] = []
        instance_ids = [pid.rsplit("/", 1)[-1] for n in ids
                        if (pid := (n.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1]
                        .startswith("i-")]
        start = time.perf_counter()
        found = clients.ec2.bound(calls).describe_instances(instance_ids)
        ms = (time.perf_counter() - start) * 1000
        print(f"{'EC2 state of every node':36} {'read':6} {0:>4} {len(calls):>4} {ms:>8.1f}  "
              f"DescribeInstances for {len(instance_ids)} instances -> {len(found)} found")


if __name__ == "__main__":
    main()
