"""A fence never fights a person: a machine someone starts again after the bot stopped it is not
stopped a second time on the strength of the first approval, whether a poll meets it or a worker
resuming the apply of one that died; and a poll that may write is marked durably before it does,
so a worker that dies mid-poll leaves a trace in the audit.

Both were found by the explorer (two approvers broke glass to fence a node whose kubelet had
come back; the machine stopped; someone started it; the fence's next poll sent StopInstances
again, and the worker died before recording it: a write on the wire the audit never showed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from bot.engine.commands import BreakGlass
from bot.sim.rehearsal import APPROVERS, Rehearsal
from tests.rehearsals.conftest import types

OOS = "node.kubernetes.io/out-of-service"

pytestmark = pytest.mark.slow


def _stops(r: Rehearsal) -> list[Any]:
    return [w for w in r.sandbox.ec2.wire if w.action == "StopInstances"]


def _turn(r: Rehearsal, run_id: str, state: Any) -> None:
    """People decide (two break glass where the fence is refused: its kubelet answers), or the
    sandbox moves on to the run's next check."""
    if state.status == "awaiting_approval":
        s = next(x for x in state.steps.values() if x.status == "awaiting_approval")
        if s.blocked:
            for who in APPROVERS[:2]:
                assert r.submit(BreakGlass(run_id=run_id, actor=who, step=s.key,
                                           reason="console dead, machine partitioned")).ok
        else:
            cmd = r.approve_all(state, s)
            assert cmd is not None
            r.submit(cmd)
    elif state.next_check_at:
        due = datetime.fromisoformat(state.next_check_at)
        r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))


def _fence_then_start_again(r: Rehearsal, run_id: str, *, start_again: bool = True) -> Any:
    """Drive the run, breaking glass when the fence is refused; once the machine is stopped
    while the fence still polls, someone starts it again (``start_again``)."""
    iid = r.facts["instance_id"]
    started = not start_again
    state = r.runner.drive(run_id)
    for _ in range(200):
        if state.status in ("succeeded", "failed", "aborted", "partial"):
            return state
        _turn(r, run_id, state)
        fence = state.steps.get("fence")
        if (not started and state.status != "awaiting_approval" and fence is not None
                and fence.status == "waiting" and r.sandbox.ec2.instance_state(iid) == "stopped"):
            r.sandbox.ec2.repair(iid)  # someone starts it: a new boot, a new LaunchTime
            started = True
        state = r.runner.drive(run_id)
    raise AssertionError(f"run {run_id} did not end ({state.status})")


def test_a_machine_started_again_while_the_fence_polls_is_not_stopped_again(rehearse):
    r = rehearse("pod-force-deleted", stop_seconds="30")
    run_id = r.start_run("node-dead-ngns", node=r.facts["dead_node"])
    st = _fence_then_start_again(r, run_id)
    fence = st.steps["fence"]
    assert fence.status == "failed", (fence.status, fence.message)
    assert "was started again" in fence.error and "Retry the step" in fence.error, fence.error
    # EC2: one stop, the approved one; the machine someone started runs on
    assert len(_stops(r)) == 1, [w.action for w in r.sandbox.ec2.wire]
    assert r.sandbox.ec2.instance_state(r.facts["instance_id"]) == "running"
    # and nothing was tainted after it
    node = r.sandbox.get("Node", None, r.facts["dead_node"])
    assert not [t for t in node["spec"].get("taints") or ()
                if t["key"] == "node.kubernetes.io/out-of-service"]
    assert r.verified(run_id)


