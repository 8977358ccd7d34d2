"""The fake API server authorizes the bot's ServiceAccount against deploy/rbac.yaml, as EKS would:
what the file grants works, anything else is 403 Forbidden and changes nothing. People (the
kubeconfig's default context) are admins; an unknown token is 401; no token is system:anonymous."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bot.sim.authz import BOT_TOKEN, load_grants
from bot.sim.sandbox import BOT_CONTEXT
from tests.sim.kit import api_for, kube_for, kubectl, needs_kubectl

BOT = "system:serviceaccount:runbook-bot:runbook-bot"


@pytest.fixture
def sb(pool: Any) -> Any:
    return pool.get("stuck-terminating")


@pytest.fixture
def bot(sb: Any) -> Any:
    c = kube_for(sb, context=BOT_CONTEXT)
    yield c
    c.close()


def test_the_bot_reads_and_updates_what_rbac_yaml_grants(sb, bot):
    core = k8s.CoreV1Api(bot)
    nodes = core.list_node().items
    assert nodes
    node = core.read_node(nodes[0].metadata.name)
    node.metadata.labels["runbook-bot.example.com/seen"] = "yes"
    assert core.replace_node(node.metadata.name, node).metadata.labels[
        "runbook-bot.example.com/seen"] == "yes"
    assert k8s.StorageV1Api(bot).list_volume_attachment() is not None


def test_deleting_a_statefulset_as_the_bot_is_forbidden(sb, bot):
    # the bot may delete pods (gracefully, a pod that tolerates the out-of-service taint), never
    # their controllers; authorization comes before the object is looked up
    with pytest.raises(ApiException) as e:
        k8s.AppsV1Api(bot).delete_namespaced_stateful_set("es-data", "search")
    body = json.loads(e.value.body)
    assert (e.value.status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (f'statefulsets.apps "es-data" is forbidden: User "{BOT}" cannot '
                               'delete resource "statefulsets" in API group "apps" in the namespace '
                               '"search"')


@pytest.mark.parametrize(("method", "path", "body", "verb"), [
    ("PATCH", "/api/v1/nodes/{node}", {"metadata": {"labels": {"x": "y"}}}, "patch"),
    ("PUT", "/api/v1/nodes/{node}/status", None, "update"),
    ("POST", "/api/v1/namespaces/search/pods", {"metadata": {"name": "x"}}, "create"),
    ("GET", "/api/v1/secrets", None, None),
])
def test_verbs_rbac_yaml_does_not_grant_the_bot_are_403(sb, method, path, body, verb):
    node = sb.list("Node")[0]
    http = api_for(sb, BOT_TOKEN)
    try:
        if body is None and method == "PUT":
            body = node
        code, answer = http(method, path.format(node=node["metadata"]["name"]), body,
                            content_type="application/merge-patch+json" if method == "PATCH"
                            else "application/json")
    finally:
        http.close()
    if verb is None:
        assert code == 404  # secrets are not served at all
        return
    assert (code, answer["reason"]) == (403, "Forbidden"), answer
    assert f"cannot {verb} resource" in answer["message"]
    assert sb.get("Node", None, node["metadata"]["name"])["metadata"]["resourceVersion"] == \
        node["metadata"]["resourceVersion"]


def test_an_unknown_token_is_401_and_no_token_may_read_only_the_version(sb):
    stranger = api_for(sb, "not-a-token")
    anonymous = api_for(sb, None)
    try:
        assert stranger("GET", "/api/v1/nodes")[0] == 401
        assert anonymous("GET", "/version")[0] == 200
        code, body = anonymous("GET", "/api/v1/nodes")
        assert (code, body["reason"]) == (403, "Forbidden") and "system:anonymous" in body["message"]
        assert anonymous("GET", "/api")[0] == 403
    finally:
        stranger.close()
        anonymous.close()


def test_the_grants_are_read_from_the_manifest_and_a_binding_to_a_missing_role_is_an_error(tmp_path):
    grants = load_grants()
    bot = f"User:{BOT}"
    verbs = {v for r in grants.cluster[bot] if "nodes" in r.resources for v in r.verbs}
    assert "update" in verbs and "delete" not in verbs
    broken = tmp_path / "rbac.yaml"
    broken.write_text("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"
                      "metadata: {name: b}\nroleRef: {kind: ClusterRole, name: nowhere}\n"
                      "subjects: [{kind: ServiceAccount, name: x, namespace: y}]\n")
    with pytest.raises(ValueError, match="nowhere"):
        load_grants(broken)
    with pytest.raises(FileNotFoundError, match="rbac=PATH"):
        load_grants(tmp_path / "missing.yaml")


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_as_the_bot_is_told_it_cannot_cordon_with_a_patch(sb):
    node = sb.list("Node")[0]["metadata"]["name"]
    done = kubectl(sb, "--context", BOT_CONTEXT, "cordon", node, check=False)
    assert f'User "{BOT}" cannot patch resource "nodes"' in done.stderr
    assert not sb.get("Node", None, node)["spec"].get("unschedulable")
