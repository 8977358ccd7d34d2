"""deploy/iam-policy.json allows exactly the EC2 calls the code makes, on the resources it makes them on.

IAM authorizes a request once per resource it names: ``DetachVolume`` names the volume and the
instance, and each must be allowed. The EBS CSI driver tags the volumes it creates
``ebs.csi.aws.com/cluster=true`` (``kubernetes.io/cluster/NAME=owned`` only with
``--k8s-tag-cluster-id``), so a condition on the cluster tag alone denied the force detach and
the deletion of exactly the volumes the runbooks need them for. The evaluation here covers what
this policy uses: Allow statements, action and resource wildcards, ``StringEquals`` on
``aws:ResourceTag``.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[2]
POLICY = json.loads((ROOT / "deploy" / "iam-policy.json").read_text())
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


def allowed(policy: dict[str, Any], action: str, resource: tuple[str, dict[str, str]]) -> bool:
    arn, tags = resource
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow" and set(st) <= {"Sid", "Effect", "Action", "Resource",
                                                       "Condition"}, st
        if not any(fnmatch.fnmatchcase(action, a) for a in as_list(st["Action"])):
            continue
        if not any(fnmatch.fnmatchcase(arn, r) for r in as_list(st["Resource"])):
            continue
        condition = st.get("Condition", {})
        assert set(condition) <= {"StringEquals"}, condition
        if all(k.startswith("aws:ResourceTag/") and tags.get(k.removeprefix("aws:ResourceTag/")) == v
               for k, v in condition.get("StringEquals", {}).items()):
            return True
    return False


def request(policy: dict[str, Any], action: str, *resources: tuple[str, dict[str, str]]) -> bool:
    return all(allowed(policy, action, r) for r in resources)


def test_the_ec2_actions_are_exactly_the_calls_the_client_makes() -> None:
    source = (ROOT / "bot" / "clients" / "ec2.py").read_text()
    called = {"ec2:" + "".join(w.title() for w in m.split("_"))
              for m in re.findall(r"self\.client\.(\w+)\(", source)} - {"ec2:GetPaginator"}
    called |= {f"ec2:{op}" for op in re.findall(r'_paginate\("(\w+)"', source)}
    granted = {a for st in POLICY["Statement"] for a in as_list(st["Action"]) if a.startswith("ec2:")}
    assert called == granted


def test_a_force_detach_of_a_csi_volume_from_a_cluster_node_is_allowed() -> None:
    assert request(POLICY, "ec2:DetachVolume", CSI_VOLUME, NODE)
    assert request(POLICY, "ec2:DetachVolume", TAGGED_VOLUME, NODE)
    assert request(POLICY, "ec2:DeleteVolume", CSI_VOLUME)
    assert request(POLICY, "ec2:StopInstances", NODE)


def test_the_old_condition_denied_the_csi_volume_at_the_worst_moment() -> None:
    old = {"Statement": [{"Effect": "Allow", "Action": ["ec2:StopInstances", "ec2:DetachVolume",
                                                          "ec2:DeleteVolume"], "Resource": "*",
                          "Condition": {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": "owned"}}}]}
    assert not request(old, "ec2:DetachVolume", CSI_VOLUME, NODE)
    assert not request(old, "ec2:DeleteVolume", CSI_VOLUME)


@pytest.mark.parametrize(("action", "resources"), [
    ("ec2:DeleteVolume", (FOREIGN_VOLUME,)),
    ("ec2:DetachVolume", (FOREIGN_VOLUME, NODE)),
    ("ec2:DetachVolume", (CSI_VOLUME, FOREIGN_INSTANCE)),
    ("ec2:StopInstances", (FOREIGN_INSTANCE,)),
    ("ec2:TerminateInstances", (NODE,)),
    ("ec2:DeleteVolume", (NODE,)),
])
def test_writes_outside_the_cluster_or_beyond_the_actions_are_denied(
        action: str, resources: tuple[tuple[str, dict[str, str]], ...]) -> None:
    assert not request(POLICY, action, *resources)


def test_role_arn_needs_sts_assume_role_on_the_target_role() -> None:
    (st,) = [s for s in POLICY["Statement"] if "sts:AssumeRole" in as_list(s["Action"])]
    assert as_list(st["Resource"]) and all(r.startswith("arn:aws:iam::") and ":role/" in r
                                           for r in as_list(st["Resource"]))
