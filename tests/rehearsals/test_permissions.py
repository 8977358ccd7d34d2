"""The bot runs in rehearsals as its own ServiceAccount, authorized against deploy/rbac.yaml: a
permission missing from the manifest fails the rehearsal as production would refuse it."""

from __future__ import annotations

import pytest

from tests.rehearsals.conftest import assert_clean, taint_keys

pytestmark = pytest.mark.slow
OOS = "node.kubernetes.io/out-of-service"


def test_without_update_on_nodes_the_taint_is_refused_with_403_and_the_node_is_untouched(rehearse, tmp_path):
    from bot.sim.authz import RBAC_FILE

    manifest = RBAC_FILE.read_text().replace(
        "verbs: [get, list, update]               # taint / untaint",
        "verbs: [get, list]               # taint / untaint")
    assert manifest != RBAC_FILE.read_text()
    reduced = tmp_path / "rbac.yaml"
    reduced.write_text(manifest)
    r = rehearse("node-dead", rbac=str(reduced))
    f = r.facts
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "failed"
    taint = st.steps["taint"]
    assert taint.status == "failed" and "Forbidden" in str(taint.error), taint.error
    assert "cannot update resource" in str(taint.error)
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    assert_clean(r, st.run_id)


def test_the_shipped_manifest_grants_everything_node_dead_ngns_needs(rehearse):
    r = rehearse("node-dead")
    st = r.run("node-dead-ngns", node=r.facts["node"])
    assert st.status == "succeeded", st.outcome
    assert r.sandbox.api.authorizer is not None
    assert r.settings.clusters["sandbox"].context == "runbook-bot"


def test_without_delete_on_pods_the_release_of_a_tolerating_pod_is_refused_with_403(rehearse, tmp_path):
    from bot.sim.authz import RBAC_FILE

    grant = ("  - apiGroups: [\"\"]\n    resources: [pods]\n    verbs: [delete]")
    manifest = RBAC_FILE.read_text()
    assert grant in manifest
    reduced = tmp_path / "rbac.yaml"
    reduced.write_text(manifest.replace(grant, grant.replace("[delete]", "[get]")))
    r = rehearse("tolerating-pod", rbac=str(reduced))
    f = r.facts
    st = r.run("node-dead-ngns", node=f["dead_node"])
    release = next(s for k, s in st.steps.items() if k.startswith("release"))
    assert release.status == "failed" and "Forbidden" in str(release.error), release.error
    assert r.sandbox.get("Pod", f["namespace"], f["pod"])["spec"]["nodeName"] == f["dead_node"]
