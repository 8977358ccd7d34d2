"""EC2 actions: read instances and volumes, fence (force stop, or terminate where EC2 cannot stop
the instance), detach and delete volumes.

The changing actions never sleep. ``aws.ec2.instance.stop`` and ``aws.ec2.volume.detach`` make their
call once, then return ``Result(done=False, retry_after=...)`` while EC2 reports ``stopping`` /
``detaching``; the engine stores the next check and calls ``apply()`` again, which re-reads the state
and only calls EC2 again when the resource is not yet on its way (idempotent by reading first).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from bot.actions import interlocks as il
from bot.actions import local_data, multiattach
from bot.actions.authoring import (
    FENCED_STATES,
    ActionSpec,
    Change,
    Env,
    Fact,
    InterlockBlocked,
    Obj,
    PermanentError,
    Plan,
    Result,
    RetryableError,
    action,
    instance_state,
    operator_of,
    poll_interval,
)
from bot.actions.declarations import (
    InstanceParams,
    InstanceStopParams,
    InstanceTerminateParams,
    VolumeDeleteParams,
    VolumeDetachParams,
    VolumeParams,
    VolumesListParams,
    VolumesWaitDetachedParams,
)
from bot.actions.ec2_views import instance_view, must_terminate, started_since, volume_view

POLL_SECONDS = 5.0
# how often a stop is checked on: the interval of EC2's own ``instance-stopped`` waiter
STOP_POLL_SECONDS = 15.0


def _not_found(kind: str, ident: str, operation: str) -> PermanentError:
    code = "InvalidInstanceID.NotFound" if kind == "instance" else "InvalidVolume.NotFound"
    return PermanentError(f"EC2 {kind} {ident} does not exist in this account and region",
                          service="ec2", operation=operation, code=code)


# -- instances --------------------------------------------------------------------------------

def plan_instance(p: InstanceParams, env: Env) -> Plan:
    return Plan(action="aws.ec2.instance.get", params={})


# what EC2 reports for the status checks of an instance that is not running
NOT_APPLICABLE = {"SystemStatus": {"Status": "not-applicable"},
                  "InstanceStatus": {"Status": "not-applicable"}}


def apply_instance(plan: Plan, p: InstanceParams, env: Env) -> Result:
    inst = env.ec2.describe_instances([p.instance_id]).get(p.instance_id)
    if inst is None:
        status = None
    elif instance_state(inst) in FENCED_STATES:
        status = NOT_APPLICABLE  # EC2 runs no status checks on a stopped or terminated instance
    else:
        status = env.ec2.describe_instance_status([p.instance_id]).get(p.instance_id)
    # stop protection matters only to a fence, and only a machine that may still run is fenced:
    # a stopped or terminating instance costs no DescribeInstanceAttribute
    # (an EKS Auto Mode machine is fenced through its NodeClaim: EC2's protections do not apply)
    fenceable = inst is not None and instance_state(inst) in ("pending", "running", "stopping") \
        and not operator_of(inst)
    protected = env.ec2.stop_protected(p.instance_id) if fenceable else False
    # only an instance that can be fenced by nothing but a terminate: its termination protection
    no_terminate = (fenceable and not protected and inst is not None and must_terminate(inst)
                    and env.ec2.termination_protected(p.instance_id))
    return Result(data=instance_view(p.instance_id, inst, status, stop_protected=protected,
                                     terminate_protected=bool(no_terminate)))


def _read_instance(env: Env, iid: str) -> Obj:
    inst = env.ec2.describe_instances([iid]).get(iid)
    if inst is None:
        raise _not_found("instance", iid, "DescribeInstances")
    return inst


def _fence_read(env: Env, iid: str) -> Obj:
    """The instance's state for a fence, live: DescribeInstanceStatus (``IncludeAllInstances``)
    answers the state with the status checks the fence interlock shows its approvers, so the live
    re-read after an approval is one request, not DescribeInstances and DescribeInstanceStatus.
    What the pass already described is not asked again. A poll reads DescribeInstances instead,
    which the re-read of the instance after the fence is then answered from."""
    if env.ctx.poll:
        return _read_instance(env, iid)
    if (st := (env.ec2.already_described("DescribeInstanceStatus", [iid]) or {}).get(iid)) is None:
        if (inst := (env.ec2.already_described("DescribeInstances", [iid]) or {}).get(iid)):
            return inst  # read in this pass already (a stopped instance has no status to read)
        st = env.ec2.describe_instance_status([iid]).get(iid)
    if st is None:  # not listed there: DescribeInstances is the authority on whether it exists
        return _read_instance(env, iid)
    return {"InstanceId": iid, "State": st.get("InstanceState") or {}}


def _stop_change(state: str, p: InstanceStopParams) -> Change | None:
    if state in FENCED_STATES or state == "shutting-down" or (state == "stopping" and not p.force):
        # already fenced, terminating by itself (it cannot be stopped: wait for 'terminated'),
        # or already on its way and no force asked for
        return None
    return Change(target_kind="Instance", target=p.instance_id,
                  operation="force-stop" if p.force else "stop", before=state, after="stopped")


def plan_stop(p: InstanceStopParams, env: Env) -> Plan:
    inst = _fence_read(env, p.instance_id)
    state = instance_state(inst)
    change = _stop_change(state, p)
    facts: list[Fact] = []
    lost = None
    if change is not None:
        lost = _lost(env, p.instance_id, inst, facts, action="aws.ec2.instance.stop", change=change)
    else:
        facts.append(env.fact(f"instance {p.instance_id}", "state", state))
    return Plan(action="aws.ec2.instance.stop", params={}, changes=(change,) if change else (),
                facts=tuple(facts), data=lost.raise_data() if lost else {})


def _lost(env: Env, iid: str, inst: Obj, facts: list[Fact], *, action: str,
          change: Change) -> local_data.LocalData:
    """Interlock 8, and what the fence wipes for good (instance store, local volumes) into the
    plan's facts: the plan then asks for one more approver (``local_data``); and the io2
    Multi-Attach volumes the instance shares, with every holder. What is lost is read before the
    interlock, so a refused fence hands its plan, raise included, to the refusal: the people who
    may break glass read what it destroys (facts in the order they always had: same hash)."""
    found: list[Fact] = []
    lost = local_data.find(env, instance_id=iid, instance=inst)
    found.extend(lost.facts(env))
    found.extend(multiattach.of_instance(env, iid))  # volumes it shares: the others keep them
    try:
        il.check_fence(env, instance_id=iid, instance=inst, facts=facts)
    except InterlockBlocked as e:
        e.plan = Plan(action=action, params={}, changes=(change,), facts=(*facts, *found),
                      data=lost.raise_data()).to_dict()
        raise
    facts.extend(found)
    return lost


def apply_stop(plan: Plan, p: InstanceStopParams, env: Env) -> Result:
    inst = _fence_read(env, p.instance_id)
    if instance_state(inst) in ("pending", "running") and "LaunchTime" not in inst:
        # a state DescribeInstanceStatus gave: which boot it is on is asked before any stop
        # (the fence check reads the same answer, once, for the tags that say whose it is)
        inst = _read_instance(env, p.instance_id)
    state = instance_state(inst)
    if state in FENCED_STATES:
        return Result(data={"instance_id": p.instance_id, "state": state}, already_done=True,
                      message=f"instance {p.instance_id} is {state}")
    started = started_since(inst, env.ctx.applying_since)
    if started is not None:
        raise PermanentError(
            f"instance {p.instance_id} was started again at {started} (its LaunchTime), after "
            f"this step began fencing it: someone is working on the machine, and a fence is not "
            f"repeated without approvers who saw it running again. Retry the step for a new "
            f"plan and approval if it must still be fenced", service="ec2",
            operation="StopInstances", code="InstanceStartedAgain")
    # a plain stop already under way is not repeated; a force stop of a hung 'stopping' is, once:
    # the polls that follow wait for it rather than sending it again;
    # 'shutting-down' cannot be stopped (IncorrectInstanceState): it is waited on until terminated
    if state in {"pending", "running"} or (state == "stopping" and p.force and not env.ctx.poll):
        # a live read, never the plan's facts: the node may have come back during the approval
        il.check_fence(env, instance_id=p.instance_id, instance=inst, facts=[])
        try:
            resp = env.ec2.stop_instances([p.instance_id], force=p.force)
        except PermanentError as e:
            if e.code != "IncorrectInstanceState":
                raise
            # EC2 will not stop an instance still booting (or one that moved on meanwhile):
            # read it again at the next poll and stop it then
            resp = {}
        now = next((i.get("CurrentState", {}).get("Name") for i in resp.get("StoppingInstances") or ()
                    if i.get("InstanceId") == p.instance_id), None)
        state = str(now or state)
        if state in FENCED_STATES:
            return Result(data={"instance_id": p.instance_id, "state": state},
                          message=f"instance {p.instance_id} stopped")
    progress = f"instance {p.instance_id} is {state}" + (
        ", waiting for terminated" if state == "shutting-down" else "")
    env.ctx.progress = progress
    return Result(data={"instance_id": p.instance_id, "state": state}, done=False,
                  progress=progress, retry_after=STOP_POLL_SECONDS)


def plan_terminate(p: InstanceTerminateParams, env: Env) -> Plan:
    inst = _read_instance(env, p.instance_id)
    state = instance_state(inst)
    facts: list[Fact] = []
    change = None
    lost = None
    if state not in ("shutting-down", "terminated"):
        change = Change(target_kind="Instance", target=p.instance_id, operation="terminate",
                        before=state, after="terminated")
        lost = _lost(env, p.instance_id, inst, facts, action="aws.ec2.instance.terminate",
                     change=change)
    else:
        facts.append(env.fact(f"instance {p.instance_id}", "state", state))
    facts.append(env.fact(f"instance {p.instance_id}", "lifecycle",
                          inst.get("InstanceLifecycle") or "on-demand"))
    facts.append(env.fact(f"instance {p.instance_id}", "root_device_type",
                          inst.get("RootDeviceType") or "ebs"))
    return Plan(action="aws.ec2.instance.terminate", params={},
                changes=(change,) if change else (), facts=tuple(facts),
                data=lost.raise_data() if lost else {})


def apply_terminate(plan: Plan, p: InstanceTerminateParams, env: Env) -> Result:
    inst = _read_instance(env, p.instance_id)
    state = instance_state(inst)
    if state == "terminated":
        return Result(data={"instance_id": p.instance_id, "state": state}, already_done=True,
                      message=f"instance {p.instance_id} is terminated")
    if state in {"pending", "running", "stopping", "stopped"}:
        # the same live interlock as the stop: a node back during the approval is not terminated
        il.check_fence(env, instance_id=p.instance_id, instance=inst, facts=[])
        resp = env.ec2.terminate_instances([p.instance_id])
        now = next((i.get("CurrentState", {}).get("Name")
                    for i in resp.get("TerminatingInstances") or ()
                    if i.get("InstanceId") == p.instance_id), None)
        state = str(now or state)
        if state == "terminated":
            return Result(data={"instance_id": p.instance_id, "state": state},
                          message=f"instance {p.instance_id} terminated")
    progress = f"instance {p.instance_id} is {state}, waiting for terminated"
    env.ctx.progress = progress
    return Result(data={"instance_id": p.instance_id, "state": state}, done=False,
                  progress=progress, retry_after=POLL_SECONDS)


# -- volumes ----------------------------------------------------------------------------------

def plan_volumes(p: VolumesListParams, env: Env) -> Plan:
    return Plan(action="aws.ec2.volumes.list", params={})


def apply_volumes(plan: Plan, p: VolumesListParams, env: Env) -> Result:
    filters: list[Obj] = []
    if p.instance_id:
        filters.append({"Name": "attachment.instance-id", "Values": [p.instance_id]})
    for key, value in sorted((p.tags or {}).items()):
        filters.append({"Name": f"tag:{key}", "Values": [value]})
    vols = env.ec2.describe_volumes(list(p.volume_ids or ()), filters=filters)
    items = [volume_view(vid, vols[vid]) for vid in sorted(vols)]
    return Result(data={"items": items, "count": len(items)})


def plan_volume(p: VolumeParams, env: Env) -> Plan:
    return Plan(action="aws.ec2.volume.get", params={})


def apply_volume(plan: Plan, p: VolumeParams, env: Env) -> Result:
    return Result(data=volume_view(p.volume_id, env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)))


def _attachment(vol: Obj, p: VolumeDetachParams) -> Obj | None:
    """The attachment to detach; a PermanentError when it is attached elsewhere than asked."""
    atts = [a for a in vol.get("Attachments") or () if a.get("State") != "detached"]
    if not atts:
        return None
    if p.instance_id is None:
        if multiattach.holders(vol):  # several instances hold it on purpose: which one?
            raise PermanentError(
                f"volume {p.volume_id} is Multi-Attach, attached to "
                + ", ".join(sorted({str(a.get('InstanceId')) for a in atts}))
                + ": name the instance to detach it from (instance_id)",
                service="ec2", operation="DetachVolume", code="InvalidParameterCombination")
        return dict(atts[0])
    mine = [a for a in atts if a.get("InstanceId") == p.instance_id]
    if not mine:
        raise PermanentError(
            f"volume {p.volume_id} is attached to {atts[0].get('InstanceId')}, not {p.instance_id}",
            service="ec2", operation="DetachVolume", code="InvalidAttachment.NotFound")
    return dict(mine[0])


def _read_volume(env: Env, vid: str) -> Obj:
    vol = env.ec2.describe_volumes([vid]).get(vid)
    if vol is None:
        raise _not_found("volume", vid, "DescribeVolumes")
    return vol


def plan_detach(p: VolumeDetachParams, env: Env) -> Plan:
    vol = _read_volume(env, p.volume_id)
    att = _attachment(vol, p)
    facts: list[Fact] = [env.fact(f"volume {p.volume_id}", "state", vol.get("State")),
                         env.fact(f"volume {p.volume_id}", "attachment",
                                  f"{att['InstanceId']} {att['State']}" if att else None)]
    if att is None:
        return Plan(action="aws.ec2.volume.detach", params={}, facts=tuple(facts))
    if p.force:
        il.check_force_detach(env, volume=vol, facts=facts, instance_id=att["InstanceId"])
        # EBS's own word on the volume, for the approvers of a forced detach: an impaired volume
        # (I/O disabled after a host failure) may already hold inconsistent data
        vs = (env.ec2.describe_volume_status([p.volume_id]).get(p.volume_id) or {}).get(
            "VolumeStatus") or {}
        facts.append(env.fact(f"volume {p.volume_id}", "volume_status", {
            "status": vs.get("Status"),
            "failed": sorted(str(d.get("Name")) for d in vs.get("Details") or ()
                             if d.get("Status") == "failed")}))
    elif multiattach.holders(vol):
        facts.append(multiattach.fact(env, vol, target=att["InstanceId"]))
    rest = multiattach.others(vol, att["InstanceId"])
    change = Change(target_kind="Volume", target=p.volume_id,
                    operation="force-detach" if p.force else "detach",
                    before=f"attached to {att['InstanceId']} ({att['State']})",
                    after=f"still attached to {', '.join(rest)} (Multi-Attach)" if rest
                    else "available")
    return Plan(action="aws.ec2.volume.detach", params={}, changes=(change,), facts=tuple(facts))


def _moved_on(vol: Obj, p: VolumeDetachParams) -> Result | None:
    """Done if the volume is off the instance asked for and already on its next consumer.

    The attach/detach controller attaches it to the new node the moment it is free, possibly
    between two polls of this detach: the post-condition (not on ``p.instance_id``) holds.
    """
    atts = [a for a in vol.get("Attachments") or () if a.get("State") != "detached"]
    if not p.instance_id or not atts or any(a.get("InstanceId") == p.instance_id for a in atts):
        return None
    now_on = ", ".join(str(a.get("InstanceId")) for a in atts)
    return Result(data={"volume_id": p.volume_id, "state": str(vol.get("State"))},
                  message=f"volume {p.volume_id} is off {p.instance_id} (now attached to {now_on})")


STUCK = frozenset({"detaching", "busy"})
# DetachVolume answers that EC2's view may be a moment behind: re-read, then decide
STALE_CODES = frozenset({"IncorrectState", "InvalidAttachment.NotFound"})


def _detach_call(env: Env, p: VolumeDetachParams, att: Obj, *, force: bool) -> Obj:
    """DetachVolume, then the volume re-read; an answer of eventual consistency is re-read too."""
    try:
        # InstanceId always given: without it some endpoints fail instead of picking the only one
        env.ec2.detach_volume(volume_id=p.volume_id, instance_id=att["InstanceId"], force=force)
    except PermanentError as e:
        if e.code not in STALE_CODES:
            raise
        vol = _read_volume(env, p.volume_id)
        if _attachment(vol, p) is not None:
            raise RetryableError(f"{e}; volume {p.volume_id} still shows an attachment to "
                                 f"{att['InstanceId']} on a re-read: trying again",
                                 service="ec2", operation="DetachVolume", code=e.code) from e
        return vol
    return _read_volume(env, p.volume_id)


def apply_detach(plan: Plan, p: VolumeDetachParams, env: Env) -> Result:
    vol = _read_volume(env, p.volume_id)
    moved = _moved_on(vol, p)
    if moved is not None:
        return moved
    att = _attachment(vol, p)
    if att is None and vol.get("State") == "available":
        return Result(data={"volume_id": p.volume_id, "state": "available"},
                      already_done=True, message=f"volume {p.volume_id} is available")
    forced = False
    if att is not None and (att.get("State") in {"attached", "busy"}
                            or (p.force and att.get("State") == "detaching")):
        # Force only for an attachment already stuck detaching/busy; an attached one gets a normal
        # DetachVolume first, which completes from a stopped instance
        forced = p.force and att.get("State") in STUCK
        if p.force:
            il.check_force_detach(env, volume=vol, facts=[], instance_id=att["InstanceId"])
        vol = _detach_call(env, p, att, force=forced)
        if vol.get("State") == "available":
            return Result(data={"volume_id": p.volume_id, "state": "available", "forced": forced},
                          message=f"volume {p.volume_id} detached"
                                  + (" with Force" if forced else " without Force"))
        moved = _moved_on(vol, p)
        if moved is not None:
            return moved
    state = str((_attachment(vol, p) or {}).get("State") or vol.get("State"))
    if not p.wait and att is not None:
        return Result(data={"volume_id": p.volume_id, "state": state, "forced": forced},
                      message=f"DetachVolume accepted for {p.volume_id}: {state}")
    progress = f"volume {p.volume_id} is {state}"
    env.ctx.progress = progress
    return Result(data={"volume_id": p.volume_id, "state": state}, done=False, progress=progress,
                  retry_after=POLL_SECONDS)


def plan_wait_detached(p: VolumesWaitDetachedParams, env: Env) -> Plan:
    # a read: the start time in the plan is kept by the engine for every poll
    return Plan(action="aws.ec2.volumes.wait_detached", params={},
                data={"started_at": env.now_iso()})


def apply_wait_detached(plan: Plan, p: VolumesWaitDetachedParams, env: Env) -> Result:
    vols = env.ec2.describe_volumes(list(p.volume_ids)) if p.volume_ids else {}
    dead = {p.instance_id, *p.instance_ids} - {None}
    held = {vid: str(a.get("State")) for vid, v in sorted(vols.items())
            for a in v.get("Attachments") or ()
            if a.get("InstanceId") in dead and a.get("State") != "detached"}
    data = {"remaining": sorted(held), "states": held, "count": len(held)}
    which = p.instance_id or f"{len(dead)} instance(s)"
    if not held:
        return Result(data=data, message=f"no volume is attached to {which} any more")
    started = datetime.fromisoformat(str(plan.data.get("started_at") or env.now_iso()))
    now = env.ctx.clock.now()
    if (now - started).total_seconds() >= p.timeout:
        raise PermanentError(
            f"{len(held)} volume(s) still attached to {which} after {p.timeout:.0f}s ("
            + ", ".join(f"{v} {s}" for v, s in held.items())
            + "): stuck; a force detach is the last resort", service="ec2",
            operation="wait_detached", code="Timeout")
    env.ctx.progress = f"{len(held)} still attached to {which}"
    return Result(data=data, done=False, progress=env.ctx.progress, retry_after=poll_interval(
        started=started, now=now, deadline=started + timedelta(seconds=p.timeout)))


def _delete_change(vol: Obj | None, vid: str) -> Change | None:
    if vol is None or vol.get("State") in {"deleting", "deleted"}:
        return None
    if vol.get("State") != "available":
        on = ", ".join(str(a.get("InstanceId")) for a in vol.get("Attachments") or ())
        raise PermanentError(
            f"volume {vid} is {vol.get('State')}{f' (attached to {on})' if on else ''}; only an "
            "available volume can be deleted: detach it first", service="ec2",
            operation="DeleteVolume", code="VolumeInUse")
    return Change(target_kind="Volume", target=vid, operation="delete", before="available",
                  after="deleted")


def plan_delete(p: VolumeDeleteParams, env: Env) -> Plan:
    vol = env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)
    change = _delete_change(vol, p.volume_id)
    facts = [env.fact(f"volume {p.volume_id}", "state", vol.get("State") if vol else "absent")]
    if change is not None and vol is not None:
        il.check_volume_delete(env, volume=vol, pv_name=p.pv, facts=facts)
    return Plan(action="aws.ec2.volume.delete", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


def lagging(volume_id: str, operation: str, why: str) -> RetryableError:
    """EC2 is eventually consistent: a volume just detached, created or deleted may still read as
    it was. Worth trying again shortly (the step's ``retries``), never a decision on a stale view."""
    return RetryableError(f"volume {volume_id}: {why}; EC2's view of it may lag, try again",
                          service="ec2", operation=operation, code="EventualConsistency",
                          retry_after=POLL_SECONDS)


def apply_delete(plan: Plan, p: VolumeDeleteParams, env: Env) -> Result:
    vol = env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)
    if _delete_change(vol, p.volume_id) is None or vol is None:
        return Result(data={"volume_id": p.volume_id, "deleted": True}, already_done=True,
                      message=f"volume {p.volume_id} is already gone")
    il.check_volume_delete(env, volume=vol, pv_name=p.pv, facts=[])
    try:
        env.ec2.delete_volume(volume_id=p.volume_id)
    except PermanentError as e:
        if e.code not in {"InvalidVolume.NotFound", "IncorrectState"}:
            raise
        # re-read, then decide: gone is success, in use is a refusal, available is a lagging view
        again = env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)
        if again is None or again.get("State") in {"deleting", "deleted"}:
            return Result(data={"volume_id": p.volume_id, "deleted": True},
                          message=f"volume {p.volume_id} deleted")
        _delete_change(again, p.volume_id)  # raises VolumeInUse for an attached volume
        raise lagging(p.volume_id, "DeleteVolume", f"EC2 answered {e.code} for an available "
                      "volume") from e
    after = env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)
    if after is not None and after.get("State") not in {"deleting", "deleted"}:
        if after.get("State") == "available":
            raise lagging(p.volume_id, "DeleteVolume", "it still reads as available after "
                          "DeleteVolume")
        raise PermanentError(f"volume {p.volume_id} is {after.get('State')} after DeleteVolume",
                             service="ec2", operation="DeleteVolume", code="PostCondition")
    return Result(data={"volume_id": p.volume_id, "deleted": True},
                  message=f"volume {p.volume_id} deleted")


