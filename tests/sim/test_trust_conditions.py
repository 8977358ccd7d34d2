"""The shipped trust policy requires a SourceIdentity and the bot's session tags on every
AssumeRole of the role ``role_arn`` names, and the sandbox's STS evaluates those conditions.

Without them anyone holding the bot's base credentials could open a session of the role that
CloudTrail attributes to no run and no person, and a code path of the bot that forgot the
attribution would go unnoticed. With them, every AssumeRole the bot makes (a run's session, the
cluster's shared session, ``config check``'s) carries both, and anything else is refused.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from bot.clients.attribution import TAG_REQUESTER, Attribution, SharedSession
from bot.clients.ec2 import Ec2Client
from bot.config import ClusterConfig
from bot.sim.sts import trust_context
from bot.sim.trust import DEFAULT_TRUST, TrustPolicy

ROLE = "arn:aws:iam::123456789012:role/runbook-bot"
CALLER = "arn:aws:sts::123456789012:assumed-role/runbook-bot/testing"
ACTIONS = ("sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity")


@pytest.fixture
def sts(pool: Any) -> Any:
    sb = pool.get("stuck-terminating")  # the shipped trust policy, enforced
    return sb, boto3.session.Session().client(
        "sts", region_name=sb.region, endpoint_url=sb.ec2.endpoint,
        aws_access_key_id="testing", aws_secret_access_key="testing")


def _code(e: pytest.ExceptionInfo[ClientError]) -> str:
    return str(e.value.response["Error"]["Code"])


def test_an_assume_role_without_source_identity_or_session_tags_is_refused(sts: Any) -> None:
    """The attack: the bot's base credentials open a session that names no run and no person."""
    sb, client = sts
    bare = {"RoleArn": ROLE, "RoleSessionName": "anonymous"}
    tags = [{"Key": TAG_REQUESTER, "Value": "alice"}]
    before = len(sb.ec2.refused)
    for extra in ({}, {"SourceIdentity": "rb-1"}, {"Tags": tags},
                  {"SourceIdentity": "rb-1", "Tags": [*tags, {"Key": "team", "Value": "x"}]}):
        with pytest.raises(ClientError) as e:
            client.assume_role(**bare, **extra)
        assert _code(e) == "AccessDenied", extra
        assert "trust policy" in str(e.value), extra
    assert [a for _, a, _ in sb.ec2.refused[before:]] == ["sts:AssumeRole"] * 4
    # what a run's session sends is accepted
    who = Attribution.of(run_id="rb-1", requester="alice", approvers=["bob"])
    assert client.assume_role(RoleArn=ROLE, RoleSessionName=who.session_name,
                              SourceIdentity=who.source_identity, Tags=who.tags())["Credentials"]


def test_the_clusters_shared_session_carries_a_source_identity_and_the_requester_tag(
        sts: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sb, _ = sts
    for key, value in sb.env.items():
        monkeypatch.setenv(key, value)
    cfg = ClusterConfig(name="prod", region=sb.region, role_arn=ROLE)
    for requester in ("runbook-bot", "carol"):  # the bot's own, and config check's for carol
        client = Ec2Client.from_cluster(cfg, requester=requester)
        assert isinstance(client.describe_instances(), dict)  # the session was let in
        call = [c for c in sb.ec2.sts.calls if c.action == "AssumeRole"][-1]
        assert (call.session_name, call.source_identity, call.tags) == (
            "runbook-bot-prod", requester, {TAG_REQUESTER: requester})


def test_the_shipped_conditions_allow_exactly_what_the_bot_sends() -> None:
    shipped = TrustPolicy.load(DEFAULT_TRUST)

    def refused(params: dict[str, Any]) -> list[str]:
        context = trust_context(params)
        return [a for a in ACTIONS if shipped.refuses(a, CALLER, ROLE, context)]

    def wire(source_identity: str, tags: list[dict[str, str]]) -> dict[str, str]:
        params = {"SourceIdentity": source_identity} if source_identity else {}
        for n, tag in enumerate(tags, start=1):
            params |= {f"Tags.member.{n}.Key": tag["Key"], f"Tags.member.{n}.Value": tag["Value"]}
        return params

    run = Attribution.of(run_id="rb-7k3q2", requester="alice", approvers=["bob", "carol"])
    shared = SharedSession(cluster="prod")
    assert refused(wire(run.source_identity, run.tags())) == []
    assert refused(wire(shared.source_identity, shared.tags())) == []
    assert refused(wire("", run.tags())) == list(ACTIONS)
    assert refused(wire(run.source_identity, [])) == list(ACTIONS)
    assert refused(wire(run.source_identity, [*run.tags(), {"Key": "x", "Value": "y"}])) == list(
        ACTIONS)
