"""The catalog contract (declarations all implemented, dry-run honesty, call records) and flow."""

from __future__ import annotations

import pytest

from bot.actions.builtin import builtin_actions
from bot.actions.catalog import build_catalog
from bot.actions.declarations import OUT_OF_SERVICE_TAINT
from bot.config import ClusterConfig, Settings
from bot.errors import ConfigError, PolicyError


def test_every_declared_action_has_a_plan_and_an_apply():
    registry = builtin_actions()
    missing = [s.name for s in registry if not (callable(s.plan_fn) and callable(s.apply_fn))]
    assert missing == [] and len(registry.names()) >= 23


def _arrange(world, case):
    """A world where ``case`` has one real change to make; returns its action and params."""
    action, _, variant = case.partition(":")
    if action == "k8s.node.taint":
        world.node("n1", ready="False", instance_id=world.instance(state="stopped"),
                   taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
        return action, {"node": "n1"}
    if action == "k8s.node.untaint":
        world.node("n1", taints=[{"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown",
                                  "effect": "NoExecute"},
                                 {"key": "example.com/keep", "value": "yes", "effect": "NoSchedule"}])
        return action, {"node": "n1"}
    if action in {"k8s.node.cordon", "k8s.node.uncordon"}:
        node = world.node("n1", cordoned_by="rb-earlier" if action.endswith("uncordon") else None)
        node["spec"]["unschedulable"] = action.endswith("uncordon")
        world.kube.put("nodes", node)
        return action, {"node": "n1"}
    if action == "k8s.finalizers.remove":
        vid = world.volume()
        world.ec2.delete_volume(VolumeId=vid)
        world.pv("pv-1", volume_id=vid, finalizers=["kubernetes.io/pv-protection",
                                                    "external-attacher/ebs-csi-aws-com"],
                 terminating=True, phase="Released")
        world.pvc("data-0", volume_name="pv-1", terminating=True)
        world.va("csi-0", node="n1", pv="pv-1", terminating=True)
        name = {"PersistentVolume": "pv-1", "PersistentVolumeClaim": "data-0",
                "VolumeAttachment": "csi-0"}[variant]
        return action, {"kind": variant, "name": name,
                        "namespace": "default" if variant == "PersistentVolumeClaim" else None}
    if action == "aws.ec2.instance.stop":
        world.instance(state="stopped")  # a bystander that must not change
        iid = world.instance()
        world.dead_node(iid)
        return action, {"instance_id": iid}
    if action == "aws.ec2.instance.terminate":
        world.instance(state="stopped")  # a bystander that must not change
        iid = world.instance()
        world.dead_node(iid)
        return action, {"instance_id": iid}
    if action == "k8s.volumeattachment.delete":
        world.pv("pv-1", volume_id=world.volume())
        world.va("csi-0", node="gone-node", pv="pv-1")
        world.va("csi-1", node="gone-node", pv="pv-1")  # a bystander
        return action, {"name": "csi-0"}
    if action == "k8s.volumeattachments.delete":
        world.pv("pv-1", volume_id=world.volume())
        world.va("csi-0", node="gone-node", pv="pv-1")
        world.va("csi-1", node="gone-node", pv="pv-1")  # a bystander
        return action, {"names": ["csi-0"]}
    if action == "aws.ec2.volume.detach":
        iid = world.instance(state="stopped")
        world.volume(attach_to=world.instance(state="stopped"))  # a bystander
        return action, {"volume_id": world.volume(attach_to=iid), "force": True}
    if action == "aws.ec2.volumes.detach":
        iid = world.instance(state="stopped")
        world.volume(attach_to=world.instance(state="stopped"))  # a bystander
        return action, {"volumes": [{"volume_id": world.volume(attach_to=iid),
                                     "instance_id": iid}], "force": True}
    if action == "aws.ec2.volume.delete":
        world.volume()
        return action, {"volume_id": world.released_volume()}
    if action == "k8s.pod.delete":
        world.pod("es-1", node="n1", pvc="data-es-1")  # a bystander
        world.pod("es-0", node="n1", pvc="data-es-0")
        return action, {"pod": "es-0", "namespace": "default", "node": "n1"}
    raise AssertionError(case)


def _snapshot(world):
    """Everything the actions could change, in the words of ``Change.before``/``after``:
    (kind, target) -> the set of facts that hold (taints, finalizers, states, attachments)."""
    out = {}
    for node in world.kube.items("nodes"):
        facts = {f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in node["spec"].get("taints") or ()}
        facts.add(f"unschedulable={bool(node['spec'].get('unschedulable'))}")
        out["Node", node["metadata"]["name"]] = facts
    for plural, kind in (("persistentvolumes", "PersistentVolume"),
                         ("persistentvolumeclaims", "PersistentVolumeClaim"),
                         ("volumeattachments", "VolumeAttachment")):
        for obj in world.kube.items(plural):
            meta = obj["metadata"]
            name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            out[kind, name] = set(meta.get("finalizers") or ()) | (
                {"deleting"} if kind == "VolumeAttachment" and meta.get("deletionTimestamp") else set())
    for pod in world.kube.items("pods"):
        meta = pod["metadata"]
        out["Pod", f"{meta['namespace']}/{meta['name']}"] = (
            {"deleted gracefully"} if meta.get("deletionTimestamp") else {f"on {pod['spec']['nodeName']}"})
    for iid in world.instances:
        out["Instance", iid] = {world.instance_state(iid)}
    for vid in world.volumes:
        vols = world.ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [vid]}])["Volumes"]
        atts = vols[0]["Attachments"] if vols else []
        out["Volume", vid] = ({f"attached to {a['InstanceId']} ({a['State']})" for a in atts}
                              or {vols[0]["State"] if vols else "deleted"})
    return out


