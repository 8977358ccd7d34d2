"""The sandbox holds the bot's credentials to deploy/iam-policy.json, tag conditions included, and
answers STS locally (recording SourceIdentity and session tags), reached through the same
environment variables as production: AWS_ENDPOINT_URL_EC2 and AWS_ENDPOINT_URL_STS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from bot.clients.ec2 import Ec2Client
from bot.config import ClusterConfig
from bot.sim.iam import Policy, PolicyFileError
from bot.sim.trust import DEFAULT_TRUST, TrustPolicy

ZONE = "ap-southeast-1a"
OLD_POLICY = {  # the shipped policy before CSI-created volumes were matched by their own tag
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"},
        {"Effect": "Allow", "Action": ["ec2:StopInstances", "ec2:DetachVolume", "ec2:DeleteVolume"],
         "Resource": "*", "Condition": {"StringEquals": {
             "aws:ResourceTag/kubernetes.io/cluster/CLUSTER_NAME": "owned"}}}]}


def bot(sb: Any) -> Any:
    return sb.ec2_client(as_bot=True, max_attempts=0, timeout=10)


def admin(sb: Any) -> Any:
    return sb.ec2_client(max_attempts=0, timeout=10)


def code(e: pytest.ExceptionInfo[ClientError]) -> str:
    return str(e.value.response["Error"]["Code"])


def launch(sb: Any, tags: dict[str, str] | None = None) -> str:
    kw: dict[str, Any] = {}
    if tags:
        kw["TagSpecifications"] = [{"ResourceType": "instance",
                                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    return str(admin(sb).run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                       Placement={"AvailabilityZone": ZONE}, **kw)
               ["Instances"][0]["InstanceId"])


@pytest.fixture
def plain(pool: Any) -> Any:
    return pool.get("stuck-terminating")


def test_the_bot_cannot_stop_an_instance_that_is_not_its_cluster_s(plain):
    other = launch(plain, {"kubernetes.io/cluster/another": "owned"})
    for dry_run in (True, False):
        with pytest.raises(ClientError) as e:
            bot(plain).stop_instances(InstanceIds=[other], Force=True, DryRun=dry_run)
        assert code(e) == "UnauthorizedOperation"  # before DryRunOperation, as EC2 checks
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert f"ec2:StopInstances on resource: arn:aws:ec2:ap-southeast-1:123456789012:instance/{other}" \
            in str(e.value)
    assert plain.ec2.instance_state(other) == "running"
    mine = launch(plain, {"kubernetes.io/cluster/sandbox": "owned"})
    with pytest.raises(ClientError) as e:
        bot(plain).stop_instances(InstanceIds=[mine], Force=True, DryRun=True)
    assert code(e) == "DryRunOperation"
    bot(plain).stop_instances(InstanceIds=[mine], Force=True)
    assert plain.ec2.instance_state(mine) == "stopping"


def test_the_bot_may_read_but_not_launch_attach_or_terminate_another_cluster_s_machine(plain):
    mine = launch(plain, {"kubernetes.io/cluster/sandbox": "owned"})
    theirs = launch(plain, {"kubernetes.io/cluster/other": "owned"})
    assert bot(plain).describe_instances(InstanceIds=[mine])["Reservations"]
    calls = [lambda: bot(plain).run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1),
             lambda: bot(plain).terminate_instances(InstanceIds=[theirs]),
             lambda: bot(plain).create_volume(AvailabilityZone=ZONE, Size=1)]
    for call in calls:
        with pytest.raises(ClientError) as e:
            call()
        assert code(e) == "UnauthorizedOperation"
    assert plain.ec2.instance_state(mine) == plain.ec2.instance_state(theirs) == "running"


def test_a_detach_needs_both_the_cluster_s_instance_and_a_csi_volume(plain):
    ec2 = admin(plain)
    mine = launch(plain, {"kubernetes.io/cluster/sandbox": "owned"})
    plain_vol = str(ec2.create_volume(AvailabilityZone=ZONE, Size=1)["VolumeId"])
    csi_vol = str(ec2.create_volume(AvailabilityZone=ZONE, Size=1, TagSpecifications=[{
        "ResourceType": "volume", "Tags": [{"Key": "ebs.csi.aws.com/cluster", "Value": "true"}]}])
        ["VolumeId"])
    ec2.attach_volume(VolumeId=plain_vol, InstanceId=mine, Device="/dev/xvdf")
    ec2.attach_volume(VolumeId=csi_vol, InstanceId=mine, Device="/dev/xvdg")
    with pytest.raises(ClientError) as e:
        bot(plain).detach_volume(VolumeId=plain_vol, Force=True)  # InstanceId left out, as allowed
    assert code(e) == "UnauthorizedOperation" and f"volume/{plain_vol}" in str(e.value)
    bot(plain).detach_volume(VolumeId=csi_vol, InstanceId=mine, Force=True)
    assert plain.ec2.attachments()[csi_vol] == []
    assert plain.ec2.attachments()[plain_vol] == [(mine, "attached")]


def test_the_csi_driver_s_volumes_are_tagged_as_the_driver_tags_them(pool):
    sb = pool.get("node-dead")
    f = sb.facts
    tags = sb.ec2.tags(f["volume_id"])
    assert tags == {"CSIVolumeName": f["pv"], "ebs.csi.aws.com/cluster": "true",
                    "kubernetes.io/created-for/pv/name": f["pv"],
                    "kubernetes.io/created-for/pvc/name": f["pvc"],
                    "kubernetes.io/created-for/pvc/namespace": f["namespace"]}
    assert sb.ec2.tags(f["instance_id"])["kubernetes.io/cluster/sandbox"] == "owned"


@pytest.mark.parametrize("tag_cluster_id", [False, True])
def test_the_old_policy_refused_force_detaching_csi_volumes_unless_the_driver_tags_the_cluster(
        pool, tmp_path, tag_cluster_id):
    policy = tmp_path / "old-policy.json"
    policy.write_text(json.dumps(OLD_POLICY))
    sb = pool.fresh("stuck-detach", iam_policy=str(policy), k8s_tag_cluster_id=tag_cluster_id)
    f = sb.facts
    if tag_cluster_id:
        bot(sb).detach_volume(VolumeId=f["volume_id"], InstanceId=f["instance_id"], Force=True)
        assert (f["instance_id"], "busy") not in sb.ec2.attachments()[f["volume_id"]]
        return
    with pytest.raises(ClientError) as e:
        bot(sb).detach_volume(VolumeId=f["volume_id"], InstanceId=f["instance_id"], Force=True)
    assert code(e) == "UnauthorizedOperation"
    assert sb.ec2.attachments()[f["volume_id"]] == [(f["instance_id"], "busy")]


def test_a_policy_the_sandbox_cannot_evaluate_is_refused_naming_the_statement(tmp_path):
    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps({"Statement": [{"Sid": "Fence", "Effect": "Allow",
                                              "Action": "ec2:StopInstances", "Resource": "*",
                                              "Condition": {"DateGreaterThan": {"aws:CurrentTime": "x"}}}]}))
    with pytest.raises(PolicyFileError, match="Statement Fence: condition operator DateGreaterThan"):
        Policy.load(bad, cluster_name="c")


def test_the_shipped_policy_loads_and_names_the_cluster():
    policy = Policy.load(Path(__file__).resolve().parents[2] / "deploy" / "iam-policy.json",
                         cluster_name="prod")
    assert "kubernetes.io/cluster/prod" in json.dumps(policy.statements)


def test_sts_is_answered_locally_and_records_source_identity_and_session_tags(plain, monkeypatch):
    for key, value in plain.env.items():
        monkeypatch.setenv(key, value)
    session = boto3.session.Session()
    sts = session.client("sts", region_name=plain.region)  # the endpoint comes from the environment
    assert sts.get_caller_identity()["Account"] == "123456789012"
    creds = sts.assume_role(RoleArn="arn:aws:iam::123456789012:role/runbook-bot",
                            RoleSessionName="run-42", SourceIdentity="alice",
                            Tags=[{"Key": "runbook-bot-requester", "Value": "alice"},
                                  {"Key": "runbook-bot-approver-1", "Value": "bob"}],
                            TransitiveTagKeys=["runbook-bot-requester"])["Credentials"]
    call = [c for c in plain.ec2.sts.calls if c.action == "AssumeRole"][-1]
    assert (call.action, call.role_arn, call.session_name, call.source_identity) == (
        "AssumeRole", "arn:aws:iam::123456789012:role/runbook-bot", "run-42", "alice")
    assert call.tags == {"runbook-bot-requester": "alice", "runbook-bot-approver-1": "bob"}
    assert call.transitive_tag_keys == ("runbook-bot-requester",)
    assert call.access_key == "testing"
    # the assumed role's credentials are held to the policy too
    ec2 = session.client("ec2", region_name=plain.region, aws_access_key_id=creds["AccessKeyId"],
                       aws_secret_access_key=creds["SecretAccessKey"],
                       aws_session_token=creds["SessionToken"])
    assert "Reservations" in ec2.describe_instances()
    with pytest.raises(ClientError) as e:
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)
    assert code(e) == "UnauthorizedOperation"


def test_the_product_s_assumed_role_client_asks_sts_on_the_wire(plain, monkeypatch):
    for key, value in plain.env.items():
        monkeypatch.setenv(key, value)
    cfg = ClusterConfig(name="prod", region=plain.region,
                        role_arn="arn:aws:iam::123456789012:role/runbook-bot")
    client = Ec2Client.from_cluster(cfg)
    assert isinstance(client.describe_instances(), dict)
    [call] = [c for c in plain.ec2.sts.calls if c.session_name == "runbook-bot-prod"]
    assert call.action == "AssumeRole" and call.role_arn == cfg.role_arn


TAGGED = {"RoleArn": "arn:aws:iam::123456789012:role/runbook-bot",
          "RoleSessionName": "runbook-bot-rb-1", "SourceIdentity": "rb-1",
          "Tags": [{"Key": "runbook-bot-run", "Value": "rb-1"}]}


@pytest.mark.parametrize(("actions", "refused"), [
    (["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"], None),
    (["sts:AssumeRole", "sts:SetSourceIdentity"], "sts:TagSession"),
    (["sts:AssumeRole", "sts:TagSession"], "sts:SetSourceIdentity"),
])
def test_assume_role_is_held_to_the_role_s_trust_policy(pool, tmp_path, actions, refused):
    trust = tmp_path / "trust.json"
    trust.write_text(json.dumps({"Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::ACCOUNT_ID:role/runbook-bot"},
        "Action": actions}]}))
    sb = pool.fresh("stuck-terminating", trust_policy=str(trust))
    sts = boto3.session.Session().client("sts", region_name=sb.region, endpoint_url=sb.ec2.endpoint,
                                         aws_access_key_id="testing", aws_secret_access_key="testing")
    if refused is None:
        assert sts.assume_role(**TAGGED)["Credentials"]["AccessKeyId"]
        return
    with pytest.raises(ClientError) as e:
        sts.assume_role(**TAGGED)
    assert code(e) == "AccessDenied"
    assert refused in str(e.value) and "trust policy does not allow it" in str(e.value)


def test_a_role_that_trusts_another_principal_is_not_assumed(pool, tmp_path):
    trust = tmp_path / "trust.json"
    trust.write_text(json.dumps({"Statement": [{
        "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::ACCOUNT_ID:role/someone-else"},
        "Action": "sts:*"}]}))
    sb = pool.fresh("stuck-terminating", trust_policy=str(trust))
    sts = boto3.session.Session().client("sts", region_name=sb.region, endpoint_url=sb.ec2.endpoint,
                                         aws_access_key_id="testing", aws_secret_access_key="testing")
    with pytest.raises(ClientError) as e:
        sts.assume_role(**TAGGED)
    assert code(e) == "AccessDenied" and "sts:AssumeRole" in str(e.value)


def test_the_shipped_trust_policy_loads_and_a_condition_is_refused_naming_the_statement(tmp_path):
    shipped = TrustPolicy.load(DEFAULT_TRUST)
    caller = "arn:aws:sts::123456789012:assumed-role/runbook-bot/key"
    attributed = {"sts:SourceIdentity": "rb-1", "aws:RequestTag/runbook-bot-requester": "alice",
                  "aws:TagKeys": ["runbook-bot-requester"]}
    for action in ("sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"):
        assert shipped.refuses(action, caller, "arn:aws:iam::123456789012:role/x", attributed) == ""
    bad = tmp_path / "trust.json"
    bad.write_text(json.dumps({"Statement": [{"Sid": "Bot", "Effect": "Allow", "Principal": "*",
                                              "Action": "sts:AssumeRole",
                                              "Condition": {"StringEquals": {"sts:ExternalId": "x"}}}]}))
    with pytest.raises(PolicyFileError,
                       match="Statement Bot: condition key sts:ExternalId is not evaluated"):
        TrustPolicy.load(bad)
