"""Every interlock refuses when its condition fails, reads the world again at apply time, and lets
break-glass through with a record of what was overridden.

Each rule has a world where the change is safe, a way to make it unsafe (what happens between an
approval and its apply), and the change it guards, so one set of tests holds all six rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from bot.actions.declarations import OUT_OF_SERVICE_TAINT
from bot.actions.interlocks import RULES
from bot.errors import InterlockBlocked

OOS = {"key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}


@dataclass(frozen=True)
class Rule:
    action: str
    safe: Callable[[Any], dict[str, Any]]  # world -> params of a change the rule allows
    spoil: Callable[[Any, dict[str, Any]], object]  # make the same change unsafe
    done: Callable[[Any, dict[str, Any]], bool]  # has the change been made?


def _dead_node(world):
    iid = world.instance(state="stopped")
    world.node("n1", ready="False", instance_id=iid)
    world.facts = {"instance_id": iid}
    return {"node": "n1"}


def _oos_nodes(world, count):
    for i in range(count):
        world.node(f"tainted-{i}", ready="False", taints=[dict(OOS)])


def _repaired(world):
    world.node("n1", taints=[dict(OOS)])
    return {"node": "n1"}


def _fenced_volume(world):
    iid = world.instance(state="stopped")
    world.facts = {"instance_id": iid}
    return {"volume_id": world.volume(attach_to=iid), "force": True}


def _dead_running_instance(world):
    iid = world.instance()  # running: a hung or partitioned machine
    world.facts = {"instance_id": iid, "node": world.dead_node(iid)}
    return {"instance_id": iid, "force": True}


def _node_came_back(world, params):
    node = world.kube.get("nodes", world.facts["node"])
    node["status"]["conditions"][0].update(status="True", lastHeartbeatTime="2026-01-01T00:00:00Z")
    world.kube.put("nodes", node)


def _released_pv(world):
    vid = world.volume()
    world.ec2.delete_volume(VolumeId=vid)
    world.pv("pv-1", volume_id=vid, terminating=True, phase="Released")
    return {"kind": "PersistentVolume", "name": "pv-1"}


def _deleted_claim(world):
    vid = world.volume()
    world.ec2.delete_volume(VolumeId=vid)
    world.pv("pv-1", volume_id=vid, terminating=True, phase="Released")
    world.pvc("data-0", volume_name="pv-1", terminating=True)
    return {"kind": "PersistentVolumeClaim", "name": "data-0", "namespace": "default"}


def _retain(world, params):
    pv = world.kube.get("persistentvolumes", "pv-r")
    pv["spec"]["persistentVolumeReclaimPolicy"] = "Retain"  # someone chose to keep the disk
    world.kube.put("persistentvolumes", pv)


def _point_pv_at_a_live_volume(world, params):
    pv = world.kube.get("persistentvolumes", "pv-1")
    pv["spec"]["csi"]["volumeHandle"] = world.volume()
    world.kube.put("persistentvolumes", pv)


def _has_oos(world, params):
    return OUT_OF_SERVICE_TAINT in {t["key"] for t in world.kube.get("nodes", "n1")["spec"]["taints"]}


RULE_CASES: dict[str, Rule] = {
    "oos-taint": Rule(
        "k8s.node.taint", _dead_node,
        lambda w, p: w.ec2.start_instances(InstanceIds=[w.facts["instance_id"]]),  # it came back
        _has_oos),
    "blast-radius": Rule(
        "k8s.node.taint", lambda w: (_oos_nodes(w, 2), _dead_node(w))[-1],
        lambda w, p: _oos_nodes(w, 3),  # a third node was tainted meanwhile (limit 3)
        _has_oos),
    "oos-untaint": Rule(
        "k8s.node.untaint", _repaired,
        lambda w, p: w.pod("es-0", node="n1", terminating=True),
        lambda w, p: not _has_oos(w, p)),
    "force-detach": Rule(
        "aws.ec2.volume.detach", _fenced_volume,
        lambda w, p: w.ec2.start_instances(InstanceIds=[w.facts["instance_id"]]),
        lambda w, p: w.volume_state(p["volume_id"]) == "available"),
    "fence-live": Rule(
        "aws.ec2.instance.stop", _dead_running_instance, _node_came_back,
        lambda w, p: w.instance_state(p["instance_id"]) in ("stopping", "stopped")),
    "finalizer-volume": Rule(
        "k8s.finalizers.remove", _released_pv, _point_pv_at_a_live_volume,
        lambda w, p: w.kube.get("persistentvolumes", "pv-1") is None),
    "finalizer-blocker": Rule(
        "k8s.finalizers.remove", _deleted_claim,
        lambda w, p: w.pod("es-0", node="n1", pvc="data-0"),  # a pod mounts the claim again
        lambda w, p: w.kube.get("persistentvolumeclaims", "data-0", "default") is None),
    "volume-delete": Rule(
        "aws.ec2.volume.delete", lambda w: {"volume_id": w.released_volume(), "pv": "pv-r"},
        _retain, lambda w, p: w.volume_state(p["volume_id"]) is None),
}


# the override break-glass grants: a rule that counts nodes names how many it allows
GLASS = {"blast-radius": "blast-radius<=4"}


def _glass(rule: str) -> frozenset[str]:
    return frozenset({GLASS.get(rule, rule)})


def test_every_rule_has_a_case():
    assert sorted(RULE_CASES) == sorted(RULES)


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_an_interlock_refuses_the_plan_when_its_condition_fails(world, rule):
    case = RULE_CASES[rule]
    params = case.safe(world)
    case.spoil(world, params)
    with pytest.raises(InterlockBlocked) as e:
        world.plan(case.action, **params)
    assert e.value.rule == rule and e.value.message
    assert world.writes() == [] and not case.done(world, params)


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_a_world_that_changed_after_approval_changes_the_plan_hash_and_apply_refuses(world, rule):
    case = RULE_CASES[rule]
    params = case.safe(world)
    approved, _ = world.plan(case.action, **params)
    assert world.plan(case.action, **params)[0].hash() == approved.hash()  # same world, same hash
    case.spoil(world, params)
    replanned, _ = world.plan(case.action, overrides=_glass(rule), **params)
    assert replanned.hash() != approved.hash()  # the approval no longer counts
    with pytest.raises(InterlockBlocked) as e:
        world.apply(approved)  # apply reads live, never trusts the approved plan's facts
    assert e.value.rule == rule
    assert world.writes() == [] and not case.done(world, params)


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_break_glass_lets_the_change_through_and_records_the_override(world, rule):
    case = RULE_CASES[rule]
    params = case.safe(world)
    case.spoil(world, params)
    glass = _glass(rule)
    plan_ctx = world.ctx(overrides=glass)
    plan = world.catalog.plan(case.action, params, plan_ctx)
    assert plan_ctx.overridden == [rule] and len(plan.changes) == 1
    results, _ = world.until_done(plan, overrides=glass)
    assert case.done(world, params)
    # what the engine audits as overridden, on the apply that made the change (a stop is then
    # polled until 'stopped' with nothing left to override)
    assert [rule] in [c.overridden for c in world.contexts[1:]]
    assert not results[0].already_done


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_overriding_a_different_rule_does_not_open_this_one(world, rule):
    case = RULE_CASES[rule]
    params = case.safe(world)
    case.spoil(world, params)
    others = frozenset(GLASS.get(r, r) for r in RULES) - _glass(rule)
    with pytest.raises(InterlockBlocked) as e:
        world.plan(case.action, overrides=others, **params)
    assert e.value.rule == rule and not case.done(world, params)


def _node_ready(world, status):
    def flip(plural, name):
        node = world.kube.objects[(plural, "", name)]
        node["status"]["conditions"][0]["status"] = status
        world.kube.put(plural, node)
    return flip


def _pv_points_at_a_live_volume(world):
    live = world.volume()

    def flip(plural, name):
        pv = world.kube.objects[(plural, "", name)]
        pv["spec"]["csi"]["volumeHandle"] = live
        world.kube.put(plural, pv)
    return flip


DURING_WRITE = {  # what a conflicting write by someone else changes, for the rules it bears on
    "oos-taint": lambda w: _node_ready(w, "True"),  # the kubelet reports the node Ready again
    "oos-untaint": lambda w: _node_ready(w, "False"),  # the repaired node drops out again
    "finalizer-volume": _pv_points_at_a_live_volume,
}


@pytest.mark.parametrize("rule", sorted(DURING_WRITE))
def test_a_conflicting_write_that_breaks_the_rule_is_caught_on_the_re_read(world, rule):
    case = RULE_CASES[rule]
    params = case.safe(world)
    plan, _ = world.plan(case.action, **params)
    flip = DURING_WRITE[rule](world)
    fired = []

    def conflicting_writer(plural, name):
        if not fired:  # our PUT now carries a stale resourceVersion: 409, re-read, re-check
            fired.append(name)
            flip(plural, name)

    world.kube.on_put.append(conflicting_writer)
    with pytest.raises(InterlockBlocked) as e:
        world.apply(plan)
    assert e.value.rule == rule and fired
    assert not case.done(world, params)
    calls = world.contexts[-1].calls
    assert [c.outcome for c in calls if c.operation.startswith("replace_")] == ["Conflict"]


def test_break_glass_survives_a_conflict_and_is_recorded_once(world):
    case = RULE_CASES["oos-taint"]
    params = case.safe(world)
    case.spoil(world, params)
    glass = frozenset({"oos-taint"})
    plan, _ = world.plan(case.action, overrides=glass, **params)
    world.kube.conflicts_next_put = 1
    world.apply(plan, overrides=glass)
    assert case.done(world, params) and world.contexts[-1].overridden == ["oos-taint"]
