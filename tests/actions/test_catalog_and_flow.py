"""The catalog contract (declarations all implemented, dry-run honesty, call records) and flow."""

from __future__ import annotations

import pytest

from bot.actions.catalog import build_catalog
from bot.actions.declarations import OUT_OF_SERVICE_TAINT
from bot.actions.registry import registry
from bot.config import ClusterConfig, Settings
from bot.errors import ConfigError, PolicyError


def test_every_declared_action_has_a_plan_and_an_apply():
    missing = [s.name for s in registry if s.plan_fn is None or s.apply_fn is None]
    assert missing == []
    assert len(registry.names()) == 23


def _arrange(world, action):
    """A world where ``action`` has one real change to make; returns its params."""
    if action == "k8s.node.taint":
        world.node("n1", ready="False", instance_id=world.instance(state="stopped"))
        return {"node": "n1"}
    if action == "k8s.node.untaint":
        world.node("n1", taints=[{"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown",
                                  "effect": "NoExecute"}])
        return {"node": "n1"}
    if action == "k8s.finalizers.remove":
        world.pv("pv-1", volume_id="vol-0123456789abcdef0", terminating=False)
        return {"kind": "PersistentVolume", "name": "pv-1"}
    if action == "aws.ec2.instance.stop":
        return {"instance_id": world.instance()}
    if action == "aws.ec2.volume.detach":
        return {"volume_id": world.volume(attach_to=world.instance(state="stopped")), "force": True}
    if action == "aws.ec2.volume.delete":
        return {"volume_id": world.volume()}
    raise AssertionError(action)


def _observe(world, change):
    """The live value of what ``change`` is about, in the same words as its before/after."""
    if change.target_kind == "Node":
        taints = world.taints(change.target)
        return change.after if change.after in taints else ", ".join(taints)
    if change.target_kind == "PersistentVolume":
        pv = world.kube.get("persistentvolumes", change.target)
        return ", ".join(pv["metadata"].get("finalizers") or ()) if pv else ""
    if change.target_kind == "Instance":
        return world.instance_state(change.target)
    if change.target_kind == "Volume":
        vols = world.ec2.describe_volumes(
            Filters=[{"Name": "volume-id", "Values": [change.target]}])["Volumes"]
        if not vols:
            return "deleted"
        atts = vols[0]["Attachments"]
        if atts and change.operation.endswith("detach"):
            return f"attached to {atts[0]['InstanceId']} ({atts[0]['State']})"
        return vols[0]["State"]
    raise AssertionError(change)


DESTRUCTIVE = sorted(s.name for s in registry if s.destructive)


def test_the_destructive_actions_are_exactly_the_changing_ones():
    assert DESTRUCTIVE == ["aws.ec2.instance.stop", "aws.ec2.volume.delete", "aws.ec2.volume.detach",
                           "k8s.finalizers.remove", "k8s.node.taint", "k8s.node.untaint"]


@pytest.mark.parametrize("action", DESTRUCTIVE)
def test_dry_run_plan_is_exactly_the_change_later_applied(world, action):
    params = _arrange(world, action)
    dry, _ = world.plan(action, dry_run=True, **params)
    real, _ = world.plan(action, **params)
    assert dry.hash() == real.hash() and len(dry.changes) == 1
    change = dry.changes[0]
    if change.before:
        assert _observe(world, change) == change.before
    result, _ = world.apply(dry)
    while not result.done:
        result, _ = world.apply(dry)
    assert _observe(world, change) == change.after
    assert world.plan(action, **params)[0].is_noop  # nothing left to do: the plan was complete


@pytest.mark.parametrize("action", DESTRUCTIVE)
def test_apply_is_refused_in_a_dry_run(world, action):
    params = _arrange(world, action)
    plan, _ = world.plan(action, **params)
    with pytest.raises(PolicyError, match="dry run"):
        world.catalog.apply(action, plan, world.ctx(dry_run=True))


def test_every_api_call_is_in_the_result_with_service_targets_and_outcome(world):
    iid = world.instance()
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid)
    result, calls = world.apply(plan)
    assert list(result.calls) == calls
    assert [(c.service, c.operation, c.targets, c.outcome) for c in result.calls] == [
        ("ec2", "DescribeInstances", (iid,), "ok"), ("ec2", "StopInstances", (iid,), "ok")]


def test_clients_are_built_once_per_cluster(world):
    world.node("n1")
    world.run("k8s.node.get", node="n1")
    world.run("k8s.node.get", node="n1", cluster="test")
    assert list(world.catalog._clients) == ["test"]


def test_an_unknown_cluster_is_a_config_error_naming_the_configured_ones(world):
    with pytest.raises(ConfigError, match="configured: test"):
        world.plan("k8s.node.get", node="n1", cluster="prod")


def test_several_clusters_need_the_cluster_param():
    catalog = build_catalog(Settings(database_url="sqlite://", clusters={
        "a": ClusterConfig(name="a"), "b": ClusterConfig(name="b")}))
    from bot.engine.ports import ManualClock, StepContext

    ctx = StepContext(run_id="r", step_id="s", requester="alice", clock=ManualClock())
    with pytest.raises(ConfigError, match="pass the 'cluster' param"):
        catalog.plan("k8s.node.get", {"node": "n1"}, ctx)
    assert ctx.calls == []


def test_wait_is_not_done_until_its_duration_has_passed_on_the_clock(world):
    plan, calls = world.plan("wait", duration="5m")
    assert calls == [] and plan.summary == "Wait"
    first, _ = world.apply(plan)
    assert not first.done and first.retry_after == 300
    world.clock.advance(200)
    second, _ = world.apply(plan)
    assert not second.done and second.retry_after == 100 and "100s" in second.progress
    world.clock.advance(100)
    last, _ = world.apply(plan)
    assert last.done and last.data == {"waited": 300.0}


def test_notify_returns_its_message_for_the_runner_to_deliver(world):
    plan, _ = world.plan("notify", message="Fencing i-0abc now")
    result, calls = world.apply(plan)
    assert result.message == "Fencing i-0abc now" and result.data == {"message": "Fencing i-0abc now"}
    assert calls == [] and plan.summary == "Notify: Fencing i-0abc now"


def test_manual_confirm_records_who_confirmed(world):
    plan, _ = world.plan("manual.confirm", item="The instance is not coming back")
    result, _ = world.apply(plan)
    assert result.data == {"confirmed": True, "by": "alice"}
    assert plan.summary == "Confirm: The instance is not coming back"
