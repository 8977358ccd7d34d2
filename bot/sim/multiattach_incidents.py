"""A dead node's io2 Multi-Attach volume, which a live machine shares on purpose.

``stuck-detach-multi-attach`` is ``stuck-detach`` (the node died, its instance is stopped, the
attachment stuck ``busy``, the VolumeAttachment deleting with a ``detachError``) where the
Elasticsearch volume is io2 with ``MultiAttachEnabled``, attached besides to a second instance of
the zone that runs and is not a node (a peer of a clustered application that fences its own
writers; the sandbox's EC2 keeps such holders, ``ec2_multiattach``). A force detach from the dead
instance is the fix; one from the peer would cut a live writer off. Option ``hung=true``: the
node's guest hung instead (``node-hung``): the instance still runs and must be fenced first.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.attachdetach import MAX_WAIT_FOR_UNMOUNT
from bot.sim.staging import Scenario, Stage, es_cluster, lose_node_of

PEER_DEVICE = "/dev/xvdz"


def _share(sb: Stage, facts: dict[str, Any]) -> str:
    """Make the victim's volume io2 Multi-Attach and attach it to a live peer instance."""
    vol = sb.ec2.volume(facts["volume_id"])
    assert vol is not None, facts["volume_id"]
    vol.volume_type, vol.iops, vol.multi_attach_enabled = "io2", 3000, True
    peer = sb.seed_ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                     InstanceType="m5.xlarge",
                                     Placement={"AvailabilityZone": facts["zone"]},
                                     Tags={"Name": "es-peer"})["Instances"][0]["InstanceId"]
    # through the proxy's rules (moto alone would move the attachment to the peer)
    assert sb.ctx is not None
    sb.ctx.ec2_client.attach_volume(VolumeId=facts["volume_id"], InstanceId=peer,
                                    Device=PEER_DEVICE)
    assert sb.ec2.multi.holds(facts["volume_id"], peer)
    return str(peer)


def build_stuck_detach_multi_attach(sb: Stage) -> dict[str, Any]:
    facts = es_cluster(sb)
    peer = _share(sb, facts)
    if str(sb.options.get("hung") or "").lower() in ("1", "true", "yes"):
        # the guest hung instead: the instance runs, a fence comes first
        return {**lose_node_of(sb, facts, hung=True), "peer_instance_id": peer}
    sb.ec2.mark_stuck(facts["volume_id"], "busy")
    facts = lose_node_of(sb, facts, hung=False)
    sb.advance(MAX_WAIT_FOR_UNMOUNT)
    va = sb.get("VolumeAttachment", None, facts["volume_attachment"])
    assert va["metadata"].get("deletionTimestamp") and va["status"].get("detachError"), va
    return {**facts, "peer_instance_id": peer}


MULTI_ATTACH_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("stuck-detach-multi-attach", "like stuck-detach, but the volume is io2 Multi-Attach and "
             "also attached to a live peer instance: the force detach must come off the dead "
             "instance only, and the peer must not block it (option hung=true: the guest hung, "
             "the instance runs)", 1,
             build_stuck_detach_multi_attach, {}),
)
