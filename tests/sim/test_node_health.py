"""Node health as EKS reports it: Leases, the 5-minute status report, the lifecycle controller's
grace period, live-but-sick kubelets, and EC2 status checks and scheduled events on the clock.

Every expectation is what an API client or an EC2 client would read, at the simulated second the
upstream rule says.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from bot.sim.controllers.daemonsets import pod_name
from bot.sim.node_incidents import build_node_not_ready
from tests.sim.kit import events, node_of, ready, taint_keys

NS = "search"
LEASES = "kube-node-lease"
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
CNI = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
       "message:Network plugin returns error: cni plugin not initialized")
PLEG = "PLEG is not healthy: pleg was last seen active 3m5s ago; threshold is 3m0s"


def lease_age(sb: Any, node: str) -> float:
    assert sb.ctx is not None
    return float(sb.ctx.seconds_since(sb.get("Lease", LEASES, node)["spec"]["renewTime"]))


def cond(sb: Any, node: str, ctype: str) -> dict[str, Any]:
    return next(c for c in sb.get("Node", None, node)["status"]["conditions"] if c["type"] == ctype)


def beat_age(sb: Any, node: str) -> float:
    assert sb.ctx is not None
    return float(sb.ctx.seconds_since(cond(sb, node, "Ready")["lastHeartbeatTime"]))


def checks(sb: Any, iid: str) -> dict[str, Any]:
    [row] = sb.ec2_client().describe_instance_status(InstanceIds=[iid])["InstanceStatuses"]
    return dict(row)


# -- Leases ---------------------------------------------------------------------------------------

def test_every_live_kubelet_holds_a_lease_in_kube_node_lease_owned_by_its_node(pool):
    sb = pool.get("node-partitioned")
    assert sb.get("Namespace", None, LEASES)["status"]["phase"] == "Active"
    for node in sb.list("Node"):
        lease = sb.get("Lease", LEASES, node["metadata"]["name"])
        assert lease["apiVersion"] == "coordination.k8s.io/v1"
        assert lease["spec"]["holderIdentity"] == node["metadata"]["name"]
        assert lease["spec"]["leaseDurationSeconds"] == 40
        assert MICRO.match(lease["spec"]["renewTime"])
        assert lease["metadata"]["ownerReferences"] == [{
            "apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"],
            "uid": node["metadata"]["uid"]}]


def test_leases_are_renewed_every_10_s_stop_for_a_hung_or_partitioned_machine_and_go_with_the_node(
        pool):
    sb = pool.fresh("node-dead")
    live, hung, cut = (node_of(sb, NS, f"es-data-{i}") for i in (0, 1, 2))
    before = {n: sb.get("Lease", LEASES, n)["spec"]["renewTime"] for n in (live, hung, cut)}
    sb.break_node(hung, hung=True)
    sb.partition(cut)
    renewals = set()
    for _ in range(6):
        sb.advance(5)
        renewals.add(sb.get("Lease", LEASES, live)["spec"]["renewTime"])
        assert lease_age(sb, live) < 10
    assert len(renewals) == 3  # 30 s, a renewal every 10 s
    for n in (hung, cut):
        assert sb.get("Lease", LEASES, n)["spec"]["renewTime"] == before[n]
    sb.partition(cut, cut=False)  # the network heals: the same kubelet renews at once
    assert lease_age(sb, cut) == 0 and ready(sb, cut) == "True"
    sb.store.delete(sb.res("Node"), None, hung)  # its Lease goes with it, as the GC takes it
    sb.advance(5)
    assert sb.find("Lease", LEASES, hung) is None


# -- the kubelet's status report and the lifecycle controller -------------------------------------

def test_a_healthy_node_posts_its_status_only_every_5_minutes_while_its_lease_stays_fresh(pool):
    sb = pool.fresh("node-dead")
    node = node_of(sb, NS, "es-data-2")
    sb.advance(300)  # past the staging's last change of that node's status
    ages = []
    for _ in range(62):
        sb.advance(5)
        assert ready(sb, node) == "True" and lease_age(sb, node) < 10
        ages.append(beat_age(sb, node))
    # Ready all along, its heartbeat up to 5 minutes old, refreshed once every 300 s
    assert max(ages) == 295 and ages.count(0) in (1, 2)
    assert [c["type"] for c in sb.get("Node", None, node)["status"]["conditions"]][:4] == [
        "MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]


def test_a_silent_node_is_unknown_50_s_after_its_last_lease_renewal(pool):
    sb = pool.fresh("node-dead")
    node = node_of(sb, NS, "es-data-1")
    sb.break_node(node)  # stopped: the last renewal was at most 10 s ago
    sb.advance(35)
    assert ready(sb, node) == "True" and taint_keys(sb, node) == []
    sb.advance(15)
    for ctype in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        c = cond(sb, node, ctype)
        assert (c["status"], c["reason"], c["message"]) == (
            "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    assert cond(sb, node, "NetworkingReady")["status"] == "True"  # the agent's: left alone
    assert taint_keys(sb, node)[:2] == [(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")]
    assert [e.source for e in events(sb, reason="NodeNotReady", obj=f"Node/{node}")] == [
        "node-controller"]


def test_the_grace_period_is_the_option_node_monitor_grace_period(pool):
    sb = pool.fresh("node-dead", node_monitor_grace_period=100)
    node = node_of(sb, NS, "es-data-1")
    sb.break_node(node)
    sb.advance(85)
    assert ready(sb, node) == "True"
    sb.advance(15)
    assert ready(sb, node) == "Unknown"


def test_the_controller_judges_the_lease_not_the_machine(pool):
    sb = pool.fresh("node-dead")
    node = node_of(sb, NS, "es-data-1")
    sb.break_node(node, hung=True)
    for _ in range(12):  # someone else keeps renewing the hung kubelet's Lease
        sb.advance(10)
        sb.store.mutate("Lease", LEASES, node, lambda o: o["spec"].update(
            renewTime=sb.clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")))
    assert ready(sb, node) == "True"  # what reaches the API server is all it has
    sb.advance(50)
    assert ready(sb, node) == "Unknown"


# -- live kubelets that are not Ready -------------------------------------------------------------

def test_a_kubelet_whose_cni_is_not_ready_posts_ready_false_while_its_lease_is_fresh_and_its_pod_runs(
        pool):
    sb = pool.get("node-not-ready")
    f = sb.facts
    node = f["node"]
    c = cond(sb, node, "Ready")
    assert (c["status"], c["reason"], c["message"]) == ("False", "KubeletNotReady", CNI)
    assert (f["ready"], f["ready_reason"], f["ready_message"]) == ("False", "KubeletNotReady", CNI)
    assert lease_age(sb, node) < 10 and beat_age(sb, node) >= 60  # alive, its report older
    pod = sb.get("Pod", NS, f["pod"])
    assert pod["spec"]["nodeName"] == node and pod["status"]["phase"] == "Running"
    assert not pod["metadata"].get("deletionTimestamp")
    net = cond(sb, node, "NetworkingReady")
    assert (net["status"], net["reason"]) == ("False", "IPAMDNotReady")
    assert taint_keys(sb, node) == [(NOT_READY, "NoSchedule"), (NOT_READY, "NoExecute")]
    aws_node = sb.get("Pod", "kube-system", pod_name("aws-node", node))
    [cs] = [s for s in aws_node["status"]["containerStatuses"] if s["name"] == "aws-node"]
    assert aws_node["status"]["phase"] == "Running" and not cs["ready"] and cs["restartCount"] >= 1
    row = checks(sb, f["instance_id"])
    assert row["InstanceStatus"]["Status"] == row["SystemStatus"]["Status"] == "ok"
    assert sb.violations == []


def test_each_cause_posts_what_a_real_kubelet_and_the_monitoring_agent_post(pool):
    sb = pool.fresh("zombie-attachments")  # six healthy nodes
    nodes = [n["metadata"]["name"] for n in sb.list("Node")]
    causes = ["pleg", "runtime", "disk-pressure", "memory-pressure", "pid-pressure", "storage"]
    for node, cause in zip(nodes, causes, strict=True):
        sb.sicken_kubelet(node, cause)
    sb.advance(10)
    got = dict(zip(causes, nodes, strict=True))
    assert cond(sb, got["pleg"], "Ready")["message"] == PLEG
    assert cond(sb, got["runtime"], "Ready")["message"] == f"container runtime is down, {PLEG}"
    assert cond(sb, got["runtime"], "ContainerRuntimeReady")["status"] == "False"
    for cause, ctype, reason in (("disk-pressure", "DiskPressure", "KubeletHasDiskPressure"),
                                 ("memory-pressure", "MemoryPressure", "KubeletHasInsufficientMemory"),
                                 ("pid-pressure", "PIDPressure", "KubeletHasInsufficientPID")):
        node = got[cause]
        assert ready(sb, node) == "True"  # pressure never flips Ready
        assert (cond(sb, node, ctype)["status"], cond(sb, node, ctype)["reason"]) == ("True", reason)
        assert taint_keys(sb, node) == [(f"node.kubernetes.io/{cause}", "NoSchedule")]
    storage = got["storage"]
    assert ready(sb, storage) == "True" and cond(sb, storage, "StorageReady")["status"] == "False"
    assert lease_age(sb, got["pleg"]) < 10 and lease_age(sb, storage) < 10


def test_a_not_ready_node_s_pod_is_evicted_after_300_s_and_its_live_kubelet_lets_the_volume_go(pool):
    sb = pool.fresh("node-not-ready")
    f = sb.facts
    sb.advance(300 - f["sick_for"] - 10)
    assert sb.get("Pod", NS, f["pod"])["spec"]["nodeName"] == f["node"]
    sb.advance(30)
    [ev] = events(sb, reason="TaintManagerEviction", obj=f"Pod/{NS}/{f['pod']}")
    assert ev.source == "taint-eviction-controller"  # the not-ready taint's 300 s are up
    # the live kubelet stops it within its grace period (Elasticsearch's 120 s), then it moves
    assert sb.get("Pod", NS, f["pod"])["spec"]["nodeName"] == f["node"]
    sb.advance(150, step=10)
    pod = sb.get("Pod", NS, f["pod"])  # confirmed by its kubelet, recreated elsewhere
    assert pod["spec"]["nodeName"] != f["node"] and pod["status"]["phase"] == "Running"
    new_iid = sb.get("Node", None, pod["spec"]["nodeName"])["spec"]["providerID"].rsplit("/", 1)[1]
    assert sb.ec2.attachments()[f["volume_id"]] == [(new_iid, "attached")]
    assert sb.find("Pod", "kube-system", pod_name("aws-node", f["node"])) is not None  # tolerates
    assert sb.violations == []


def test_repairing_the_kubelet_makes_it_post_ready_again_and_the_taints_go(pool):
    sb = pool.fresh("node-not-ready", cause="pleg")
    node = sb.facts["node"]
    sb.sicken_kubelet(node, None)
    assert ready(sb, node) == "True" and cond(sb, node, "Ready")["reason"] == "KubeletReady"
    assert taint_keys(sb, node) == []
    assert [e.source for e in events(sb, reason="NodeReady", obj=f"Node/{node}")] == ["kubelet"]


def test_an_unknown_cause_is_refused_with_the_known_ones():
    staged = SimpleNamespace(options={"cause": "flaky"})  # refused before anything is built
    with pytest.raises(ValueError, match=r"cause='flaky'.*cni, pleg"):
        build_node_not_ready(staged)  # type: ignore[arg-type]


# -- EC2 status checks and scheduled events -------------------------------------------------------

def test_status_checks_fail_only_after_the_delay_and_a_failed_host_fails_the_system_check(pool):
    sb = pool.fresh("node-partitioned", status_check_delay=120)
    hung, host = node_of(sb, NS, "es-data-1"), node_of(sb, NS, "es-data-2")
    hung_iid, host_iid = sb._instance(hung), sb._instance(host)
    sb.break_node(hung, hung=True)
    sb.ec2.set_host_failed(host_iid)
    sb.advance(115)
    for iid in (hung_iid, host_iid):
        row = checks(sb, iid)
        assert row["InstanceStatus"]["Status"] == row["SystemStatus"]["Status"] == "ok"
    sb.advance(5)
    failed = {"Details": [{"Name": "reachability", "Status": "failed"}], "Status": "impaired"}
    row = checks(sb, hung_iid)  # the guest is gone, AWS's side is fine
    assert row["InstanceStatus"] == failed and row["SystemStatus"]["Status"] == "ok"
    row = checks(sb, host_iid)  # the host is gone: the instance still says running
    assert row["InstanceState"]["Name"] == "running" and row["SystemStatus"] == failed
    assert lease_age(sb, host) >= 50  # its guest is cut off with it
    sb.recover_guest(hung)
    assert checks(sb, hung_iid)["InstanceStatus"]["Status"] == "ok"


def test_a_partitioned_instance_keeps_ok_checks_while_its_node_is_unknown(pool):
    sb = pool.get("node-partitioned")
    f = sb.facts
    assert ready(sb, f["node"]) == "Unknown" and lease_age(sb, f["node"]) >= 50
    assert sb.ec2.instance_state(f["instance_id"]) == "running"
    sb.advance(300)
    row = checks(sb, f["instance_id"])
    assert row["InstanceStatus"]["Status"] == row["SystemStatus"]["Status"] == "ok"


def test_scheduled_events_are_answered_in_describe_instance_status(pool):
    sb = pool.fresh("node-partitioned", scheduled_event="instance-retirement")
    f = sb.facts
    done = sb.ec2.schedule_event(f["instance_id"], "system-reboot", in_seconds=-86400,
                                 duration=7200, completed=True)
    [retire, reboot] = checks(sb, f["instance_id"])["Events"]
    assert retire["InstanceEventId"] == f["scheduled_event_id"] and retire["Code"] == "instance-retirement"
    assert retire["Description"] == "The instance is running on degraded hardware"
    assert (retire["NotBefore"] - sb.clock.now()).total_seconds() == 7 * 86400
    assert reboot["InstanceEventId"] == done and reboot["Description"].startswith("[Completed]")
    assert (reboot["NotAfter"] - reboot["NotBefore"]).total_seconds() == 7200
    with pytest.raises(ValueError, match="instance-reboot"):
        sb.ec2.schedule_event(f["instance_id"], "meteor-strike")


def test_the_pods_of_a_node_the_controller_stops_hearing_from_are_not_ready_until_it_is_back():
    """MarkPodsNotReady: once the node lifecycle controller marks a node Unknown, every pod on it
    has its Ready condition False (nothing reads them as serving); back, its kubelet reports them
    Ready again."""
    from bot.sim.sandbox import Sandbox

    with Sandbox("node-hung", account="210987654321") as sb:  # beside this module's sandbox
        node = "ip-10-0-2-23.ap-southeast-1.compute.internal"

        def readies() -> set[str]:
            return {next(c["status"] for c in p["status"]["conditions"] if c["type"] == "Ready")
                    for p in sb.list("Pod") if p["spec"].get("nodeName") == node}

        assert readies() == {"True"}
        sb.partition(node)
        sb.advance(90)  # past the 40 s grace period
        assert ready(sb, node) == "Unknown" and readies() == {"False"}
        sb.partition(node, cut=False)
        sb.advance(30)
        assert ready(sb, node) == "True" and readies() == {"True"}


def test_pods_stay_ready_when_a_node_the_controller_last_saw_not_ready_goes_silent(pool):
    """EKS's node lifecycle controller marks a node's pods not ready only when it sees Ready go
    from True to not True (``monitorNodeHealth``: the Ready it observed was True). A kubelet that
    posted Ready=False and then fell silent (its machine stopped) leaves its pods Ready=True,
    stale, as they were: nothing but the taint eviction moves them. A runbook reading pod
    readiness as "serving" is wrong there, and the sandbox must show it."""
    sb = pool.fresh("node-not-ready")
    f = sb.facts
    node = f["node"]
    pod_ready = lambda: next(c["status"] for c in sb.get("Pod", NS, f["pod"])["status"]["conditions"]  # noqa: E731
                             if c["type"] == "Ready")
    assert ready(sb, node) == "False" and pod_ready() == "True"
    before = len(events(sb, reason="NodeNotReady", obj=f"Node/{node}"))
    sb.break_node(node)
    sb.advance(60)  # past the 50 s grace period: the controller stops hearing from it
    assert ready(sb, node) == "Unknown"
    assert (UNREACHABLE, "NoExecute") in taint_keys(sb, node)
    assert pod_ready() == "True"  # stale: not marked by the controller, as in EKS
    assert len(events(sb, reason="NodeNotReady", obj=f"Node/{node}")) == before
    assert sb.violations == []
