"""The shipped runbooks validate, and node-dead-ngns's expressions mean what the runbook says.

The expressions are evaluated against results shaped as docs/action-results.md promises, so a
misspelt result field or a wrong filter shows here, before a rehearsal in the sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.actions.registry import Registry
from bot.runbook.loader import load_runbook, load_runbooks
from bot.runbook.model import Runbook
from bot.runbook.templating import evaluate, render, render_value

RUNBOOKS = Path(__file__).parents[2] / "runbooks"
NODE = "ip-10-0-1-2.ec2.internal"
INSTANCE = "i-0123456789abcdef0"


@pytest.fixture
def ngns(catalog: Registry) -> Runbook:
    return load_runbook(RUNBOOKS / "node-dead-ngns.yaml", catalog=catalog)


def context(*, state: str = "stopped", ready: bool = False, still_attached: bool = False,
            deleting: bool = False, running_elsewhere: bool = True, wanted: bool = True,
            fence_by: str = "stop", protection: str = "disableApiStop") -> dict[str, Any]:
    va = [{"name": "csi-1", "node": NODE, "pv": "pv-1", "attached": True, "attach_error": None,
           "detach_error": "rpc error: timed out" if deleting else None, "deleting": deleting,
           "volume_id": "vol-0aaaaaaaaaaaaaaaa"}]
    ec2 = [
        {"volume_id": "vol-0rootrootrootroot", "exists": True, "state": "in-use", "zone": "a",
         "attachments": [{"instance_id": INSTANCE, "state": "attached", "device": "/dev/xvda"}]},
        {"volume_id": "vol-0aaaaaaaaaaaaaaaa", "exists": True, "state": "in-use", "zone": "a",
         "attachments": [{"instance_id": INSTANCE, "state": "attached", "device": "/dev/xvdb"}]},
    ]
    pods_after = [
        {"name": "es-0", "namespace": "db", "node": NODE, "phase": "Unknown", "reason": None,
         "terminating": True, "pvcs": ["data-es-0"], "claims": ["db/data-es-0"]},
        {"name": "es-0", "namespace": "db", "node": "ip-10-0-9-9.ec2.internal",
         "phase": "Running" if running_elsewhere else "Pending", "reason": None,
         "terminating": False, "pvcs": ["data-es-0"], "claims": ["db/data-es-0"]},
    ]
    pvs = [{"name": "pv-1", "exists": True, "phase": "Bound", "volume_id": "vol-0aaaaaaaaaaaaaaaa",
            "zone": "a", "claim": "db/data-es-0", "storage_class": "gp3", "finalizers": [],
            "terminating": False},
           {"name": "pv-other", "exists": True, "phase": "Bound", "volume_id": "vol-0bbbbbbbbbbbbbbbb",
            "zone": "b", "claim": "db/other", "storage_class": "gp3", "finalizers": [],
            "terminating": False}]
    node = {"name": NODE, "exists": True, "ready": ready, "ready_status": "Unknown",
            "instance_id": INSTANCE, "taints": [], "out_of_service": False}
    steps = {
        "node": {"result": node, "outputs": {"instance_id": INSTANCE}, "status": "succeeded"},
        "detach_risk": {"result": {"items": [], "count": 0}, "outputs": {"claims": []},
                        "status": "succeeded"},
        "instance": {"result": {"instance_id": INSTANCE, "state": state, "fence_by": fence_by,
                                "stop_protected": fence_by == "none" and protection == "disableApiStop",
                                "terminate_protected": (fence_by == "none"
                                                        and protection == "disableApiTermination"),
                                "lifecycle": "spot" if fence_by == "terminate" else "on-demand",
                                "root_device_type": "ebs", "group": {"nodepool": "default"}},
                     "outputs": {}},
        "fenced": {"result": {"instance_id": INSTANCE, "state": state}, "outputs": {}},
        "node_now": {"result": node, "outputs": {}},
        "attachments": {"result": {"items": va, "count": 1}, "outputs": {}},
        "held": {"result": {"items": ec2, "count": 2}, "outputs": {}},
        "volumes": {"result": {"items": pvs, "count": 2}, "outputs": {}},
        "attachments_after": {"result": {"items": va if still_attached else [], "count": 0},
                              "outputs": {}},
        "pods": {"result": {"items": pods_after[:1], "count": 1}, "outputs": {}},
        "ec2_volumes": {"result": {"items": ec2, "count": 2}, "outputs": {}},
        "still_stuck": {"result": {"items": ec2, "count": 2}, "outputs": {}, "status": "succeeded"},
        "pods_running": {"result": {
            "items": [{"claim": "db/data-es-0", "volume_id": "vol-0aaaaaaaaaaaaaaaa",
                       "running_elsewhere": running_elsewhere, "wanted": wanted,
                       "wanted_by": "StatefulSet es wants 1 replica(s)" if wanted else None,
                       "satisfied": running_elsewhere or not wanted, "pods": pods_after}],
            "count": 1, "satisfied": running_elsewhere or not wanted,
            "unsatisfied": [] if running_elsewhere or not wanted else ["db/data-es-0"],
            "wanted_volume_ids": ["vol-0aaaaaaaaaaaaaaaa"] if wanted else []}, "outputs": {}},
        "taint": {"result": {"node": NODE}, "outputs": {}, "status": "succeeded"},
    }
    return {"params": {"node": NODE, "cluster": None, "detach_wait": 360.0,
                       "force_detach_after": 600.0}, "steps": steps,
            "run": {"id": "r1", "requester": "alice", "started_at": "2026-01-01T00:00:00Z"}}


def outputs_of(runbook: Runbook, step_id: str, ctx: dict[str, Any]) -> dict[str, Any]:
    step = runbook.step(step_id)
    local = {**ctx, "result": ctx["steps"][step_id]["result"]}
    return {name: evaluate(expr, local) for name, expr in step.outputs.items()}


def with_outputs(runbook: Runbook, ctx: dict[str, Any]) -> dict[str, Any]:
    for step in runbook.spec.steps:
        if step.id in ctx["steps"] and step.outputs:
            ctx["steps"][step.id]["outputs"] = outputs_of(runbook, step.id, ctx)
    return ctx


def test_every_shipped_runbook_validates(catalog: Registry) -> None:
    assert "node-dead-ngns" in load_runbooks(RUNBOOKS, catalog=catalog)


def test_every_shipped_runbook_points_editors_at_the_schema() -> None:
    for path in sorted(RUNBOOKS.glob("*.yaml")):
        assert path.read_text().splitlines()[0] == "# yaml-language-server: $schema=./runbook.schema.json"


def test_ngns_finds_the_data_volumes_and_their_claims_but_not_the_root_volume(ngns: Runbook) -> None:
    ctx = with_outputs(ngns, context())
    assert ctx["steps"]["volumes"]["outputs"] == {"ebs": ["vol-0aaaaaaaaaaaaaaaa"],
                                                  "claims": ["db/data-es-0"]}
    assert render_value(ngns.step("pods").with_, ctx)["claims"] == ["db/data-es-0"]


def test_ngns_destructive_steps_are_fence_taint_and_force_detach(ngns: Runbook, catalog: Registry) -> None:
    destructive = [s.id for s in ngns.spec.steps if s.action and catalog.get(s.action).destructive]
    assert destructive == ["fence", "fence_terminate", "fence_nodeclaim", "taint", "release",
                           "va_delete", "detach", "force_detach"]
    # the terminate and the leftover VolumeAttachment delete are steps of their own, never automatic
    assert ngns.step("fence_terminate").approval is not None
    assert ngns.step("fence_terminate").approval.required
    assert ngns.step("va_delete").approval is not None and ngns.step("va_delete").approval.required
    assert ngns.step("force_detach").approval is not None
    assert ngns.step("force_detach").approval.min_approvers == 2


@pytest.mark.parametrize(("state", "fences"), [("running", True), ("pending", True),
                                               ("stopping", True), ("shutting-down", True),
                                               ("stopped", False),
                                               ("terminated", False)])
def test_ngns_fences_only_an_instance_that_may_still_run(ngns: Runbook, state: str, fences: bool) -> None:
    assert evaluate(ngns.step("fence").when_expr or "", context(state=state)) is fences
    assert evaluate(ngns.step("fence_terminate").when_expr or "", context(state=state)) is False
    spot = context(state=state, fence_by="terminate")
    assert evaluate(ngns.step("fence").when_expr or "", spot) is False
    assert evaluate(ngns.step("fence_terminate").when_expr or "", spot) is fences  # stopped is fenced


@pytest.mark.parametrize(("fence_by", "state", "passes"), [
    ("none", "running", False), ("none", "stopped", True), ("stop", "running", True)])
@pytest.mark.parametrize("protection", ["disableApiStop", "disableApiTermination"])
def test_ngns_refuses_clearly_to_fence_a_protected_instance(
        ngns: Runbook, fence_by: str, state: str, passes: bool, protection: str) -> None:
    ctx = context(state=state, fence_by=fence_by, protection=protection)
    (guard,) = ngns.step("fenced").guards
    assert evaluate(guard.expr, ctx) is passes
    if fence_by == "none":
        assert protection in render(guard.message, ctx)


@pytest.mark.parametrize(("state", "ready", "passes"), [("stopped", False, True),
                                                         ("terminated", False, True),
                                                         ("running", False, False),
                                                         ("stopped", True, False)])
def test_ngns_taint_guards_need_a_powered_off_notready_node(
    ngns: Runbook, state: str, ready: bool, passes: bool
) -> None:
    ctx = context(state=state, ready=ready)
    assert all(evaluate(g.expr, ctx) for g in ngns.step("taint").guards) is passes


def test_ngns_taint_guard_message_says_what_to_do_instead(ngns: Runbook) -> None:
    message = render(ngns.step("taint").guards[0].message, context(state="running"))
    assert f"Instance {INSTANCE} is running" in message
    assert "fence it first" in message


@pytest.mark.parametrize(("still_attached", "deleting", "stuck"), [
    (False, False, ["vol-0aaaaaaaaaaaaaaaa"]),  # no VolumeAttachment left
    (True, True, ["vol-0aaaaaaaaaaaaaaaa"]),  # deleting, attached: true, detachError
    (True, False, []),  # Kubernetes still holds it
])
def test_ngns_force_detaches_only_volumes_kubernetes_let_go_of(
    ngns: Runbook, still_attached: bool, deleting: bool, stuck: list[str]
) -> None:
    ctx = with_outputs(ngns, context(still_attached=still_attached, deleting=deleting))
    assert ctx["steps"]["ec2_volumes"]["outputs"]["stuck"] == stuck
    assert evaluate(ngns.step("detach").foreach or "", ctx) == stuck
    assert evaluate(ngns.step("force_detach").foreach or "", ctx) == stuck


def test_ngns_force_detach_with_values_render_to_the_action_params(ngns: Runbook) -> None:
    ctx = {**with_outputs(ngns, context()), "item": "vol-0aaaaaaaaaaaaaaaa"}
    assert render_value(ngns.step("force_detach").with_, ctx) == {
        "volume_id": "vol-0aaaaaaaaaaaaaaaa", "instance_id": INSTANCE, "force": True,
        "cluster": None,
    }


@pytest.mark.parametrize(("elsewhere", "done"), [(True, True), (False, False)])
def test_ngns_waits_until_the_pods_run_on_another_node(ngns: Runbook, elsewhere: bool, done: bool) -> None:
    ctx = with_outputs(ngns, context(running_elsewhere=elsewhere))
    wait = ngns.step("pods_running").wait_until
    assert wait is not None
    assert evaluate(wait.expr, {**ctx, "result": ctx["steps"]["pods_running"]["result"]}) is done


@pytest.mark.parametrize(("elsewhere", "wanted", "done"), [
    (True, True, True), (False, True, False), (False, False, True)])
def test_ngns_judges_the_recovery_per_claim_never_by_counting_pods(
        ngns: Runbook, elsewhere: bool, wanted: bool, done: bool) -> None:
    # two pods name the one claim (the old one Terminating on the dead node): a count would fail
    ctx = with_outputs(ngns, context(running_elsewhere=elsewhere, wanted=wanted))
    assert render_value(ngns.step("pods_running").with_, ctx) == {
        "claims": ["db/data-es-0"], "away_from": NODE, "cluster": None}
    wait = ngns.step("pods_running").wait_until
    assert wait is not None
    assert evaluate(wait.expr, {**ctx, "result": ctx["steps"]["pods_running"]["result"]}) is done


def _volume(state: str, instance: str | None) -> dict[str, Any]:
    return {"volume_id": "vol-0aaaaaaaaaaaaaaaa", "exists": True, "state": state, "zone": "a",
            "attachments": [{"instance_id": instance, "state": "attached", "device": "/dev/xvdb"}]
            if instance else []}


@pytest.mark.parametrize(("volume", "wanted", "done"), [
    (_volume("in-use", "i-0fffffffffffffff0"), True, True),  # attached to the new node
    (_volume("in-use", INSTANCE), True, False),  # still on the dead instance
    (_volume("in-use", INSTANCE), False, False),
    (_volume("available", None), False, True),  # free, and no one wants it any more
    (_volume("available", None), True, False),  # free, but its consumer still waits for it
])
def test_ngns_checks_each_volume_moved_or_free_and_unwanted(
        ngns: Runbook, volume: dict[str, Any], wanted: bool, done: bool) -> None:
    ctx = with_outputs(ngns, context(running_elsewhere=False, wanted=wanted))
    wait = ngns.step("volumes_moved").wait_until
    assert wait is not None
    result = {"items": [volume], "count": 1}
    assert evaluate(wait.expr, {**ctx, "result": result}) is done


def test_ngns_passes_the_detach_wait_param_as_seconds(ngns: Runbook, catalog: Registry) -> None:
    params = render_value(ngns.step("wait_detach").with_, context())
    model = catalog.get("k8s.volumeattachments.wait_gone").params_model
    assert model.model_validate(params).model_dump()["timeout"] == 360.0


def test_ngns_ends_by_saying_the_taint_stays_until_node_recovered(ngns: Runbook) -> None:
    last = ngns.spec.steps[-1]
    assert last.action == "notify"
    assert "node-recovered" in render(last.with_["message"], context())
    assert "stays stopped" in render(last.with_["message"], context())


def test_ngns_ends_without_claiming_a_taint_or_a_fence_that_did_not_happen(ngns: Runbook) -> None:
    ctx = context(state="running")  # a dry run on a hung node: the fence and the taint only planned
    ctx["steps"]["taint"] = {"result": None, "outputs": {}, "status": "skipped"}
    said = render(ngns.spec.steps[-1].with_["message"], ctx)
    assert "was not tainted" in said and "is running" in said
    assert "stays stopped" not in said and "keeps the node.kubernetes.io" not in said
