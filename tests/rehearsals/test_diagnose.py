"""``diagnose`` against every sandbox scenario: it names the runbook that fixes the incident, with
the params that runbook takes, read only through the bot's own identity (RBAC from deploy/rbac.yaml,
IAM from deploy/iam-policy.json), and nothing at all for a healthy cluster."""

from __future__ import annotations

from typing import Any

import pytest

from bot.actions.builtin import builtin_actions
from bot.actions.catalog import ClusterClients
from bot.cli.wiring import scanner
from bot.clients.ec2 import Ec2Client
from bot.clients.kube import KubeClient
from bot.diagnose import Report, Scope, Severity, catalogue_of
from bot.runbook.source import DirectorySource
from bot.sim.rehearsal import REPO, Rehearsal
from bot.sim.sandbox import BOT_CONTEXT
from bot.sim.scenarios import SCENARIOS

SHIPPED = catalogue_of(DirectorySource((str(REPO / "runbooks"),), catalog=builtin_actions()))


def _node(f: dict[str, Any]) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {("node-dead-ngns", (("node", f["dead_node"]),))}


def _pvs(*pvs: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {("stuck-terminating-volume", (("pv", pv),)) for pv in pvs}


# scenario -> the (runbook, params without cluster) every finding of a scan names, from its facts
EXPECTED = {
    "node-dead": _node, "node-hung": _node, "stuck-detach": _node, "tolerating-pod": _node,
    "pod-force-deleted": _node, "old-incident": _node, "node-recovers-during-approval": _node,
    "spot-node-dead": _node, "node-replaced": _node, "node-dead-deployment": _node,
    "auto-mode-node-hung": _node, "node-hung-local-data": _node, "stuck-detach-multi-attach": _node,
    "az-capacity-deadlock": lambda f: {("volume-affinity-conflict",
                                        (("namespace", f["namespace"]), ("pod", f["pod"])))},
    "stuck-terminating": lambda f: _pvs(*f["pvs"]),
    "bound-pv-deleted": lambda f: _pvs(f["pv"]),
    "auto-mode-leak": lambda f: _pvs(f["pv"]),
    "zombie-attachments": lambda f: {("zombie-volumeattachments", ())},
    "az-outage": lambda f: {("zone-outage-ngns", (("zone", f["zone"]),))},
    # staged 50 s after the failure: the hung instances' status checks have not failed yet (180 s),
    # so only two machines are confirmed dead, fewer than a zone finding needs: node by node
    "az-outage-worst-day": lambda f: {("node-dead-ngns", (("node", n),)) for n in f["dead_nodes"]},
    # a live kubelet: the triage, never the fence
    "node-not-ready": lambda f: {("node-not-ready-triage", (("node", f["node"]),))},
    # silent, EC2 passes it: node-dead-ngns, whose fence is break-glass only
    "node-partitioned": lambda f: {("node-dead-ngns", (("node", f["node"]),))},
    # a Node deleted while its machine runs: URGENT, with the machine; and the pod waiting on it
    "node-deleted-running": lambda f: {
        ("node-dead-ngns", (("instance_id", f["instance_id"]), ("node", f["node"]))),
        ("multi-attach-triage", (("namespace", f["namespace"]), ("pod", f["pod"])))},
}


def scan(r: Rehearsal, **scope: Any) -> Report:
    sb = r.sandbox
    clients = ClusterClients.of(
        kube=KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT),
        ec2=Ec2Client(client=sb.ec2_client(as_bot=True)))
    scan = scanner(r.settings, clients_factory=lambda _cfg: clients, clock=r.clock)
    return scan(Scope(cluster="sandbox", **scope))


def named(report: Report) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(str(f.runbook), tuple(sorted((k, v) for k, v in f.params.items() if k != "cluster")))
            for f in report.findings}


def test_every_scenario_has_an_expected_diagnosis() -> None:
    assert set(EXPECTED) == set(SCENARIOS)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_diagnose_names_the_runbook_and_params_that_fix_each_scenario(rehearse, scenario) -> None:
    r = rehearse(scenario)
    report = scan(r)
    assert named(report) == EXPECTED[scenario](r.facts), [f.to_json() for f in report.findings]
    for f in report.findings:
        assert f.evidence and f.summary and f.command.startswith(f"runbook-bot run {f.runbook} ")
        assert f.params.get("cluster") == "sandbox"
        declared = SHIPPED.get(str(f.runbook))
        if declared is None and f.runbook == "zone-outage-ngns":
            continue  # shipped alongside; its params are checked once it is in runbooks/
        assert declared is not None, f"{f.runbook} is not a shipped runbook"
        assert set(f.params) <= declared
    assert r.sandbox.ec2.refused == []  # nothing IAM would refuse
    assert report.calls <= 12  # one list per kind, three EC2 questions


@pytest.mark.slow
def test_a_force_deleted_pod_on_a_live_machine_is_urgent_with_the_minutes_left(rehearse) -> None:
    r = rehearse("pod-force-deleted")
    [f] = scan(r).findings
    assert (f.kind, f.severity) == ("pod-force-deleted-volume-attached", Severity.URGENT)
    assert any("5.0 min" in e.what for e in f.evidence)  # 6 minutes from the force delete, 1 gone
    assert any("is running" in e.what for e in f.evidence)


