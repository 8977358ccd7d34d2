"""k8s.volumeattachments.audit: zombies only, each handed to a runbook with the params it takes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


def _attached(world, *, node="n1", claim="data-0", phase=None, pod_node=None, waiting=None):
    world.node(node)
    world.pv("pv-1", volume_id=world.volume(), claim=("default", claim))
    world.pvc(claim, volume_name="pv-1")
    world.va("csi-1", node=node, pv="pv-1")
    if pod_node is not None:
        world.pod("es-0", node=pod_node, pvc=claim, waiting=waiting)
        if phase:
            pod = world.kube.get("pods", "es-0", "default")
            pod["status"]["phase"] = phase
            world.kube.put("pods", pod)


def _audit(world):
    return world.run("k8s.volumeattachments.audit").data["items"]


@pytest.mark.parametrize("phase, waiting", [
    (None, None),                    # its consumer runs on the node
    (None, "ContainerCreating"),     # its consumer is starting there: Pending, volume attaching
    ("Succeeded", None),             # a finished Job: the controller detaches it shortly
])
def test_normal_and_transient_states_are_not_zombies(world, phase, waiting):
    _attached(world, pod_node="n1", phase=phase, waiting=waiting)
    assert _audit(world) == []


def test_a_consumer_not_scheduled_yet_is_not_a_zombie(world):
    _attached(world)
    world.pod("es-0", node="", pvc="data-0", waiting="Unschedulable")
    assert _audit(world) == []


def test_a_volume_held_from_a_pod_waiting_elsewhere_goes_to_multi_attach_triage_with_its_pod(world):
    _attached(world)
    world.node("n2")
    world.pod("es-0", node="n2", pvc="data-0", waiting="ContainerCreating")
    [item] = _audit(world)
    assert item["next"] == "multi-attach-triage"
    assert item["next_params"] == {"pod": "es-0", "namespace": "default"}


def test_an_attachment_on_a_notready_node_goes_to_node_dead_with_the_node(world):
    _attached(world, pod_node="n1")
    world.node("n1", ready="False")
    [item] = _audit(world)
    assert (item["next"], item["next_params"]) == ("node-dead-ngns", {"node": "n1"})


def test_every_handoff_names_exactly_the_params_its_runbook_takes(world):
    _attached(world)  # no consumer at all
    world.node("gone-later")
    world.va("csi-2", node="missing", pv="pv-1")
    world.node("n3", ready="False")
    world.va("csi-3", node="n3", pv="pv-1")
    world.node("n2")
    world.pod("es-0", node="n2", pvc="data-0", waiting="ContainerCreating")
    items = _audit(world)
    assert {i["next"].split(":")[0] for i in items} >= {"multi-attach-triage", "node-dead-ngns"}
    for item in items:
        if item["next"].startswith("none"):
            assert item["next_params"] == {}
            continue
        spec = yaml.safe_load((RUNBOOKS / f"{item['next']}.yaml").read_text())["spec"]["params"]
        required = {k for k, v in spec.items() if v.get("required")}
        assert required <= set(item["next_params"]) <= set(spec), (item, sorted(spec))
