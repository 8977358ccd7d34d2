"""Every scenario seen through the clients an on-call engineer uses: the kubernetes Python client
and real kubectl, reading nodes, pods and VolumeAttachments, describing the pod that explains the
incident, and tainting and untainting a node."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.sim.kit import kube_for, kubectl, needs_kubectl, ready

SCENARIOS = ["node-dead", "node-hung", "stuck-detach", "az-capacity-deadlock", "stuck-terminating",
             "zombie-attachments", "az-outage"]

# What each scenario must show: how many nodes are NotReady, and which object's Events explain it.
EXPECT: dict[str, dict[str, Any]] = {
    "node-dead": {"not_ready": 1, "explained_by": "Multi-Attach error for volume"},
    "node-hung": {"not_ready": 1, "explained_by": "Multi-Attach error for volume"},
    "stuck-detach": {"not_ready": 1, "explained_by": "Multi-Attach error for volume"},
    "az-capacity-deadlock": {"not_ready": 0, "explained_by": "had volume node affinity conflict"},
    "stuck-terminating": {"not_ready": 0, "explained_by": None},
    "zombie-attachments": {"not_ready": 0, "explained_by": None},
    "az-outage": {"not_ready": 4, "explained_by": None},
}


@pytest.fixture(scope="module", params=SCENARIOS)
def sb(request: pytest.FixtureRequest, pool: Any) -> Any:
    if request.param == "az-outage":
        return pool.get(request.param, nodes=4)  # the size is the benchmark's business
    return pool.get(request.param)


@pytest.fixture
def api(sb: Any) -> Any:
    c = kube_for(sb)
    yield c
    c.close()


def test_the_python_client_lists_every_node_with_the_scenario_s_readiness(sb, api):
    nodes = k8s.CoreV1Api(api).list_node().items
    assert [n.metadata.name for n in nodes] == [n["metadata"]["name"] for n in sb.list("Node")]
    not_ready = [n.metadata.name for n in nodes
                 if next(c.status for c in n.status.conditions if c.type == "Ready") != "True"]
    assert len(not_ready) == EXPECT[sb.scenario.name]["not_ready"]
    dead = sb.facts.get("dead_nodes") or ([sb.facts["dead_node"]] if "dead_node" in sb.facts else [])
    assert sorted(dead) == sorted(not_ready)
    assert all(n.spec.provider_id.startswith("aws:///ap-southeast-1") for n in nodes)


def test_the_python_client_lists_pods_and_volumeattachments_as_the_store_holds_them(sb, api):
    pods = k8s.CoreV1Api(api).list_pod_for_all_namespaces().items
    stored = [p["metadata"] | {"node": p["spec"].get("nodeName")} for p in sb.list("Pod")]
    assert sorted((p.metadata.namespace, p.metadata.name, p.spec.node_name) for p in pods) == sorted(
        (m["namespace"], m["name"], m["node"]) for m in stored)
    vas = k8s.StorageV1Api(api).list_volume_attachment().items
    assert {(v.metadata.name, v.spec.node_name, v.status.attached) for v in vas} == {
        (v["metadata"]["name"], v["spec"]["nodeName"], v["status"]["attached"])
        for v in sb.list("VolumeAttachment")}


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_get_nodes_prints_notready_for_the_dead_nodes_only(sb):
    out = kubectl(sb, "get", "nodes", "--no-headers").stdout.splitlines()
    rows = {line.split()[0]: line.split()[1] for line in out}
    assert set(rows) == {n["metadata"]["name"] for n in sb.list("Node")}
    down = sum(status.startswith("NotReady") for status in rows.values())
    assert down == EXPECT[sb.scenario.name]["not_ready"]
    for name, status in rows.items():
        assert status.startswith("Ready") == (ready(sb, name) == "True")


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_get_pods_and_volumeattachments_prints_one_row_per_object(sb):
    pods = kubectl(sb, "get", "pods", "-A", "-o", "wide", "--no-headers").stdout.splitlines()
    assert len(pods) == len(sb.list("Pod"))
    for line in pods:
        ns, name, _ready, status = line.split()[:4]
        pod = sb.get("Pod", ns, name)
        if pod["metadata"].get("deletionTimestamp"):
            assert status == "Terminating"
        elif pod["status"].get("phase") == "Running":
            assert status == "Running"
    vas = kubectl(sb, "get", "volumeattachments", "--no-headers").stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in vas}
    assert set(rows) == {v["metadata"]["name"] for v in sb.list("VolumeAttachment")}
    for name, cells in rows.items():
        va = sb.get("VolumeAttachment", None, name)
        assert cells[3] == va["spec"]["nodeName"]
        assert cells[4] == str(bool(va["status"].get("attached"))).lower()


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_shows_what_each_scenario_is_about(sb):
    f, name = sb.facts, sb.scenario.name
    text = EXPECT[name]["explained_by"]
    if text is not None:
        out = kubectl(sb, "describe", "pod", "-n", f["namespace"], f["pod"]).stdout
        events = out.split("Events:", 1)[1]
        assert text in events
        if "Multi-Attach" in text:
            assert "Warning  FailedAttachVolume" in events
            assert (f'Multi-Attach error for volume "{f["pv"]}" Volume is already exclusively attached '
                    "to one node and can't be attached to another") in events
        if "affinity" in text:
            assert "FailedScheduling" in events
            assert ("0/15 nodes are available: 1 Insufficient cpu, 14 node(s) had volume node affinity "
                    "conflict.") in events
    elif name == "stuck-terminating":
        pvs = kubectl(sb, "get", "pv", "--no-headers").stdout.splitlines()
        assert sorted(line.split()[0] for line in pvs if line.split()[4] == "Terminating") == sorted(f["pvs"])
        # the claims went (no pod used them); the PVs wait for the uninstalled driver's finalizers
        pvcs = kubectl(sb, "get", "pvc", "-n", f["namespace"], "-o", "name").stdout.split()
        assert not set(pvcs) & {f"persistentvolumeclaim/{c}" for c in f["pvcs"]}
        for name in f["pvs"]:
            fins = sb.get("PersistentVolume", None, name)["metadata"]["finalizers"]
            assert fins == ["external-provisioner.volume.kubernetes.io/finalizer",
                            "external-attacher/ebs-csi-aws-com"], fins
    elif name == "zombie-attachments":
        out = kubectl(sb, "get", "volumeattachments", "-o", "json").stdout
        by_name = {v["metadata"]["name"]: v for v in json.loads(out)["items"]}
        assert all(by_name[z]["status"]["attached"] is True for z in f["zombies"])
        assert by_name[f["zombies"][0]]["spec"]["nodeName"] == f["missing_node"]
        assert f["missing_node"] not in {n["metadata"]["name"] for n in sb.list("Node")}
    else:
        assert name == "az-outage"
        out = kubectl(sb, "get", "nodes", "-l", f"topology.kubernetes.io/zone={f['zone']}",
                      "--no-headers").stdout.splitlines()
        assert sorted(line.split()[0] for line in out if "NotReady" in line) == sorted(f["dead_nodes"])


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_taint_and_untaint_change_the_node_the_python_client_reads(sb, api):
    core = k8s.CoreV1Api(api)
    node = sb.list("Node")[-1]["metadata"]["name"]
    before = [(t.key, t.effect) for t in core.read_node(node).spec.taints or []]
    out = kubectl(sb, "taint", "nodes", node, "sandbox.example.com/gameday=drill:NoSchedule").stdout
    assert out.strip() == f"node/{node} tainted"
    taints = [(t.key, t.value, t.effect) for t in core.read_node(node).spec.taints]
    assert ("sandbox.example.com/gameday", "drill", "NoSchedule") in taints
    out = kubectl(sb, "taint", "nodes", node, "sandbox.example.com/gameday-").stdout
    assert out.strip() == f"node/{node} untainted"
    assert [(t.key, t.effect) for t in core.read_node(node).spec.taints or []] == before
