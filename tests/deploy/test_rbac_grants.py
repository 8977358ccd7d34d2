"""deploy/rbac.yaml grants exactly the Kubernetes calls the code makes: none missing, none unused.

A missing grant fails an action with 403 in production (the sandbox enforces the file, so the
rehearsals catch it too); a grant nothing uses is access an attacker with the bot's token gets for
free. The calls are read from the source: every ``KubeClient`` method called outside the client,
and every kind ``update`` is given (a read, then a replace).
"""

from __future__ import annotations

import re
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).parents[2]

# KubeClient method -> (API group, resource, verb)
METHODS = {
    "get_node": ("", "nodes", "get"),
    "list_nodes": ("", "nodes", "list"),
    "list_pods": ("", "pods", "list"),
    "get_pod": ("", "pods", "get"),
    "list_pod_events": ("", "events", "list"),
    "list_object_events": ("", "events", "list"),
    "list_events": ("", "events", "list"),
    "delete_pod": ("", "pods", "delete"),
    "get_pv": ("", "persistentvolumes", "get"),
    "list_pvs": ("", "persistentvolumes", "list"),
    "get_pvc": ("", "persistentvolumeclaims", "get"),
    "list_pvcs": ("", "persistentvolumeclaims", "list"),
    "list_storage_classes": ("storage.k8s.io", "storageclasses", "list"),
    "list_csinodes": ("storage.k8s.io", "csinodes", "list"),
    "list_volume_attachments": ("storage.k8s.io", "volumeattachments", "list"),
    "get_volume_attachment": ("storage.k8s.io", "volumeattachments", "get"),
    "delete_volume_attachment": ("storage.k8s.io", "volumeattachments", "delete"),
    "get_node_lease": ("coordination.k8s.io", "leases", "get"),
    "list_node_leases": ("coordination.k8s.io", "leases", "list"),
    "watch_nodes": ("", "nodes", "watch"),
    "watch_node_leases": ("coordination.k8s.io", "leases", "watch"),
    "list_deployments": ("apps", "deployments", "list"),
    "list_replica_sets": ("apps", "replicasets", "list"),
    "list_stateful_sets": ("apps", "statefulsets", "list"),
    "list_jobs": ("batch", "jobs", "list"),
    "list_nodeclaims": ("karpenter.sh", "nodeclaims", "list"),
    "delete_nodeclaim": ("karpenter.sh", "nodeclaims", "delete"),
    "create_token_review": ("authentication.k8s.io", "tokenreviews", "create"),
}
KINDS = {"Node": ("", "nodes"), "PersistentVolume": ("", "persistentvolumes"),
         "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
         "VolumeAttachment": ("storage.k8s.io", "volumeattachments")}


def used() -> set[tuple[str, str, str]]:
    client = (ROOT / "bot" / "clients" / "kube.py").read_text()
    public = set(re.findall(r"^    def ([a-z]\w*)\(self", client, re.M))
    # api_server: the configured URL, no request
    unknown = public - set(METHODS) - {"update", "find", "bound", "close", "api_server"}
    assert not unknown, f"KubeClient methods this test does not know: {unknown}; add them to METHODS"
    out: set[tuple[str, str, str]] = set()
    for path in (ROOT / "bot").rglob("*.py"):
        if path.parts[-3:] == ("bot", "clients", "kube.py") or "sim" in path.relative_to(ROOT).parts:
            continue
        text = path.read_text()
        out |= {METHODS[m] for m in re.findall(r"\.(\w+)\(", text) if m in METHODS}
        kinds = set(re.findall(r'\.update\(kind="(\w+)"', text))
        if re.search(r"\.update\(kind=p\.kind", text):  # a declared kind: see its Literal
            declarations = (ROOT / "bot" / "actions" / "declarations.py").read_text()
            (literal,) = re.findall(r'kind: Literal\[([^\]]+)\]', declarations)
            kinds |= set(re.findall(r'"(\w+)"', literal))
        for kind in kinds:
            group, resource = KINDS[kind]
            out |= {(group, resource, "get"), (group, resource, "update")}
    return out


def granted() -> set[tuple[str, str, str]]:
    docs = [d for d in YAML(typ="safe").load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "runbook-bot"]
    # the node Leases are read in kube-node-lease only, through a Role there
    roles = [d for d in docs if d["kind"] == "Role"]
    assert {d["metadata"]["namespace"] for d in roles} <= {"kube-node-lease"}
    return {(g, r, v) for rule in [*role["rules"], *(x for d in roles for x in d["rules"])]
            for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_cluster_role_grants_exactly_the_calls_the_code_makes() -> None:
    need, have = used(), granted()
    assert not need - have, f"used but not granted: {sorted(need - have)}"
    assert not have - need, f"granted but unused: {sorted(have - need)}"


READ = {"get", "list", "watch"}


def test_the_manifest_has_the_namespace_the_service_account_lives_in_and_a_group_binding() -> None:
    docs = [d for d in YAML(typ="safe").load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]
    (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert any(d["kind"] == "Namespace" and d["metadata"]["name"] == sa["metadata"]["namespace"]
               for d in docs)
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    groups = [(d["roleRef"]["name"], s) for d in bindings for s in d["subjects"]
              if s["kind"] == "Group"]
    # operators are the API's clients: bound to a read-only role, never to the bot's own grants
    assert groups == [("runbook-bot-operators", {"kind": "Group", "name": "runbook-bot-operators",
                                                 "apiGroup": "rbac.authorization.k8s.io"})]
    bot_roles = {d["roleRef"]["name"] for d in bindings
                 if any(s["kind"] == "ServiceAccount" for s in d["subjects"])}
    assert "runbook-bot-operators" not in bot_roles
    (view,) = [d for d in docs if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] == "runbook-bot-operators"]
    verbs = {v for rule in view["rules"] for v in rule["verbs"]}
    assert verbs == READ, f"the operators' role grants more than reads: {sorted(verbs - READ)}"
    assert not [r for rule in view["rules"] for r in rule["resources"]
                if r == "secrets" or "/" in r], "no secrets, no subresources (exec, logs...)"
