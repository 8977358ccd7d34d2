"""API calls per action in the ``az-outage`` sandbox: the number of requests an action makes must
not grow with the number of volumes or nodes it looks through.

One sandbox (20 dead nodes of 5 volumes each, 30 nodes in all) is shared by the module: sandbox
startup dominates, and every test but the last only reads. The same figures at 100 nodes / 500
volumes are what ``bench/actions.py`` prints.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.actions.catalog import ClusterClients, RegistryCatalog, build_catalog
from bot.clients.ec2 import Ec2Client
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig, Settings
from bot.engine.plan import ApiCall, Plan, Result
from bot.engine.ports import ManualClock, SharedReads, StepContext
from tests.fakes.calls import sent

sandbox = pytest.importorskip("bot.sim.sandbox")
NODES, PER_NODE = 20, 5


class Outage:
    def __init__(self, sb: Any, clock: ManualClock) -> None:
        self.sb, self.clock = sb, clock
        self.facts = sb.facts
        self.node = sb.facts["dead_nodes"][0]
        self.instance_id = sb.facts["instance_ids"][0]
        self.ec2 = Ec2Client(client=sb.ec2_client())
        self.catalogs: dict[int, RegistryCatalog] = {}

    def catalog(self, page_size: int = 500) -> RegistryCatalog:
        if page_size not in self.catalogs:
            kube = KubeClient.from_config(kubeconfig=str(self.sb.kubeconfig_path),
                                          sleep=lambda _s: None, page_size=page_size)
            settings = Settings(database_url="sqlite://", clusters={
                "sandbox": ClusterConfig(name="sandbox", kubeconfig=str(self.sb.kubeconfig_path))})
            clients = ClusterClients.of(kube=kube, ec2=self.ec2)
            self.catalogs[page_size] = build_catalog(settings, clients_factory=lambda _c: clients)
        return self.catalogs[page_size]

    def ctx(self) -> StepContext:
        return StepContext(run_id="rb-eff01", step_id="s", requester="alice", clock=self.clock)

    def step(self, action: str, *, page_size: int = 500, **params: Any
             ) -> tuple[Plan, list[ApiCall], Result, list[ApiCall]]:
        catalog = self.catalog(page_size)
        plan_ctx, apply_ctx = self.ctx(), self.ctx()
        plan = catalog.plan(action, params, plan_ctx)
        result = catalog.apply(action, plan, apply_ctx)
        return plan, plan_ctx.calls, result, apply_ctx.calls


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    clock = ManualClock()
    workdir: Path = tmp_path_factory.mktemp("az-outage")
    with sandbox.Sandbox(scenario="az-outage", workdir=workdir, clock=clock,
                         options={"nodes": NODES, "volumes_per_node": PER_NODE}) as sb:
        yield Outage(sb, clock)


def _ops(calls: list[ApiCall]) -> list[str]:
    return sent(calls)


def test_the_outage_has_the_volumes_the_figures_are_about(outage):
    assert len(outage.sb.list("VolumeAttachment")) == NODES * PER_NODE
    assert len(outage.facts["dead_nodes"]) == NODES


@pytest.mark.parametrize("page_size", [500, 30])
def test_one_nodes_volume_attachments_are_one_paginated_list_not_a_call_per_volume(outage, page_size):
    _, plan_calls, result, calls = outage.step("k8s.volumeattachments.list", page_size=page_size,
                                               node=outage.node)
    assert plan_calls == [] and result.data["count"] == PER_NODE
    assert all(i["node"] == outage.node and i["volume_id"] for i in result.data["items"])
    # one list of every attachment (paged), and one of the PVs for their volume ids; none per volume
    pages = math.ceil(NODES * PER_NODE / page_size)
    assert _ops(calls) == ["list_volume_attachment"] * pages + ["list_persistent_volume"] * pages


def test_waiting_for_one_nodes_attachments_is_one_list_per_poll(outage):
    plan, plan_calls, result, calls = outage.step("k8s.volumeattachments.wait_gone",
                                                  node=outage.node)
    assert len(plan.data["initial"]) == PER_NODE and result.progress == f"0 of {PER_NODE} detached"
    assert _ops(plan_calls) == _ops(calls) == ["list_volume_attachment"]


def test_the_ec2_state_of_every_node_is_one_describe_instances_call(outage):
    kube = KubeClient.from_config(kubeconfig=str(outage.sb.kubeconfig_path))
    ids = [pid.rsplit("/", 1)[-1] for n in kube.list_nodes() if (pid := n["spec"]["providerID"])]
    calls: list[ApiCall] = []
    found = outage.ec2.bound(calls).describe_instances(ids)
    assert len(found) == len(ids) == NODES + NODES // 5 * 2 + -(-NODES * PER_NODE // 40)
    assert {found[i]["State"]["Name"] for i in outage.facts["instance_ids"]} == {"stopped"}
    assert _ops(calls) == ["DescribeInstances"]


@pytest.mark.parametrize("action, params, plan_ops, apply_ops", [
    ("k8s.node.get", {}, [], ["read_node"]),
    ("k8s.pods.list", {}, [], ["list_pod_for_all_namespaces"]),
    ("k8s.pv.list", None, [], ["list_persistent_volume"]),
    ("k8s.storageclasses.audit", None, [], ["list_node", "list_storage_class"]),
    # a stopped instance: EC2 runs no status checks on it, so none are read, and its stop
    # protection neither (only a machine that may still run is fenced)
    ("aws.ec2.instance.get", {}, [], ["DescribeInstances"]),
    ("aws.ec2.volumes.list", {}, [], ["DescribeVolumes"]),
    # the fence's live read: DescribeInstanceStatus gives the state with the status checks
    ("aws.ec2.instance.stop", {}, ["DescribeInstanceStatus"], ["DescribeInstanceStatus"]),
    # the node is taken from the list of all nodes the blast-radius rule reads anyway
    ("k8s.node.taint", {}, ["list_node", "DescribeInstances"], None),
])
def test_each_action_makes_a_fixed_number_of_calls_however_big_the_cluster(
        outage, action, params, plan_ops, apply_ops):
    if params is not None:  # the node or the instance of the first dead node
        params = {"instance_id": outage.instance_id} if action.startswith("aws.") else {
            "node": outage.node}
    catalog, ctx = outage.catalog(), outage.ctx()
    plan = catalog.plan(action, params or {}, ctx)
    assert _ops(ctx.calls) == plan_ops
    if apply_ops is not None:
        apply_ctx = outage.ctx()
        catalog.apply(action, plan, apply_ctx)
        assert _ops(apply_ctx.calls) == apply_ops


def test_steps_sharing_a_pass_read_each_object_once_and_every_node_from_one_list(outage):
    # one pass of a run: several steps, and several nodes, ask for the same things
    shared = SharedReads()
    catalog, ctxs = outage.catalog(), []
    for action, params in [("aws.ec2.instance.get", {"instance_id": outage.instance_id}),
                           ("aws.ec2.instance.stop", {"instance_id": outage.instance_id}),
                           ("k8s.storageclasses.audit", {}),
                           *[("k8s.node.get", {"node": n}) for n in outage.facts["dead_nodes"]]]:
        ctx = StepContext(run_id="rb-eff01", step_id=action, requester="alice",
                          clock=outage.clock, reads=shared)
        plan = catalog.plan(action, params, ctx)
        if plan.is_noop:
            catalog.apply(action, plan, ctx)
        ctxs.append(ctx)
    sent = [op for ctx in ctxs for op in _ops(ctx.calls)]
    # the instance once for both EC2 steps; the node list once, then every node from it
    assert sent == ["DescribeInstances", "list_node", "list_storage_class"]
    assert shared.served == 2 + NODES  # the stop's plan and apply, and each node


def test_a_write_clears_the_shared_reads_so_the_next_read_sees_it(outage):
    shared = SharedReads()
    ctx = StepContext(run_id="rb-eff01", step_id="s", requester="alice", clock=outage.clock,
                      reads=shared)
    catalog = outage.catalog()
    kube = catalog.clients_for(catalog.settings.clusters["sandbox"]).kube.bound(ctx.calls,
                                                                                reads=shared)
    node = outage.facts["dead_nodes"][-1]
    assert "efficiency" not in kube.get_node(node)["metadata"].get("labels", {})

    def label(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"].setdefault("labels", {})["efficiency"] = "written"
        return obj

    kube.list_pvs()
    kube.update(kind="Node", name=node, mutate=label)
    # the object written is served as the write answered it; every other read was cleared
    assert kube.get_node(node)["metadata"]["labels"]["efficiency"] == "written"
    kube.list_pvs()
    assert _ops(ctx.calls) == ["read_node", "list_persistent_volume", "read_node", "replace_node",
                               "list_persistent_volume"]
    assert shared.served == 1


def test_tainting_one_dead_node_detaches_its_volumes_while_the_wait_lists_once_per_poll(outage):
    # last in the module: this one changes the shared sandbox
    catalog = outage.catalog()
    plan = catalog.plan("k8s.node.taint", {"node": outage.node}, outage.ctx())
    apply_ctx = outage.ctx()
    catalog.apply("k8s.node.taint", plan, apply_ctx)
    assert _ops(apply_ctx.calls) == ["list_node", "DescribeInstances", "replace_node"]
    # the node itself and the second look at the node list were served from the first list
    assert [c.operation for c in apply_ctx.calls if c.outcome == "cached"] == [
        "read_node", "list_node"]
    wait = catalog.plan("k8s.volumeattachments.wait_gone", {"node": outage.node}, outage.ctx())
    polls: list[list[str]] = []
    for _ in range(20):
        ctx = outage.ctx()
        result = catalog.apply("k8s.volumeattachments.wait_gone", wait, ctx)
        polls.append(_ops(ctx.calls))
        if result.done:
            break
        outage.sb.advance(result.retry_after)
    assert result.done and result.progress == f"{PER_NODE} of {PER_NODE} detached"
    assert all(p == ["list_volume_attachment"] for p in polls)
    dead = set(outage.facts["dead_nodes"]) - {outage.node}
    others = [v for v in outage.sb.list("VolumeAttachment") if v["spec"]["nodeName"] in dead]
    assert len(others) == (NODES - 1) * PER_NODE  # only the tainted node's volumes moved


def test_an_object_deleted_by_the_write_that_removed_its_last_finalizer_is_read_on_the_wire(world):
    # The API server answers the PUT with the object, then removes it (deletionTimestamp set,
    # no finalizer left): a read after it in the same pass must see it gone, not the answer.
    world.kube.put("persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-going", "finalizers": ["kubernetes.io/pv-protection"],
                     "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"capacity": {"storage": "1Gi"}}})
    world.node("n-written")
    shared = SharedReads()
    ctx = StepContext(run_id="rb-eff02", step_id="s", requester="alice", clock=world.clock,
                      reads=shared)
    kube = world.catalog._env(world.catalog.validate("k8s.node.get", {"node": "n-written"}),
                              ctx).kube
    assert kube.get_pv("pv-going")["metadata"]["deletionTimestamp"]

    def unfinalize(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["finalizers"] = []
        return obj

    kube.update(kind="PersistentVolume", name="pv-going", mutate=unfinalize)
    assert kube.find(lambda: kube.get_pv("pv-going")) is None
    kube.update(kind="Node", name="n-written", mutate=lambda o: {
        **o, "metadata": {**o["metadata"], "labels": {"written": "yes"}}})
    assert kube.get_node("n-written")["metadata"]["labels"] == {"written": "yes"}
    assert [(c.operation, c.outcome) for c in ctx.calls] == [
        ("read_persistent_volume", "ok"), ("read_persistent_volume", "ok"),  # update reads live
        ("replace_persistent_volume", "ok"), ("read_persistent_volume", "NotFound"),
        ("read_node", "ok"), ("replace_node", "ok"), ("read_node", "cached")]


@pytest.mark.parametrize("page_size", [500, 7])
def test_what_a_reader_does_to_a_shared_read_is_not_served_to_the_next(outage, page_size):
    # the pass keeps a read as it came off the wire (one page's body, or the items of several
    # pages): a step that changes what it was given cannot change what the next step is served
    shared = SharedReads()
    catalog = outage.catalog(page_size)
    calls: list[ApiCall] = []
    kube = catalog.clients_for(catalog.settings.clusters["sandbox"]).kube.bound(calls,
                                                                                reads=shared)
    first = kube.list_nodes()
    names = sorted(n["metadata"]["name"] for n in first)
    node = outage.facts["dead_nodes"][0]
    first[0]["metadata"]["name"] = "changed-by-a-reader"
    first.clear()
    got = kube.get_node(node)
    got["metadata"]["labels"] = {"changed": "by a reader"}
    assert sorted(n["metadata"]["name"] for n in kube.list_nodes()) == names
    assert "changed" not in (kube.get_node(node)["metadata"].get("labels") or {})
    lease = kube.get_node_lease(node)
    if lease is not None:
        lease["spec"] = {}
        assert (kube.get_node_lease(node) or {}).get("spec")
    pages = math.ceil(len(names) / page_size)
    assert _ops(calls).count("list_node") == pages  # read once, then served


def test_what_a_reader_does_to_a_shared_ec2_read_is_not_served_to_the_next(outage):
    # the EC2 twin: a Describe kept for the pass is copied out to each reader, nested parts too
    shared = SharedReads()
    catalog = outage.catalog()
    calls: list[ApiCall] = []
    ec2 = catalog.clients_for(catalog.settings.clusters["sandbox"]).ec2.bound(calls, reads=shared)
    iid = outage.instance_id
    first = ec2.describe_instances([iid])[iid]
    state, tags = dict(first["State"]), list(first.get("Tags") or [])
    first["State"]["Name"] = "changed-by-a-reader"
    first.setdefault("Tags", []).append({"Key": "changed", "Value": "by a reader"})
    again = ec2.already_described("DescribeInstances", [iid])
    assert again is not None and again[iid]["State"] == state
    assert (again[iid].get("Tags") or []) == tags
    again[iid]["State"]["Name"] = "changed-by-the-next-reader"
    third = ec2.already_described("DescribeInstances", [iid])
    assert third is not None and third[iid]["State"] == state
    assert [(c.operation, c.outcome) for c in calls] == [
        ("DescribeInstances", "ok"), ("DescribeInstances", "cached"), ("DescribeInstances", "cached")]
