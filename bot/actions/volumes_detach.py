"""aws.ec2.volumes.detach: many EBS volumes detached from their (stopped) instances as one step.

Why it exists: after a zone outage EC2 can still attach tens of volumes to the dead machines.
Detached one step per volume (``aws.ec2.volume.detach`` in a ``foreach``), each volume read the
instances, the VolumeAttachments, the PVs, the Nodes and EBS's status checks again, at its plan
and again after its approval, and asked two people apiece. This action does the batch at once:
its plan reads everything once for all the volumes (one DescribeVolumes, one DescribeInstances,
one list each of VolumeAttachments, PVs and Nodes, one DescribeVolumeStatus), and judges interlock
2 for each volume on those reads with the very code the single detach uses
(``interlocks_release``). One volume refused refuses the whole step, naming it, and nothing is
detached; break-glass on the step lifts rule 2 as it does for a single detach.

Apply reads again (rule 2 re-checked on fresh reads before any write), sends one DetachVolume per
volume, ``Force`` only for an attachment already stuck ``detaching``/``busy`` (an ``attached`` one
gets a normal detach first, which completes from a stopped instance), and then polls all of them
with one DescribeVolumes per poll. A volume whose normal detach is left ``detaching`` is forced
once at a later poll, after rule 2 again; a Force already sent is not repeated (EC2 is forcing
it). A volume EC2 or IAM refuses fails alone: the others are detached, and the step then fails
naming it.
"""

from __future__ import annotations

from typing import Any

from bot.actions import interlocks_release as rules
from bot.actions import multiattach
from bot.actions.authoring import (
    ActionSpec,
    Change,
    Env,
    Fact,
    Obj,
    PermanentError,
    Plan,
    Result,
    action,
    poll_interval,
)
from bot.actions.declarations import VolumesDetachParams
from bot.actions.ec2 import STALE_CODES, STUCK


def _pairs(p: VolumesDetachParams) -> list[tuple[str, str]]:
    return sorted({(v.volume_id, v.instance_id) for v in p.volumes})


def _on(vol: Obj | None, iid: str) -> Obj | None:
    """The volume's attachment to ``iid`` (not yet detached), or None: it is off that instance."""
    return next((dict(a) for a in (vol or {}).get("Attachments") or ()
                 if a.get("InstanceId") == iid and a.get("State") != "detached"), None)


def _volume_status_facts(env: Env, vids: list[str], facts: list[Fact]) -> None:
    """EBS's own word on each volume, for the approvers of a forced detach: an impaired one (I/O
    disabled after a host failure) may already hold inconsistent data. One call for all."""
    statuses = env.ec2.describe_volume_status(vids)
    for vid in vids:
        vs = (statuses.get(vid) or {}).get("VolumeStatus") or {}
        facts.append(env.fact(f"volume {vid}", "volume_status", {
            "status": vs.get("Status"),
            "failed": sorted(str(d.get("Name")) for d in vs.get("Details") or ()
                             if d.get("Status") == "failed")}))


def plan_detach_many(p: VolumesDetachParams, env: Env) -> Plan:
    pairs = _pairs(p)
    vols = env.ec2.describe_volumes(sorted({vid for vid, _ in pairs}))
    facts: list[Fact] = []
    changes: list[Change] = []
    targets: list[tuple[Obj, str]] = []
    for vid, iid in pairs:
        vol = vols.get(vid)
        att = _on(vol, iid)
        facts.append(env.fact(f"volume {vid}", "state", vol.get("State") if vol else "absent"))
        facts.append(env.fact(f"volume {vid}", "attachment",
                              f"{iid} {att['State']}" if att else None))
        if vol is None or att is None:
            continue  # gone, or already off that instance: nothing to do for it
        targets.append((vol, iid))
        rest = multiattach.others(vol, iid)
        changes.append(Change(
            target_kind="Volume", target=vid, operation="force-detach" if p.force else "detach",
            before=f"attached to {iid} ({att['State']})",
            after=f"still attached to {', '.join(rest)} (Multi-Attach)" if rest else "available"))
    if targets and p.force:
        rules.check_force_detaches(env, targets=targets, facts=facts)
        _volume_status_facts(env, sorted({str(v["VolumeId"]) for v, _ in targets}), facts)
    elif targets:
        facts += [multiattach.fact(env, v, target=iid) for v, iid in targets
                  if multiattach.holders(v)]
    return Plan(action="aws.ec2.volumes.detach", params={}, changes=tuple(changes),
                facts=tuple(facts))


def _item(vid: str, iid: str, vol: Obj | None, *, forced: bool, failed: str | None) -> Obj:
    att = _on(vol, iid)
    item: Obj = {"volume_id": vid, "instance_id": iid, "forced": forced,
                 "state": str(att["State"]) if att else ("absent" if vol is None
                                                          else str(vol.get("State"))),
                 "outcome": "detaching" if att else "detached"}
    if failed is not None and att is not None:
        item["outcome"], item["reason"] = "failed", failed
    return item


Pair = tuple[str, str]  # (volume id, instance id)


