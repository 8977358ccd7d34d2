"""A seed fixes a scenario's whole history, and the three safety invariants are recorded, with the
simulated time, the moment a change breaks them."""

from __future__ import annotations

import gc
import threading
import weakref
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s

from bot.sim.controllers.context import va_name
from bot.sim.sandbox import Sandbox
from tests.sim.kit import api_for, kube_for

OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


def history(sb: Any) -> tuple[Any, ...]:
    """Drive the sandbox through a recovery, then everything an observer could compare."""
    f = sb.facts
    sb.store.mutate("Node", None, f["dead_node"], lambda n: n["spec"]["taints"].append(dict(OOS)))
    sb.advance(60)
    objects = {kind: [(o["metadata"]["name"], o["metadata"]["uid"], o["metadata"]["resourceVersion"])
                      for o in sb.list(kind)]
               for kind in ("Node", "Pod", "PersistentVolume", "VolumeAttachment")}
    return tuple(sb.events), f, objects, sorted(sb.ec2.attachments().items())


def test_the_same_seed_gives_the_same_event_sequence_ids_and_versions(pool):
    first = history(pool.fresh("node-dead"))
    pool.fresh("az-capacity-deadlock")  # whatever ran before in this process must not matter
    second = history(pool.fresh("node-dead"))
    assert first == second
    assert len(first[0]) > 20 and any("Multi-Attach" in e.message for e in first[0])


def test_another_seed_gives_other_ids_for_the_same_story(pool):
    one = pool.fresh("node-dead", seed=1)
    ids_one = (one.facts["instance_id"], one.facts["volume_id"], one.facts["pv"])
    reasons_one = [e.reason for e in one.events]
    other = pool.fresh("node-dead", seed=7)
    assert (other.facts["instance_id"], other.facts["volume_id"], other.facts["pv"]) != ids_one
    assert sorted(set(e.reason for e in other.events)) == sorted(set(reasons_one))


# -- invariants ------------------------------------------------------------------------------------

def test_an_ebs_volume_attached_to_two_instances_is_recorded_when_it_happens(pool):
    sb = pool.fresh("node-dead", allow_multi_attach=True)
    f = sb.facts
    assert sb.violations == []
    other = sb.get("Node", None, f["new_node"])["spec"]["providerID"].rsplit("/", 1)[-1]
    sb.advance(30)
    when = sb.now_ts()
    # moto (and this sandbox with allow_multi_attach) lets the second attach through.
    ec2 = sb.ec2_client(max_attempts=0, timeout=10)
    ec2.attach_volume(VolumeId=f["volume_id"], InstanceId=other, Device="/dev/xvdq")
    [v] = sb.violations
    assert (v.kind, v.time) == ("double-attach", when)
    assert v.details == f"{f['volume_id']} attached to {', '.join(sorted([f['instance_id'], other]))}"
    sb.advance(60)
    assert len(sb.violations) == 1  # recorded when it starts, not again while it lasts


def test_a_volume_attached_to_a_running_instance_while_a_pod_elsewhere_uses_it_is_recorded(pool):
    sb = pool.fresh("node-hung")
    f = sb.facts
    assert sb.violations == []
    sb.advance(20)
    when = sb.now_ts()
    # Someone "fixes" the Multi-Attach by hand: drops the old VolumeAttachment and marks a new one
    # attached, while EC2 still has the volume on the hung, running instance.
    sb.store.mutate("VolumeAttachment", None, f["volume_attachment"],
                    lambda v: v["metadata"].update(finalizers=[]))
    sb.store.remove(sb.res("VolumeAttachment"), None, f["volume_attachment"])
    sb.create("VolumeAttachment", {
        "metadata": {"name": va_name(f["volume_id"], f["new_node"])},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": f["new_node"],
                 "source": {"persistentVolumeName": f["pv"]}},
        "status": {"attached": True}})
    sb.settle()
    assert sb.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    [v] = [v for v in sb.violations if v.kind == "attached-elsewhere"]
    assert v.time == when
    assert v.details == (f"{f['volume_id']} attached to running {f['instance_id']} while pod "
                         f"{f['namespace']}/{f['pod']} uses it on {f['new_node']}")


def test_an_out_of_service_taint_on_a_node_whose_instance_runs_is_recorded_and_again_after_it_cleared(pool):
    sb = pool.fresh("zombie-attachments")
    node = sb.facts["node"]
    http = api_for(sb)
    smp = "application/strategic-merge-patch+json"
    try:
        assert http("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": [OOS]}}, content_type=smp)[0] == 200
        first = sb.now_ts()
        sb.advance(30)
        assert http("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": []}}, content_type=smp)[0] == 200
        sb.advance(30)
        assert http("PATCH", f"/api/v1/nodes/{node}", {"spec": {"taints": [OOS]}}, content_type=smp)[0] == 200
        second = sb.now_ts()
    finally:
        http.close()
    taints = [v for v in sb.violations if v.kind == "oos-taint-on-running"]
    assert [v.time for v in taints] == [first, second]
    assert taints[0].details == (f"node {node} has node.kubernetes.io/out-of-service but instance "
                                 f"{sb.facts['instance_id']} is running")


