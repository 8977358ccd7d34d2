"""The EC2 endpoint behaves like EC2 where moto does not, in the ways the incidents depend on:
stuck attachments that only Force clears, DetachVolume without InstanceId, VolumeInUse, refusing to
start a terminated instance, hung instances, and throttling at a configured, seeded rate.
Every call goes through boto3 to the sandbox's endpoint, as the product's calls do."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.sim.kit import ec2_attachments

ZONE = "ap-southeast-1a"


@pytest.fixture
def plain(pool: Any) -> Any:
    """A sandbox whose tests make their own instances and volumes."""
    return pool.get("stuck-terminating")


@pytest.fixture
def ec2(plain: Any) -> Any:
    return client(plain)


def client(sb: Any) -> Any:
    return sb.ec2_client(max_attempts=0, timeout=10)  # the controllers' own client: built once


def code(e: pytest.ExceptionInfo[ClientError]) -> str:
    return str(e.value.response["Error"]["Code"])


def instance(ec2: Any) -> str:
    return str(ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                 Placement={"AvailabilityZone": ZONE})["Instances"][0]["InstanceId"])


def attached_volume(ec2: Any, iid: str) -> str:
    vid = str(ec2.create_volume(AvailabilityZone=ZONE, Size=10)["VolumeId"])
    ec2.attach_volume(VolumeId=vid, InstanceId=iid, Device="/dev/xvdf")
    return vid


def test_a_busy_attachment_survives_a_normal_detach_and_only_force_clears_it(pool):
    sb = pool.get("stuck-detach")
    f, ec2 = sb.facts, client(sb)
    va = sb.get("VolumeAttachment", None, f["volume_attachment"])  # Kubernetes let go, EC2 did not
    assert va["metadata"]["deletionTimestamp"] and va["status"]["attached"] is True
    assert "Could not detach volume" in va["status"]["detachError"]["message"]
    for _ in range(2):
        resp = ec2.detach_volume(VolumeId=f["volume_id"], InstanceId=f["instance_id"])
        assert resp["State"] == "detaching"
        sb.advance(30)
        assert ec2_attachments(sb, f["volume_id"]) == [(f["instance_id"], "busy")]
    ec2.detach_volume(VolumeId=f["volume_id"], InstanceId=f["instance_id"], Force=True)
    sb.advance(2)  # Describe shows a change a moment later
    vol = ec2.describe_volumes(VolumeIds=[f["volume_id"]])["Volumes"][0]
    assert vol["State"] == "available" and vol["Attachments"] == []
    # Kubernetes learns it at the attacher's next try, after its back-off (up to 5 min): the
    # VolumeAttachment stays until then, and only then does the volume go where its pod waits.
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is not None
    new_iid = sb.get("Node", None, f["new_node"])["spec"]["providerID"].rsplit("/", 1)[-1]
    sb.advance(305)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
    vol = ec2.describe_volumes(VolumeIds=[f["volume_id"]])["Volumes"][0]
    assert [(a["InstanceId"], a["State"]) for a in vol["Attachments"]] == [(new_iid, "attached")]
    assert sb.get("Pod", "search", f["pod"])["status"]["phase"] == "Running"


def test_a_detach_from_a_hung_instance_hangs_in_detaching_until_forced(pool):
    sb = pool.get("node-hung")
    ec2 = client(sb)
    iid = sb.facts["instance_id"]
    vid = attached_volume(ec2, iid)
    assert ec2.detach_volume(VolumeId=vid, InstanceId=iid)["State"] == "detaching"
    sb.advance(300)
    assert ec2_attachments(sb, vid) == [(iid, "detaching")]
    ec2.detach_volume(VolumeId=vid, InstanceId=iid, Force=True)
    assert ec2_attachments(sb, vid) == []


def test_a_hung_instance_fails_its_status_checks_and_stops_only_when_forced(pool):
    sb = pool.get("node-hung")
    ec2 = client(sb)
    iid = sb.facts["instance_id"]
    [row] = ec2.describe_instance_status(InstanceIds=[iid], IncludeAllInstances=True)["InstanceStatuses"]
    assert row["InstanceState"]["Name"] == "running"
    # The guest is gone, AWS's hardware is fine: the instance check fails, the system check passes.
    assert row["InstanceStatus"]["Status"] == "impaired" and row["SystemStatus"]["Status"] == "ok"
    assert row["InstanceStatus"]["Details"] == [{"Name": "reachability", "Status": "failed"}]
    out = ec2.stop_instances(InstanceIds=[iid])["StoppingInstances"][0]
    assert out["CurrentState"]["Name"] == "stopping"
    sb.advance(120)
    assert sb.ec2.instance_state(iid) == "stopping"
    ec2.stop_instances(InstanceIds=[iid], Force=True)
    sb.advance(115)  # Force tries the OS shutdown first, and cuts the power 120 s after
    assert sb.ec2.instance_state(iid) == "stopping"
    sb.advance(5)
    assert sb.ec2.instance_state(iid) == "stopped"


def test_detach_volume_without_an_instance_id_detaches_from_the_one_it_is_attached_to(ec2, plain):
    iid = instance(ec2)
    vid = attached_volume(ec2, iid)
    resp = ec2.detach_volume(VolumeId=vid)
    assert resp["InstanceId"] == iid
    assert ec2_attachments(plain, vid) == []
    with pytest.raises(ClientError) as e:
        ec2.detach_volume(VolumeId=vid)
    assert code(e) == "IncorrectState"


def test_detaching_from_the_wrong_instance_is_invalid_attachment_not_found(ec2):
    iid, other = instance(ec2), instance(ec2)
    vid = attached_volume(ec2, iid)
    with pytest.raises(ClientError) as e:
        ec2.detach_volume(VolumeId=vid, InstanceId=other)
    assert code(e) == "InvalidAttachment.NotFound"


def test_attaching_a_volume_that_is_in_use_is_refused_with_volume_in_use(ec2, plain):
    first, second = instance(ec2), instance(ec2)
    vid = attached_volume(ec2, first)
    with pytest.raises(ClientError) as e:
        ec2.attach_volume(VolumeId=vid, InstanceId=second, Device="/dev/xvdg")
    assert code(e) == "VolumeInUse"
    assert ec2_attachments(plain, vid) == [(first, "attached")]


def test_starting_a_terminated_instance_is_incorrect_instance_state(ec2, plain):
    iid = instance(ec2)
    ec2.terminate_instances(InstanceIds=[iid])
    for wait in (0, 60):  # shutting-down, then terminated
        plain.advance(wait)
        with pytest.raises(ClientError) as e:
            ec2.start_instances(InstanceIds=[iid])
        assert code(e) == "IncorrectInstanceState"
    assert plain.ec2.instance_state(iid) == "terminated"


def test_a_dry_run_detach_that_would_succeed_answers_dry_run_operation(ec2, plain):
    iid = instance(ec2)
    vid = attached_volume(ec2, iid)
    with pytest.raises(ClientError) as e:
        ec2.detach_volume(VolumeId=vid, InstanceId=iid, DryRun=True)
    assert code(e) == "DryRunOperation"
    assert ec2_attachments(plain, vid) == [(iid, "attached")]


def _throttled(sb: Any, calls: int) -> list[bool]:
    ec2 = client(sb)  # botocore counts retries: max_attempts=0 is one attempt, no sleeping
    out = []
    for _ in range(calls):
        try:
            ec2.describe_availability_zones()
            out.append(False)
        except ClientError as e:
            assert e.response["Error"]["Code"] == "RequestLimitExceeded"
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503
            out.append(True)
    return out


def test_throttling_refuses_calls_at_the_configured_rate_in_a_seeded_order(pool):
    sb = pool.fresh("stuck-terminating", throttle_rate=0.5)
    first = _throttled(sb, 30)
    assert 7 <= sum(first) <= 23 and sb.ec2.throttled == sum(first)
    again = pool.fresh("stuck-terminating", throttle_rate=0.5)
    assert _throttled(again, 30) == first


def test_a_write_that_sets_the_controllers_calling_ec2_answers_with_their_calls_answered(pool):
    # The pass a write sets off runs before the reply, and its EC2 calls cross the same endpoint on
    # other threads: the proxy must not hold its lock while the controllers react.
    sb = pool.fresh("node-hung", attacher_retry_max=1)  # the attacher tries on every pass
    ec2 = client(sb)
    iid, vid = sb.facts["instance_id"], sb.facts["volume_id"]
    sb.advance(420)  # the timeout detach: the attacher keeps retrying DetachVolume on the hung guest
    assert ec2_attachments(sb, vid) == [(iid, "detaching")]
    sb.clock.advance(2)  # a moment later, its back-off over, the stop sets the attacher's try off
    before = sb.ec2.requests
    out = ec2.stop_instances(InstanceIds=[iid])["StoppingInstances"][0]
    assert out["CurrentState"]["Name"] == "stopping"
    assert sb.ec2.requests - before >= 2  # the stop, and the attacher's retry it set off
    assert sb.violations == []
