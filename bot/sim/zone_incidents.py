"""A zone outage: ``az-outage`` (built here, listed in ``bot.sim.scenarios``), what its options
add on request to make it the worst day, and the scenario that has it all.

``az-outage`` on its own is a kind zone failure: dead machines either stopped or hung (a forced
stop powers them off), spare Ready nodes staged in the zone so every pod can move, EC2 and the
attacher at full speed. Its options make it the real thing, each on its own:

- ``stuck=K``: the last K hung instances (``hung`` is raised to K if lower) sit on hosts that
  failed with the zone (both status checks fail): a stop, even forced, is accepted and the
  instance stays ``stopping`` (``stuck_seconds``: after that long it completes; unset, never),
  and a termination stays ``shutting-down`` (``ec2_zone``).
- ``spare=N``: N spare nodes in the zone instead of enough for every pod; ``spare=0`` stages none
  and leaves the zone without capacity: EC2 refuses launches there (``InsufficientInstanceCapacity``),
  so a replacement (``replacement=true``) fails, or goes to a healthy zone for a group spanning
  zones (``multi_az=true``) and for Karpenter (``controllers/zone_launch``).
- ``impaired_volumes=K``: EBS disabled the I/O of K of the zone's volumes (those of the first dead
  instances, in order): DescribeVolumeStatus answers them ``impaired``, ``io-enabled`` failed.
- ``attacher_rate=N``: from the failure on, the EBS CSI attacher makes at most N attach/detach
  calls per simulated second (``controllers/attach_rate``).
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.attach_rate import throttle
from bot.sim.controllers.context import ZONE, instance_id
from bot.sim.staging import (
    NAMESPACE,
    ZONES,
    Scenario,
    Stage,
    add_nodes,
    lose_contact,
    namespace,
    statefulset,
    storage_class,
)


def _count(options: dict[str, Any], key: str, default: int = 0) -> int:
    value = options.get(key, default)
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"option {key}={value!r}: expected a whole number >= 0") from None
    if count < 0:
        raise ValueError(f"option {key}={value!r}: expected a whole number >= 0")
    return count


def spare_nodes(options: dict[str, Any], nodes: int, per_node: int) -> int:
    """How many spare nodes az-outage stages in the zone: enough for every pod and EBS
    attachment (40 per node) unless the option ``spare`` says otherwise."""
    if "spare" in options:
        return _count(options, "spare")
    return max(1, -(-nodes * per_node // 40))


def hung_count(options: dict[str, Any], nodes: int) -> int:
    """How many dead instances still run: ``hung``, at least ``stuck`` (a stuck host's instance
    is one whose guest is unreachable), at most ``nodes``."""
    return min(nodes, max(_count(options, "hung"), _count(options, "stuck")))


def fail_hosts(sb: Stage, instances: list[str], hung: int) -> list[str]:
    """Put the last ``stuck`` of the first ``hung`` instances on failed, stuck hosts; their ids."""
    stuck = min(hung, _count(sb.options, "stuck"))
    if "stuck_seconds" in sb.options:
        seconds = float(sb.options["stuck_seconds"])
        if seconds < 0:
            raise ValueError(f"option stuck_seconds={seconds!r}: expected a number of seconds >= 0")
        sb.ec2.zone.stuck_seconds = seconds
    held = instances[hung - stuck:hung]
    for iid in held:
        sb.ec2.set_host_failed(iid)
        sb.ec2.zone.hold(iid)
    return held


def fail_zone(sb: Stage, zone: str, instances: list[str], spare: int) -> dict[str, Any]:
    """The rest of the zone's failure, at the moment it happens: capacity, volumes, attacher."""
    assert sb.ctx is not None
    if spare == 0:
        sb.ec2.zone.impaired_zones.add(zone)
    wanted = _count(sb.options, "impaired_volumes")
    impaired: list[str] = []
    for iid in instances:
        attached = sorted(v for v, vol in sb.ec2.backend.volumes.items()
                          if vol.attachment is not None and vol.attachment.instance.id == iid
                          and v not in sb.ec2.zone.impaired_volumes)
        for vid in attached[:max(0, wanted - len(impaired))]:
            sb.ec2.zone.impaired_volumes[vid] = sb.clock.now()
            impaired.append(vid)
    if "attacher_rate" in sb.options:
        try:
            rate = float(sb.options["attacher_rate"])
        except (TypeError, ValueError):
            raise ValueError(f"option attacher_rate={sb.options['attacher_rate']!r}: expected "
                             "calls per second > 0") from None
        throttle(sb.ctx, rate)
    return {"impaired_volumes": impaired, "no_capacity": sorted(sb.ec2.zone.impaired_zones)}