@pytest.mark.parametrize(("scenario", "action"), [
    ("node-not-ready", "stop_instances"),  # a live kubelet that says Ready=False
    ("node-partitioned", "terminate_instances"),  # a machine cut off from the API server
])
def test_a_fence_of_a_machine_whose_guest_still_runs_is_recorded_whoever_sends_it(
        pool, scenario, action):
    sb = pool.fresh(scenario)
    iid = sb.facts["instance_id"]
    kw = {"Force": True} if action == "stop_instances" else {}
    getattr(sb.ec2_client(as_bot=True), action)(InstanceIds=[iid], **kw)
    sb.advance(5)
    [v] = [v for v in sb.violations if v.kind == "fence-of-live"]
    assert iid in v.details and "guest still runs" in v.details


def test_each_fence_of_a_live_machine_is_recorded_the_second_as_well_as_the_first(pool):
    # a fence is a deed, not a standing state: the machine stopped, started again and stopped
    # again is two stops mid-write, each recorded when it is sent
    sb = pool.fresh("node-partitioned")
    iid = sb.facts["instance_id"]
    ec2 = sb.ec2_client(as_bot=True)
    ec2.stop_instances(InstanceIds=[iid], Force=True)
    sb.advance(120)
    assert sb.ec2.instance_state(iid) == "stopped"
    sb.ec2.set_state(iid, "running")  # someone starts it: the guest runs again
    sb.advance(5)
    ec2.stop_instances(InstanceIds=[iid], Force=True)
    sb.advance(5)
    fences = [v for v in sb.violations if v.kind == "fence-of-live"]
    assert len(fences) == 2, fences
    assert fences[0].time < fences[1].time


def test_a_fence_of_a_hung_or_stopped_machine_is_no_violation(pool):
    sb = pool.fresh("node-hung")
    sb.ec2_client(as_bot=True).stop_instances(InstanceIds=[sb.facts["instance_id"]], Force=True)
    sb.advance(60)
    assert [v for v in sb.violations if v.kind == "fence-of-live"] == []


def test_a_runbook_s_safe_order_breaks_no_invariant(pool):
    sb = pool.fresh("node-hung")
    f = sb.facts
    ec2 = sb.ec2_client(max_attempts=0, timeout=10)
    ec2.stop_instances(InstanceIds=[f["instance_id"]], Force=True)  # fence first
    sb.advance(125)  # the hung guest ignores the OS shutdown; Force cuts the power after it
    assert sb.ec2.instance_state(f["instance_id"]) == "stopped"
    sb.store.mutate("Node", None, f["dead_node"], lambda n: n["spec"]["taints"].append(dict(OOS)))
    sb.advance(30)
    assert sb.get("Pod", f["namespace"], f["pod"])["status"]["phase"] == "Running"
    assert sb.violations == []


# -- the sandbox as a whole ----------------------------------------------------------------------

def test_a_second_sandbox_in_the_same_process_is_refused_while_one_runs(pool, tmp_path):
    running = pool.get("stuck-terminating")
    with pytest.raises(RuntimeError, match="another sandbox is running"):
        Sandbox("node-dead", workdir=tmp_path).start()
    assert running.list("Node")  # the running one is untouched


def test_a_stopped_sandbox_keeps_no_thread_and_is_freed_while_its_clients_live(pool):
    pool.close()
    others = set(threading.enumerate())
    sb = pool.fresh("node-dead")
    kube, ec2 = kube_for(sb), sb.ec2_client(as_bot=True)
    # both clients keep their connection open after a request, as the bot's do
    assert k8s.CoreV1Api(kube).list_node().items
    assert ec2.describe_instances()["Reservations"]
    started = set(threading.enumerate()) - others
    assert any("process_request_thread" in t.name for t in started)  # a connection's thread
    pool.close()
    assert [t for t in started if t.is_alive()] == []
    stopped = weakref.ref(sb)
    del sb
    gc.collect()
    assert stopped() is None  # nothing the clients still hold reaches the stopped sandbox
    kube.close()
    ec2.close()


def test_rebasing_moves_every_timestamp_and_keeps_the_pending_timers(pool):
    sb = pool.fresh("node-dead", disable_force_detach_on_timeout=False)
    f = sb.facts
    before = sb.clock.now()
    created = sb.get("Node", None, f["dead_node"])["metadata"]["creationTimestamp"]
    first_event = sb.events[0].time
    target = datetime(2027, 3, 4, 5, 6, 7, tzinfo=UTC)
    sb.rebase(target)
    delta = target - before
    assert sb.clock.now() == target

    def moved(stamp: str) -> str:
        return (datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) + delta).strftime(
            "%Y-%m-%dT%H:%M:%SZ")

    assert sb.get("Node", None, f["dead_node"])["metadata"]["creationTimestamp"] == moved(created)
    assert sb.events[0].time == moved(first_event)
    # The 6-minute force-detach still counts from when the volume stopped being wanted.
    sb.advance(340)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is not None
    sb.advance(30)
    assert sb.find("VolumeAttachment", None, f["volume_attachment"]) is None
