"""Real kubectl against the sandbox for the verbs an on-call engineer uses, without
--validate=false: apply, replace, explain (from the OpenAPI v3 documents), describe, cordon and
drain --dry-run=client. `get -w` and `wait` are in test_watch.py, taint in test_scenarios.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.sim.controllers.daemonsets import pod_name
from tests.sim.kit import api_for, kubectl, needs_kubectl

pytestmark = [needs_kubectl, pytest.mark.kubectl]


@pytest.fixture(scope="module")
def sb(pool: Any) -> Any:
    return pool.get("node-dead")


def _write(sb: Any, name: str, text: str) -> str:
    path = sb.workdir / name
    path.write_text(text)
    return str(path)


def test_apply_creates_then_updates_and_strict_validation_refuses_an_unknown_field(sb):
    ok = _write(sb, "sc.yaml", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n"
                "  name: gp3-retain\n  labels: {team: search}\nprovisioner: ebs.csi.aws.com\n"
                "reclaimPolicy: Retain\nvolumeBindingMode: WaitForFirstConsumer\n")
    sc = "storageclass.storage.k8s.io/gp3-retain"
    assert kubectl(sb, "apply", "-f", ok).stdout.strip() == f"{sc} created"
    _write(sb, "sc.yaml", Path(ok).read_text().replace("team: search", "team: storage"))
    assert kubectl(sb, "apply", "-f", ok).stdout.strip() == f"{sc} configured"
    assert sb.get("StorageClass", None, "gp3-retain")["metadata"]["labels"] == {"team": "storage"}
    bad = _write(sb, "bad.yaml", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n"
                 "  name: gp3-bad\nprovisioner: ebs.csi.aws.com\nreclaimPolicy: Retain\nbogus: 1\n")
    done = kubectl(sb, "apply", "-f", bad, check=False)
    assert done.returncode != 0 and 'unknown field "bogus"' in done.stderr
    assert sb.find("StorageClass", None, "gp3-bad") is None


def test_replace_writes_the_whole_object_and_an_immutable_field_is_refused(sb):
    path = _write(sb, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: replaced\n")
    kubectl(sb, "apply", "-f", path)
    _write(sb, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: replaced\n"
           "  labels: {tier: gold}\n")
    assert kubectl(sb, "replace", "-f", path).stdout.strip() == "namespace/replaced replaced"
    assert sb.get("Namespace", None, "replaced")["metadata"]["labels"] == {"tier": "gold"}
    sc = _write(sb, "sc2.yaml", "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n"
                "  name: gp3\nprovisioner: ebs.csi.aws.com\nreclaimPolicy: Delete\n"
                "volumeBindingMode: Immediate\nparameters: {type: gp3}\n")
    done = kubectl(sb, "replace", "-f", sc, check=False)
    assert done.returncode != 0 and "field is immutable" in done.stderr


def test_explain_reads_field_documentation_from_the_openapi_v3_documents(sb):
    out = kubectl(sb, "explain", "node.spec.taints").stdout
    assert "KIND:       Node" in out and "effect\t<string> -required-" in out
    out = kubectl(sb, "explain", "volumeattachments.status.detachError").stdout
    assert "GROUP:      storage.k8s.io" in out and "message\t<string>" in out
    http = api_for(sb)
    try:
        code, index = http("GET", "/openapi/v3")
        assert code == 200 and set(index["paths"]) == {"api/v1", "apis/apps/v1", "apis/batch/v1",
                                                       "apis/storage.k8s.io/v1",
                                                       "apis/events.k8s.io/v1",
                                                       "apis/coordination.k8s.io/v1",
                                                       "apis/karpenter.sh/v1"}
        assert http("GET", "/openapi/v3/apis/networking.k8s.io/v1")[0] == 404
    finally:
        http.close()


def test_describe_shows_the_dead_node_and_the_stuck_pod(sb):
    f = sb.facts
    node = kubectl(sb, "describe", "node", f["dead_node"]).stdout
    assert "node.kubernetes.io/unreachable:NoExecute" in node
    assert "NodeStatusUnknown" in node
    pod = kubectl(sb, "describe", "pod", "-n", f["namespace"], f["pod"]).stdout
    assert f"{f['new_node']}" in pod.split("Node:", 1)[1].splitlines()[0] and "Multi-Attach error" in pod


def test_get_leases_lists_each_kubelet_s_lease_with_its_holder_and_microsecond_renew_time(sb):
    out = kubectl(sb, "get", "leases", "-n", "kube-node-lease", "--no-headers").stdout.splitlines()
    rows = {line.split()[0]: line.split()[1] for line in out}
    assert rows == {n["metadata"]["name"]: n["metadata"]["name"] for n in sb.list("Node")}
    node = sb.facts["new_node"]
    lease = json.loads(kubectl(sb, "get", "lease", "-n", "kube-node-lease", node, "-o", "json").stdout)
    assert lease["spec"]["renewTime"].endswith("Z") and len(lease["spec"]["renewTime"]) == 27
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"


def test_cordon_marks_a_node_unschedulable_and_uncordon_clears_it(sb):
    node = sb.list("Node")[-1]["metadata"]["name"]
    assert kubectl(sb, "cordon", node).stdout.strip() == f"node/{node} cordoned"
    assert sb.get("Node", None, node)["spec"]["unschedulable"] is True
    assert kubectl(sb, "uncordon", node).stdout.strip() == f"node/{node} uncordoned"
    assert not sb.get("Node", None, node)["spec"].get("unschedulable")


def test_drain_dry_run_lists_the_pods_it_would_evict_and_changes_nothing(sb):
    f = sb.facts
    node = f["new_node"]
    before = sb.get("Node", None, node)["metadata"]["resourceVersion"]
    done = kubectl(sb, "drain", node, "--dry-run=client", "--ignore-daemonsets",
                   "--delete-emptydir-data")
    out = done.stdout
    assert f"node/{node} cordoned (dry run)" in out
    assert f"evicting pod {f['namespace']}/{f['pod']} (dry run)" in out
    # the node agents' pods are found to be DaemonSet-managed, and left
    ignored = done.stderr.split("ignoring DaemonSet-managed Pods:", 1)[1].splitlines()[0]
    assert f"kube-system/{pod_name('aws-node', node)}" in ignored
    assert f"kube-system/{pod_name('kube-proxy', node)}" in ignored
    assert sb.get("Node", None, node)["metadata"]["resourceVersion"] == before
    assert sb.find("Pod", f["namespace"], f["pod"]) is not None
