"""What a second cluster needs, as ``scripts/cluster_access.py`` renders it: the grants of
deploy/rbac.yaml bound to the group an EKS access entry maps the cluster's role to, and the role's
policy and trust policy from deploy/iam-policy.json and deploy/role-trust-policy.json.
deploy/second-cluster/ is its output for placeholders, kept in step here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from bot.sim.authz import Identity, load_grants

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "second-cluster"
BOT_ROLE = "arn:aws:iam::HOME_ACCOUNT_ID:role/runbook-bot"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("cluster_access", ROOT / "scripts" / "cluster_access.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _docs(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d
            for d in YAML(typ="safe").load_all(path.read_text()) if isinstance(d, dict)}


def test_the_shipped_second_cluster_files_are_the_scripts_output(tmp_path: Path) -> None:
    script = _script()
    assert script.main(["CLUSTER", "--account", "ACCOUNT_ID", "--bot-role-arn", BOT_ROLE,
                        "--out", str(tmp_path)]) == 0
    rendered = sorted(p.name for p in tmp_path.iterdir())
    assert rendered == sorted(p.name for p in SHIPPED.iterdir())
    for name in rendered:
        assert (tmp_path / name).read_text() == (SHIPPED / name).read_text(), (
            f"deploy/second-cluster/{name} is stale: python scripts/cluster_access.py CLUSTER "
            f"--account ACCOUNT_ID --bot-role-arn {BOT_ROLE} --out deploy/second-cluster")


def test_the_group_gets_exactly_what_the_bots_service_account_gets_in_its_own_cluster(
        tmp_path: Path) -> None:
    script = _script()
    files = script.render("prod-eu", account="444455556666", bot_role_arn=BOT_ROLE, eks_name="prod-eu-1")
    (tmp := tmp_path / "rbac.yaml").write_text(files["rbac.yaml"])
    rendered, docs = load_grants(tmp), _docs(tmp)
    shipped, own = load_grants(ROOT / "deploy" / "rbac.yaml"), _docs(ROOT / "deploy" / "rbac.yaml")
    for kind, name in [("ClusterRole", "runbook-bot"), ("Role", "runbook-bot-node-leases"),
                       ("ClusterRole", "runbook-bot-operators")]:
        assert docs[(kind, name)]["rules"] == own[(kind, name)]["rules"], name
    entry = json.loads(files["access-entry.json"])
    assert entry == {"clusterName": "prod-eu-1", "principalArn": "arn:aws:iam::444455556666:role/runbook-bot",
                     "kubernetesGroups": ["runbook-bot"], "username": "runbook-bot", "type": "STANDARD"}
    mapped = Identity(entry["username"], (*entry["kubernetesGroups"], "system:authenticated"))
    sa = Identity("system:serviceaccount:runbook-bot:runbook-bot",
                  ("system:serviceaccounts", "system:authenticated"))
    for verb, group, resource, ns in [("update", "", "nodes", None), ("watch", "", "nodes", None),
                                      ("delete", "", "pods", "search"),
                                      ("delete", "storage.k8s.io", "volumeattachments", None),
                                      ("list", "coordination.k8s.io", "leases", "kube-node-lease"),
                                      ("create", "authentication.k8s.io", "tokenreviews", None),
                                      ("delete", "", "nodes", None), ("create", "", "pods", "search")]:
        ask = {"verb": verb, "group": group, "resource": resource, "namespace": ns, "name": None}
        assert rendered.allows(mapped, **ask) == shipped.allows(sa, **ask), ask
    assert not rendered.allows(sa, verb="list", group="", resource="nodes", namespace=None, name=None)


def test_the_clusters_role_has_the_ec2_policy_and_trusts_the_bots_role() -> None:
    files = _script().render("prod-eu", account="444455556666", bot_role_arn=BOT_ROLE,
                             eks_name="prod-eu-1")
    policy = json.loads(files["role-policy.json"])
    shipped = json.loads((ROOT / "deploy" / "iam-policy.json").read_text().replace(
        "CLUSTER_NAME", "prod-eu-1"))
    assert policy["Statement"] == [s for s in shipped["Statement"] if s["Sid"] != "AssumeClusterRoles"]
    assert "CLUSTER_NAME" not in files["role-policy.json"]
    trust = json.loads(files["role-trust-policy.json"])
    own = json.loads((ROOT / "deploy" / "role-trust-policy.json").read_text())
    assert [s["Principal"] for s in trust["Statement"]] == [{"AWS": BOT_ROLE}]
    assert [{k: v for k, v in s.items() if k != "Principal"} for s in trust["Statement"]] == [
        {k: v for k, v in s.items() if k != "Principal"} for s in own["Statement"]]
    config = YAML(typ="safe").load(files["cluster.yaml"])["prod-eu"]
    assert config["auth"] == "eks" and config["eks_cluster"] == "prod-eu-1"
    assert config["role_arn"] == "arn:aws:iam::444455556666:role/runbook-bot"
