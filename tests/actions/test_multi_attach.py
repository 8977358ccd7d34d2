"""io2 Multi-Attach in interlock 2 and in the plans that detach or fence, against the sandbox.

``stuck-detach-multi-attach``: the dead node's volume is io2 Multi-Attach, attached besides to a
live peer instance. Before interlock 2 looked at the one attachment a detach acts on, the force
detach from the dead (stopped) instance was refused because the peer runs, and a detach that
named no instance took whichever attachment EC2 listed first. The sandbox's API server and EC2
proxy are reached over HTTP, as production reaches a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.actions.interlocks import RULE_FORCE_DETACH
from bot.engine.ports import ManualClock
from bot.errors import InterlockBlocked, PermanentError
from tests.actions.test_sandbox_scenarios import Driver

sandbox = pytest.importorskip("bot.sim.sandbox")
SCENARIO = "stuck-detach-multi-attach"


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Any]:
    opened: list[Any] = []

    def start(**options: Any) -> Driver:
        clock = ManualClock()
        sb = sandbox.Sandbox(scenario=SCENARIO, workdir=tmp_path / f"s{len(opened)}", clock=clock,
                             options=options)
        opened.append(sb.__enter__())
        return Driver(sb, clock)

    yield start
    for sb in opened:
        sb.__exit__(None, None, None)


def _holders(d: Driver) -> dict[str, str]:
    return dict(d.sb.ec2.attachments()[d.sb.facts["volume_id"]])


def test_a_force_detach_from_the_live_peer_is_refused(shared):
    d = shared()
    f = d.sb.facts
    with pytest.raises(InterlockBlocked) as e:
        d.plan("aws.ec2.volume.detach", volume_id=f["volume_id"],
               instance_id=f["peer_instance_id"], force=True)
    assert e.value.rule == RULE_FORCE_DETACH
    assert f"{f['peer_instance_id']} (running)" in e.value.message
    assert _holders(d) == {f["instance_id"]: "busy", f["peer_instance_id"]: "attached"}


def test_a_detach_naming_no_instance_is_refused_naming_every_holder(shared):
    d = shared()
    f = d.sb.facts
    for force in (True, False):
        with pytest.raises(PermanentError) as e:
            d.plan("aws.ec2.volume.detach", volume_id=f["volume_id"], force=force)
        assert "Multi-Attach" in str(e.value) and f["peer_instance_id"] in str(e.value)
        assert f["instance_id"] in str(e.value)
    assert len(_holders(d)) == 2


def test_the_dead_instance_is_force_detached_while_the_live_peer_keeps_the_volume(shared):
    d = shared()
    f = d.sb.facts
    dead, peer = f["instance_id"], f["peer_instance_id"]
    plan, _ = d.plan("aws.ec2.volume.detach", volume_id=f["volume_id"], instance_id=dead,
                     force=True)
    [change] = plan.changes
    assert change.operation == "force-detach" and change.after == \
        f"still attached to {peer} (Multi-Attach)"
    holders = plan.fact(f"volume {f['volume_id']}", "attachments")
    assert holders == sorted([
        {"instance_id": dead, "state": "busy", "instance_state": "stopped", "target": True},
        {"instance_id": peer, "state": "attached", "instance_state": "running", "target": False},
    ], key=lambda h: h["instance_id"])
    result = d.until_done(plan)
    assert f"off {dead}" in result.message and peer in result.message
    assert dead not in _holders(d) and _holders(d)[peer] == "attached"
    assert d.sb.ec2.instance_state(peer) == "running"
    assert [v for v in d.sb.violations if v.kind == "detach-from-live"] == []


def test_a_batched_force_detach_applies_the_same_rule_to_each_holder(shared):
    """aws.ec2.volumes.detach judges rule 2 with the single detach's code: the batch naming the
    live peer is refused; naming the dead instance, its busy attachment is forced off, the peer
    keeps the volume."""
    d = shared()
    f = d.sb.facts
    dead, peer, vid = f["instance_id"], f["peer_instance_id"], f["volume_id"]
    with pytest.raises(InterlockBlocked) as e:
        d.plan("aws.ec2.volumes.detach", volumes=[{"volume_id": vid, "instance_id": peer}],
               force=True)
    assert e.value.rule == RULE_FORCE_DETACH and f"{peer} (running)" in e.value.message
    plan, _ = d.plan("aws.ec2.volumes.detach", volumes=[{"volume_id": vid, "instance_id": dead}],
                     force=True)
    assert [c.after for c in plan.changes] == [f"still attached to {peer} (Multi-Attach)"]
    assert {(h["instance_id"], h["target"]) for h in plan.fact(f"volume {vid}", "attachments")} \
        == {(dead, True), (peer, False)}
    first, _ = d.apply(plan)
    assert first.data["items"][0]["forced"]  # its attachment was busy: Force
    result = d.until_done(plan)
    assert result.data["detached"] == [vid]
    assert dead not in _holders(d) and _holders(d)[peer] == "attached"
    assert [v for v in d.sb.violations if v.kind == "detach-from-live"] == []


def test_the_fence_plan_shows_every_holder_of_the_volumes_it_shares(shared):
    d = shared(hung=True)
    f = d.sb.facts
    plan, _ = d.plan("aws.ec2.instance.stop", instance_id=f["instance_id"], force=True)
    assert plan.changes  # a fence of the hung instance
    holders = plan.fact(f"volume {f['volume_id']}", "attachments")
    assert {(h["instance_id"], h["instance_state"], h["target"]) for h in holders} == {
        (f["instance_id"], "running", True), (f["peer_instance_id"], "running", False)}