# -- the actions ------------------------------------------------------------------------------

INSTANCE_GET = action(
    "aws.ec2.instance.get", InstanceParams, destructive=False,
    summary="Read EC2 instance {{ instance_id }}",
    description="State, state reason and status checks.",
    plan=plan_instance, apply=apply_instance)
INSTANCE_STOP = action(
    "aws.ec2.instance.stop", InstanceStopParams, destructive=True,
    summary="Stop EC2 instance {{ instance_id }}{% if force %} (force){% endif %}",
    description="Fence the instance and wait for it to be stopped.",
    plan=plan_stop, apply=apply_stop)
INSTANCE_TERMINATE = action(
    "aws.ec2.instance.terminate", InstanceTerminateParams, destructive=True,
    summary="TERMINATE EC2 instance {{ instance_id }}",
    description="The fence for an instance EC2 cannot stop (Spot, instance-store root): "
                "TerminateInstances, then polls until terminated. Same interlock as the stop.",
    plan=plan_terminate, apply=apply_terminate)
VOLUMES_LIST = action(
    "aws.ec2.volumes.list", VolumesListParams, destructive=False,
    summary="List EBS volumes", description="By instance, ids or tags.",
    plan=plan_volumes, apply=apply_volumes)
VOLUME_GET = action(
    "aws.ec2.volume.get", VolumeParams, destructive=False,
    summary="Read EBS volume {{ volume_id }}", description="State and attachments.",
    plan=plan_volume, apply=apply_volume)
