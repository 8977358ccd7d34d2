"""EC2 instances as EC2 runs them: transitions on the sandbox clock, the refusals EC2 gives (Spot,
instance store, stop protection, shutting-down), Force trying the OS shutdown before cutting the
power, SkipOsShutdown, eventually consistent Describe calls, and a new bootID per boot.
Every call goes through boto3 to the sandbox's endpoint."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

ZONE = "ap-southeast-1a"


@pytest.fixture
def plain(pool: Any) -> Any:
    return pool.get("stuck-terminating")


def admin(sb: Any) -> Any:
    return sb.ec2_client(max_attempts=0, timeout=10)


def launch(sb: Any, **kw: Any) -> str:
    return str(admin(sb).run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                       Placement={"AvailabilityZone": ZONE}, **kw)
               ["Instances"][0]["InstanceId"])


def code(e: pytest.ExceptionInfo[ClientError]) -> str:
    return str(e.value.response["Error"]["Code"])


def seen_state(sb: Any, iid: str) -> str:
    """What a client reads (DescribeInstances, possibly a moment behind)."""
    [res] = admin(sb).describe_instances(InstanceIds=[iid])["Reservations"]
    return str(res["Instances"][0]["State"]["Name"])


def test_a_stop_takes_a_minute_of_sandbox_time_and_describe_lags_the_change(plain):
    iid = launch(plain)
    out = admin(plain).stop_instances(InstanceIds=[iid])["StoppingInstances"][0]
    assert (out["PreviousState"]["Name"], out["CurrentState"]["Name"]) == ("running", "stopping")
    assert seen_state(plain, iid) == "running"  # eventually consistent: the old state, for a moment
    plain.advance(2)
    assert seen_state(plain, iid) == "stopping"
    plain.advance(57)
    assert plain.ec2.instance_state(iid) == "stopping"
    plain.advance(1)
    assert plain.ec2.instance_state(iid) == "stopped"
    plain.advance(2)
    assert seen_state(plain, iid) == "stopped"


def test_how_long_a_stop_takes_is_an_option(pool):
    sb = pool.fresh("stuck-terminating", stop_seconds=10, describe_lag=0)
    iid = launch(sb)
    admin(sb).stop_instances(InstanceIds=[iid])
    assert seen_state(sb, iid) == "stopping"  # no lag
    sb.advance(10)
    assert sb.ec2.instance_state(iid) == "stopped"


def test_a_detach_shows_in_describe_volumes_only_after_the_lag(plain):
    ec2 = admin(plain)
    iid = launch(plain)
    vid = str(ec2.create_volume(AvailabilityZone=ZONE, Size=1)["VolumeId"])
    ec2.attach_volume(VolumeId=vid, InstanceId=iid, Device="/dev/xvdf")
    plain.advance(5)
    ec2.detach_volume(VolumeId=vid, InstanceId=iid)
    assert ec2.describe_volumes(VolumeIds=[vid])["Volumes"][0]["State"] == "in-use"
    plain.advance(2)
    assert ec2.describe_volumes(VolumeIds=[vid])["Volumes"][0]["State"] == "available"


@pytest.mark.parametrize(("how", "error", "message"), [
    ("spot", "UnsupportedOperation", "one-time Spot Instance request"),
    ("instance-store", "UnsupportedOperation", "does not have an 'ebs' root device type"),
    ("stop-protection", "OperationNotPermitted", "Modify its 'disableApiStop' instance attribute"),
    ("shutting-down", "IncorrectInstanceState", "not in a state from which it can be stopped"),
])
def test_instances_ec2_will_not_stop_are_refused_even_with_force_and_left_as_they_were(
        plain, how, error, message):
    kw: dict[str, Any] = {}
    if how == "spot":
        kw["InstanceMarketOptions"] = {"MarketType": "spot"}
    if how == "stop-protection":
        kw["DisableApiStop"] = True
    iid = launch(plain, **kw)
    if how == "instance-store":
        plain.ec2.instance(iid).root_device_type = "instance-store"
    if how == "shutting-down":
        admin(plain).terminate_instances(InstanceIds=[iid])
    before = plain.ec2.instance_state(iid)
    for force in (False, True):
        with pytest.raises(ClientError) as e:
            admin(plain).stop_instances(InstanceIds=[iid], Force=force)
        assert code(e) == error and message in str(e.value)
    plain.advance(10)
    assert plain.ec2.instance_state(iid) == before


def test_one_refused_instance_fails_the_whole_request_and_stops_none(plain):
    ok, spot = launch(plain), launch(plain, InstanceMarketOptions={"MarketType": "spot"})
    with pytest.raises(ClientError) as e:
        admin(plain).stop_instances(InstanceIds=[ok, spot], Force=True)
    assert code(e) == "UnsupportedOperation"
    assert plain.ec2.instance_state(ok) == "running"


def test_force_tries_the_os_shutdown_first_so_a_healthy_guest_stops_cleanly_in_a_minute(plain):
    iid = launch(plain)
    admin(plain).stop_instances(InstanceIds=[iid], Force=True)
    plain.advance(60)
    assert plain.ec2.instance_state(iid) == "stopped"


def test_force_cuts_a_hung_guest_s_power_after_the_os_shutdown_timeout_skip_os_shutdown_at_once(plain):
    forced, skipped = launch(plain), launch(plain)
    plain.ec2.set_hung(forced)
    plain.ec2.set_hung(skipped)
    admin(plain).stop_instances(InstanceIds=[forced], Force=True)
    admin(plain).stop_instances(InstanceIds=[skipped], Force=True, SkipOsShutdown=True)
    plain.advance(5)
    assert (plain.ec2.instance_state(forced), plain.ec2.instance_state(skipped)) == ("stopping", "stopped")
    plain.advance(110)
    assert plain.ec2.instance_state(forced) == "stopping"
    plain.advance(5)
    assert plain.ec2.instance_state(forced) == "stopped"


def test_a_start_takes_time_and_a_terminate_goes_through_shutting_down(plain):
    iid = launch(plain)
    ec2 = admin(plain)
    ec2.stop_instances(InstanceIds=[iid])
    plain.advance(60)
    out = ec2.start_instances(InstanceIds=[iid])["StartingInstances"][0]
    assert out["CurrentState"]["Name"] == "pending"
    plain.advance(30)
    assert plain.ec2.instance_state(iid) == "running"
    ec2.terminate_instances(InstanceIds=[iid])
    assert plain.ec2.instance_state(iid) == "shutting-down"
    plain.advance(60)
    assert plain.ec2.instance_state(iid) == "terminated"


def test_a_terminated_instance_lets_go_of_its_data_volumes(plain):
    ec2 = admin(plain)
    iid = launch(plain)
    vid = str(ec2.create_volume(AvailabilityZone=ZONE, Size=1)["VolumeId"])
    ec2.attach_volume(VolumeId=vid, InstanceId=iid, Device="/dev/xvdf")
    ec2.terminate_instances(InstanceIds=[iid])
    assert plain.ec2.attachments()[vid] == [(iid, "attached")]
    plain.advance(60)
    assert plain.ec2.attachments()[vid] == []


def test_the_node_s_boot_id_changes_when_its_instance_stops_and_starts_not_when_a_hang_clears(pool):
    sb = pool.fresh("node-dead")
    node = sb.facts["new_node"]
    iid = sb.get("Node", None, node)["spec"]["providerID"].rsplit("/", 1)[-1]

    def boot() -> str:
        return str(sb.get("Node", None, node)["status"]["nodeInfo"]["bootID"])

    first = boot()
    sb.ec2.set_hung(iid)
    sb.advance(60)
    sb.recover_guest(node)
    sb.advance(10)
    assert boot() == first
    ec2 = admin(sb)
    ec2.stop_instances(InstanceIds=[iid])
    sb.advance(60)
    ec2.start_instances(InstanceIds=[iid])
    sb.advance(40)
    assert boot() != first
    assert any(e.reason == "Rebooted" and e.object == f"Node/{node}" for e in sb.events)


@pytest.mark.parametrize("value", ["soon", "-5"])
def test_a_bad_timing_option_is_refused_naming_it(value):
    from bot.sim.ec2_instances import Timing

    with pytest.raises(ValueError, match=f"option stop_seconds={value!r}: expected a number of seconds"):
        Timing.from_options({"stop_seconds": value})


def test_a_stop_under_way_keeps_its_remaining_time_when_the_clock_is_rebased(pool):
    from datetime import timedelta

    sb = pool.fresh("stuck-terminating")
    iid = launch(sb)
    admin(sb).stop_instances(InstanceIds=[iid])
    sb.advance(30)
    sb.rebase(sb.clock.now() + timedelta(days=400))
    sb.advance(25)
    assert sb.ec2.instance_state(iid) == "stopping"
    sb.advance(5)
    assert sb.ec2.instance_state(iid) == "stopped"
