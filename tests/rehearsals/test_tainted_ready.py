"""A node Ready again with the out-of-service taint still on it (repaired, or started again by
someone) is named, with node-recovered: while the taint stays, Kubernetes detaches its volumes
at once if it stops hearing from the node, mounted or not (the explorer's
``zone-outage-ngns--detach-from-live--world-starts-a-tainted-machine``)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.actions.builtin import builtin_actions
from bot.diagnose import Scope, catalogue_of, diagnose
from bot.runbook.source import DirectorySource
from bot.sim.rehearsal import Rehearsal

pytestmark = pytest.mark.slow

OOS = "node.kubernetes.io/out-of-service"


def _findings(r: Rehearsal) -> list[Any]:
    source = DirectorySource(r.settings.runbooks_dir, catalog=builtin_actions())
    return diagnose(r.settings.cluster("sandbox"), r.clients(), Scope(cluster="sandbox"),
                    now=r.clock.now(), runbooks=catalogue_of(source),
                    grace=r.settings.policy.node_monitor_grace_period).findings


def test_a_ready_node_that_still_carries_the_taint_is_named_with_node_recovered(rehearse):
    r = rehearse("node-dead")
    node = r.facts["dead_node"]
    assert not [f for f in _findings(r) if f.kind == "out-of-service-node-ready"]
    # node-dead-ngns ran to the end: the node is tainted and its machine stopped
    st = r.run("node-dead-ngns", node=node)
    assert st.status == "succeeded", st.outcome
    assert [t for t in r.sandbox.get("Node", None, node)["spec"]["taints"] if t["key"] == OOS]
    assert not [f for f in _findings(r) if f.kind == "out-of-service-node-ready"]
    # someone starts the machine: its kubelet posts Ready, the taint is still there
    r.sandbox.ec2.repair(r.facts["instance_id"])
    r.sandbox.advance(60)
    [f] = [f for f in _findings(r) if f.kind == "out-of-service-node-ready"]
    assert f.runbook == "node-recovered" and f.params.get("node") == node
    assert "detached at once" in f.summary and OOS in f.summary


def test_node_recovered_keeps_the_taint_of_a_node_back_on_the_kernel_it_was_tainted_on(rehearse):
    """Tainted while its machine ran (as a zone batch does without a stop), the node comes back
    on the same kernel: same boot id, and an instance not started since. node-recovered refuses
    to lift the taint (interlock oos-untaint: the old mounts may still be held). The sandbox
    used to give every instance moto's LaunchTime, the host's clock, months after its own, so
    any instance looked started after any taint and the lift went through."""
    r = rehearse("node-dead")
    node = r.facts["node"]
    live = next(n for n in r.sandbox.list("Node") if n["metadata"]["name"] != node
                and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in n["status"]["conditions"]))
    name = live["metadata"]["name"]
    when = r.clock.now().isoformat()
    live["metadata"].setdefault("annotations", {}).update({
        "runbook-bot.io/out-of-service-boot-id": live["status"]["nodeInfo"]["bootID"],
        "runbook-bot.io/out-of-service-at": when})
    live["spec"]["taints"] = [*(live["spec"].get("taints") or ()),
                              {"key": OOS, "value": "nodeshutdown", "effect": "NoExecute"}]
    r.sandbox.store.update(r.sandbox.res("Node"), live)
    r.sandbox.advance(900, step=30)  # its pods evicted and gone: only its kernel is in question
    st = r.run("node-recovered", node=name)
    assert st.status != "succeeded", st.outcome
    blocked = [e.payload for e in r.store.events(st.run_id) if e.type == "interlock.blocked"]
    assert blocked and blocked[0]["rule"] == "oos-untaint", blocked
    assert "has not been started since" in blocked[0]["message"], blocked[0]["message"]
    assert [t for t in r.sandbox.get("Node", None, name)["spec"]["taints"] if t["key"] == OOS]
