"""The worst day of a zone outage, through the real API: stuck hosts that hold a forced stop, no
capacity in the failed zone (and replacements that launch elsewhere or fail), impaired EBS
volumes (DescribeVolumeStatus), and an attacher throttled in a large event."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from kubernetes import client as k8s

from bot.clients.ec2 import Ec2Client
from tests.sim.kit import events, kube_for, ready, taint_keys

ZONE = "ap-southeast-1a"
OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


def states(sb: Any, ids: list[str]) -> list[str]:
    """Instance states as DescribeInstances answers them (through the proxy)."""
    resp = sb.ec2_client(as_bot=True).describe_instances(InstanceIds=ids)
    found = {i["InstanceId"]: i["State"]["Name"] for r in resp["Reservations"] for i in r["Instances"]}
    return [found[i] for i in ids]


def zone_nodes(sb: Any) -> dict[str, str]:
    """Node name -> zone, as the kubernetes client lists them."""
    api = kube_for(sb)
    try:
        return {n.metadata.name: n.metadata.labels["topology.kubernetes.io/zone"]
                for n in k8s.CoreV1Api(api).list_node().items}
    finally:
        api.close()


# -- stuck hosts --------------------------------------------------------------------------------

def test_a_forced_stop_on_a_stuck_host_is_accepted_and_the_instance_stays_stopping(pool):
    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=1, hung=2, stuck=1)
    f = sb.facts
    healthy_host, stuck = f["instance_ids"]
    assert f["stuck"] == [f["dead_nodes"][1]] and f["hung"] == f["dead_nodes"]
    ec2 = sb.ec2_client(as_bot=True)
    sb.advance(180)  # the status checks have caught up: the stuck one's host failed
    checks = {s["InstanceId"]: (s["SystemStatus"]["Status"], s["InstanceStatus"]["Status"])
              for s in ec2.describe_instance_status(InstanceIds=[healthy_host, stuck])["InstanceStatuses"]}
    assert checks == {healthy_host: ("ok", "impaired"), stuck: ("impaired", "impaired")}
    answer = ec2.stop_instances(InstanceIds=[healthy_host, stuck], Force=True)
    assert [i["CurrentState"]["Name"] for i in answer["StoppingInstances"]] == ["stopping"] * 2
    sb.advance(300)  # past the forced stop's OS-shutdown timeout (120 s)
    assert states(sb, [healthy_host, stuck]) == ["stopped", "stopping"]
    sb.advance(3600)
    assert states(sb, [stuck]) == ["stopping"]
    # asking again, with everything, changes nothing
    ec2.stop_instances(InstanceIds=[stuck], Force=True, SkipOsShutdown=True)
    sb.advance(600)
    assert states(sb, [stuck]) == ["stopping"]
    # never stopped: the cloud controller does not mark its node shut down
    assert ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule") not in taint_keys(
        sb, f["dead_nodes"][1])


def test_stuck_seconds_lets_ec2_complete_the_held_stop_at_last(pool):
    sb = pool.fresh("az-outage", nodes=1, volumes_per_node=1, stuck=1, stuck_seconds=900)
    [iid] = sb.facts["instance_ids"]
    assert sb.facts["hung"] == sb.facts["dead_nodes"]  # stuck raises hung
    sb.ec2_client(as_bot=True).stop_instances(InstanceIds=[iid], Force=True)
    sb.advance(890)
    assert states(sb, [iid]) == ["stopping"]
    sb.advance(15)
    assert states(sb, [iid]) == ["stopped"]


def test_a_termination_on_a_stuck_host_stays_shutting_down_for_hours_and_keeps_its_node(pool):
    sb = pool.fresh("az-outage", nodes=1, volumes_per_node=1, stuck=1)
    [iid], [node] = sb.facts["instance_ids"], sb.facts["dead_nodes"]
    sb.ec2_client().terminate_instances(InstanceIds=[iid])
    sb.advance(3 * 3600 - 120, step=300)
    assert states(sb, [iid]) == ["shutting-down"] and node in zone_nodes(sb)
    sb.advance(300, step=60)  # EC2 forcibly terminates it after several hours
    assert states(sb, [iid]) == ["terminated"] and node not in zone_nodes(sb)


# -- no capacity in the failed zone ---------------------------------------------------------------

def test_spare_zero_stages_no_spare_node_and_ec2_refuses_launches_into_the_zone(pool):
    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=1, spare=0)
    assert sb.facts["spare_nodes"] == [] and sb.facts["no_capacity"] == [ZONE]
    nodes = zone_nodes(sb)
    assert sorted(n for n, z in nodes.items() if z == ZONE) == sorted(sb.facts["dead_nodes"])
    ec2 = sb.ec2_client()
    with pytest.raises(ClientError) as err:
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.xlarge",
                          Placement={"AvailabilityZone": ZONE})
    assert err.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
    assert ZONE in err.value.response["Error"]["Message"]
    assert "ap-southeast-1b, ap-southeast-1c" in err.value.response["Error"]["Message"]
    ok = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.xlarge",
                           Placement={"AvailabilityZone": "ap-southeast-1b"})
    assert ok["Instances"][0]["Placement"]["AvailabilityZone"] == "ap-southeast-1b"


def test_the_default_az_outage_still_stages_spares_and_has_capacity(pool):
    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=1)
    assert sb.facts["spare_nodes"] and sb.facts["no_capacity"] == []
    sb.ec2_client().run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                  InstanceType="m5.xlarge", Placement={"AvailabilityZone": ZONE})


# -- replacement at zone scale ------------------------------------------------------------------

def test_a_zonal_group_replaces_the_whole_zone_but_cannot_launch_there(pool):
    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=1, spare=0, replacement=True,
                    node_group="asg")
    f = sb.facts
    before = set(zone_nodes(sb))
    sb.advance(200)  # unhealthy for 120 s: terminated; a minute later gone
    assert states(sb, f["instance_ids"]) == ["terminated"] * 2
    nodes = zone_nodes(sb)
    assert not set(f["dead_nodes"]) & set(nodes)  # the cloud node lifecycle controller deleted them
    assert {e.object for e in events(sb, reason="DeletingNode")} == {f"Node/{n}" for n in f["dead_nodes"]}
    assert set(nodes) == before - set(f["dead_nodes"])  # nothing joined
    failed = list(sb.ctx.state["failed_launches"])
    assert {x["instance"] for x in failed} == set(f["instance_ids"])
    assert {x["code"] for x in failed} == {"InsufficientInstanceCapacity"}
    sb.advance(300)  # the group keeps trying, in vain
    assert len(sb.ctx.state["failed_launches"]) > len(failed) and set(zone_nodes(sb)) == set(nodes)


@pytest.mark.parametrize("options", [{"node_group": "asg", "multi_az": True},
                                     {"node_group": "karpenter"}], ids=["multi-az-asg", "karpenter"])
def test_a_group_spanning_zones_or_karpenter_launches_the_replacements_in_healthy_zones(pool, options):
    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=1, spare=0, replacement=True,
                    join_after=30, **options)
    f = sb.facts
    before = set(zone_nodes(sb))
    sb.advance(300)
    nodes = zone_nodes(sb)
    joined = set(nodes) - before
    assert len(joined) == 2 and not set(f["dead_nodes"]) & set(nodes)
    for name in joined:
        node = sb.get("Node", None, name)
        zone = nodes[name]
        assert zone != ZONE and ready(sb, name) == "True"
        assert node["metadata"]["labels"]["topology.ebs.csi.aws.com/zone"] == zone
        assert node["spec"]["providerID"].startswith(f"aws:///{zone}/")
        iid = node["spec"]["providerID"].rsplit("/", 1)[-1]
        inst = sb.ec2_client().describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        assert inst["Placement"]["AvailabilityZone"] == zone
        assert name.startswith(f"ip-10-0-{'abc'.index(zone[-1]) + 1}-")
    assert sorted(nodes[n] for n in joined) == ["ap-southeast-1b", "ap-southeast-1c"]  # balanced
    assert not sb.ctx.state.get("failed_launches")


# -- impaired EBS volumes -------------------------------------------------------------------------

def test_describe_volume_status_reports_the_zone_s_impaired_volumes(pool):
    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=2, impaired_volumes=3)
    f = sb.facts
    impaired = f["impaired_volumes"]
    assert len(impaired) == 3
    raw = sb.ec2_client(as_bot=True)  # the bot's credentials: the shipped policy allows it
    every = {s["VolumeId"]: s for s in raw.describe_volume_status()["VolumeStatuses"]}
    assert {v for v, s in every.items() if s["VolumeStatus"]["Status"] == "impaired"} == set(impaired)
    bad = every[impaired[0]]
    assert bad["AvailabilityZone"] == ZONE
    assert {d["Name"]: d["Status"] for d in bad["VolumeStatus"]["Details"]}["io-enabled"] == "failed"
    assert [e["EventType"] for e in bad["Events"]] == ["potential-data-inconsistency"]
    assert [a["Code"] for a in bad["Actions"]] == ["enable-volume-io"]
    good = next(s for v, s in every.items() if v not in impaired)
    assert good["VolumeStatus"]["Status"] == "ok" and good["Events"] == [] and good["Actions"] == []
    # the bot's client, by ids and by filter
    client = Ec2Client(client=raw)
    by_id = client.describe_volume_status([impaired[0], good["VolumeId"]])
    assert {v: s["VolumeStatus"]["Status"] for v, s in by_id.items()} == {
        impaired[0]: "impaired", good["VolumeId"]: "ok"}
    flt = client.describe_volume_status(filters=[
        {"Name": "availability-zone", "Values": [ZONE]},
        {"Name": "volume-status.details-status", "Values": ["failed"]}])
    assert set(flt) == set(impaired)
    with pytest.raises(ClientError) as err:
        raw.describe_volume_status(VolumeIds=["vol-0000000000000dead"])
    assert err.value.response["Error"]["Code"] == "InvalidVolume.NotFound"
    with pytest.raises(ClientError) as err:
        raw.describe_volume_status(Filters=[{"Name": "volume-id", "Values": [impaired[0]]}])
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"


def test_describe_volume_status_is_refused_to_a_policy_that_does_not_grant_it(pool, tmp_path):
    import json
    from pathlib import Path

    shipped = json.loads((Path(__file__).parents[2] / "deploy" / "iam-policy.json").read_text())
    for st in shipped["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        st["Action"] = [a for a in actions if a != "ec2:DescribeVolumeStatus"]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(shipped))
    sb = pool.fresh("az-outage", nodes=1, volumes_per_node=1, impaired_volumes=1, iam_policy=str(policy))
    with pytest.raises(ClientError) as err:
        sb.ec2_client(as_bot=True).describe_volume_status()
    assert err.value.response["Error"]["Code"] == "UnauthorizedOperation"


# -- the attacher in a large event --------------------------------------------------------------

def _fence_all(sb: Any) -> None:
    """The out-of-service taint on every dead node, as the zone runbook puts it."""
    api = kube_for(sb)
    try:
        core = k8s.CoreV1Api(api)
        for name in sb.facts["dead_nodes"]:
            taints = [t.to_dict() for t in core.read_node(name).spec.taints or []]
            core.patch_node(name, {"spec": {"taints": [*taints, OOS]}})
    finally:
        api.close()


def _attached_in_zone(sb: Any) -> int:
    """VolumeAttachments still naming a dead node, as the kubernetes client lists them."""
    api = kube_for(sb)
    try:
        vas = k8s.StorageV1Api(api).list_volume_attachment().items
    finally:
        api.close()
    return sum(1 for va in vas if va.spec.node_name in sb.facts["dead_nodes"])


@pytest.mark.parametrize("rate", [None, 0.1], ids=["full-speed", "throttled"])
def test_a_throttled_attacher_detaches_the_zone_s_volumes_one_call_at_a_time(pool, rate):
    options = {"attacher_rate": rate} if rate else {}
    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=2, **options)
    assert _attached_in_zone(sb) == 4
    _fence_all(sb)
    sb.advance(20)  # pod GC has force-deleted the evicted pods: the volumes may detach
    if not rate:
        assert _attached_in_zone(sb) == 0
    else:
        assert _attached_in_zone(sb) >= 2  # "still detaching" is normal for a while
        # no VolumeAttachment reports an error meanwhile: the attacher has not got to them
        assert not [va for va in sb.list("VolumeAttachment") if va.get("status", {}).get("detachError")]
        sb.advance(15)
        assert 0 < _attached_in_zone(sb) < 4
        sb.advance(45)
        assert _attached_in_zone(sb) == 0
    sb.advance(5)  # past DescribeVolumes' lag
    vols = sb.ec2_client().describe_volumes(Filters=[{"Name": "availability-zone", "Values": [ZONE]}])
    on_dead = [a["VolumeId"] for v in vols["Volumes"] for a in v["Attachments"]
               if a["InstanceId"] in sb.facts["instance_ids"] and a["Device"] != "/dev/sda1"]
    assert on_dead == []  # every data volume left the dead machines at EC2


@pytest.mark.parametrize(("option", "value", "says"), [
    ("stuck", "two", "option stuck='two': expected a whole number >= 0"),
    ("spare", -1, "option spare=-1: expected a whole number >= 0"),
    ("attacher_rate", 0, "option attacher_rate=0.0: expected calls per second > 0"),
])
def test_a_bad_worst_day_option_is_refused_naming_it_and_what_is_valid(pool, option, value, says):
    with pytest.raises(ValueError) as err:
        pool.fresh("az-outage", nodes=1, volumes_per_node=1, **{option: value})
    assert says in str(err.value)


def test_a_large_replacement_gives_every_new_node_a_name_of_its_own(pool):
    """A 100-node outage replaced: more new nodes than one subnet's 50 host numbers, and names
    that existing nodes hold already. Before, the 51st replacement (or one meeting a node of the
    same name) failed with "nodes ... already exists" and stopped the sandbox's controllers."""
    from bot.sim.controllers.replacement import _node_like

    sb = pool.fresh("az-outage", nodes=2, volumes_per_node=1)
    template = sb.get("Node", None, sb.facts["dead_nodes"][0])
    taken = {n["metadata"]["name"] for n in sb.list("Node")}
    made = []
    for i in range(120):
        node = _node_like(sb.ctx, template, f"i-{i:017x}")
        sb.ctx.store.create(sb.ctx.store_res("Node"), node)
        made.append(node["metadata"]["name"])
    assert len(set(made)) == 120 and not set(made) & taken
    assert all(n.startswith("ip-10-0-") for n in made)
