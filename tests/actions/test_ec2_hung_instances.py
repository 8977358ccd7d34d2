"""Fencing and detaching against the sandbox's EC2, which has what moto lacks: a hung guest that
ignores a plain stop, and attachments stuck ``busy``/``detaching`` until forced."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bot.actions.catalog import ClusterClients, build_catalog
from bot.clients.ec2 import Ec2Client, boto3_client
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig, Settings
from bot.engine.ports import ManualClock, StepContext
from bot.errors import InterlockBlocked
from tests.fakes.kube_api import FakeKubeApi

ec2_sim = pytest.importorskip("bot.sim.ec2")
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class Sim:
    def __init__(self, sim: Any, kube: FakeKubeApi, kubeconfig: Any) -> None:
        self.sim, self.kube = sim, kube
        self.raw = boto3_client(region="us-east-1", endpoint_url=sim.endpoint, credentials=CREDS)
        clients = ClusterClients(
            make_kube=lambda: KubeClient.from_config(kubeconfig=str(kubeconfig)),
            make_ec2=lambda: Ec2Client(client=self.raw))
        self.catalog = build_catalog(Settings(database_url="sqlite://", clusters={
            "c": ClusterConfig(name="c")}), clients_factory=lambda _c: clients)

    def instance(self) -> str:
        """An instance whose node has been NotReady since long before the clock's start."""
        iid = str(self.raw.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, Placement={
            "AvailabilityZone": "us-east-1a"}, TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": "kubernetes.io/cluster/c", "Value": "owned"}]}])["Instances"][0]["InstanceId"])
        self.kube.put("nodes", {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": f"ip-{iid[2:]}.ec2.internal"},
                                "spec": {"providerID": f"aws:///us-east-1a/{iid}"},
                                "status": {"conditions": [{
                                    "type": "Ready", "status": "Unknown",
                                    "lastTransitionTime": "2025-12-31T23:00:00Z"}]}})
        return iid

    def step(self, action: str, **params: Any) -> tuple[Any, Any]:
        ctx = StepContext(run_id="r", step_id="s", requester="alice", clock=ManualClock())
        return self.catalog.plan(action, params, ctx), ctx

    def apply(self, plan: Any, *, poll: bool = False) -> tuple[Any, list[Any]]:
        ctx = StepContext(run_id="r", step_id="s", requester="alice", clock=ManualClock(),
                          poll=poll)
        return self.catalog.apply(plan.action, plan, ctx), ctx.calls


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    server = ec2_sim.Ec2Sim(region="us-east-1")
    server.start()
    with FakeKubeApi() as kube:
        yield Sim(server, kube, kube.kubeconfig(tmp_path_factory.mktemp("kube")))
    server.stop()


def test_a_plain_stop_of_a_hung_instance_stays_stopping_and_is_not_repeated(sim):
    iid = sim.instance()
    sim.sim.set_hung(iid)
    plan, _ = sim.step("aws.ec2.instance.stop", instance_id=iid, force=False)
    first, _ = sim.apply(plan)
    assert not first.done and first.data["state"] == "stopping"
    again, again_calls = sim.apply(plan, poll=True)
    assert not again.done and [c.operation for c in again_calls] == ["DescribeInstances"]
    assert sim.step("aws.ec2.instance.stop", instance_id=iid, force=False)[0].is_noop


def test_a_force_stop_fences_a_hung_instance_already_stopping(sim):
    iid = sim.instance()
    sim.sim.set_hung(iid)
    sim.raw.stop_instances(InstanceIds=[iid])  # someone tried a plain stop: stuck "stopping"
    plan, _ = sim.step("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert plan.changes[0].before == "stopping" and plan.changes[0].operation == "force-stop"
    result, _ = sim.apply(plan)
    while not result.done:
        result, _ = sim.apply(plan)
    assert result.data["state"] == "stopped" and sim.sim.instance_state(iid) == "stopped"


def test_a_stuck_attachment_needs_force_and_force_needs_a_fenced_instance(sim):
    iid = sim.instance()
    vid = str(sim.raw.create_volume(Size=1, AvailabilityZone="us-east-1a")["VolumeId"])
    sim.raw.attach_volume(VolumeId=vid, InstanceId=iid, Device="/dev/xvdf")
    sim.sim.mark_stuck(vid, "busy")
    with pytest.raises(InterlockBlocked) as e:
        sim.step("aws.ec2.volume.detach", volume_id=vid, force=True)
    assert e.value.rule == "force-detach"
    plain, _ = sim.step("aws.ec2.volume.detach", volume_id=vid)
    result, _ = sim.apply(plain)
    assert not result.done and result.data["state"] in {"busy", "detaching"}
    sim.raw.stop_instances(InstanceIds=[iid], Force=True)
    forced, _ = sim.step("aws.ec2.volume.detach", volume_id=vid, force=True)
    result, _ = sim.apply(forced)
    while not result.done:
        result, _ = sim.apply(forced)
    assert result.data == {"volume_id": vid, "state": "available", "forced": True}


def test_a_shutting_down_instance_is_waited_on_until_terminated_never_stopped(sim):
    iid = sim.instance()
    sim.sim.set_state(iid, "shutting-down")
    plan, _ = sim.step("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert plan.is_noop
    waiting, calls = sim.apply(plan)
    assert not waiting.done and "waiting for terminated" in waiting.progress
    assert [c.operation for c in calls] == ["DescribeInstanceStatus"]  # the fence's live read
    sim.sim.set_state(iid, "terminated")
    done, _ = sim.apply(plan)
    assert done.done and done.data["state"] == "terminated"
