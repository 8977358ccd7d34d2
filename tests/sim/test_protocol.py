"""The fake API server speaks the Kubernetes REST conventions runbooks depend on: discovery, Status
errors, optimistic concurrency, paging, selectors, the three patch types, finalizers and /status.

The objects these tests create are inert (nodes without an instance, pods bound to them), so the
sandbox's controllers leave them alone and each test sees only the protocol.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import quote

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.sim.kit import api_for, kube_for, kubectl, needs_kubectl

NS = "protocol"
_names = itertools.count()


@pytest.fixture
def sb(pool: Any) -> Any:
    sb = pool.get("stuck-terminating")
    if sb.find("Namespace", None, NS) is None:
        sb.create("Namespace", {"metadata": {"name": NS}})
    return sb


@pytest.fixture
def http(sb: Any) -> Any:
    api = api_for(sb)
    yield api
    api.close()


@pytest.fixture
def kube(sb: Any) -> Any:
    c = kube_for(sb)
    yield c
    c.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names):04d}"


def inert_node(http: Any, *, labels: dict[str, str] | None = None,
               taints: list[dict[str, str]] | None = None) -> str:
    name = unique("inert")
    code, body = http("POST", "/api/v1/nodes", {"metadata": {"name": name, "labels": labels or {}},
                                                "spec": {"taints": taints or []}})
    assert code == 201, body
    return name


def pv(http: Any, *, finalizers: list[str] | None = None) -> dict[str, Any]:
    code, body = http("POST", "/api/v1/persistentvolumes", {
        "metadata": {"name": unique("pv"), "finalizers": finalizers or []},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0000000000protocol"}}})
    assert code == 201, body
    return body


# -- discovery ------------------------------------------------------------------------------------

def test_discovery_describes_every_resource_with_kind_scope_verbs_and_short_names(http):
    code, versions = http("GET", "/api")
    assert code == 200 and versions["kind"] == "APIVersions" and versions["versions"] == ["v1"]
    core = {r["name"]: r for r in http("GET", "/api/v1")[1]["resources"]}
    assert core["nodes"]["kind"] == "Node" and core["nodes"]["namespaced"] is False
    assert core["nodes"]["shortNames"] == ["no"]
    assert core["pods"]["namespaced"] is True and "patch" in core["pods"]["verbs"]
    assert {"persistentvolumes", "persistentvolumeclaims", "events", "namespaces"} <= set(core)
    groups = {g["name"]: g["preferredVersion"]["groupVersion"] for g in http("GET", "/apis")[1]["groups"]}
    assert groups == {"apps": "apps/v1", "batch": "batch/v1", "storage.k8s.io": "storage.k8s.io/v1",
                      "events.k8s.io": "events.k8s.io/v1", "coordination.k8s.io": "coordination.k8s.io/v1",
                      "karpenter.sh": "karpenter.sh/v1"}
    storage = {r["name"]: r for r in http("GET", "/apis/storage.k8s.io/v1")[1]["resources"]}
    assert storage["volumeattachments/status"]["verbs"] == ["get", "patch", "update"]
    assert storage["storageclasses"]["shortNames"] == ["sc"] and "csinodes" in storage
    apps = {r["name"]: r for r in http("GET", "/apis/apps/v1")[1]["resources"]}
    assert apps["statefulsets"]["kind"] == "StatefulSet" and apps["statefulsets"]["shortNames"] == ["sts"]
    assert apps["deployments"]["shortNames"] == ["deploy"] and "replicasets" in apps
    assert http("GET", "/apis/networking.k8s.io/v1")[0] == 404


@needs_kubectl
@pytest.mark.kubectl
def test_kubectl_api_resources_reads_the_discovery_documents(sb):
    rows = {line.split()[0]: line.split() for line in
            kubectl(sb, "api-resources", "--no-headers").stdout.splitlines()}
    assert rows["statefulsets"][1:] == ["sts", "apps/v1", "true", "StatefulSet"]
    assert rows["volumeattachments"][1:] == ["storage.k8s.io/v1", "false", "VolumeAttachment"]


# -- Status errors ------------------------------------------------------------------------------

def test_reading_a_missing_object_is_a_404_status_with_reason_notfound(sb, kube):
    with pytest.raises(ApiException) as e:
        k8s.CoreV1Api(kube).read_namespaced_pod("nope", NS)
    assert e.value.status == 404
    body = json.loads(e.value.body)
    assert (body["kind"], body["reason"], body["message"]) == ("Status", "NotFound", 'pods "nope" not found')


def test_creating_an_existing_object_is_a_409_with_reason_alreadyexists(http):
    code, body = http("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    assert (code, body["reason"], body["details"]["name"]) == (409, "AlreadyExists", NS)


def test_changing_volumebindingmode_of_a_storageclass_is_a_422_because_it_is_immutable(sb, kube):
    storage = k8s.StorageV1Api(kube)
    sc = storage.read_storage_class("gp3")
    assert sc.volume_binding_mode == "WaitForFirstConsumer"
    sc.volume_binding_mode = "Immediate"
    with pytest.raises(ApiException) as e:
        storage.replace_storage_class("gp3", sc)
    body = json.loads(e.value.body)
    assert (e.value.status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "volumeBindingMode"
    assert sb.get("StorageClass", None, "gp3")["volumeBindingMode"] == "WaitForFirstConsumer"
    fresh = storage.read_storage_class("gp3")
    fresh.metadata.labels = {"team": "search"}
    assert storage.replace_storage_class("gp3", fresh).metadata.labels == {"team": "search"}


# -- optimistic concurrency ---------------------------------------------------------------------

def test_two_writers_with_the_same_resource_version_one_gets_409_and_wins_after_a_reread(sb, http, kube):
    core = k8s.CoreV1Api(kube)
    name = inert_node(http)
    alice, bob = core.read_node(name), core.read_node(name)
    assert alice.metadata.resource_version == bob.metadata.resource_version
    alice.spec.taints = [k8s.V1Taint(key="alice", effect="NoSchedule")]
    core.replace_node(name, alice)
    bob.spec.taints = [k8s.V1Taint(key="bob", effect="NoSchedule")]
    with pytest.raises(ApiException) as e:
        core.replace_node(name, bob)
    assert e.value.status == 409 and '"reason":"Conflict"' in e.value.body.replace(" ", "")
    assert [t["key"] for t in sb.get("Node", None, name)["spec"]["taints"]] == ["alice"]
    bob = core.read_node(name)
    bob.spec.taints.append(k8s.V1Taint(key="bob", effect="NoSchedule"))
    core.replace_node(name, bob)
    assert [t["key"] for t in sb.get("Node", None, name)["spec"]["taints"]] == ["alice", "bob"]


@pytest.mark.parametrize("content_type", ["application/merge-patch+json",
                                          "application/strategic-merge-patch+json"])
def test_a_patch_that_carries_a_stale_resource_version_gets_409(http, content_type):
    name = inert_node(http)
    stale = http("GET", f"/api/v1/nodes/{name}")[1]["metadata"]["resourceVersion"]
    assert http("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": {"a": "1"}}},
                content_type=content_type)[0] == 200
    code, body = http("PATCH", f"/api/v1/nodes/{name}",
                      {"metadata": {"resourceVersion": stale, "labels": {"b": "2"}}},
                      content_type=content_type)
    assert (code, body["reason"]) == (409, "Conflict")
    assert http("GET", f"/api/v1/nodes/{name}")[1]["metadata"]["labels"] == {"a": "1"}


def test_every_write_bumps_the_resource_version_and_lists_carry_the_latest(http):
    before = int(http("GET", "/api/v1/nodes")[1]["metadata"]["resourceVersion"])
    name = inert_node(http)
    created = int(http("GET", f"/api/v1/nodes/{name}")[1]["metadata"]["resourceVersion"])
    after = int(http("GET", "/api/v1/nodes")[1]["metadata"]["resourceVersion"])
    assert before < created <= after


# -- lists --------------------------------------------------------------------------------------

def test_limit_and_continue_page_through_every_item_exactly_once(sb, kube):
    core = k8s.CoreV1Api(kube)
    for _ in range(7):
        sb.create("Namespace", {"metadata": {"name": unique("page")}})
    everything = [n.metadata.name for n in core.list_namespace().items]
    seen, token, pages = [], None, 0
    while True:
        page = core.list_namespace(limit=3, _continue=token)
        pages += 1
        assert len(page.items) <= 3
        seen += [n.metadata.name for n in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == len(everything) - len(seen)
    assert seen == everything and pages == -(-len(everything) // 3)


@pytest.mark.parametrize(("selector", "expected"), [
    ("tier=a", ["a"]),
    ("tier==b", ["b"]),
    ("tier!=a", ["b", "c", None]),
    ("tier in (a,c)", ["a", "c"]),
    ("tier notin (a,c)", ["b", None]),
    ("tier", ["a", "b", "c"]),
    ("!tier", [None]),
    ("tier,tier!=c", ["a", "b"]),
])
def test_label_selectors_select_as_the_api_server_does(http, selector, expected):
    group = unique("sel")
    for tier in ("a", "b", "c", None):
        inert_node(http, labels={"group": group, **({"tier": tier} if tier else {})})
    code, body = http("GET", f"/api/v1/nodes?labelSelector=group%3D{group},{_q(selector)}")
    assert code == 200, body
    assert [n["metadata"]["labels"].get("tier") for n in body["items"]] == expected


def _q(s: str) -> str:
    return quote(s, safe="")


def test_pods_are_selected_by_spec_node_name(sb, http):
    node, other = inert_node(http), inert_node(http)
    for n in (node, node, other):
        assert http("POST", f"/api/v1/namespaces/{NS}/pods", {
            "metadata": {"name": unique("p")},
            "spec": {"nodeName": n, "containers": [{"name": "c", "image": "busybox"}]}})[0] == 201
    code, body = http("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
    assert code == 200 and len(body["items"]) == 2
    assert {p["spec"]["nodeName"] for p in body["items"]} == {node}
    code, body = http("GET", f"/api/v1/namespaces/{NS}/pods?fieldSelector=spec.nodeName%21%3D{node}")
    assert node not in {p["spec"]["nodeName"] for p in body["items"]} and other in {
        p["spec"]["nodeName"] for p in body["items"]}


def test_events_are_selected_by_involved_object_and_reason(sb, kube):
    core = k8s.CoreV1Api(kube)
    pod = unique("victim")
    for reason, target in (("FailedAttachVolume", pod), ("Scheduled", pod), ("FailedAttachVolume", "other")):
        core.create_namespaced_event(NS, k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name=unique("ev")), reason=reason, message="m", type="Warning",
            involved_object=k8s.V1ObjectReference(kind="Pod", name=target, namespace=NS)))
    mine = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={pod},involvedObject.namespace={NS}").items
    assert sorted(e.reason for e in mine) == ["FailedAttachVolume", "Scheduled"]
    failed = core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={pod},reason=FailedAttachVolume")
    assert [e.involved_object.name for e in failed.items] == [pod]


def test_metadata_name_selects_one_object_and_unsupported_field_labels_are_refused(sb, http, kube):
    node = inert_node(http)
    nodes = k8s.CoreV1Api(kube).list_node(field_selector=f"metadata.name={node}").items
    assert [n.metadata.name for n in nodes] == [node]
    # VolumeAttachments index no spec.nodeName: clients must filter on their side.
    code, body = http("GET", "/apis/storage.k8s.io/v1/volumeattachments?fieldSelector=spec.nodeName%3Dx")
    assert (code, body["reason"]) == (400, "BadRequest") and "spec.nodeName" in body["message"]


# -- patches ------------------------------------------------------------------------------------

def test_a_strategic_merge_patch_replaces_the_taint_list_whole(http):
    name = inert_node(http, taints=[{"key": "keep-me", "effect": "NoSchedule"}])
    code, body = http("PATCH", f"/api/v1/nodes/{name}",
                      {"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service",
                                            "value": "nodeshutdown", "effect": "NoExecute"}]}},
                      content_type="application/strategic-merge-patch+json")
    assert code == 200
    assert [t["key"] for t in body["spec"]["taints"]] == ["node.kubernetes.io/out-of-service"]


def test_a_strategic_merge_patch_merges_finalizers_and_can_delete_one(http):
    obj = pv(http)
    assert obj["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]  # admission added it
    path = f"/api/v1/persistentvolumes/{obj['metadata']['name']}"
    smp = "application/strategic-merge-patch+json"
    code, body = http("PATCH", path, {"metadata": {"finalizers": ["example.com/hold"]}}, content_type=smp)
    assert code == 200
    assert body["metadata"]["finalizers"] == ["kubernetes.io/pv-protection", "example.com/hold"]
    code, body = http("PATCH", path, {"metadata": {"$deleteFromPrimitiveList/finalizers": [
        "kubernetes.io/pv-protection"]}}, content_type=smp)
    assert code == 200 and body["metadata"]["finalizers"] == ["example.com/hold"]


def test_a_merge_patch_replaces_lists_and_null_removes_a_key(http):
    name = inert_node(http, labels={"drop": "me", "keep": "me"},
                      taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}])
    code, body = http("PATCH", f"/api/v1/nodes/{name}",
                      {"metadata": {"labels": {"drop": None}}, "spec": {"taints": [{"key": "c",
                                                                                   "effect": "NoSchedule"}]}},
                      content_type="application/merge-patch+json")
    assert code == 200
    assert body["metadata"]["labels"] == {"keep": "me"}
    assert [t["key"] for t in body["spec"]["taints"]] == ["c"]


def test_a_json_patch_applies_only_when_its_test_holds(http):
    name = inert_node(http, taints=[{"key": "a", "effect": "NoSchedule"}])
    path = f"/api/v1/nodes/{name}"
    rv = http("GET", path)[1]["metadata"]["resourceVersion"]
    add = {"op": "add", "path": "/spec/taints/-", "value": {"key": "b", "effect": "NoSchedule"}}
    jp = "application/json-patch+json"
    code, body = http("PATCH", path, [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, add],
                      content_type=jp)
    assert code == 200 and [t["key"] for t in body["spec"]["taints"]] == ["a", "b"]
    code, body = http("PATCH", path, [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                                      {"op": "remove", "path": "/spec/taints/0"}], content_type=jp)
    assert (code, body["reason"]) == (422, "Invalid") and "testing value" in body["message"]
    assert [t["key"] for t in http("GET", path)[1]["spec"]["taints"]] == ["a", "b"]
    code, body = http("PATCH", path, [{"op": "remove", "path": "/spec/taints/0"}], content_type=jp)
    assert code == 200 and [t["key"] for t in body["spec"]["taints"]] == ["b"]


def test_server_side_apply_is_refused_as_an_unsupported_media_type(http):
    name = inert_node(http)
    code, body = http("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": {"a": "b"}}},
                      content_type="application/apply-patch+yaml")
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")


# -- deletion and subresources ----------------------------------------------------------------

def test_deleting_an_object_with_finalizers_only_marks_it_until_they_are_removed(http):
    obj = pv(http, finalizers=["example.com/hold"])
    path = f"/api/v1/persistentvolumes/{obj['metadata']['name']}"
    code, body = http("DELETE", path)
    assert code == 200 and body["metadata"]["deletionTimestamp"]
    code, body = http("GET", path)
    # pv-protection (added at creation) went at once: the PV is not Bound; the other one stays
    assert code == 200 and body["metadata"]["finalizers"] == ["example.com/hold"]
    code, body = http("PATCH", path, {"metadata": {"finalizers": ["example.com/hold", "x/y"]}},
                      content_type="application/merge-patch+json")
    assert (code, body["reason"]) == (422, "Invalid") and "no new finalizers" in body["message"]
    code, _ = http("PATCH", path, {"metadata": {"finalizers": None}},
                   content_type="application/merge-patch+json")
    assert code == 200
    assert http("GET", path)[0] == 404


def test_a_delete_with_a_stale_resource_version_precondition_gets_409(http):
    obj = pv(http)
    path = f"/api/v1/persistentvolumes/{obj['metadata']['name']}"
    http("PATCH", path, {"metadata": {"labels": {"x": "1"}}}, content_type="application/merge-patch+json")
    code, body = http("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {
        "resourceVersion": obj["metadata"]["resourceVersion"]}})
    assert (code, body["reason"]) == (409, "Conflict")
    assert http("GET", path)[0] == 200


def test_volumeattachment_status_changes_only_through_the_status_subresource(sb, http, kube):
    storage = k8s.StorageV1Api(kube)
    name = unique("csi-protocol")
    storage.create_volume_attachment(k8s.V1VolumeAttachment(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1VolumeAttachmentSpec(attacher="ebs.csi.aws.com", node_name=inert_node(http),
                                        source=k8s.V1VolumeAttachmentSource(persistent_volume_name="pv-x"))))
    va = storage.read_volume_attachment(name)
    va.status = k8s.V1VolumeAttachmentStatus(attached=True)
    assert storage.replace_volume_attachment(name, va).status is None
    va = storage.read_volume_attachment(name)
    va.status = k8s.V1VolumeAttachmentStatus(attached=True, attach_error=k8s.V1VolumeError(message="boom"))
    va.spec.node_name = "somewhere-else"
    out = storage.replace_volume_attachment_status(name, va)
    assert out.status.attached is True and out.status.attach_error.message == "boom"
    assert out.spec.node_name != "somewhere-else"
    code, body = http("PATCH", f"/apis/storage.k8s.io/v1/volumeattachments/{name}",
                      {"spec": {"nodeName": "moved"}}, content_type="application/merge-patch+json")
    assert (code, body["reason"]) == (422, "Invalid") and "immutable" in body["message"]
    code, body = http("PATCH", f"/apis/storage.k8s.io/v1/volumeattachments/{name}/status",
                      {"status": {"attached": False}}, content_type="application/merge-patch+json")
    assert code == 200 and body["status"]["attached"] is False
    assert sb.get("VolumeAttachment", None, name)["status"]["attached"] is False
