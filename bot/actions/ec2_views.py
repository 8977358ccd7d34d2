"""How an EC2 instance and volume read to a runbook (``steps.<id>.result``), and how an instance
may be fenced: kept apart from the actions that read and change them (``bot.actions.ec2``)."""

from __future__ import annotations

from datetime import datetime

from bot.actions.authoring import Obj, ec2_tags, instance_state, operator_of, parse_time

# the tags naming who launched a node's instance and will replace it once it is gone
GROUP_TAGS = {"asg": "aws:autoscaling:groupName", "nodepool": "karpenter.sh/nodepool",
              "nodegroup": "eks:nodegroup-name"}


def fence_by(inst: Obj, *, stop_protected: bool, terminate_protected: bool = False) -> str:
    """How this instance may be powered off: ``nodeclaim`` for an EKS Auto Mode (managed)
    instance, which EC2 lets only EKS stop or terminate (delete its NodeClaim); ``stop``;
    ``terminate`` for a Spot instance
    (one-time request: StopInstances answers UnsupportedOperation) or an instance-store root (no
    stop at all); ``none`` under stop protection (``disableApiStop``: StopInstances and
    TerminateInstances both answer OperationNotPermitted), or when only a terminate could fence
    it and termination protection (``disableApiTermination``) refuses that."""
    if operator_of(inst):
        return "nodeclaim"
    if stop_protected:
        return "none"
    if not must_terminate(inst):
        return "stop"
    return "none" if terminate_protected else "terminate"


def must_terminate(inst: Obj) -> bool:
    """EC2 cannot stop it: a Spot instance (one-time request) or an instance-store root."""
    return bool(inst.get("InstanceLifecycle") == "spot" or inst.get("RootDeviceType", "ebs") != "ebs")


def instance_view(iid: str, inst: Obj | None, status: Obj | None, *,
                  stop_protected: bool = False, terminate_protected: bool = False) -> Obj:
    if inst is None:
        return {"instance_id": iid, "exists": False, "state": None, "state_code": None,
                "state_reason": None, "zone": None, "system_status": None, "instance_status": None,
                "volume_ids": [], "lifecycle": None, "root_device_type": None,
                "stop_protected": False, "terminate_protected": False, "fence_by": None,
                "group": {}, "managed_by": None}
    state = inst.get("State") or {}
    reason = inst.get("StateReason") or {}
    tags = ec2_tags(inst)
    return {
        "lifecycle": inst.get("InstanceLifecycle") or "on-demand",
        "root_device_type": inst.get("RootDeviceType") or "ebs",
        "stop_protected": stop_protected,
        "terminate_protected": terminate_protected,
        "fence_by": fence_by(inst, stop_protected=stop_protected,
                             terminate_protected=terminate_protected),
        "group": {k: tags[t] for k, t in GROUP_TAGS.items() if t in tags},
        "managed_by": operator_of(inst),
        "instance_id": iid, "exists": True, "state": state.get("Name"),
        "state_code": int(state.get("Code", 0)) & 0xFF,
        "state_reason": reason.get("Code") or reason.get("Message") or None,
        "zone": (inst.get("Placement") or {}).get("AvailabilityZone"),
        "system_status": ((status or {}).get("SystemStatus") or {}).get("Status"),
        "instance_status": ((status or {}).get("InstanceStatus") or {}).get("Status"),
        "volume_ids": [m["Ebs"]["VolumeId"] for m in inst.get("BlockDeviceMappings") or ()
                       if (m.get("Ebs") or {}).get("VolumeId")],
    }


def volume_view(vid: str, vol: Obj | None) -> Obj:
    if vol is None:
        return {"volume_id": vid, "exists": False, "state": None, "zone": None, "attachments": []}
    return {"volume_id": vid, "exists": True, "state": vol.get("State"),
            "zone": vol.get("AvailabilityZone"),
            "attachments": [{"instance_id": a.get("InstanceId"), "state": a.get("State"),
                             "device": a.get("Device")} for a in vol.get("Attachments") or ()]}


def started_since(inst: Obj | None, since: datetime | None) -> str | None:
    """The instance's LaunchTime, as EC2 gave it, when it runs or boots on a launch after
    ``since`` (EC2 moves LaunchTime on every start): someone started it since then. A fence
    asks it of the moment its step began applying: a poll, or an apply another worker resumes
    after one died once its stop may have reached EC2, can meet a machine started again; a
    first apply cannot (it began a moment ago, and a retry or break-glass begins it anew).
    EC2 gives LaunchTime to the second: a launch in the very second ``since`` falls in may have
    come after it, and counts (a fence fails closed)."""
    if inst is None or since is None or instance_state(inst) not in ("pending", "running"):
        return None
    launched = parse_time(inst.get("LaunchTime"))
    return (str(inst.get("LaunchTime"))
            if launched is not None and launched >= since.replace(microsecond=0) else None)
