"""deploy/iam-policy.json allows exactly the EC2 calls the code makes, on the resources it makes them on.

IAM authorizes a request once per resource it names: ``DetachVolume`` names the volume and the
instance, and each must be allowed. The EBS CSI driver tags the volumes it creates
``ebs.csi.aws.com/cluster=true`` (``kubernetes.io/cluster/NAME=owned`` only with
``--k8s-tag-cluster-id``), so a condition on the cluster tag alone denied the force detach and
the deletion of exactly the volumes the runbooks need them for. The policy is evaluated as the
sandbox's EC2 endpoint evaluates it (``bot.sim.iam``), on the tags each tool puts on resources.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bot.sim.iam import Policy, condition_context

ROOT = Path(__file__).parents[2]
POLICY = json.loads((ROOT / "deploy" / "iam-policy.json").read_text())
SHIPPED = Policy.load(ROOT / "deploy" / "iam-policy.json", cluster_name="CLUSTER_NAME")
CLUSTER_TAG = "kubernetes.io/cluster/CLUSTER_NAME"

NODE = ("arn:aws:ec2:eu-west-1:111122223333:instance/i-0123456789abcdef0", {CLUSTER_TAG: "owned",
                                                                             "eks:cluster-name": "x"})
CSI_VOLUME = ("arn:aws:ec2:eu-west-1:111122223333:volume/vol-0123456789abcdef0",
              {"ebs.csi.aws.com/cluster": "true", "CSIVolumeName": "pvc-1"})
TAGGED_VOLUME = ("arn:aws:ec2:eu-west-1:111122223333:volume/vol-0aaaaaaaaaaaaaaa1",
                 {CLUSTER_TAG: "owned", "KubernetesCluster": "CLUSTER_NAME"})  # in-tree or cluster id
FOREIGN_VOLUME = ("arn:aws:ec2:eu-west-1:111122223333:volume/vol-0bbbbbbbbbbbbbbb2", {"team": "db"})
FOREIGN_INSTANCE = ("arn:aws:ec2:eu-west-1:111122223333:instance/i-0bbbbbbbbbbbbbbb2", {})


def as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [x]


def request(policy: Policy, action: str, *resources: tuple[str, dict[str, str]]) -> bool:
    """IAM's answer as the sandbox's EC2 endpoint evaluates it: every resource must be allowed."""
    contexts = [(arn, condition_context(tags, {})) for arn, tags in resources]
    return policy.evaluate(action.removeprefix("ec2:"), contexts, principal="bot") is None


def test_the_ec2_actions_are_exactly_the_calls_the_client_makes() -> None:
    source = (ROOT / "bot" / "clients" / "ec2.py").read_text()
    called = {"ec2:" + "".join(w.title() for w in m.split("_"))
              for m in re.findall(r"(?:self\.client|writer)\.(\w+)\(", source)} - {"ec2:GetPaginator"}
    called |= {f"ec2:{op}" for op in re.findall(r'_paginate\("(\w+)"', source)}
    granted = {a for st in POLICY["Statement"] for a in as_list(st["Action"]) if a.startswith("ec2:")}
    # CreateTags is how EC2 authorizes the TagSpecifications of CreateSnapshot
    assert called | {"ec2:CreateTags"} == granted


def test_a_force_detach_of_a_csi_volume_from_a_cluster_node_is_allowed() -> None:
    assert request(SHIPPED, "ec2:DetachVolume", CSI_VOLUME, NODE)
    assert request(SHIPPED, "ec2:DetachVolume", TAGGED_VOLUME, NODE)
    assert request(SHIPPED, "ec2:DeleteVolume", CSI_VOLUME)
    assert request(SHIPPED, "ec2:StopInstances", NODE)
    assert request(SHIPPED, "ec2:TerminateInstances", NODE)  # the fence of a Spot node


def test_the_old_condition_denied_the_csi_volume_at_the_worst_moment(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"Statement": [{
        "Effect": "Allow", "Action": ["ec2:StopInstances", "ec2:DetachVolume", "ec2:DeleteVolume"],
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:ResourceTag/kubernetes.io/cluster/CLUSTER_NAME": "owned"}},
    }]}))
    old = Policy.load(path, cluster_name="CLUSTER_NAME")
    assert not request(old, "ec2:DetachVolume", CSI_VOLUME, NODE)
    assert not request(old, "ec2:DeleteVolume", CSI_VOLUME)


@pytest.mark.parametrize(("action", "resources"), [
    ("ec2:DeleteVolume", (FOREIGN_VOLUME,)),
    ("ec2:DetachVolume", (FOREIGN_VOLUME, NODE)),
    ("ec2:DetachVolume", (CSI_VOLUME, FOREIGN_INSTANCE)),
    ("ec2:StopInstances", (FOREIGN_INSTANCE,)),
    ("ec2:TerminateInstances", (FOREIGN_INSTANCE,)),
    ("ec2:DeleteVolume", (NODE,)),
])
def test_writes_outside_the_cluster_or_beyond_the_actions_are_denied(
        action: str, resources: tuple[tuple[str, dict[str, str]], ...]) -> None:
    assert not request(SHIPPED, action, *resources)


def test_role_arn_needs_sts_assume_role_on_the_target_role() -> None:
    (st,) = [s for s in POLICY["Statement"] if "sts:AssumeRole" in as_list(s["Action"])]
    # a run's session carries its run id as SourceIdentity and its people as session tags
    assert set(as_list(st["Action"])) == {"sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"}
    assert as_list(st["Resource"]) and all(r.startswith("arn:aws:iam::") and ":role/" in r
                                           for r in as_list(st["Resource"]))