@pytest.mark.slow
def test_a_stopped_machine_holding_volumes_is_high_and_names_the_waiting_pod(rehearse) -> None:
    r = rehearse("node-dead")
    [f] = scan(r).findings
    assert (f.kind, f.severity) == ("node-dead-holding-volumes", Severity.HIGH)
    assert any("is stopped" in e.what and e.source == "ec2:DescribeInstances" for e in f.evidence)
    assert any(f"pod search/{r.facts['pod']} on {r.facts['new_node']}" in e.what for e in f.evidence)


@pytest.mark.slow
def test_the_scope_keeps_what_touches_the_node_pod_or_namespace(rehearse) -> None:
    r = rehearse("node-dead")
    dead, other = r.facts["dead_node"], r.facts["new_node"]
    assert len(scan(r, node=dead).findings) == 1
    assert scan(r, node=other).findings == ()  # the waiting pod's node holds nothing
    assert len(scan(r, pod=r.facts["pod"], namespace="search").findings) == 1
    assert scan(r, pod=r.facts["pod"], namespace="default").findings == ()
    assert len(scan(r, namespace="search").findings) == 1
    assert scan(r, namespace="kube-system").findings == ()


@pytest.mark.slow
def test_a_zone_outage_is_one_finding_for_the_zone_with_its_capacity(rehearse) -> None:
    r = rehearse("az-outage", nodes=4)
    [f] = scan(r).findings
    assert (f.kind, dict(f.subject)) == ("zone-outage", {"zone": "ap-southeast-1a"})
    assert any(e.what.startswith("zone capacity: ap-southeast-1a:") for e in f.evidence)
    assert f.severity is Severity.HIGH and f.command.endswith("-p zone=ap-southeast-1a")


def _heal_zombies(r: Rehearsal) -> None:
    sb, f = r.sandbox, r.facts
    gone = [("VolumeAttachment", name) for name in f["zombies"]] + [("PersistentVolume", f["orphan_pv"])]
    for kind, name in gone:  # a person clears the finalizers of what no controller will
        sb.store.mutate(kind, None, name, lambda o: o["metadata"].update(finalizers=[]))
        sb.store.remove(sb.res(kind), None, name)
    admin = sb.ec2_client()
    admin.detach_volume(VolumeId=f["orphan_volume_id"], Force=True)
    sb.advance(5)
    admin.delete_volume(VolumeId=f["orphan_volume_id"])
    sb.advance(5)


@pytest.mark.slow
def test_a_healthy_cluster_has_no_findings_then_latent_risks_are_low(rehearse) -> None:
    r = rehearse("zombie-attachments")
    _heal_zombies(r)
    assert scan(r).findings == ()
    sb = r.sandbox
    # an Immediate class across three zones, and volumes no PV names: one tagged for this cluster,
    # one for another cluster in the same account
    sb.create("StorageClass", {"metadata": {"name": "gp2-any"}, "provisioner": "ebs.csi.aws.com",
                               "volumeBindingMode": "Immediate"})
    tags = [{"Key": "ebs.csi.aws.com/cluster", "Value": "true"},
            {"Key": "CSIVolumeName", "Value": "pvc-gone"}]
    admin = sb.ec2_client()
    leaked = admin.create_volume(AvailabilityZone="ap-southeast-1b", Size=20, TagSpecifications=[
        {"ResourceType": "volume", "Tags": [*tags, {"Key": "kubernetes.io/cluster/sandbox",
                                                    "Value": "owned"}]}])["VolumeId"]
    admin.create_volume(AvailabilityZone="ap-southeast-1b", Size=20, TagSpecifications=[
        {"ResourceType": "volume", "Tags": [*tags, {"Key": "kubernetes.io/cluster/other",
                                                    "Value": "owned"}]}])
    sb.advance(5)
    found = {(f.kind, f.severity, f.runbook): dict(f.subject) for f in scan(r).findings}
    assert found == {
        ("immediate-storageclass-multi-zone", Severity.LOW, None): {"storageclass": "gp2-any"},
        ("ebs-volume-leaked", Severity.LOW, None): {"volume": leaked, "zone": "ap-southeast-1b",
                                                    "pv": "pvc-gone"}}


def _calls(tmp_path: Any, nodes: int) -> tuple[int, int]:
    with Rehearsal("az-outage", options={"nodes": nodes}, workdir=tmp_path / f"n{nodes}") as r:
        sb = r.sandbox
        kube = KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT,
                                      page_size=10_000)  # pages aside: one request per list
        clients = ClusterClients.of(kube=kube, ec2=Ec2Client(client=sb.ec2_client(as_bot=True)))
        report = scanner(r.settings, clients_factory=lambda _cfg: clients,
                         clock=r.clock)(Scope(cluster="sandbox"))
        return report.calls, len(sb.list("Pod"))


@pytest.mark.slow
def test_a_scan_costs_the_same_calls_for_a_small_and_a_large_outage(tmp_path) -> None:
    small, small_pods = _calls(tmp_path, 4)
    large, large_pods = _calls(tmp_path, 40)
    assert large_pods >= 8 * small_pods
    assert small == large == 10  # 7 lists, the node Leases, DescribeInstances, DescribeVolumes