def test_a_poll_that_may_write_is_marked_applying_before_it_runs(rehearse):
    """What the store holds at the moment each poll of the fence runs: ``applying``, as for the
    first apply, so a worker that dies after the poll's write is followed by one that says it
    resumed (``step.applying`` with ``resumed``)."""
    r = rehearse("pod-force-deleted", stop_seconds="30")
    catalog = r.catalog
    inner = type(catalog).apply
    seen: list[str] = []

    def apply(name: str, plan: Any, ctx: Any) -> Any:
        if name == "aws.ec2.instance.stop" and ctx.poll:
            seen.append(str(r.store.load(ctx.run_id).steps["fence"].status))
        return inner(catalog, name, plan, ctx)
    catalog.apply = apply  # type: ignore[method-assign]
    run_id = r.start_run("node-dead-ngns", node=r.facts["dead_node"])
    st = _fence_then_start_again(r, run_id, start_again=False)
    assert st.status == "succeeded", st.outcome
    assert seen and set(seen) == {"applying"}, seen
    assert ("step.succeeded", "fence") in types(r, run_id)



class _Killed(BaseException):
    """The worker dies: raised past the runner, as a SIGKILL would end it."""


def _dies_after_its_stop(r: Rehearsal, action: str) -> None:
    """The worker dies once, right after an apply of ``action`` sent StopInstances, before the
    runner records it."""
    catalog = r.catalog
    inner = type(catalog).apply
    armed = [True]

    def apply(name: str, plan: Any, ctx: Any) -> Any:
        result = inner(catalog, name, plan, ctx)
        if armed[0] and name == action and any(c.operation == "StopInstances"
                                               for c in result.calls):
            armed[0] = False
            raise _Killed
        return result
    catalog.apply = apply  # type: ignore[method-assign]


def test_a_fence_resumed_after_its_worker_died_does_not_stop_a_machine_started_since(rehearse):
    """Two people break glass to fence a node whose kubelet still answers; the worker dies right
    after its StopInstances reached EC2, before recording it. The machine stops; someone starts
    it again from the console, and its kubelet cannot reach the API server (a partition), so
    nothing in Kubernetes says it lives. The worker that takes the run over resumes the apply:
    it finds the machine running with a LaunchTime after the step began applying, and fails as
    a poll does, instead of stopping it again on the strength of the first approval."""
    r = rehearse("pod-force-deleted", stop_seconds="30")
    iid, node = r.facts["instance_id"], r.facts["dead_node"]
    _dies_after_its_stop(r, "aws.ec2.instance.stop")
    run_id = r.start_run("node-dead-ngns", node=node)
    state = r.runner.drive(run_id)
    with pytest.raises(_Killed):
        for _ in range(50):
            _turn(r, run_id, state)
            state = r.runner.drive(run_id)
    assert len(_stops(r)) == 1 and r.store.load(run_id).steps["fence"].status == "applying"
    r.sandbox.advance(60)
    assert r.sandbox.ec2.instance_state(iid) == "stopped"
    r.sandbox.partition(node)  # its kubelet will not be heard from when the machine is back
    r.sandbox.ec2.repair(iid)  # someone starts it: a new boot, a new LaunchTime
    assert r.sandbox.ec2.instance_state(iid) in ("pending", "running")
    r.resume()  # another worker; the dead one's lease runs out
    r.sandbox.advance(r.runner.lease_seconds + 1)
    fence = r.runner.drive(run_id).steps["fence"]
    assert fence.status == "failed", (fence.status, fence.message, fence.progress)
    assert "was started again" in fence.error and "Retry the step" in fence.error, fence.error
    assert len(_stops(r)) == 1, [w.action for w in r.sandbox.ec2.wire]
    assert r.sandbox.ec2.instance_state(iid) in ("pending", "running")
    assert ("step.applying", "fence") in types(r, run_id) and r.verified(run_id)