def apply_detach_many(plan: Plan, p: VolumesDetachParams, env: Env) -> Result:
    pairs = _pairs(p)
    vids = sorted({vid for vid, _ in pairs})
    forced, failed = _earlier_polls(env)
    vols = env.ec2.describe_volumes(vids)
    send = _to_send(pairs, vols, p, forced=forced, failed=failed)
    if send:
        if p.force:  # live reads, never the plan's: an instance may have been started since
            rules.check_force_detaches(env, targets=[(v, iid) for v, iid, _ in send], facts=[])
        _send_detaches(env, send, forced=forced, failed=failed)
        vols = env.ec2.describe_volumes(vids)  # one read for all, after the writes
    items = [_item(vid, iid, vols.get(vid), forced=(vid, iid) in forced,
                   failed=failed.get((vid, iid))) for vid, iid in pairs]
    return _batch_result(env, items, sent=bool(send))


def _earlier_polls(env: Env) -> tuple[set[Pair], dict[Pair, str]]:
    """What earlier polls of this step did: the pairs sent with Force, and those EC2 refused."""
    before = {(str(i["volume_id"]), str(i["instance_id"])): i
              for i in ((env.ctx.last_result or {}).get("items") or ()) if env.ctx.poll}
    forced = {k for k, i in before.items() if i.get("forced")}
    failed = {k: str(i.get("reason")) for k, i in before.items() if i.get("outcome") == "failed"}
    return forced, failed


def _to_send(pairs: list[Pair], vols: dict[str, Obj], p: VolumesDetachParams, *,
             forced: set[Pair], failed: dict[Pair, str]) -> list[tuple[Obj, str, bool]]:
    """The DetachVolume calls to make now: (volume, instance, with Force). An attached or busy
    attachment is detached; one left detaching is forced once when ``force`` allows it."""
    send: list[tuple[Obj, str, bool]] = []
    for vid, iid in pairs:
        att = _on(vols.get(vid), iid)
        if att is None or (vid, iid) in failed:
            continue
        state = att.get("State")
        if state in {"attached", "busy"} or (p.force and state == "detaching"
                                             and (vid, iid) not in forced):
            send.append((vols[vid], iid, p.force and state in STUCK))
    return send


def _send_detaches(env: Env, send: list[tuple[Obj, str, bool]], *, forced: set[Pair],
                   failed: dict[Pair, str]) -> None:
    """One DetachVolume per volume; records in ``forced`` and ``failed`` what each did."""
    for vol, iid, force in send:
        vid = str(vol["VolumeId"])
        try:
            # InstanceId always given: without it some endpoints fail instead of picking one
            env.ec2.detach_volume(volume_id=vid, instance_id=iid, force=force)
        except PermanentError as e:
            if e.code not in STALE_CODES:  # refused for this volume alone (IAM, EC2)
                failed[(vid, iid)] = f"{e.code}: {e}"
            # EC2's view lagging: the read after the writes decides, and a volume still
            # attached is sent again at the next poll
            continue
        if force:
            forced.add((vid, iid))


def _batch_result(env: Env, items: list[Obj], *, sent: bool) -> Result:
    """Not done while a volume is detaching; failed naming each volume EC2 refused; else done."""
    off = [i["volume_id"] for i in items if i["outcome"] == "detached"]
    bad = [i for i in items if i["outcome"] == "failed"]
    waiting = [i for i in items if i["outcome"] == "detaching"]
    data = {"items": items, "detached": off, "failed": [i["volume_id"] for i in bad],
            "remaining": [i["volume_id"] for i in waiting + bad], "count": len(waiting + bad)}
    if waiting:
        progress = f"{len(off)} of {len(items)} volume(s) off their instances, " + ", ".join(
            f"{i['volume_id']} {i['state']}" for i in waiting[:5]) + (
            " ..." if len(waiting) > 5 else "")
        env.ctx.progress = progress
        return Result(data=data, done=False, progress=progress, retry_after=poll_interval(
            started=env.ctx.applying_since, now=env.ctx.clock.now()))
    if bad:
        raise PermanentError(
            f"{len(off)} of {len(items)} volume(s) detached; EC2 refused "
            + "; ".join(f"{i['volume_id']} from {i['instance_id']}: {i['reason']}" for i in bad),
            service="ec2", operation="DetachVolume", code="PartialFailure")
    with_force = sum(1 for i in items if i["forced"])
    return Result(data=data, already_done=not sent and not env.ctx.poll,
                  message=f"{len(off)} volume(s) off their instances"
                          + (f" ({with_force} with Force)" if with_force else ""))


VOLUMES_DETACH = action(
    "aws.ec2.volumes.detach", VolumesDetachParams, destructive=True,
    summary="Detach {{ volumes | length }} EBS volume(s){% if force %} with FORCE{% endif %}",
    description="Detach many volumes at EC2 and wait until all are off their instances; one set "
                "of reads for all, interlock 2 for every volume (one refused refuses the step).",
    plan=plan_detach_many, apply=apply_detach_many)

ACTIONS: tuple[ActionSpec[Any], ...] = (VOLUMES_DETACH,)
