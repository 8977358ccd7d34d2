"""What one more cluster needs before the bot can reach it with EKS tokens: RBAC, an access entry,
and the AWS role its EC2 calls are made with, rendered for that cluster.

Usage::

    python scripts/cluster_access.py NAME --account ACCOUNT_ID --bot-role-arn ARN \\
        [--eks-name EKS_NAME] [--region REGION] [--role-name runbook-bot] [--out DIR]

writes into ``DIR`` (default ``deploy/clusters/NAME``):

- ``rbac.yaml``: the ClusterRole and the node-Lease Role of deploy/rbac.yaml, rule for rule, and
  the terminal users' read-only role; bound to the group ``runbook-bot`` instead of the bot's
  ServiceAccount (the bot runs elsewhere: it is the IAM role the access entry maps);
- ``access-entry.json``: the EKS access entry mapping the cluster's role to the user
  ``runbook-bot`` in that group (``aws eks create-access-entry --cli-input-json file://...``);
- ``role-policy.json``: deploy/iam-policy.json for this cluster, without ``AssumeClusterRoles``
  (only the bot's own role assumes roles);
- ``role-trust-policy.json``: deploy/role-trust-policy.json trusting ``--bot-role-arn``, the role
  the bot's pods run as;
- ``cluster.yaml``: the cluster's entry of the bot's config (``auth: eks``).

deploy/second-cluster/ is this script's output for the placeholders ``CLUSTER``, ``ACCOUNT_ID``
and ``HOME_ACCOUNT_ID`` (tests/deploy/test_cluster_access.py keeps them in step). The rules are
read from deploy/rbac.yaml and deploy/iam-policy.json each time, so they never drift.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
GROUP = "runbook-bot"  # the Kubernetes group the access entry puts the bot's role in
USER = "runbook-bot"
BOT_ROLES = ("runbook-bot", "runbook-bot-node-leases")  # the bot's grants in deploy/rbac.yaml
PEOPLE_ROLES = ("runbook-bot-operators",)  # terminal users' read-only grant, bound as shipped
HEADER = ("# runbook-bot's grants in cluster {cluster}, rendered from deploy/rbac.yaml by\n"
          "# scripts/cluster_access.py: the bot reaches this cluster with EKS tokens of its role\n"
          "# {role}, which the access entry (access-entry.json) maps to the group " + GROUP + ".\n")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe").load_all(path.read_text()) if isinstance(d, dict)]


def rbac(cluster: str, role_arn: str) -> str:
    """deploy/rbac.yaml's roles of the bot and of terminal users, the bot's bound to ``GROUP``."""
    out = []
    for d in _docs(DEPLOY / "rbac.yaml"):
        name = (d.get("metadata") or {}).get("name")
        if d.get("kind") in ("ClusterRole", "Role") and name in BOT_ROLES + PEOPLE_ROLES:
            out.append(d)
        elif d.get("kind") in ("ClusterRoleBinding", "RoleBinding") and name in BOT_ROLES:
            d = copy.deepcopy(d)
            d["subjects"] = [{"kind": "Group", "name": GROUP, "apiGroup": "rbac.authorization.k8s.io"}]
            out.append(d)
        elif d.get("kind") == "ClusterRoleBinding" and name in PEOPLE_ROLES:
            out.append(d)
    text = io.StringIO()
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.dump_all(out, text)
    return HEADER.format(cluster=cluster, role=role_arn) + text.getvalue()


def render(cluster: str, *, account: str, bot_role_arn: str, eks_name: str | None = None,
           region: str = "REGION", role_name: str = "runbook-bot") -> dict[str, str]:
    """File name -> text of everything cluster ``cluster`` needs."""
    eks = eks_name or cluster
    role_arn = f"arn:aws:iam::{account}:role/{role_name}"
    policy = json.loads((DEPLOY / "iam-policy.json").read_text().replace("CLUSTER_NAME", eks))
    policy["Statement"] = [s for s in policy["Statement"] if s.get("Sid") != "AssumeClusterRoles"]
    trust = json.loads((DEPLOY / "role-trust-policy.json").read_text())
    for statement in trust["Statement"]:
        statement["Principal"] = {"AWS": bot_role_arn}
    entry = {"clusterName": eks, "principalArn": role_arn, "kubernetesGroups": [GROUP],
             "username": USER, "type": "STANDARD"}
    config = (f"# the entry of cluster {cluster} under clusters: in the bot's config\n"
              f"{cluster}:\n  auth: eks\n  eks_cluster: {eks}\n  region: {region}\n"
              f"  role_arn: {role_arn}\n"
              f"  server: https://API_SERVER_ENDPOINT  # aws eks describe-cluster --name {eks}\n"
              f"  certificate_authority: /etc/runbook-bot/clusters/{cluster}-ca.crt\n")
    return {"rbac.yaml": rbac(cluster, role_arn),
            "access-entry.json": json.dumps(entry, indent=2) + "\n",
            "role-policy.json": json.dumps(policy, indent=2) + "\n",
            "role-trust-policy.json": json.dumps(trust, indent=2) + "\n",
            "cluster.yaml": config}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("cluster", help="the cluster's name in the bot's config")
    parser.add_argument("--account", required=True, help="the cluster's AWS account id")
    parser.add_argument("--bot-role-arn", required=True,
                        help="the role the bot runs as (IRSA or Pod Identity), trusted by the new one")
    parser.add_argument("--eks-name", help="the EKS cluster's name (default: the config's)")
    parser.add_argument("--region", default="REGION")
    parser.add_argument("--role-name", default="runbook-bot")
    parser.add_argument("--out", type=Path, help="default: deploy/clusters/CLUSTER")
    args = parser.parse_args(argv)
    out: Path = args.out or DEPLOY / "clusters" / args.cluster
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render(args.cluster, account=args.account, bot_role_arn=args.bot_role_arn,
                             eks_name=args.eks_name, region=args.region,
                             role_name=args.role_name).items():
        (out / name).write_text(text)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
