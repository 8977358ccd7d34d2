"""Conflicts and throttling are retried and the step still succeeds, with every attempt on record."""

from __future__ import annotations

import pytest

from bot.actions.catalog import ClusterClients, build_catalog
from bot.actions.declarations import OUT_OF_SERVICE_TAINT
from bot.clients.ec2 import Ec2Client, boto3_client
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig, Settings
from bot.errors import RetryableError

OOS = {"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _taint(world):
    world.node("n1", ready="False", instance_id=world.instance(state="stopped"))
    return {"node": "n1"}, lambda: world.kube.get("nodes", "n1")["spec"]["taints"] == [OOS]


def _untaint(world):
    world.node("n1", taints=[dict(OOS)])
    return {"node": "n1"}, lambda: world.kube.get("nodes", "n1")["spec"]["taints"] == []


def _cordon(world):
    world.node("n1")
    return {"node": "n1"}, lambda: world.kube.get("nodes", "n1")["spec"]["unschedulable"] is True


def _finalizers(world):
    vid = world.volume()
    world.ec2.delete_volume(VolumeId=vid)
    world.pvc("data-0", volume_name="pv-gone", terminating=True)
    return ({"kind": "PersistentVolumeClaim", "name": "data-0", "namespace": "default"},
            lambda: world.kube.get("persistentvolumeclaims", "data-0", "default") is None)


KUBE_WRITES = {"k8s.node.taint": _taint, "k8s.node.untaint": _untaint, "k8s.node.cordon": _cordon,
               "k8s.finalizers.remove": _finalizers}


@pytest.mark.parametrize("action", sorted(KUBE_WRITES))
def test_a_kubernetes_write_that_meets_409_conflicts_re_reads_and_succeeds(world, action):
    params, done = KUBE_WRITES[action](world)
    plan, _ = world.plan(action, **params)
    world.kube.conflicts_next_put = 2  # another controller writes the object twice in between
    result, calls = world.apply(plan)
    assert done() and not result.already_done
    writes = [c for c in calls if c.operation.startswith("replace_")]
    assert [c.outcome for c in writes] == ["Conflict", "Conflict", "ok"]
    # after each conflict the object is read again on the wire, never served from earlier reads
    after = [calls[i + 1] for i, c in enumerate(calls) if c.outcome == "Conflict"]
    assert [(c.operation.startswith("read_"), c.outcome) for c in after] == [(True, "ok")] * 2


def _stop(world):
    iid = world.instance()
    world.dead_node(iid)
    return {"instance_id": iid}, "StopInstances", lambda: world.instance_state(iid) == "stopped"


def _detach(world):
    vid = world.volume(attach_to=world.instance(state="stopped"))
    return ({"volume_id": vid, "force": True}, "DetachVolume",
            lambda: world.volume_state(vid) == "available")


def _delete(world):
    vid = world.released_volume()
    return {"volume_id": vid}, "DeleteVolume", lambda: world.volume_state(vid) is None


EC2_WRITES = {"aws.ec2.instance.stop": _stop, "aws.ec2.volume.detach": _detach,
              "aws.ec2.volume.delete": _delete}


@pytest.mark.parametrize("action", sorted(EC2_WRITES))
def test_a_throttled_ec2_write_is_retried_and_every_attempt_is_recorded(world, action):
    params, operation, done = EC2_WRITES[action](world)
    plan, _ = world.plan(action, **params)
    world.proxy.throttle_actions[operation] = 1
    _, calls = world.until_done(plan)
    assert done()
    attempts = [(c.outcome, c.request_id) for c in calls if c.operation == operation]
    assert attempts[0][0] == "RequestLimitExceeded" and attempts[0][1].startswith("throttled-")
    assert attempts[1][0] == "ok" and len(attempts) == 2
    assert world.proxy.requests.count(operation) == 2  # retried once, never repeated after success


def test_throttled_reads_are_recorded_attempt_by_attempt_and_the_step_succeeds(world):
    iid = world.instance()
    world.proxy.throttle_next = 1
    result, calls = world.apply(world.plan("aws.ec2.instance.get", instance_id=iid)[0])
    assert result.data["state"] == "running"
    assert [(c.operation, c.outcome) for c in calls] == [
        ("DescribeInstances", "RequestLimitExceeded"), ("DescribeInstances", "ok"),
        ("DescribeInstanceStatus", "ok"), ("DescribeInstanceAttribute", "ok")]


def test_throttling_beyond_the_retry_budget_is_a_retryable_error_for_the_engine(world, tmp_path):
    raw = boto3_client(region="us-east-1", endpoint_url=world.proxy.url, credentials=CREDS,
                       max_attempts=1)  # one retry: keeps botocore's real backoff short here
    kube = KubeClient.from_config(kubeconfig=str(world.kube.kubeconfig(tmp_path)))
    catalog = build_catalog(
        Settings(database_url="sqlite://", clusters={"c": ClusterConfig(name="c")}),
        clients_factory=lambda _c: ClusterClients.of(kube=kube, ec2=Ec2Client(client=raw)))
    iid = world.instance()
    world.proxy.throttle_next = 5
    ctx = world.ctx()
    with pytest.raises(RetryableError) as e:
        catalog.plan("aws.ec2.instance.stop", {"instance_id": iid}, ctx)
    assert e.value.code == "RequestLimitExceeded" and e.value.service == "ec2"
    assert [c.outcome for c in ctx.calls] == ["RequestLimitExceeded"] * 2
    assert world.instance_state(iid) == "running"
