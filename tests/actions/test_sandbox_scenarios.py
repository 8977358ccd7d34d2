"""The actions against the sandbox's incident scenarios, reached by kubeconfig and EC2 endpoint
exactly as production reaches a cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.actions.catalog import ClusterClients, RegistryCatalog, build_catalog
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


def test_node_dead_is_resolved_by_fence_taint_wait_and_the_pod_moves(drive):
    d = drive("node-dead")
    f = d.sb.facts
    node, iid = f["dead_node"], f["instance_id"]
    events = d.run("k8s.pod.events", pod=f["pod"], namespace=f["namespace"])
    assert d.run("k8s.node.get", node=node).data["instance_id"] == iid
    if d.run("aws.ec2.instance.get", instance_id=iid).data["state"] not in {"stopped", "terminated"}:
        with pytest.raises(InterlockBlocked) as e:
            d.plan("k8s.node.taint", node=node)
        assert e.value.rule == "oos-taint"
        assert d.run("aws.ec2.instance.stop", instance_id=iid).data["state"] == "stopped"
    taint = d.run("k8s.node.taint", node=node)
    assert any(t["key"] == "node.kubernetes.io/out-of-service" for t in taint.data["taints"])
    gone = d.run("k8s.volumeattachments.wait_gone", node=node, timeout="10m")
    assert gone.data["count"] == 0
    assert list(d.sb.violations) == []
    assert isinstance(events.data["multi_attach"], bool)


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


def test_one_nodes_attachments_in_az_outage_are_one_paginated_list(drive):
    d = drive("az-outage")
    node = d.sb.facts["dead_node"] if "dead_node" in d.sb.facts else d.sb.facts["dead_nodes"][0]
    plan, _ = d.plan("k8s.volumeattachments.wait_gone", node=node)
    _, ctx = d.apply(plan)
    assert [c.operation for c in ctx.calls] == ["list_volume_attachment"]


def test_ec2_state_of_every_az_outage_node_is_one_describe_instances_call(drive):
    d = drive("az-outage")
    nodes = d.run("k8s.node.get", node=d.sb.facts.get("dead_node") or d.sb.facts["dead_nodes"][0])
    assert nodes.data["exists"]
    kube = KubeClient.from_config(kubeconfig=str(d.sb.kubeconfig_path))
    ids = [n["spec"]["providerID"].rsplit("/", 1)[-1] for n in kube.list_nodes()]
    calls: list[Any] = []
    found = Ec2Client(client=d.sb.ec2_client()).bound(calls).describe_instances(ids)
    assert len(found) == len(ids) >= 10 and [c.operation for c in calls] == ["DescribeInstances"]


def test_ec2_throttling_in_the_sandbox_is_absorbed(drive):
    d = drive("node-dead", throttle_rate=0.3)
    iid = d.sb.facts["instance_id"]
    for _ in range(5):
        assert d.run("aws.ec2.instance.get", instance_id=iid).data["exists"]
