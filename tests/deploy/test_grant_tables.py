"""docs/deploy.md's tables say what deploy/ grants and opens, both ways: none missing, none extra.

An operator reads the guide's tables to review what the bot may do before creating its role and
RBAC, and what its pods expose before writing an Ingress; a table that lags the files (a verb
added to deploy/rbac.yaml, an action to deploy/iam-policy.json, a port to the manifests) has them
approve something other than what they deploy. Each table is parsed and compared with its file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).parents[2]
GUIDE = (ROOT / "docs" / "deploy.md").read_text()


def table(header: str) -> list[list[str]]:
    """The rows of the guide's table whose header line is ``header``, as cells."""
    lines = GUIDE.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    assert rows, f"the table {header!r} has no rows"
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def test_the_iam_table_names_every_statement_and_action_of_the_policy_and_no_other() -> None:
    policy = json.loads((ROOT / "deploy" / "iam-policy.json").read_text())
    in_file = {st["Sid"]: set(_listed(st["Action"])) for st in policy["Statement"]}
    rows = table("| statement | actions | on |")
    in_guide = {ticked(sid)[0]: set(ticked(actions)) for sid, actions, _ in rows}
    assert len(in_guide) == len(rows), "a statement is in the table twice"
    assert in_guide == in_file
    for st in policy["Statement"]:  # the "on" column names what each statement is limited to
        [on] = [r[2] for r in rows if ticked(r[0])[0] == st["Sid"]]
        if st["Resource"] == "*":
            assert on.startswith("everything"), st["Sid"]
        for block in (st.get("Condition") or {}).values():
            for key in block:
                assert key.split("/", 1)[-1] in on, (st["Sid"], key)


def rbac_grants(role: str = "runbook-bot") -> set[tuple[str, str, str, str]]:
    """(API group, resource, verb, where) for every rule of deploy/rbac.yaml's ClusterRole
    ``role`` ("cluster") and, for the bot's, its Roles (their namespace)."""
    grants = set()
    for doc in YAML(typ="safe").load_all((ROOT / "deploy" / "rbac.yaml").read_text()):
        if not doc or doc["kind"] not in ("ClusterRole", "Role"):
            continue
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] != role:
            continue
        if doc["kind"] == "Role" and role != "runbook-bot":
            continue
        where = "cluster" if doc["kind"] == "ClusterRole" else doc["metadata"]["namespace"]
        for rule in doc["rules"]:
            grants |= {(group or "core", resource, verb, where) for group in rule["apiGroups"]
                       for resource in rule["resources"] for verb in rule["verbs"]}
    return grants


def test_the_kubernetes_table_lists_every_grant_of_the_rbac_file_and_no_other() -> None:
    in_guide = set()
    for group, resources, verbs, where, _ in table(
            "| API group | resource | verbs | where | what for |"):
        group = (ticked(group) or [group])[0]
        where = (ticked(where) or [where])[0]
        in_guide |= {(group, r, v, where) for r in ticked(resources) for v in ticked(verbs)}
    file = rbac_grants()
    assert ("core", "pods", "delete", "cluster") in file  # what the old prose left out
    assert sorted(file - in_guide) == [], "granted by deploy/rbac.yaml, missing from the guide"
    assert sorted(in_guide - file) == [], "in the guide, not granted by deploy/rbac.yaml"


def test_the_operators_table_lists_every_grant_of_their_read_only_role_and_no_other() -> None:
    in_guide = set()
    for group, resources, verbs in table("| API group | resources | verbs (operators) |"):
        group = (ticked(group) or [group])[0]
        in_guide |= {(group, r, v, "cluster") for r in ticked(resources) for v in ticked(verbs)}
    file = rbac_grants("runbook-bot-operators")
    assert file and {v for *_, v, _ in file} == {"get", "list", "watch"}
    assert sorted(file - in_guide) == [], "granted by deploy/rbac.yaml, missing from the guide"
    assert sorted(in_guide - file) == [], "in the guide, not granted by deploy/rbac.yaml"


def test_the_port_table_is_what_the_config_listens_on_and_the_manifests_open() -> None:
    from bot.config import ListenConfig

    rows = table("| port | name | `listen` key | serves | reached by | the NetworkPolicy lets in |")
    listen = ListenConfig()
    in_guide = {ticked(name)[0]: (int(port), ticked(key)[0]) for port, name, key, *_ in rows}
    assert {name: getattr(listen, key) for name, (_, key) in in_guide.items()} == {
        name: port for name, (port, _) in in_guide.items()}
    # the bot's Deployment, and the MCP server's of its optional component: every port is one of
    # theirs (the ops port is in both: each process has its own probes and metrics)
    opened: dict[str, int] = {}
    for path in ("base/deployment.yaml", "components/mcp/deployment.yaml"):
        deployment = YAML(typ="safe").load((ROOT / "deploy" / "kubernetes" / path).read_text())
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        opened |= {p["name"]: p["containerPort"] for p in container["ports"]}
    assert opened == {name: port for name, (port, _) in in_guide.items()}


def test_the_trust_policy_in_the_guide_is_the_shipped_file() -> None:
    blocks = re.findall(r"```json\n(.*?)```", GUIDE, re.S)
    shipped = json.loads((ROOT / "deploy" / "role-trust-policy.json").read_text())
    trust = [json.loads(b) for b in blocks if '"sts:SetSourceIdentity"' in b and "Principal" in b]
    assert trust == [shipped]
