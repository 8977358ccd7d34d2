"""The diagnosis names a node whose kubelet is alive, and pods starved of IP addresses, and never
offers either the fence of ``node-dead-ngns``; the classifier behind it is rule 8's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.actions.liveness import AMBIGUOUS, DEAD, READY, SICK, classify
from bot.diagnose.rules import findings
from bot.diagnose.world import World

NOW = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
CNI = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
       "message:Network plugin returns error: cni plugin not initialized")


def _at(ago: float) -> str:
    return (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str = "n1", *, ready: str = "False", reason: str = "KubeletNotReady",
         message: str = CNI, beat_ago: float = 5, extra: list[dict[str, Any]] | None = None
         ) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "z1"}},
            "spec": {"providerID": "aws:///z1/i-0123456789abcdef0"},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason,
                                       "message": message, "lastHeartbeatTime": _at(beat_ago),
                                       "lastTransitionTime": _at(600)}, *(extra or [])]}}


def lease(ago: float) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "namespace": "kube-node-lease"},
            "spec": {"renewTime": (NOW - timedelta(seconds=ago)).isoformat()}}


RUNNING = {"InstanceId": "i-0123456789abcdef0", "State": {"Name": "running"}}
STOPPED = {"InstanceId": "i-0123456789abcdef0", "State": {"Name": "stopped"}}


def checks(instance: str = "ok", system: str = "ok") -> dict[str, Any]:
    return {"InstanceStatus": {"Status": instance}, "SystemStatus": {"Status": system}}


@pytest.mark.parametrize(("n", "lease_ago", "inst", "st", "verdict", "cause"), [
    (node(), 3, RUNNING, checks(), SICK, "cni"),
    (node(message="PLEG is not healthy: pleg was last seen active 3m5s ago"), 3, RUNNING, checks(),
     SICK, "pleg"),
    # the 5-minute status report: an old heartbeat, a fresh Lease: alive
    (node(beat_ago=280, message="container runtime is down"), 8, RUNNING, checks(), SICK,
     "runtime"),
    (node(ready="Unknown", reason="NodeStatusUnknown", message="", beat_ago=400), 390, RUNNING,
     checks("impaired"), DEAD, None),
    (node(ready="Unknown", reason="NodeStatusUnknown", message="", beat_ago=400), 390, STOPPED,
     None, DEAD, None),
    (node(ready="Unknown", reason="NodeStatusUnknown", message="", beat_ago=400), 390, RUNNING,
     checks(), AMBIGUOUS, None),
    (node(ready="Unknown", reason="NodeStatusUnknown", message="", beat_ago=400), 390, RUNNING,
     checks("initializing"), AMBIGUOUS, None),
    (node(ready="True", reason="KubeletReady", message="", beat_ago=200,
          extra=[{"type": "DiskPressure", "status": "True"}]), 2, RUNNING, checks(), READY,
     "disk-pressure"),
    (node(ready="True", reason="KubeletReady", message="", beat_ago=200,
          extra=[{"type": "StorageReady", "status": "False"}]), 2, RUNNING, checks(), READY,
     "storage"),
])
def test_the_classifier_tells_sick_dead_and_ambiguous_apart(n, lease_ago, inst, st, verdict, cause):
    lv = classify(node=n, lease=lease(lease_ago), instance=inst, status=st, now=NOW, grace=50)
    assert (lv.verdict, lv.cause) == (verdict, cause), lv.words()


def test_without_a_lease_a_fresh_ready_false_is_still_a_live_kubelet():
    lv = classify(node=node(beat_ago=10), lease=None, instance=RUNNING, status=checks(), now=NOW,
                  grace=50)
    assert lv.verdict == SICK and "no Lease" in lv.words()


def _world(*nodes: dict[str, Any], leases: dict[str, Any], pods: list[Any] = (),
           events: list[Any] = (), statuses: dict[str, Any] | None = None) -> World:
    w = World(now=NOW, nodes=list(nodes), pods=list(pods), pvs=[], pvcs=[], vas=[], classes=[],
              events=list(events))
    w.instances = {"i-0123456789abcdef0": RUNNING}
    w.statuses = statuses or {"i-0123456789abcdef0": checks()}
    w.leases = leases
    return w


def test_a_sick_node_is_named_with_its_cause_and_the_triage_never_the_fence():
    aws_node = {"metadata": {"name": "aws-node-x1", "namespace": "kube-system",
                             "labels": {"k8s-app": "aws-node"}},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "containerStatuses": [
                    {"name": "aws-node", "ready": False, "restartCount": 7}]}}
    w = _world(node(), leases={"n1": lease(4)}, pods=[aws_node])
    found = list(findings(w))
    assert [(d.kind, d.runbook) for d in found] == [("node-sick-kubelet-alive",
                                                     "node-not-ready-triage")]
    [d] = found
    assert "kubelet is ALIVE" in d.summary and "Do not fence it" in d.summary
    assert any("aws-node-x1 is NOT ready, 7 restart(s)" in e.what for e in d.evidence)


def test_pods_without_an_ip_address_are_named_as_ip_exhaustion_not_a_storage_fault():
    pod = {"metadata": {"name": "web-1", "namespace": "shop"}, "spec": {"nodeName": "n1"},
           "status": {"phase": "Pending"}}
    ev = {"involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1"},
          "reason": "FailedCreatePodSandBox",
          "message": 'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to '
                     'setup network for sandbox: plugin type="aws-cni" name="aws-cni" failed '
                     '(add): add cmd: failed to assign an IP address to container'}
    w = _world(node(ready="True", reason="KubeletReady", message=""), leases={"n1": lease(2)},
               pods=[pod], events=[ev])
    [d] = [d for d in findings(w) if d.kind == "ip-exhaustion"]
    assert d.runbook == "node-not-ready-triage" and "IP exhaustion" in d.summary
    assert "volumes are not the problem" in d.summary


def test_a_node_deleted_while_its_machine_runs_is_urgent_and_names_the_machine():
    va = {"metadata": {"name": "csi-1"},
          "spec": {"nodeName": "gone-1", "attacher": "ebs.csi.aws.com",
                   "source": {"persistentVolumeName": "pv-1"}},
          "status": {"attached": True}}
    pv = {"metadata": {"name": "pv-1"},
          "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0aaaaaaaaaaaaaaaa"},
                   "claimRef": {"namespace": "db", "name": "data-0"}},
          "status": {"phase": "Bound"}}
    w = World(now=NOW, nodes=[], pods=[], pvs=[pv], pvcs=[], vas=[va], classes=[], events=[])
    w.orphan_volumes = {"vol-0aaaaaaaaaaaaaaaa": {"VolumeId": "vol-0aaaaaaaaaaaaaaaa", "Attachments": [
        {"InstanceId": "i-0123456789abcdef0", "State": "attached"}]}}
    w.instances = {"i-0123456789abcdef0": RUNNING}
    w.statuses = {"i-0123456789abcdef0": checks("impaired")}
    [d] = [d for d in findings(w) if d.kind == "node-deleted-machine-running"]
    assert d.severity.value == "urgent" and d.runbook == "node-dead-ngns"
    assert d.params == {"node": "gone-1", "instance_id": "i-0123456789abcdef0"}
    assert "EC2 confirms it is down: fence it now" in d.summary
    assert not [x for x in findings(w) if x.kind == "zombie-volumeattachment"]  # said once
