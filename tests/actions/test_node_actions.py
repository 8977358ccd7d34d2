"""Node actions: read, taint/untaint with interlocks 1, 3 and 5, cordon, and 409 resilience."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.actions.declarations import OUT_OF_SERVICE_TAINT
from bot.errors import InterlockBlocked, ParamError, PermanentError, RetryableError
from tests.fakes.calls import sent

OOS = f"{OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute"


def _ops(calls):
    return sent(calls)


def dead_node(world, name="ip-10-0-1-1.ec2.internal", *, state="stopped", ready="False"):
    iid = world.instance(state=state)
    world.node(name, ready=ready, instance_id=iid)
    return name, iid


@pytest.mark.parametrize("provider_id, expected", [
    ("aws:///us-east-1a/i-0abc12345678def01", "i-0abc12345678def01"),
    ("aws:////i-0abc12345678def01", "i-0abc12345678def01"),
    ("i-0abc12345678def01", "i-0abc12345678def01"),
    ("aws:///us-east-1a/fargate-10.0.1.2", None),
    ("", None),
])
def test_node_get_reads_instance_id_from_every_provider_id_form(world, provider_id, expected):
    world.node("n1", provider_id=provider_id)
    result = world.run("k8s.node.get", node="n1")
    assert result.data["instance_id"] == expected
    assert result.data["zone"] == "us-east-1a"
    assert result.data["ready"] is True and result.data["exists"] is True


def test_node_get_reports_a_missing_node_as_not_existing(world):
    plan, plan_calls = world.plan("k8s.node.get", node="gone")
    result, calls = world.apply(plan)
    assert plan_calls == [] and plan.is_noop
    assert result.data["exists"] is False and _ops(calls) == ["read_node"]


def test_oos_taint_on_a_dead_fenced_node_applies_once_then_is_already_done(world):
    name, _ = dead_node(world)
    plan, plan_calls = world.plan("k8s.node.taint", node=name)
    assert [c.summary() for c in plan.changes] == [f"taint Node {name}:  -> {OOS}"]
    assert plan.summary == f"Taint node {name} with {OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute"
    assert _ops(plan_calls) == ["list_node", "DescribeInstances"]
    result, calls = world.apply(plan)
    assert world.taints(name) == [OOS]
    assert result.already_done is False and result.data["node"] == name
    assert _ops(calls) == ["list_node", "DescribeInstances", "replace_node"]
    again, again_calls = world.apply(plan)
    assert again.already_done is True and world.taints(name) == [OOS]
    assert "replace_node" not in _ops(again_calls)
    replan, _ = world.plan("k8s.node.taint", node=name)
    assert replan.is_noop


def test_taint_keeps_taints_other_controllers_added(world):
    name, _ = dead_node(world)
    world.kube.put("nodes", {**world.kube.get("nodes", name), "spec": {
        **world.kube.get("nodes", name)["spec"],
        "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}})
    world.run("k8s.node.taint", node=name)
    assert world.taints(name) == ["node.kubernetes.io/unreachable=:NoExecute", OOS]


@pytest.mark.parametrize("state, ready", [("running", "False"), ("stopped", "True"),
                                          ("running", "Unknown"), ("stopping", "False")])
def test_oos_taint_is_refused_unless_the_node_is_not_ready_and_its_instance_is_fenced(
        world, state, ready):
    iid = world.instance(state="running")
    if state == "stopping":
        world.ec2.stop_instances(InstanceIds=[iid])
        world.ec2.start_instances(InstanceIds=[iid])  # moto is instant: emulate "not fenced"
    elif state != "running":
        world.ec2.stop_instances(InstanceIds=[iid])
    world.node("n1", ready=ready, instance_id=iid)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.node.taint", node="n1")
    assert e.value.rule == "oos-taint" and "aws.ec2.instance.stop" in e.value.message
    assert world.taints("n1") == []


def test_oos_taint_on_a_fargate_node_is_refused(world):
    world.node("n1", ready="False", provider_id="aws:///us-east-1a/fargate-10.0.1.2")
    with pytest.raises(InterlockBlocked, match="no EC2 instance"):
        world.plan("k8s.node.taint", node="n1")


def test_an_instance_started_between_plan_and_apply_changes_the_hash_and_apply_refuses(world):
    name, iid = dead_node(world)
    plan, _ = world.plan("k8s.node.taint", node=name)
    same, _ = world.plan("k8s.node.taint", node=name)
    world.clock.advance(60)
    assert same.hash() == plan.hash()  # read times are not part of the hash
    world.ec2.start_instances(InstanceIds=[iid])
    replan, _ = world.plan("k8s.node.taint", node=name, overrides=frozenset({"oos-taint"}))
    assert replan.hash() != plan.hash()
    assert replan.fact(f"instance {iid}", "state") == "running"
    with pytest.raises(InterlockBlocked) as e:
        world.apply(plan)  # the approved plan said "stopped"; apply reads again
    assert e.value.rule == "oos-taint" and world.taints(name) == []


@pytest.mark.parametrize("world, already, allowed", [
    ({"max_oos": 3}, 2, True), ({"max_oos": 3}, 3, False), ({"max_oos": 1}, 0, True),
    ({"max_oos": 1}, 1, False)], indirect=["world"])
def test_blast_radius_caps_the_nodes_carrying_the_oos_taint(world, already, allowed):
    for i in range(already):
        world.node(f"tainted-{i}", ready="False",
                   taints=[{"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown",
                            "effect": "NoExecute"}])
    name, _ = dead_node(world)
    if allowed:
        world.run("k8s.node.taint", node=name)
        assert world.taints(name) == [OOS]
    else:
        with pytest.raises(InterlockBlocked) as e:
            world.plan("k8s.node.taint", node=name)
        assert e.value.rule == "blast-radius"
        assert "max_out_of_service_nodes" in e.value.message


def test_a_non_oos_taint_needs_no_interlock_reads(world):
    world.node("n1")
    plan, calls = world.plan("k8s.node.taint", node="n1", key="example.com/maintenance",
                             value="yes", effect="NoSchedule")
    assert _ops(calls) == ["read_node"]
    world.apply(plan)
    assert world.taints("n1") == ["example.com/maintenance=yes:NoSchedule"]


def test_taint_is_retried_on_409_conflicts_and_succeeds(world):
    name, _ = dead_node(world)
    plan, _ = world.plan("k8s.node.taint", node=name)
    world.kube.conflicts_next_put = 2
    result, calls = world.apply(plan)
    assert world.taints(name) == [OOS] and not result.already_done
    assert [c.outcome for c in calls if c.operation == "replace_node"] == ["Conflict", "Conflict", "ok"]


def test_endless_conflicts_end_in_a_retryable_error_not_a_blind_write(world):
    name, _ = dead_node(world)
    plan, _ = world.plan("k8s.node.taint", node=name)
    world.kube.conflicts_next_put = 100
    with pytest.raises(RetryableError) as e:
        world.apply(plan)
    assert e.value.code == "Conflict" and world.taints(name) == []


def test_reads_are_retried_on_429_throttling(world):
    world.node("n1")
    world.kube.throttle_next = 2
    result, calls = world.apply(world.plan("k8s.node.get", node="n1")[0])
    assert result.data["exists"] is True
    assert [c.outcome for c in calls] == ["TooManyRequests", "TooManyRequests", "ok"]


def _repaired(world, name="n1"):
    world.node(name, ready="True", taints=[{"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown",
                                            "effect": "NoExecute"}])
    return name


def test_untaint_on_a_repaired_node_removes_only_that_taint_and_is_idempotent(world):
    name = _repaired(world)
    plan, calls = world.plan("k8s.node.untaint", node=name)
    assert _ops(calls) == ["read_node", "list_pod_for_all_namespaces", "list_volume_attachment"]
    assert plan.changes[0].before == OOS and plan.changes[0].after == ""
    world.apply(plan)
    assert world.taints(name) == []
    again, again_calls = world.apply(plan)
    assert again.already_done and "replace_node" not in _ops(again_calls)


@pytest.mark.parametrize("problem", ["not-ready", "terminating-pod", "attachment"])
def test_untaint_is_refused_until_ready_no_terminating_pods_and_no_attachments(world, problem):
    name = _repaired(world)
    if problem == "not-ready":
        world.node(name, ready="False", taints=[{"key": OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}])
    elif problem == "terminating-pod":
        world.pod("es-0", node=name, terminating=True)
        world.pod("other", node="elsewhere", terminating=True)
    else:
        world.va("csi-abc", node=name, pv="pv-1")
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.node.untaint", node=name)
    assert e.value.rule == "oos-untaint"
    assert len(world.taints(name)) == 1


def test_terminating_pods_on_other_nodes_do_not_block_the_untaint(world):
    name = _repaired(world)
    world.pod("other", node="elsewhere", terminating=True)
    world.va("csi-other", node="elsewhere", pv="pv-1")
    world.run("k8s.node.untaint", node=name)
    assert world.taints(name) == []


@pytest.mark.parametrize("action, before, after", [("k8s.node.cordon", False, True),
                                                   ("k8s.node.uncordon", True, False)])
def test_cordon_and_uncordon_flip_unschedulable_once(world, action, before, after):
    node = world.node("n1", cordoned_by="rb-earlier" if before else None)
    node["spec"]["unschedulable"] = before
    world.kube.put("nodes", node)
    result = world.run(action, node="n1")
    assert result.data["unschedulable"] is after and not result.already_done
    assert ("compensation" in result.data) is after  # a bot cordon is an open compensation
    assert world.kube.get("nodes", "n1")["spec"]["unschedulable"] is after
    plan, _ = world.plan(action, node="n1")
    assert plan.is_noop and world.apply(plan)[0].already_done


NODE_FORM = "DNS-1123"
INSTANCE_FORM = "^i-[0-9a-f]{8,17}$' (expected an EC2 instance id"
VOLUME_FORM = "^vol-[0-9a-f]{8,17}$' (expected an EBS volume id"


@pytest.mark.parametrize("action, params, field, form", [
    ("k8s.node.taint", {"node": "Not_A_Node"}, "node", NODE_FORM),
    ("k8s.node.get", {"node": "-bad-"}, "node", NODE_FORM),
    ("k8s.node.get", {"node": "a" * 254}, "node", NODE_FORM),
    ("k8s.node.untaint", {"node": "UPPER.case"}, "node", NODE_FORM),
    ("k8s.node.cordon", {"node": "n1; rm -rf /"}, "node", NODE_FORM),
    ("k8s.pods.list", {"node": "n_1"}, "node", NODE_FORM),
    ("k8s.volumeattachments.wait_gone", {"node": ""}, "node", NODE_FORM),
    ("k8s.pv.get", {"name": "../etc"}, "name", "DNS-1123"),
    ("k8s.node.taint", {"node": "n1", "effect": "Sometimes"}, "effect", "NoExecute"),
    ("k8s.node.taint", {"node": "n1", "key": "bad key"}, "key", "taint key"),
    ("k8s.node.taint", {"node": "n1", "value": "a=b"}, "value", "taint value"),
    ("aws.ec2.instance.stop", {"instance_id": "i-xyz"}, "instance_id", INSTANCE_FORM),
    ("aws.ec2.instance.get", {"instance_id": "i-0ABC12345678"}, "instance_id", INSTANCE_FORM),
    ("aws.ec2.volumes.list", {"instance_id": "i-1"}, "instance_id", INSTANCE_FORM),
    ("aws.ec2.volume.detach", {"volume_id": "vol-123"}, "volume_id", VOLUME_FORM),
    ("aws.ec2.volume.detach", {"volume_id": "vol-0123456789abcdef0", "instance_id": "x"},
     "instance_id", INSTANCE_FORM),
    ("aws.ec2.volume.delete", {"volume_id": "volume-1"}, "volume_id", VOLUME_FORM),
    ("aws.ec2.volumes.list", {"volume_ids": ["vol-0123456789abcdef0", "vol-nothex00"]},
     "volume_ids.1", VOLUME_FORM),
    ("k8s.finalizers.remove", {"kind": "PersistentVolumeClaim", "name": "c"}, "namespace",
     "required"),
])
def test_invalid_params_never_reach_an_api_and_say_what_was_expected(world, action, params, field,
                                                                     form):
    ctx = world.ctx()
    kube_before, ec2_before = len(world.kube.requests), len(world.proxy.requests)
    with pytest.raises(ParamError) as e:
        world.catalog.plan(action, params, ctx)
    assert f"{field}:" in str(e.value) or f"{field} " in str(e.value)
    assert form in str(e.value) and action in str(e.value)
    assert ctx.calls == []
    assert len(world.kube.requests) == kube_before and len(world.proxy.requests) == ec2_before


def test_a_plan_whose_params_were_tampered_with_is_refused_at_apply_before_any_call(world):
    iid = world.instance()
    world.dead_node(iid)
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid)
    forged = replace(plan, params={**plan.params, "instance_id": "i-*"})
    ctx = world.ctx()
    requests = len(world.proxy.requests)
    with pytest.raises(ParamError, match="instance_id"):
        world.catalog.apply(forged.action, forged, ctx)
    assert ctx.calls == [] and len(world.proxy.requests) == requests
    assert world.instance_state(iid) == "running"


def test_oos_taint_is_refused_when_the_csi_driver_names_another_instance(world):
    name, iid = dead_node(world)
    other = world.instance(state="running")
    node = world.kube.get("nodes", name)
    node["metadata"]["annotations"] = {
        "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"{other}"}}'}
    world.kube.put("nodes", node)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.node.taint", node=name)
    assert e.value.rule == "oos-taint" and iid in e.value.message and other in e.value.message
    node["metadata"]["annotations"] = {"csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"{iid}"}}'}
    world.kube.put("nodes", node)
    world.run("k8s.node.taint", node=name)  # agreeing ids: the usual checks decide
    assert world.taints(name) == [OOS]


def test_a_pod_delete_is_graceful_and_only_of_the_pod_still_on_the_named_node(world):
    world.pod("es-0", node="n2", pvc="data-es-0")  # already rescheduled elsewhere
    with pytest.raises(PermanentError) as e:
        world.plan("k8s.pod.delete", pod="es-0", node="n1")
    assert e.value.code == "WrongNode" and world.writes() == []
    with pytest.raises(ParamError):
        world.plan("k8s.pod.delete", pod="es-0", node="n2", grace_period_seconds=0)


def test_a_pod_replaced_between_approval_and_apply_is_not_deleted(world):
    world.pod("es-0", node="n1", pvc="data-es-0")
    plan, _ = world.plan("k8s.pod.delete", pod="es-0", node="n1")
    pod = world.kube.get("pods", "es-0", "default")
    pod["metadata"]["uid"] = "uid-of-the-replacement"
    world.kube.put("pods", pod)
    result, _ = world.apply(plan)
    assert result.already_done and world.writes() == []
    assert "deletionTimestamp" not in world.kube.get("pods", "es-0", "default")["metadata"]


def test_uncordon_leaves_a_node_that_a_person_cordoned(world):
    node = world.node("n1")
    node["spec"]["unschedulable"] = True
    world.kube.put("nodes", node)
    plan, _ = world.plan("k8s.node.uncordon", node="n1")
    assert plan.is_noop
    result, _ = world.apply(plan)
    assert result.already_done and "someone else" in result.message
    assert world.kube.get("nodes", "n1")["spec"]["unschedulable"] is True and world.writes() == []


def test_a_bot_cordon_records_its_run_and_uncordon_lifts_it(world):
    world.node("n1")
    world.run("k8s.node.cordon", node="n1")
    notes = world.kube.get("nodes", "n1")["metadata"]["annotations"]
    assert notes["runbook-bot.io/cordoned-by-run"] == "rb-test1"
    assert world.run("k8s.node.uncordon", node="n1").data["unschedulable"] is False
    assert "runbook-bot.io/cordoned-by-run" not in world.kube.get("nodes", "n1")["metadata"]["annotations"]


OOS_TAINT = {"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}


def test_the_taint_records_the_boot_it_was_applied_on(world):
    iid = world.instance(state="stopped")
    node = world.node("n1", ready="False", instance_id=iid)
    node["status"]["nodeInfo"]["bootID"] = "boot-before"
    world.kube.put("nodes", node)
    world.run("k8s.node.taint", node="n1")
    notes = world.kube.get("nodes", "n1")["metadata"]["annotations"]
    assert notes["runbook-bot.io/out-of-service-boot-id"] == "boot-before"
    assert notes["runbook-bot.io/out-of-service-at"] == world.clock.now().isoformat()


def test_untaint_is_refused_while_the_node_runs_the_kernel_it_was_tainted_on(world):
    world.node("n1", taints=[dict(OOS_TAINT)], rebooted=False)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.node.untaint", node="n1")
    assert e.value.rule == "oos-untaint" and "bootID is still boot-at-taint" in e.value.message
    assert world.writes() == []


def test_untaint_is_refused_without_a_record_of_the_boot_it_was_tainted_on(world):
    world.node("n1", taints=[dict(OOS_TAINT)])
    node = world.kube.get("nodes", "n1")
    node["metadata"]["annotations"] = {}  # tainted by hand
    world.kube.put("nodes", node)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("k8s.node.untaint", node="n1")
    assert "nothing proves the old kernel is gone" in e.value.message


def test_an_instance_started_after_the_taint_proves_a_new_boot(world):
    iid = world.instance()  # launched now, after the taint recorded in the node's annotations
    world.clock.advance(3600)
    world.node("n1", taints=[dict(OOS_TAINT)], rebooted=False, instance_id=iid)
    node = world.kube.get("nodes", "n1")
    node["metadata"]["annotations"]["runbook-bot.io/out-of-service-at"] = "2020-01-01T00:00:00+00:00"
    world.kube.put("nodes", node)
    plan, _ = world.plan("k8s.node.untaint", node="n1")
    assert plan.fact(f"instance {iid}", "launch_time") is not None and len(plan.changes) == 1
    world.apply(plan)
    assert world.taints("n1") == []
    notes = world.kube.get("nodes", "n1")["metadata"]["annotations"]
    assert "runbook-bot.io/out-of-service-boot-id" not in notes
