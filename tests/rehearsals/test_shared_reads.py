"""Reads shared within a pass of a run: how few calls node-dead-ngns makes, and that no read made
before an approval ever reaches the interlocks of the apply it approved.

The calls are counted from what the clients record for every plan and apply (the audit keeps only
the apply's), on the runner's real path against the sandbox.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from tests.rehearsals.conftest import assert_clean, taint_keys

OOS = "node.kubernetes.io/out-of-service"
pytestmark = pytest.mark.slow


class Recorded:
    """Every plan and apply the runner makes, with the calls its clients recorded."""

    def __init__(self, r: Any) -> None:
        self.steps: list[tuple[str, str, bool, list[Any]]] = []  # (phase, step, poll, calls)
        self.after_plan: dict[str, Any] = {}  # step -> run after its plan returns
        catalog = r.runner.catalog
        plan, apply = catalog.plan, catalog.apply

        def planned(name: str, params: Any, ctx: Any) -> Any:
            try:
                return plan(name, params, ctx)
            finally:
                self.steps.append(("plan", ctx.step_id, False, list(ctx.calls)))
                hook = self.after_plan.get(ctx.step_id)
                if hook is not None:
                    hook()

        def applied(name: str, p: Any, ctx: Any) -> Any:
            try:
                return apply(name, p, ctx)
            finally:
                self.steps.append(("apply", ctx.step_id, ctx.poll, list(ctx.calls)))

        catalog.plan, catalog.apply = planned, applied

    def sent(self) -> Counter[str]:
        return Counter(c.operation for *_, calls in self.steps for c in calls
                       if c.outcome != "cached")

    def cached(self) -> list[Any]:
        return [c for *_, calls in self.steps for c in calls if c.outcome == "cached"]

    def polls(self, step: str) -> int:
        return sum(1 for phase, key, poll, _ in self.steps if key == step and poll)


def _node_ready(r: Any, name: str) -> None:
    """The kubelet reports Ready again (a network partition healed); the instance is untouched."""
    store, res = r.sandbox.store, r.sandbox.res("Node")
    node = copy.deepcopy(store.get(res, None, name))
    now = r.sandbox.now_ts()
    for c in node["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="True", reason="KubeletReady", lastHeartbeatTime=now,
                     lastTransitionTime=now)
    store.update(res, node, subresource="status")


def test_a_dead_node_is_recovered_with_each_object_read_once_per_pass(rehearse):
    r = rehearse("node-dead")
    rec = Recorded(r)
    st = r.run("node-dead-ngns", node=r.facts["node"])
    assert st.status == "succeeded", st.outcome
    # before shared reads: 32 requests, the instance described 5 times, the nodes listed 3 times.
    # The Node comes out of the node list the taint's interlock reads anyway (before the approval
    # and again after it); the instance is described before the approval and again after it.
    # The PVs and the Nodes are listed once more by the per-claim success check (each claim's
    # volume, and whether the node its pod runs on is Ready), in a later pass. With the
    # rehearsals' 200 ms informer lag the
    # VolumeAttachments go one poll after the taint, so the Node's re-read after that wait is a
    # read of its own (a new pass), not the taint's answer. The taint's apply asks EC2 for the
    # instance once more, right before its write, whatever the pass read.
    assert rec.sent() == Counter({
        "DescribeInstances": 3, "list_volume_attachment": 3, "list_persistent_volume": 2,
        "list_pod_for_all_namespaces": 3, "DescribeVolumes": 3, "list_node": 3, "replace_node": 1,
        "read_node": 1,
        # the kubelet's Lease, read once by the liveness step (a stopped machine is not fenced)
        "read_namespaced_lease": 1})
    # a stopped instance has no status checks to read, and is not fenced: no stop protection read
    assert "DescribeInstanceStatus" not in rec.sent()
    # what was served again is in the audit as cached, with the request id of the read it reuses
    sent_ids = {c.request_id for *_, calls in rec.steps for c in calls if c.outcome == "ok"}
    assert rec.cached() and all(c.request_id in sent_ids for c in rec.cached())
    assert_clean(r, st.run_id)


def test_a_hung_node_is_fenced_once_and_described_once_per_check(rehearse):
    r = rehearse("node-hung")
    rec = Recorded(r)
    st = r.run("node-dead-ngns", node=r.facts["node"])
    assert st.status == "succeeded", st.outcome
    sent = rec.sent()
    polls = rec.polls("fence")
    # before: 24 StopInstances (one per 5 s poll), 32 DescribeInstances, 29 lists of all nodes
    assert sent["StopInstances"] == 1
    # the first read, one per poll, the taint's re-plan after approval, the tags (whose cluster
    # the machine is) at the fence's re-plan after approval, live, and the taint's apply, right
    # before its write
    assert sent["DescribeInstances"] == 4 + polls and polls <= 9
    # the first read of the Node (the fence's plan takes it from there), the fence's re-plan,
    # the re-read before the taint (its plan takes it from there), the taint's re-plan
    # (and, after the wait for the VolumeAttachments, one read of the Node in a pass of its own),
    # and the per-claim check (is the node the pod runs on Ready?)
    assert sent["list_node"] == 5 and sent["read_node"] <= 1
    # the first read, and the fence's re-plan after approval, which also gives the state
    assert sent["DescribeInstanceStatus"] == 2
    assert sent["DescribeInstanceAttribute"] == 1  # stop protection, while the instance runs
    # the kubelet's Lease: the liveness step (the fence's plan takes it from there), and the
    # fence's re-plan after approval, live
    assert sent["read_namespaced_lease"] == 2
    # what the stop would destroy for good (local data): the node's pods and the PVs, read by the
    # fence's plan and again by its re-plan after approval; the instance type's storage once (a
    # type never changes)
    assert sent["DescribeInstanceTypes"] == 1
    # 37: the per-claim check lists the PVs and the Nodes once more; the Node is read after the
    # wait; the fence's two reads of the local data; the taint's read right before its write
    assert sum(sent.values()) <= 37 + polls
    assert_clean(r, st.run_id)


def test_a_node_ready_again_after_the_plan_is_refused_at_apply_with_live_reads(rehearse):
    # The taint's plan is made and shown for approval in one pass; the node comes back; the
    # approval starts a new pass, whose reads are live: the read made before the approval (node
    # NotReady) is never what the interlock decides on.
    r = rehearse("node-dead")
    f = r.facts
    rec = Recorded(r)
    came_back: list[bool] = []

    def ready_then_approve(state, s):
        if s.key == "taint" and not came_back:
            _node_ready(r, f["node"])
            came_back.append(True)
        return r.approve_all(state, s)

    st = r.run("node-dead-ngns", node=f["node"], decide=ready_then_approve)
    taint = st.steps["taint"]
    assert came_back and taint.blocked is not None and taint.blocked["rule"] == "oos-taint"
    assert "Ready=True" in taint.blocked["message"]
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    # refused by the recheck itself: no write was even tried (a read kept from before the
    # approval would have let it through to a 409)
    assert not [c for *_, calls in rec.steps for c in calls if c.operation == "replace_node"]
    # the refusing check read the nodes and the instance on the wire, after the approval
    last = [calls for phase, key, _, calls in rec.steps if key == "taint"][-1]
    assert {(c.operation, c.outcome) for c in last} >= {("list_node", "ok"),
                                                        ("DescribeInstances", "ok")}
    assert_clean(r, st.run_id)


def test_a_node_ready_again_between_the_recheck_and_the_apply_is_refused(rehearse):
    # Worst case inside one pass: the re-plan after approval reads the node NotReady, then the
    # node comes back before the apply, which is served that same read. The write carries the
    # node's resourceVersion, so it meets a 409; the write clears the shared reads, the node is
    # read again live, and the interlock refuses before anything is written.
    r = rehearse("node-dead")
    f = r.facts
    rec = Recorded(r)
    plans: list[bool] = []

    def ready_after_the_recheck() -> None:
        plans.append(True)
        if len(plans) == 2:  # the first is the plan shown for approval, the second the recheck
            _node_ready(r, f["node"])

    rec.after_plan["taint"] = ready_after_the_recheck
    st = r.run("node-dead-ngns", node=f["node"])
    taint = st.steps["taint"]
    assert taint.blocked is not None and taint.blocked["rule"] == "oos-taint", taint
    assert OOS not in taint_keys(r.sandbox.get("Node", None, f["node"]))
    apply_calls = [calls for phase, key, _, calls in rec.steps if phase == "apply" and key == "taint"]
    assert len(apply_calls) == 1
    outcomes = [(c.operation, c.outcome) for c in apply_calls[0]]
    conflict = outcomes.index(("replace_node", "Conflict"))
    # served from the recheck first, then read again on the wire after the conflict
    assert ("list_node", "cached") in outcomes[:conflict]
    assert ("read_node", "ok") in outcomes[conflict:]
    assert ("replace_node", "ok") not in outcomes
    assert_clean(r, st.run_id)