VOLUME_DETACH = action(
    "aws.ec2.volume.detach", VolumeDetachParams, destructive=True,
    summary="Detach EBS volume {{ volume_id }}{% if force %} with FORCE{% endif %}",
    description="Detach at EC2 and wait for available; only from a stopped instance.",
    plan=plan_detach, apply=apply_detach)
VOLUMES_WAIT_DETACHED = action(
    "aws.ec2.volumes.wait_detached", VolumesWaitDetachedParams, destructive=False,
    summary="Wait for EBS volumes to come off {{ instance_id }}",
    description="Polls until none of the volumes is attached to the instance; fails after timeout.",
    plan=plan_wait_detached, apply=apply_wait_detached)
VOLUME_DELETE = action(
    "aws.ec2.volume.delete", VolumeDeleteParams, destructive=True,
    summary="Delete EBS volume {{ volume_id }}{% if pv %} of {{ pv }}{% endif %}",
    description="Only an available volume no one owns: its PV Released or Failed with reclaim "
                "policy Delete, no live claim, no pod using it (interlock 7).",
    plan=plan_delete, apply=apply_delete)

ACTIONS: tuple[ActionSpec[Any], ...] = (INSTANCE_GET, INSTANCE_STOP, INSTANCE_TERMINATE, VOLUMES_LIST,
                                        VOLUME_GET, VOLUME_DETACH, VOLUMES_WAIT_DETACHED,
                                        VOLUME_DELETE)
