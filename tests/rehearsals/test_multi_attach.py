"""node-dead-ngns on a dead node whose io2 Multi-Attach volume a live peer instance shares.

Before interlock 2 looked only at the attachment a force detach acts on, the last-resort force
detach from the dead (stopped) instance was refused while the peer ran, and the run stopped there
with the new pod stuck on Multi-Attach.
"""

from __future__ import annotations

import pytest

from tests.rehearsals.conftest import assert_clean

pytestmark = pytest.mark.slow


def test_the_force_detach_comes_off_the_dead_instance_and_the_live_peer_keeps_the_volume(rehearse):
    r = rehearse("stuck-detach-multi-attach")
    f = r.facts
    dead, peer, vid = f["instance_id"], f["peer_instance_id"], f["volume_id"]
    st = r.run("node-dead-ngns", node=f["node"])
    assert st.status == "succeeded", st.outcome
    force = st.steps["force_detach[0]"]
    assert force.status == "succeeded" and force.blocked is None
    [change] = force.plan["changes"]
    assert change["after"] == f"still attached to {peer} (Multi-Attach)"
    holders = {h["instance_id"]: h for h in next(
        x["value"] for x in force.plan["facts"] if x["name"] == "attachments")}
    assert holders[peer]["instance_state"] == "running" and not holders[peer]["target"]
    assert holders[dead]["instance_state"] == "stopped" and holders[dead]["target"]
    # the peer still holds it, the dead instance does not, and the pod runs on its new node
    attached = dict(r.sandbox.ec2.attachments()[vid])
    assert dead not in attached and attached[peer] == "attached"
    pod = r.sandbox.get("Pod", f["namespace"], f["pod"])
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] == f["new_node"]
    assert r.sandbox.ec2.instance_state(peer) == "running"
    assert_clean(r, st.run_id)