def _words(text):
    return {w for w in text.split(", ") if w}


DESTRUCTIVE = sorted(s.name for s in builtin_actions() if s.destructive)


def test_the_destructive_actions_are_exactly_the_changing_ones():
    assert DESTRUCTIVE == ["aws.ec2.instance.stop", "aws.ec2.instance.terminate",
                           "aws.ec2.volume.delete", "aws.ec2.volume.detach",
                           "aws.ec2.volumes.detach", "k8s.finalizers.remove", "k8s.node.taint",
                           "k8s.node.untaint", "k8s.nodeclaim.delete", "k8s.pod.delete",
                           "k8s.volumeattachment.delete", "k8s.volumeattachments.delete",
                           "k8s.zone.fence_taint"]


# a zone batch plans two changes per node (stop, taint); tests/rehearsals/test_zone_outage.py
# shows its plan, drops and dry run against the sandbox. A NodeClaim's DELETE has its effect
# through EKS (Karpenter terminates the machine): tests/rehearsals/test_auto_mode.py shows it
HONESTY = sorted([*(a for a in DESTRUCTIVE if a not in ("k8s.finalizers.remove",
                                                         "k8s.zone.fence_taint",
                                                         "k8s.nodeclaim.delete")),
                  "k8s.finalizers.remove:PersistentVolume", "k8s.finalizers.remove:PersistentVolumeClaim",
                  "k8s.finalizers.remove:VolumeAttachment", "k8s.node.cordon", "k8s.node.uncordon"])


@pytest.mark.parametrize("case", HONESTY)
def test_dry_run_plan_is_exactly_the_change_later_applied(world, case):
    action, params = _arrange(world, case)
    dry, _ = world.plan(action, dry_run=True, **params)
    real, _ = world.plan(action, **params)
    assert dry.hash() == real.hash() and len(dry.changes) == 1
    assert world.writes() == []  # planning wrote nothing
    change = dry.changes[0]
    before = _snapshot(world)
    assert _words(change.before) <= before[change.target_kind, change.target]
    world.until_done(dry)
    after = _snapshot(world)
    key = (change.target_kind, change.target)
    # an object already being deleted that is now gone only finished that deletion
    now = after.get(key, before[key] & {"deleting"})
    # exactly the planned facts went and came, on the planned target ...
    assert before[key] - now == _words(change.before) - _words(change.after)
    assert now - before[key] == _words(change.after) - _words(change.before)
    # ... and nothing else anywhere changed
    assert {k: v for k, v in after.items() if k != key} == {
        k: v for k, v in before.items() if k != key}
    assert world.plan(action, **params)[0].is_noop  # nothing left to do: the plan was complete


@pytest.mark.parametrize("case", HONESTY)
def test_apply_of_a_change_is_refused_in_a_dry_run(world, case):
    action, params = _arrange(world, case)
    plan, _ = world.plan(action, **params)
    with pytest.raises(PolicyError, match="dry run"):
        world.catalog.apply(action, plan, world.ctx(dry_run=True))
    assert world.writes() == []


def test_a_dry_run_still_reads_so_later_steps_have_results(world):
    world.node("n1")
    plan, _ = world.plan("k8s.node.get", dry_run=True, node="n1")
    ctx = world.ctx(dry_run=True)
    result = world.catalog.apply("k8s.node.get", plan, ctx)
    assert result.data["exists"] and [c.operation for c in ctx.calls] == ["read_node"]


def test_a_dry_run_gets_clients_that_refuse_every_write_before_it_is_sent(world):
    world.node("n1")
    vid = world.volume()
    iid = world.instance()
    ctx = world.ctx(dry_run=True)
    env = world.catalog._env(world.catalog.validate("k8s.node.get", {"node": "n1"}), ctx)
    writes = [
        lambda: env.kube.update(kind="Node", name="n1",
                                mutate=lambda o: {**o, "spec": {"unschedulable": True}}),
        lambda: env.ec2.stop_instances([iid], force=True),
        lambda: env.ec2.detach_volume(volume_id=vid, instance_id=iid, force=True),
        lambda: env.ec2.delete_volume(volume_id=vid),
    ]
    for write in writes:
        with pytest.raises(PolicyError, match="read-only"):
            write()
    assert world.writes() == [] and world.instance_state(iid) == "running"
    assert env.ec2.delete_volume(volume_id=vid, dry_run=True) == {"DryRun": True}  # EC2's own check
    assert world.volume_state(vid) == "available"


def test_every_api_call_is_in_the_result_with_service_targets_and_outcome(world):
    iid = world.instance()
    node = world.dead_node(iid)
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid)
    result, calls = world.apply(plan)
    assert list(result.calls) == calls
    assert [(c.service, c.operation, c.targets, c.outcome) for c in result.calls] == [
        # the fence's live read is one DescribeInstanceStatus (the state and the status checks);
        # a running instance's boot (LaunchTime) and tags are one DescribeInstances
        ("ec2", "DescribeInstanceStatus", (iid,), "ok"), ("ec2", "DescribeInstances", (iid,), "ok"),
        ("ec2", "DescribeInstanceStatus", (iid,), "cached"), ("kubernetes", "list_node", (), "ok"),
        ("kubernetes", "read_namespaced_lease", (f"kube-node-lease/{node}",), "ok"),
        ("ec2", "StopInstances", (iid,), "ok")]


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