def build_az_outage(sb: Stage) -> dict[str, Any]:
    """``az-outage``, with the worst day's options (stuck, spare, ...) read by the functions above."""
    n = int(sb.options.get("nodes", 10))
    per = int(sb.options.get("volumes_per_node", 5))
    namespace(sb, NAMESPACE)
    dead = add_nodes(sb, ZONES[0], n, pods=per + 5)
    for zone in ZONES[1:]:
        add_nodes(sb, zone, max(1, n // 5), pods=per + 5)
    # room in the zone for every pod that must move: pods, and EBS attachments (40 per node)
    spares = spare_nodes(sb.options, n, per)
    spare = add_nodes(sb, ZONES[0], spares, pods=45, attach=40) if spares else []
    for name in spare:
        sb.store.mutate("Node", None, name, lambda o: o["spec"].update(unschedulable=True))
    storage_class(sb, "gp3", "WaitForFirstConsumer", default=True)
    for i, node in enumerate(dead):
        statefulset(sb, f"shard-{i:03d}", per, "gp3", anti_affinity=False, cpu="10m")
        sts = sb.get("StatefulSet", NAMESPACE, f"shard-{i:03d}")
        sts["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        sb.store.update(sb.res("StatefulSet"), sts, namespace=NAMESPACE, check_rv=False)
    sb.advance(10)
    for i in range(n):  # placed; a replacement pod may go to any node of the zone
        sb.store.mutate("StatefulSet", NAMESPACE, f"shard-{i:03d}",
                        lambda o: o["spec"]["template"]["spec"].pop("nodeSelector", None))
    for name in spare:
        sb.store.mutate("Node", None, name, lambda o: o["spec"].update(unschedulable=False))
    instances = [instance_id(sb.get("Node", None, d)) for d in dead]
    # options hung=K: the first K dead instances still run (hung guests: they must be fenced);
    # spot=J: the first J of those are one-time Spot instances (StopInstances refuses them)
    hung = hung_count(sb.options, n)
    spot = min(hung, int(sb.options.get("spot", 0)))
    for i, iid in enumerate(instances):
        assert iid
        if i < hung:
            sb.ec2.set_hung(iid)
        else:
            sb.ec2.set_state(iid, "stopped", reason_code="Server.InternalError",
                             reason_message="Server.InternalError: Internal error on the host")
        if i < spot:
            inst = sb.ec2.instance(iid)
            assert inst is not None
            inst.lifecycle = "spot"
            sb.store.mutate("Node", None, dead[i], lambda o: o["metadata"]["labels"].update(
                {"karpenter.sh/capacity-type": "spot"}))
    held = fail_hosts(sb, [i for i in instances if i], hung)
    failure = fail_zone(sb, ZONES[0], [i for i in instances if i], spares)
    lose_contact(sb)
    return {"zone": ZONES[0], "dead_nodes": dead, "instance_ids": instances, "namespace": NAMESPACE,
            "spare_nodes": spare, "volumes": n * per, "hung": dead[:hung], "spot": dead[:spot],
            "stuck": [dead[instances.index(i)] for i in held], **failure,
            "other_zone_nodes": [x["metadata"]["name"] for x in sb.list("Node")
                                 if x["metadata"]["labels"].get(ZONE) != ZONES[0]]}

ZONE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("az-outage-worst-day", "az-outage as it really goes: 4 nodes of ap-southeast-1a, "
             "2 hung, 1 of those on a stuck host (a forced stop stays stopping), no spare "
             "capacity in the zone (launches there fail), 2 EBS volumes impaired, the attacher "
             "throttled to one call per 5 s, and the Auto Scaling group replacing the dead "
             "instances 120 s after they failed (every option of az-outage may be changed)",
             1, build_az_outage,
             {"nodes": 4, "volumes_per_node": 2, "hung": 2, "stuck": 1, "spare": 0,
              "impaired_volumes": 2, "attacher_rate": 0.2, "replacement": True,
              "node_group": "asg"}),
)
