"""API calls and wall time per action on the ``az-outage`` sandbox (100 nodes, 500 volumes).

Walks the node-dead runbook's actions over one of the hundred dead nodes, plan then apply, and
prints one row per phase: the Kubernetes and EC2 requests it made, and the time it took. The
figures to watch: listing one node's VolumeAttachments is one paginated list however many volumes
the cluster has, a poll of ``wait_gone`` is one list, and the EC2 state of every node is one
``DescribeInstances`` call. The sandbox is reached as production reaches a cluster: a kubeconfig
and ``AWS_ENDPOINT_URL_EC2``. The time of a write includes the sandbox's controllers reacting to
it (they run before the API server answers), and a wait's polls cost sandbox time, not wall time.

    .venv/bin/python bench/actions.py [--nodes 100] [--volumes-per-node 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bot.actions.catalog import build_catalog
from bot.config import ClusterConfig, Settings
from bot.engine.plan import ApiCall, Plan, Result
from bot.engine.ports import ManualClock, StepContext
from bot.errors import ExternalError, InterlockBlocked, RunbookBotError

HEADER = f"{'action':34} {'phase':6} {'k8s':>4} {'ec2':>4} {'ms':>8}  outcome: operations"


def _ops(calls: list[ApiCall]) -> str:
    return ", ".join(f"{op} x{n}" if n > 1 else op
                     for op, n in Counter(c.operation for c in calls).items()) or "-"


def _row(name: str, phase: str, calls: list[ApiCall], ms: float, outcome: str) -> None:
    by = Counter(c.service for c in calls)
    print(f"{name:34} {phase:6} {by['kubernetes']:>4} {by['ec2']:>4} {ms:>8.1f}  "
          f"{outcome}: {_ops(calls)}")


def _failure(e: RunbookBotError) -> str:
    if isinstance(e, InterlockBlocked):
        return f"refused ({e.rule})"
    return f"failed ({e.code})" if isinstance(e, ExternalError) else f"failed ({type(e).__name__})"


class Bench:
    def __init__(self, sb: Any, clock: ManualClock) -> None:
        self.sb, self.clock = sb, clock
        cfg = ClusterConfig(name="sandbox", kubeconfig=str(sb.kubeconfig_path), region=sb.region)
        self.catalog = build_catalog(Settings(database_url="sqlite://", clusters={"sandbox": cfg}))
        self.totals: Counter[str] = Counter()
        clients = self.catalog.clients_for(cfg)
        _ = clients.kube, clients.ec2  # build both clients now, so no row pays for their setup

    def ctx(self, name: str) -> StepContext:
        return StepContext(run_id="rb-bench", step_id=name, requester="bench", clock=self.clock)

    def step(self, action: str, /, **params: Any) -> Result | None:
        """Plan, then apply (polling as the engine would) and print both phases."""
        ctx = self.ctx(action)
        start = time.perf_counter()
        try:
            plan: Plan = self.catalog.plan(action, params, ctx)
        except RunbookBotError as e:
            self._count(ctx.calls)
            _row(action, "plan", ctx.calls, (time.perf_counter() - start) * 1000, _failure(e))
            return None
        self._count(ctx.calls)
        _row(action, "plan", ctx.calls, (time.perf_counter() - start) * 1000,
             f"{len(plan.changes)} change(s)")
        calls: list[ApiCall] = []
        polls, elapsed = 0, 0.0
        while True:
            actx = self.ctx(action)
            start = time.perf_counter()
            try:
                result = self.catalog.apply(action, plan, actx)
            except RunbookBotError as e:
                calls.extend(actx.calls)
                self._count(calls)
                _row(action, "apply", calls, (elapsed + time.perf_counter() - start) * 1000,
                     _failure(e) + (f" after {polls + 1} polls" if polls else ""))
                return None
            elapsed += time.perf_counter() - start
            calls.extend(actx.calls)
            polls += 1
            if result.done or polls >= 50:
                break
            self.sb.advance(result.retry_after)  # sandbox time: the wait costs no wall time
        self._count(calls)
        outcome = "not done" if not result.done else (
            "already done" if result.already_done and polls == 1 else "done")
        _row(action, "apply", calls, elapsed * 1000,
             outcome + (f" after {polls} polls" if polls > 1 else ""))
        return result

    def _count(self, calls: list[ApiCall]) -> None:
        self.totals.update(c.service for c in calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--volumes-per-node", type=int, default=5)
    args = parser.parse_args()

    from bot.sim.sandbox import Sandbox  # the sandbox pulls in moto: only when benchmarking

    clock = ManualClock()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        sb = Sandbox(scenario="az-outage", workdir=Path(tmp), clock=clock,
                     options={"nodes": args.nodes, "volumes_per_node": args.volumes_per_node})
        with sb:
            startup = time.perf_counter() - start
            os.environ.update(sb.env)  # AWS_ENDPOINT_URL_EC2, credentials, KUBECONFIG
            run(sb, clock, startup)


def run(sb: Any, clock: ManualClock, startup: float) -> None:
    f = sb.facts
    node, other = f["dead_nodes"][0], f["dead_nodes"][1]
    iid, other_iid = f["instance_ids"][0], f["instance_ids"][1]
    ns = f["namespace"]
    vas = sb.list("VolumeAttachment")
    print(f"az-outage: {len(f['dead_nodes'])} dead nodes of {len(sb.list('Node'))}, "
          f"{len(sb.list('PersistentVolume'))} volumes, {len(vas)} VolumeAttachments; "
          f"sandbox ready in {startup:.1f} s\n")
    b = Bench(sb, clock)
    pv_of_node = next(v["spec"]["source"]["persistentVolumeName"] for v in vas
                      if v["spec"]["nodeName"] == node)
    pvc = sb.get("PersistentVolume", None, pv_of_node)["spec"]["claimRef"]["name"]
    pod = next(p["metadata"]["name"] for p in sb.list("Pod", ns) if p["spec"].get("nodeName") == node)
    victim = next(v for v in vas if v["spec"]["nodeName"] == other)
    victim_pv = sb.get("PersistentVolume", None, victim["spec"]["source"]["persistentVolumeName"])
    victim_vol = victim_pv["spec"]["csi"]["volumeHandle"]

    print(HEADER)
    print("-" * len(HEADER))
    # diagnose
    b.step("k8s.node.get", node=node)
    b.step("k8s.pods.list", node=node)
    b.step("k8s.pod.events", pod=pod, namespace=ns)
    b.step("k8s.volumeattachments.list", node=node)
    b.step("k8s.pv.get", name=pv_of_node)
    b.step("k8s.pv.list")
    b.step("k8s.pvc.get", name=pvc, namespace=ns)
    b.step("k8s.storageclasses.audit")
    b.step("aws.ec2.instance.get", instance_id=iid)
    b.step("aws.ec2.volumes.list", instance_id=iid)
    b.step("aws.ec2.volume.get", volume_id=victim_vol)
    # fence, taint, wait (the instance is already stopped: the stop is already done)
    b.step("manual.confirm", item=f"{node} is not coming back")
    b.step("aws.ec2.instance.stop", instance_id=iid)
    b.step("k8s.node.cordon", node=node)
    b.step("k8s.node.taint", node=node)
    gone = b.step("k8s.volumeattachments.wait_gone", node=node, timeout="3m")
    if gone is None:  # an attachment is stuck: the last resort, a force detach at EC2
        stuck = b.step("k8s.volumeattachments.list", node=node)
        for item in (stuck.data["items"] if stuck else []):
            b.step("aws.ec2.volume.detach", volume_id=item["volume_id"], force=True)
        b.step("k8s.volumeattachments.wait_gone", node=node, timeout="3m")
    b.step("notify", message=f"{node}: volumes released")
    # a leaked volume on a second dead node: detach at EC2, delete it, then clear its PV
    b.step("aws.ec2.volume.detach", volume_id=victim_vol, instance_id=other_iid, force=True)
    b.step("aws.ec2.volume.delete", volume_id=victim_vol)
    b.step("k8s.finalizers.remove", kind="PersistentVolume", name=victim_pv["metadata"]["name"])
    # repair: the untaint is refused until the node is Ready again
    b.step("k8s.node.untaint", node=node)
    sb.repair_node(node)
    b.step("wait", duration="1m")
    b.step("k8s.node.untaint", node=node)
    b.step("k8s.node.uncordon", node=node)

    kube = b.catalog.clients_for(b.catalog.settings.cluster("sandbox"))
    ids = [pid.rsplit("/", 1)[-1] for n in kube.kube.list_nodes()
           if (pid := str((n.get("spec") or {}).get("providerID") or "")).rsplit("/", 1)[-1]
           .startswith("i-")]
    calls: list[ApiCall] = []
    start = time.perf_counter()
    found = kube.ec2.bound(calls).describe_instances(ids)
    _row("EC2 state of every node", "read", calls, (time.perf_counter() - start) * 1000,
         f"{len(found)} of {len(ids)} instances")
    print(f"\ntotal: {b.totals['kubernetes']} Kubernetes and {b.totals['ec2']} EC2 requests")


if __name__ == "__main__":
    main()
