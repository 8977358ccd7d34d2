"""deploy/iam-policy.json grants exactly the EC2 calls the actions make, writes only under tag
conditions that match what the EBS CSI driver, EKS Auto Mode and the in-tree plugin really put on
volumes, and snapshots only when they carry the run that took them."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICY = json.loads((ROOT / "deploy" / "iam-policy.json").read_text())


def _granted() -> set[str]:
    out = set()
    for st in POLICY["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        out |= {a.removeprefix("ec2:") for a in actions}
    return out


def _called() -> set[str]:
    """Every EC2 operation the product's client makes (its records name each one)."""
    text = (ROOT / "bot" / "clients" / "ec2.py").read_text()
    return set(re.findall(r'(?:_call|_paginate|_write|_dry_run)\("(\w+)"', text))


def test_the_policy_grants_exactly_the_calls_the_client_makes():
    # CreateTags is how EC2 authorizes the TagSpecifications of CreateSnapshot
    sts = {"sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"}  # role_arn's run sessions
    assert _granted() - sts == _called() | {"CreateTags"}


def _statements(action: str) -> list[dict]:
    return [st for st in POLICY["Statement"]
            if f"ec2:{action}" in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])]


def test_deletes_and_snapshots_are_held_to_the_tags_each_ebs_driver_puts_on_its_volumes():
    for action in ("DeleteVolume", "CreateSnapshot"):
        on_volumes = [st for st in _statements(action) if st["Resource"].endswith(":volume/*")]
        keys = {k for st in on_volumes for k in st["Condition"]["StringEquals"]}
        assert keys == {"aws:ResourceTag/ebs.csi.aws.com/cluster",  # EBS CSI driver
                        "aws:ResourceTag/eks:eks-cluster-name",  # EKS Auto Mode
                        "aws:ResourceTag/kubernetes.io/cluster/CLUSTER_NAME"}  # in-tree
        assert all(st.get("Condition") for st in _statements(action))


def test_snapshots_must_carry_their_run_and_tags_only_come_with_them():
    snap = [st for st in _statements("CreateSnapshot") if st["Resource"].endswith(":snapshot/*")]
    assert snap and snap[0]["Condition"] == {"StringLike": {"aws:RequestTag/runbook-bot/run": "*"}}
    [tags] = _statements("CreateTags")
    assert tags["Condition"] == {"StringEquals": {"ec2:CreateAction": "CreateSnapshot"}}


def test_the_snapshot_action_tags_what_the_policy_requires():
    from bot.actions.ec2_snapshots import TAG_RUN

    assert TAG_RUN == "runbook-bot/run"