def test_a_zone_batch_resumed_after_its_worker_died_does_not_stop_a_machine_started_since(
        rehearse):
    """The zone's batch fence, the same way: its worker dies right after the batch's
    StopInstances reached EC2. The machines stop; someone starts one of them again, its kubelet
    cut off from the API server. The worker that resumes the batch drops that node (started
    again since the batch began) instead of stopping its machine again, and fences the rest."""
    r = rehearse("az-outage", policy={"max_out_of_service_nodes": 20}, nodes=2, hung=2)
    f = r.facts
    r.sandbox.advance(300)
    _dies_after_its_stop(r, "k8s.zone.fence_taint")
    run_id = r.start_run("zone-outage-ngns", zone=f["zone"])
    state = r.runner.drive(run_id)
    with pytest.raises(_Killed):
        for _ in range(50):
            _turn(r, run_id, state)
            state = r.runner.drive(run_id)
    r.sandbox.advance(120)
    node, iid = f["dead_nodes"][0], f["instance_ids"][0]
    assert all(r.sandbox.ec2.instance_state(i) == "stopped" for i in f["instance_ids"])
    r.sandbox.partition(node)
    r.sandbox.ec2.repair(iid)  # someone starts it: a new boot, a new LaunchTime
    r.resume()
    r.sandbox.advance(r.runner.lease_seconds + 1)
    st = r.play(run_id)
    assert r.sandbox.ec2.instance_state(iid) in ("pending", "running")
    batch = next(s for s in st.steps.values() if s.action == "k8s.zone.fence_taint"
                 and s.result and s.result.get("items"))
    items = {i["node"]: i for i in batch.result["items"]}
    assert items[node]["outcome"] == "dropped" and "started again" in items[node]["reason"], items
    assert {items[n]["outcome"] for n in f["dead_nodes"][1:]} == {"tainted"}, items
    assert r.verified(run_id)


def test_an_apply_resumed_after_a_worker_died_is_on_record_before_it_writes(rehearse):
    """The worker that takes over a fence its predecessor died in resumes it: its 'resumed'
    mark (naming the break-glass it runs under) is in the store before it sends anything, so if
    it dies too, after its own write, the audit still shows both attempts."""
    r = rehearse("pod-force-deleted", stop_seconds="30")
    _dies_after_its_stop(r, "aws.ec2.instance.stop")
    run_id = r.start_run("node-dead-ngns", node=r.facts["dead_node"])
    state = r.runner.drive(run_id)
    with pytest.raises(_Killed):
        for _ in range(50):
            _turn(r, run_id, state)
            state = r.runner.drive(run_id)
    r.resume()
    r.sandbox.advance(r.runner.lease_seconds + 1)
    catalog = r.catalog
    inner = type(catalog).apply
    seen: list[list[dict[str, Any]]] = []

    def apply(name: str, plan: Any, ctx: Any) -> Any:
        if name == "aws.ec2.instance.stop":
            seen.append([e.payload for e in r.store.events(run_id) if e.type == "step.applying"
                         and e.payload.get("step") == "fence"])
        return inner(catalog, name, plan, ctx)
    catalog.apply = apply  # type: ignore[method-assign]
    st = r.runner.drive(run_id)
    assert seen, st.status
    marks = seen[0]
    assert marks[-1].get("resumed") is True, marks  # saved before the resumed apply ran
    assert marks[-1].get("overrides") == ["fence-live"], marks
    assert r.verified(run_id)


def test_the_taint_is_refused_for_a_machine_started_after_this_pass_read_it_stopped(rehearse):
    """The pass that finds the fence done reads the machine stopped; someone starts it before
    the taint is written. The taint's interlock asks EC2 again right before the write (not the
    pass's earlier answer) and refuses: the node is not tainted while its machine runs."""
    r = rehearse("node-dead")
    f = r.facts
    catalog = r.catalog
    inner = type(catalog).apply

    def apply(name: str, plan: Any, ctx: Any) -> Any:
        if name == "k8s.node.taint" and r.sandbox.ec2.instance_state(f["instance_id"]) == "stopped":
            r.sandbox.ec2.repair(f["instance_id"])  # someone starts it, this very moment
        return inner(catalog, name, plan, ctx)
    catalog.apply = apply  # type: ignore[method-assign]
    st = r.run("node-dead-ngns", node=f["node"])
    taint = st.steps["taint"]
    assert taint.status != "succeeded" and (taint.blocked or {}).get("rule") == "oos-taint", taint
    node = r.sandbox.get("Node", None, f["dead_node"])
    assert not [t for t in node["spec"].get("taints") or () if t["key"] == OOS]
    assert r.verified(st.run_id)
