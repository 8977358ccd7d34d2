"""Interlock 8 tells a sick node from a dead one before any stop or terminate, over the real path.

Each attack is a fence the bot made before rule 8 read the kubelet's Lease and the Ready reason:
a node whose kubelet is alive and reports ``Ready=False`` (the VPC CNI not initialised) was fenced
once it had been NotReady for five minutes, pods running; so was a machine cut off by a network
partition that EC2 still passed. The fake API server and moto are reached over HTTP.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.actions.interlocks import RULE_FENCE, RULE_FENCE_CLUSTER, RULE_FENCE_WAIT
from bot.errors import InterlockBlocked

CNI = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
       "message:Network plugin returns error: cni plugin not initialized")


def _stamp(world, ago: float) -> str:
    return (world.clock.now() - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(world, iid: str, *, ready: str, reason: str = "", message: str = "",
          beat_ago: float, lease_ago: float | None) -> str:
    name = world.dead_node(iid)  # NotReady since 10 minutes ago, instance impaired
    node = world.kube.get("nodes", name)
    node["status"]["conditions"][0].update(status=ready, reason=reason, message=message,
                                           lastHeartbeatTime=_stamp(world, beat_ago))
    world.kube.put("nodes", node)
    world.kube.delete("leases", name, "kube-node-lease")
    if lease_ago is not None:
        world.lease(name, renewed=world.clock.now() - timedelta(seconds=lease_ago))
    return name


def _sick(world):
    """The commonest NotReady on EKS: the kubelet is alive, the CNI is not ready."""
    iid = world.instance()
    world.proxy.impaired.discard(iid)
    world.facts = {"node": _node(world, iid, ready="False", reason="KubeletNotReady", message=CNI,
                                 beat_ago=4, lease_ago=3)}
    return iid


def test_a_node_whose_kubelet_reports_ready_false_is_never_fenced(world):
    iid = _sick(world)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert e.value.rule == RULE_FENCE
    assert "kubelet is ALIVE" in e.value.message and "NetworkPluginNotReady" in e.value.message
    assert "pod network is not ready" in e.value.message  # the cause, in words
    assert world.writes() == [] and world.instance_state(iid) == "running"


def test_a_terminate_of_a_node_whose_kubelet_is_alive_is_refused_too(world):
    iid = _sick(world)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.terminate", instance_id=iid)
    assert e.value.rule == RULE_FENCE and world.writes() == []


def test_break_glass_may_fence_a_live_kubelet_and_the_override_is_recorded(world):
    iid = _sick(world)
    glass = frozenset({RULE_FENCE})
    ctx = world.ctx(overrides=glass)
    plan = world.catalog.plan("aws.ec2.instance.stop", {"instance_id": iid, "force": True}, ctx)
    assert ctx.overridden == [RULE_FENCE]
    assert plan.fact(f"node {world.facts['node']}", "liveness")["verdict"] == "sick"
    world.until_done(plan, overrides=glass)
    assert world.instance_state(iid) == "stopped"


def test_a_fresh_lease_is_a_live_kubelet_even_when_the_node_still_reads_unknown(world):
    iid = world.instance()
    _node(world, iid, ready="Unknown", beat_ago=600, lease_ago=5)  # back, status not yet posted
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert e.value.rule == RULE_FENCE and "ALIVE" in e.value.message
    assert world.writes() == []


def test_an_old_heartbeat_with_a_fresh_lease_is_not_a_dead_node(world):
    """A healthy kubelet posts unchanged status only every 5 minutes: the heartbeat is no proof."""
    iid = world.instance()
    _node(world, iid, ready="False", reason="KubeletNotReady", message="PLEG is not healthy",
          beat_ago=290, lease_ago=8)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert "PLEG" in e.value.message and world.writes() == []


def test_a_silent_node_ec2_still_passes_is_held_and_break_glass_cannot_lift_it_yet(world):
    iid = world.instance()  # running, status checks ok: a partition?
    _node(world, iid, ready="Unknown", reason="NodeStatusUnknown", beat_ago=150, lease_ago=120)
    world.proxy.impaired.discard(iid)
    everything = frozenset({RULE_FENCE, RULE_FENCE_WAIT})
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", overrides=everything, instance_id=iid, force=True)
    assert e.value.rule == RULE_FENCE_WAIT
    assert "may be alive" in e.value.message and "retry the step in 180 s" in e.value.message
    # a timed hold: the step plans itself again every policy.hold_recheck_seconds
    assert e.value.recheck_after == 15.0 and "EC2 confirms the machine is down" in e.value.until
    assert world.writes() == [] and world.instance_state(iid) == "running"


def test_after_the_ambiguous_wait_only_break_glass_fences_a_machine_that_may_be_alive(world):
    iid = world.instance()
    _node(world, iid, ready="Unknown", reason="NodeStatusUnknown", beat_ago=330, lease_ago=310)
    world.proxy.impaired.discard(iid)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert e.value.rule == RULE_FENCE and "THE MACHINE MAY BE ALIVE" in e.value.message
    glass = frozenset({RULE_FENCE})
    plan, _ = world.plan("aws.ec2.instance.stop", overrides=glass, instance_id=iid, force=True)
    world.until_done(plan, overrides=glass)
    assert world.instance_state(iid) == "stopped"


def test_a_dead_node_is_fenced_only_after_its_lease_was_stale_for_the_minimum(world):
    iid = world.instance()
    _node(world, iid, ready="Unknown", reason="NodeStatusUnknown", beat_ago=52, lease_ago=51)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert "silent for 51 s only" in e.value.message and "fence_min_not_ready (60 s)" in e.value.message
    world.clock.advance(10)
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert [c.operation for c in plan.changes] == ["force-stop"]
    assert plan.fact(f"node {world.facts.get('node') or _name(world, iid)}", "liveness")[
        "verdict"] == "dead"


def _name(world, iid):
    return f"ip-{iid[2:14]}.ec2.internal"


def test_a_lease_renewed_between_approval_and_apply_refuses_the_stop(world):
    iid = world.instance()
    name = _node(world, iid, ready="Unknown", reason="NodeStatusUnknown", beat_ago=200,
                 lease_ago=190)
    approved, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    world.lease(name, renewed=world.clock.now())  # the kubelet is back: only its Lease says so
    replanned, _ = world.plan("aws.ec2.instance.stop", overrides=frozenset({RULE_FENCE}),
                              instance_id=iid, force=True)
    assert replanned.hash() != approved.hash()  # the approval no longer counts
    with pytest.raises(InterlockBlocked) as e:
        world.apply(approved)
    assert e.value.rule == RULE_FENCE and "ALIVE" in e.value.message
    assert world.writes() == [] and world.instance_state(iid) == "running"


def test_the_plan_of_a_dead_node_hashes_the_same_when_read_again_later(world):
    iid = world.instance()
    _node(world, iid, ready="Unknown", reason="NodeStatusUnknown", beat_ago=200, lease_ago=190)
    first, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    world.clock.advance(120)  # ages grow; what was read did not change
    assert world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)[0].hash() == first.hash()


def test_an_instance_no_node_names_is_fenced_only_when_ec2_confirms_it_is_down(world):
    iid = world.instance()  # someone ran kubectl delete node; the machine may still write
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert "no Node names" in e.value.message and world.writes() == []
    world.proxy.impaired.add(iid)
    plan, _ = world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert [c.operation for c in plan.changes] == ["force-stop"]


def test_a_zone_batch_drops_a_sick_node_with_its_cause_and_fences_the_dead_one(world):
    sick = _sick(world)
    dead = world.instance()
    dead_name = world.dead_node(dead)
    obj = world.kube.get("nodes", dead_name)  # no instance store, which would keep it out too
    obj["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "m5.xlarge"
    world.kube.put("nodes", obj)
    plan, _ = world.plan("k8s.zone.fence_taint", zone="us-east-1a",
                         nodes=[world.facts["node"], dead_name])
    assert {c.target for c in plan.changes} == {dead, dead_name}
    dropped = plan.data["batch"]["dropped"][world.facts["node"]]
    assert "kubelet is ALIVE" in dropped and "NetworkPluginNotReady" in dropped
    world.until_done(plan)
    assert world.instance_state(sick) == "running" and world.instance_state(dead) == "stopped"


def test_a_machine_tagged_for_another_cluster_is_never_fenced_whatever_is_overridden(world):
    """Node names repeat across clusters: a kubeconfig pointing at the wrong one names a machine
    of another cluster, dead there, that the bot must not touch."""
    iid = world.instance(cluster="staging")
    world.dead_node(iid)
    everything = frozenset({RULE_FENCE, RULE_FENCE_WAIT, RULE_FENCE_CLUSTER})
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", overrides=everything, instance_id=iid, force=True)
    assert e.value.rule == RULE_FENCE_CLUSTER
    assert "belongs to cluster staging, not test" in e.value.message
    assert world.writes() == [] and world.instance_state(iid) == "running"


def test_an_untagged_machine_is_fenced_only_by_break_glass(world):
    iid = world.instance(cluster=None)
    world.dead_node(iid)
    with pytest.raises(InterlockBlocked) as e:
        world.plan("aws.ec2.instance.stop", instance_id=iid, force=True)
    assert e.value.rule == RULE_FENCE and "carries no cluster tag" in e.value.message
    plan, _ = world.plan("aws.ec2.instance.stop", overrides=frozenset({RULE_FENCE}),
                         instance_id=iid, force=True)
    assert [c.operation for c in plan.changes] == ["force-stop"]
