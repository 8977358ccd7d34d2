"""A Node deleted by hand while its instance still runs (registered in ``bot.sim.scenarios``).

- ``node-deleted-running``: the Elasticsearch node's guest hangs (EC2 still says ``running``; its
  status check turns ``impaired`` ``status_check_delay`` seconds later), the node goes NotReady, and
  someone "fixes" it with ``kubectl delete node``. As on EKS, the garbage collector deletes its
  CSINode and Lease, pod GC force-deletes the pods bound to the missing node once its 40 s
  quarantine is over (40 to 60 s after the deletion), the StatefulSet recreates its pod elsewhere
  (Multi-Attach: the volume is still attached to the running instance), and the attach/detach
  controller, which still tracks the deleted node's volumes, detaches them
  ``maxWaitForUnmountDuration`` after the pods went, without the kubelet's word. Staged a minute
  after the deletion: nearly all of those six minutes are left (``timeout_detach_in``).
  With ``alive=true`` the instance is partitioned instead (the guest runs and writes, its status
  checks stay ``ok``): the timeout detach then pulls the volume from a live machine
  (``detach-from-live``).
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.attachdetach import MAX_WAIT_FOR_UNMOUNT
from bot.sim.staging import Scenario, Stage, es_cluster, lose_contact

BEFORE_DELETE = 90.0  # how long the node had been NotReady when someone deleted it
AFTER_DELETE = 60.0  # how long after the deletion the bot is called: pod GC has acted by then


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def build_node_deleted_running(sb: Stage) -> dict[str, Any]:
    assert sb.ctx is not None
    alive = _truthy(sb.options.get("alive", False))
    facts = es_cluster(sb)
    iid = facts["instance_id"]
    if alive:
        sb.partition(facts["node"])  # the guest runs on and writes; EC2's checks stay ok
    else:
        sb.ec2.set_hung(iid)  # kernel hang: EC2 still says running
    lose_contact(sb)  # NotReady (Unknown), the unreachable taints; the pod still bound
    # Long enough that, when the scenario is ready, a hung guest's status check reads impaired.
    grace = float(sb.ctx.options.get("node_monitor_grace_period") or 50)
    delay = float(sb.ec2.timing.status_check_delay)
    sb.advance(max(BEFORE_DELETE, delay - grace - AFTER_DELETE + 10))
    # The wrong fix, as kubectl sends it: DELETE /api/v1/nodes/NAME.
    sb.api.handle("DELETE", f"/api/v1/nodes/{facts['node']}", {}, None, "application/json",
                  "application/json")  # as the kubeconfig's cluster admin
    deleted_at = sb.now_ts()
    sb.advance(AFTER_DELETE)
    assert sb.find("Node", None, facts["node"]) is None
    assert sb.find("VolumeAttachment", None, facts["volume_attachment"]) is not None
    if not alive:
        assert sb.ec2.status.failed(iid), "the status check should read impaired by now"
    new = sb.find("Pod", facts["namespace"], facts["pod"])
    since = sb.ctx.state.get("detach_requested", {}).get(facts["volume_attachment"])
    left = MAX_WAIT_FOR_UNMOUNT - sb.ctx.seconds_since(since) if since else MAX_WAIT_FOR_UNMOUNT
    return {**facts, "new_node": (new or {}).get("spec", {}).get("nodeName"),
            "deleted_at": deleted_at, "timeout_detach_in": left}


DELETED_NODE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("node-deleted-running", "someone ran kubectl delete node on the hung Elasticsearch node "
             "whose instance still runs: pod GC force-deleted its pod (recreated, Multi-Attach), and "
             "the attach/detach controller detaches the volume 6 minutes later without the kubelet's "
             "word (option alive=true: the node is partitioned, the guest runs and writes)", 1,
             build_node_deleted_running, {}),
)
