"""Ec2Client translation of botocore errors, against moto over HTTP."""

from __future__ import annotations

import socket

import pytest
from moto.server import ThreadedMotoServer

from bot.clients.ec2 import Ec2Client, boto3_client
from bot.config import ClusterConfig
from bot.errors import PermanentError, RetryableError


@pytest.fixture(scope="module")
def ec2():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield boto3_client(region="us-east-1", endpoint_url=f"http://{host}:{port}",
                       credentials={"aws_access_key_id": "x", "aws_secret_access_key": "x"})
    server.stop()


def test_incorrect_state_errors_are_permanent_with_the_aws_code_kept(ec2):
    calls = []
    client = Ec2Client(client=ec2).bound(calls)
    vid = ec2.create_volume(Size=1, AvailabilityZone="us-east-1a")["VolumeId"]
    with pytest.raises(PermanentError) as e:
        client.detach_volume(volume_id=vid, instance_id="i-0123456789abcdef0", force=False)
    assert e.value.service == "ec2" and e.value.operation == "DetachVolume"
    assert e.value.code.endswith("NotFound") and e.value.__cause__ is not None
    assert calls[-1].outcome == e.value.code and calls[-1].targets == (vid, "i-0123456789abcdef0")


def test_unknown_ids_in_a_batch_are_left_out_instead_of_failing_the_call(ec2):
    calls = []
    vid = ec2.create_volume(Size=1, AvailabilityZone="us-east-1a")["VolumeId"]
    found = Ec2Client(client=ec2).bound(calls).describe_volumes([vid, "vol-0123456789abcdef0"])
    assert list(found) == [vid] and len(calls) == 1 and calls[0].request_id


def test_cluster_config_sets_region_and_retry_mode():
    cfg = ClusterConfig(name="prod", region="eu-west-1", retry_mode="adaptive", max_attempts=7)
    client = Ec2Client.from_cluster(cfg, endpoint_url="http://127.0.0.1:1").client
    assert client.meta.region_name == "eu-west-1"
    # botocore counts the first try too: max_attempts retries = 8 attempts in all
    assert client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 8}


def test_a_cluster_with_a_role_arn_calls_ec2_with_assumed_role_credentials(ec2, monkeypatch):
    endpoint = ec2.meta.endpoint_url
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", endpoint)  # botocore's own endpoint variable
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "base")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "base")
    cfg = ClusterConfig(name="prod", region="us-east-1",
                        role_arn="arn:aws:iam::123456789012:role/runbook-bot")
    client = Ec2Client.from_cluster(cfg, endpoint_url=endpoint)
    signing = client.client._request_signer._credentials
    assert signing.method == "runbook-bot-assume-role"  # the session's one credential provider
    creds = signing.get_frozen_credentials()
    assert creds.access_key != "base" and creds.token  # temporary credentials from STS
    # they carry STS's expiry (an hour), so botocore fetches new ones before then
    assert not signing.refresh_needed() and signing.refresh_needed(refresh_in=3700)
    calls = []
    client.bound(calls).describe_instances(["i-0123456789abcdef0"])
    assert [c.outcome for c in calls] == ["ok"]


def test_an_unreachable_endpoint_is_retryable_and_every_attempt_is_recorded():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    raw = boto3_client(region="us-east-1", endpoint_url=f"http://127.0.0.1:{port}", max_attempts=2,
                       timeout=1, credentials={"aws_access_key_id": "x", "aws_secret_access_key": "x"})
    calls = []
    with pytest.raises(RetryableError) as e:
        Ec2Client(client=raw).bound(calls).describe_instances(["i-0123456789abcdef0"])
    assert e.value.code == "EndpointConnectionError" and e.value.service == "ec2"
    assert [c.outcome for c in calls] == ["EndpointConnectionError"] * 3  # first try + 2 retries


def test_a_cluster_profile_selects_its_credentials(tmp_path, monkeypatch):
    creds = tmp_path / "credentials"
    creds.write_text("[prod]\naws_access_key_id = AKIDPRODUCTION\naws_secret_access_key = s\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    client = Ec2Client.from_cluster(ClusterConfig(name="prod", region="eu-west-1", profile="prod"),
                                    endpoint_url="http://127.0.0.1:1").client
    frozen = client._request_signer._credentials.get_frozen_credentials()
    assert frozen.access_key == "AKIDPRODUCTION" and client.meta.region_name == "eu-west-1"


def test_an_instance_type_is_asked_for_once_in_the_clients_life(ec2):
    """A type's facts (its instance store) never change: a second step's view, in another pass,
    is answered from what the first read, recorded as ``cached``; a new type is still asked."""
    root = Ec2Client(client=ec2)
    first, second = [], []
    got = root.bound(first).describe_instance_types(["m5d.large"])
    again = root.bound(second).describe_instance_types(["m5d.large"])
    assert got == again and got["m5d.large"]["InstanceStorageInfo"]["TotalSizeInGB"] > 0
    assert [c.outcome for c in first] == ["ok"] and [c.outcome for c in second] == ["cached"]
    third = []
    root.bound(third).describe_instance_types(["m5d.large", "m5.large"])
    assert [(c.operation, c.outcome) for c in third] == [("DescribeInstanceTypes", "ok")]
    assert Ec2Client(client=ec2).bound(fourth := []).describe_instance_types(["m5d.large"])
    assert [c.outcome for c in fourth] == ["ok"]  # another client asks for itself


@pytest.mark.parametrize("stamp", ["2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00Z",
                                   "2025-12-31T23:59:59.123456Z", "2026-01-01T08:00:00+08:00",
                                   "1700000000", "Tue, 15 Nov 1994 08:12:31 GMT"])
def test_the_clients_read_a_timestamp_as_botocore_does(stamp):
    import botocore.utils

    from bot.clients.aws import parse_timestamp

    mine, botocores = parse_timestamp(stamp), botocore.utils.parse_timestamp(stamp)
    assert (mine, repr(mine)) == (botocores, repr(botocores))
    assert parse_timestamp(stamp) is mine  # parsed once


def test_a_volumes_create_time_is_parsed_once_however_often_it_is_described(ec2):
    from bot.clients.aws import _parsed

    vid = ec2.create_volume(Size=1, AvailabilityZone="us-east-1a")["VolumeId"]
    first = ec2.describe_volumes(VolumeIds=[vid])["Volumes"][0]["CreateTime"]
    before = _parsed.cache_info()
    again = ec2.describe_volumes(VolumeIds=[vid])["Volumes"][0]["CreateTime"]
    after = _parsed.cache_info()
    assert again is first and first.tzinfo is not None
    assert after.hits > before.hits and after.misses == before.misses
