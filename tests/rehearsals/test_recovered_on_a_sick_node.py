"""A recovery never counts a claim served by a pod on a node that is not Ready.

Found by the explorer (``node-dead-ngns--false-success--moved-to-a-node-gone-not-ready``): the
pod moved to the zone's other node and ran there; that node's kubelet then posted Ready=False
(its PLEG stuck) and the run said succeeded, on the pod's own Ready, which a kubelet writes back
for as long as it runs. Such a node starts nothing new, and its ``not-ready`` NoExecute taint
evicts the pod within minutes: the recovery is not done until the node is Ready again, or the
pod runs elsewhere. zone-outage-ngns's placement check counted such a claim in use too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from bot.present.words import words_for
from bot.sim.rehearsal import Rehearsal
from tests.rehearsals.conftest import assert_clean

pytestmark = pytest.mark.slow


def _moved_pods(r: Rehearsal, away: set[str], since: datetime | None,
                name: str | None) -> list[dict[str, Any]]:
    """Pods with claims (created since ``since``, if given; named ``name``, if given) Running on a
    node not in ``away``."""
    return [p for p in r.sandbox.list("Pod") if name in (None, p["metadata"]["name"])
            and p["spec"].get("nodeName") not in (None, *away)
            and p["status"].get("phase") == "Running"
            and (since is None or datetime.fromisoformat(
                str(p["metadata"]["creationTimestamp"]).replace("Z", "+00:00")) >= since)
            and any(v.get("persistentVolumeClaim") for v in p["spec"].get("volumes") or ())]


def _sicken_where_a_pod_moves(r: Rehearsal, away: set[str], since: datetime | None,
                              name: str | None = None) -> list[tuple[str, datetime]]:
    """The world: the kubelet of the first node a moved pod starts on goes PLEG-sick in the
    controller pass that started the pod. Returns [(node, when)] once it has."""
    sb, sick = r.sandbox, []
    shipped = sb.reconcile

    def reconcile(*, cause: Any = None) -> bool:
        changed = shipped(cause=cause)
        moved = [] if sick else _moved_pods(r, away, since, name)
        if moved:
            node = str(moved[0]["spec"]["nodeName"])
            sick.append((node, r.clock.now()))
            assert sb.ctx is not None
            sb.ctx.state.setdefault("kubelet_sick", {})[node] = "pleg"
            return True  # the pass after this one sees it
        return changed
    sb.reconcile = reconcile  # type: ignore[method-assign]
    return sick


def _node_dead(r: Rehearsal, *, heal_after: float | None) -> tuple[Any, str, list[str]]:
    """node-dead-ngns on node-hung: the node its pod moves to sickens as the pod starts there
    (and, ``heal_after`` seconds later, is well again). The run's end, that node, and what the
    recovery check said it waited for, as the views render it."""
    runbook, _text, _file = r.runbooks.get("node-dead-ngns")
    run_id = r.start_run("node-dead-ngns", node=r.facts["node"])
    # its replacement was created before the run, waiting on the Multi-Attach error
    sick = _sicken_where_a_pod_moves(r, {r.facts["node"]}, None, r.facts["pod"])
    said: list[str] = []

    def each_round(state: Any) -> None:
        nonlocal heal_after
        judged = state.steps.get("pods_running")
        if judged is not None and judged.status == "waiting":
            words = words_for(state, runbook, "pods_running")
            said.append(words.waiting_for if words is not None else "")
        if heal_after is not None and sick and (r.clock.now() - sick[0][1]).total_seconds() >= heal_after:
            r.sandbox.sicken_kubelet(sick[0][0], None)
            heal_after = None
    st = r.play(run_id, each_round=each_round)
    assert sick, "the pod never ran on another node"
    return st, sick[0][0], said


def _pod(r: Rehearsal) -> dict[str, Any]:
    return r.sandbox.get("Pod", r.facts["namespace"], r.facts["pod"])


def _node_ready(r: Rehearsal, name: str) -> str:
    node = r.sandbox.get("Node", None, name)
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_a_pod_on_a_node_that_went_not_ready_does_not_end_the_run_succeeded(rehearse):
    r = rehearse("node-hung")
    st, new_node, said = _node_dead(r, heal_after=None)
    assert new_node != r.facts["node"] and _node_ready(r, new_node) == "False"
    assert st.status == "failed", st.outcome
    judged = st.steps["pods_running"]
    assert judged.status == "failed"
    [claim] = judged.result["items"]
    assert (claim["running_elsewhere"], claim["satisfied"]) == (False, False)
    # while it waited it said why, naming the node; its not-ready taint then evicted the pod
    held = (f"0 of 1 claims served on another node or no longer wanted (pod {r.facts['pod']} of "
            f"{r.facts['namespace']}/{r.facts['pvc']} runs on {new_node}, which is not Ready)")
    assert held in said, sorted(set(said))
    assert _pod(r)["spec"].get("nodeName") != new_node  # evicted, as the taint says
    assert_clean(r, st.run_id)


def test_the_run_succeeds_once_that_node_is_ready_again(rehearse):
    r = rehearse("node-hung")
    st, new_node, _said = _node_dead(r, heal_after=120)
    assert st.status == "succeeded", st.outcome
    assert _pod(r)["spec"]["nodeName"] == new_node and _node_ready(r, new_node) == "True"
    [claim] = st.steps["pods_running"].result["items"]
    assert claim["running_elsewhere"] and claim["held_by_node"] is None
    assert_clean(r, st.run_id)


def test_the_zone_runbook_does_not_count_a_claim_in_use_on_a_node_that_went_not_ready(rehearse):
    r = rehearse("az-outage", nodes=3, hung=1)
    r.sandbox.advance(300)  # the hung node has been NotReady longer than fence_min_not_ready
    run_id = r.start_run("zone-outage-ngns", zone="ap-southeast-1a")
    sick = _sicken_where_a_pod_moves(r, set(r.facts["dead_nodes"]), r.clock.now())
    seen: list[dict[str, Any]] = []  # each item placement judged, poll by poll

    def each_round(state: Any) -> None:
        placed = state.steps.get("placement")
        if placed is not None and placed.result:
            seen.extend(placed.result["items"])
    r.play(run_id, each_round=each_round)
    assert sick, "no pod moved to a live node"
    # while the pods ran on the sick node, their claims waited, saying why
    held = [i for i in seen if i["node"] == sick[0][0]]
    assert held and {i["outcome"] for i in held} == {"waiting"}, held
    assert {i["reason"] for i in held} == {f"its pod runs on {sick[0][0]}, which is not Ready"}
    # and no claim was ever counted in use on a node that was not Ready at the end
    for i in seen:
        if i["outcome"] == "running":
            assert _node_ready(r, i["node"]) == "True", i
