"""The actions against the sandbox's incident scenarios, reached by kubeconfig and EC2 endpoint
exactly as production reaches a cluster. (The az-outage efficiency figures are in
test_efficiency.py, on one sandbox shared by its tests.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.actions.catalog import ClusterClients, RegistryCatalog, build_catalog
from bot.actions.declarations import OUT_OF_SERVICE_TAINT
from bot.clients.ec2 import Ec2Client
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig, Settings
from bot.engine.plan import Plan, Result
from bot.engine.ports import ManualClock, StepContext
from bot.errors import InterlockBlocked

sandbox = pytest.importorskip("bot.sim.sandbox")


class Driver:
    def __init__(self, sb: Any, clock: ManualClock) -> None:
        self.sb, self.clock = sb, clock
        settings = Settings(database_url="sqlite://", clusters={
            "sandbox": ClusterConfig(name="sandbox", kubeconfig=str(sb.kubeconfig_path))})
        clients = ClusterClients.of(
            kube=KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), sleep=lambda _s: None),
            ec2=Ec2Client(client=sb.ec2_client()))
        self.catalog: RegistryCatalog = build_catalog(settings, clients_factory=lambda _c: clients)

    def ctx(self) -> StepContext:
        return StepContext(run_id="rb-sbx01", step_id="s", requester="alice", clock=self.clock)

    def plan(self, action: str, **params: Any) -> tuple[Plan, StepContext]:
        ctx = self.ctx()
        return self.catalog.plan(action, params, ctx), ctx

    def apply(self, plan: Plan) -> tuple[Result, StepContext]:
        ctx = self.ctx()
        return self.catalog.apply(plan.action, plan, ctx), ctx

    def until_done(self, plan: Plan, *, limit: int = 200) -> Result:
        for _ in range(limit):
            result, _ = self.apply(plan)
            if result.done:
                return result
            self.sb.advance(result.retry_after)
        raise AssertionError(f"{plan.action} not done after {limit} polls")

    def run(self, action: str, **params: Any) -> Result:
        return self.until_done(self.plan(action, **params)[0])


@pytest.fixture
def drive(tmp_path: Path) -> Iterator[Any]:
    opened: list[Any] = []

    def start(scenario: str, **options: Any) -> Driver:
        clock = ManualClock()
        sb = sandbox.Sandbox(scenario=scenario, workdir=tmp_path / scenario, clock=clock, options=options)
        opened.append(sb.__enter__())
        return Driver(sb, clock)

    yield start
    for sb in opened:
        sb.__exit__(None, None, None)


def test_node_dead_is_resolved_by_fence_taint_and_wait_through_ec2_throttling(drive, monkeypatch):
    d = drive("node-dead", throttle_rate=0.3)
    f = d.sb.facts
    node, iid = f["dead_node"], f["instance_id"]
    # wired exactly as production is: the kubeconfig, and AWS_ENDPOINT_URL_EC2 in the environment
    for key, value in d.sb.env.items():
        monkeypatch.setenv(key, value)
    cfg = ClusterConfig(name="sandbox", kubeconfig=str(d.sb.kubeconfig_path), region=d.sb.region)
    d.catalog = build_catalog(Settings(database_url="sqlite://", clusters={"sandbox": cfg}))
    calls: list[Any] = []

    def run(action: str, **params: Any) -> Result:
        plan, ctx = d.plan(action, **params)
        calls.extend(ctx.calls)
        for _ in range(100):
            result, ctx = d.apply(plan)
            calls.extend(ctx.calls)
            if result.done:
                return result
            d.sb.advance(result.retry_after)
        raise AssertionError(f"{action} not done")

    assert run("k8s.pod.events", pod=f["pod"], namespace=f["namespace"]).data["multi_attach"]
    seen = run("k8s.node.get", node=node).data
    assert seen["instance_id"] == iid and seen["ready"] is False
    assert run("aws.ec2.instance.stop", instance_id=iid).data["state"] == "stopped"
    assert d.sb.ec2.instance_state(iid) == "stopped"
    taint = run("k8s.node.taint", node=node)
    assert {"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"} in taint.data[
        "taints"]
    assert run("k8s.volumeattachments.wait_gone", node=node, timeout="10m").data["count"] == 0
    d.sb.advance(60)
    pod = d.sb.get("Pod", f["namespace"], f["pod"])
    assert pod["spec"]["nodeName"] != node and pod["status"]["phase"] == "Running"
    assert list(d.sb.violations) == []
    # the sandbox throttles a seeded 30% of requests: read on until at least one was (bounded)
    for _ in range(30):
        if any(c.outcome == "RequestLimitExceeded" for c in calls):
            break
        assert run("aws.ec2.volume.get", volume_id=f["volume_id"]).data["exists"]
    throttled = [c for c in calls if c.outcome == "RequestLimitExceeded"]
    assert throttled and d.sb.ec2.throttled >= len(throttled)  # retried, and every step succeeded
    assert all(c.request_id for c in calls if c.service == "ec2")


def test_force_detach_from_the_hung_but_running_instance_in_node_hung_is_refused(drive):
    d = drive("node-hung")
    f = d.sb.facts
    vol = d.run("aws.ec2.volume.get", volume_id=f["volume_id"]).data
    attached_to = [a["instance_id"] for a in vol["attachments"]]
    states = {i: d.run("aws.ec2.instance.get", instance_id=i).data["state"] for i in attached_to}
    if all(s in {"stopped", "terminated"} for s in states.values()):
        pytest.fail(f"node-hung should attach {f['volume_id']} to a running instance: {states}")
    with pytest.raises(InterlockBlocked) as e:
        d.plan("aws.ec2.volume.detach", volume_id=f["volume_id"], force=True)
    assert e.value.rule == "force-detach"
