"""aws.ec2.volume.snapshot: an EBS snapshot of a volume, taken before anything deletes it.

The snapshot is a step of its own, on by default in the runbooks that delete a volume, so the
approver of the delete sees its id. It is tagged with the run and step that took it
(``runbook-bot/run``, ``runbook-bot/step``) plus the volume and PV, which makes ``apply`` idempotent:
a step resumed after a restart finds its snapshot by those tags instead of taking a second one.
With ``wait`` (the default) the step polls until the snapshot is ``completed``.

EC2 is eventually consistent: a volume just created may answer ``InvalidVolume.NotFound`` and one
in transition ``IncorrectState``; the volume is read again before deciding, and a lagging view is a
retryable error, never a verdict.
"""

from __future__ import annotations

from typing import Any

from bot.actions.authoring import (
    ActionSpec,
    Change,
    Env,
    Obj,
    PermanentError,
    Plan,
    Result,
    action,
    ec2_tags,
    pv_named_by_tags,
)
from bot.actions.declarations import VolumeSnapshotParams
from bot.actions.ec2 import POLL_SECONDS, lagging

TAG_RUN = "runbook-bot/run"
TAG_STEP = "runbook-bot/step"
TAG_VOLUME = "runbook-bot/volume"
TAG_PV = "runbook-bot/pv"


def _mine(env: Env, vid: str) -> Obj | None:
    """The snapshot of ``vid`` this step already took, if any (the newest)."""
    found = env.ec2.describe_snapshots(filters=[
        {"Name": "volume-id", "Values": [vid]},
        {"Name": f"tag:{TAG_RUN}", "Values": [env.ctx.run_id]},
        {"Name": f"tag:{TAG_STEP}", "Values": [env.ctx.step_id]}])
    return max(found.values(), key=lambda s: str(s.get("StartTime") or ""), default=None)


def _view(vid: str, snap: Obj | None, *, gone: bool = False) -> Obj:
    return {"volume_id": vid, "volume_gone": gone,
            "snapshot_id": snap.get("SnapshotId") if snap else None,
            "state": snap.get("State") if snap else None,
            "progress": snap.get("Progress") if snap else None}


def plan_snapshot(p: VolumeSnapshotParams, env: Env) -> Plan:
    vol = env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)
    facts = [env.fact(f"volume {p.volume_id}", "state", vol.get("State") if vol else "absent")]
    if vol is None:
        return Plan(action="aws.ec2.volume.snapshot", params={}, facts=tuple(facts))
    snap = _mine(env, p.volume_id)
    change = None if snap is not None else Change(
        target_kind="Volume", target=p.volume_id, operation="snapshot", before="no snapshot",
        after="snapshot taken")
    return Plan(action="aws.ec2.volume.snapshot", params={}, changes=(change,) if change else (),
                facts=tuple(facts))


def _create(env: Env, p: VolumeSnapshotParams, vol: Obj) -> Obj | None:
    pv = p.pv or pv_named_by_tags(ec2_tags(vol))
    tags = {TAG_RUN: env.ctx.run_id, TAG_STEP: env.ctx.step_id, TAG_VOLUME: p.volume_id}
    if pv:
        tags[TAG_PV] = pv
    try:
        resp = env.ec2.create_snapshot(
            volume_id=p.volume_id, tags=tags,
            description=f"runbook-bot {env.ctx.run_id} {env.ctx.step_id}: before deleting "
                        f"{p.volume_id}{f' of {pv}' if pv else ''}")
    except PermanentError as e:
        if e.code not in {"InvalidVolume.NotFound", "IncorrectState"}:
            raise
        again = env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)
        if again is None:
            return None  # gone meanwhile: nothing left to snapshot
        if again.get("State") in {"creating", "available", "in-use"}:
            raise lagging(p.volume_id, "CreateSnapshot", f"EC2 answered {e.code}") from e
        raise
    return {"SnapshotId": resp.get("SnapshotId"), "State": resp.get("State") or "pending",
            "Progress": resp.get("Progress")}


def apply_snapshot(plan: Plan, p: VolumeSnapshotParams, env: Env) -> Result:
    vol = env.ec2.describe_volumes([p.volume_id]).get(p.volume_id)
    snap = _mine(env, p.volume_id)
    made = False
    if snap is None:
        if vol is None:
            return Result(data=_view(p.volume_id, None, gone=True), already_done=True,
                          message=f"volume {p.volume_id} is gone: nothing to snapshot")
        snap = _create(env, p, vol)
        if snap is None:
            return Result(data=_view(p.volume_id, None, gone=True),
                          message=f"volume {p.volume_id} is gone: nothing to snapshot")
        made = True
    state = str(snap.get("State"))
    if state == "error":
        raise PermanentError(f"snapshot {snap.get('SnapshotId')} of {p.volume_id} failed "
                             f"({snap.get('StateMessage') or 'no reason given'})", service="ec2",
                             operation="CreateSnapshot", code="SnapshotError")
    data = _view(p.volume_id, snap)
    if state == "completed" or not p.wait:
        return Result(data=data, already_done=not made,
                      message=f"snapshot {snap.get('SnapshotId')} of {p.volume_id} is {state}")
    progress = f"snapshot {snap.get('SnapshotId')} of {p.volume_id} is {state} " \
               f"({snap.get('Progress') or '0%'})"
    env.ctx.progress = progress
    return Result(data=data, done=False, progress=progress, retry_after=POLL_SECONDS)


VOLUME_SNAPSHOT = action(
    "aws.ec2.volume.snapshot", VolumeSnapshotParams, destructive=False,
    summary="Snapshot EBS volume {{ volume_id }}",
    description="CreateSnapshot tagged with the run and step (so a resumed step finds it), then "
                "wait until it is completed.",
    plan=plan_snapshot, apply=apply_snapshot)

ACTIONS: tuple[ActionSpec[Any], ...] = (VOLUME_SNAPSHOT,)
