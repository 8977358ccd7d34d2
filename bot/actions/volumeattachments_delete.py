"""k8s.volumeattachments.delete: the leftover VolumeAttachments of deleted nodes, deleted as one step.

Why it exists: when a zone fails, node groups replace its dead machines mid-run, and the
attach/detach controller can leave a VolumeAttachment per volume of each deleted node behind.
Deleted one step per VolumeAttachment (``k8s.volumeattachment.delete`` in a ``foreach``), each
read its VolumeAttachment, its PV, the Node list and its EBS volume again, at its plan and again
after its approval, and asked for an approval apiece. This action does them at once: one list of
VolumeAttachments, one of PVs, one of Nodes, one DescribeInstances (for the nodes that still
exist) and one DescribeVolumes for all of them, at plan and again just before the DELETEs, and
interlock 10 judged for each on those reads with the very code the single delete uses
(``interlocks_release``). One refused refuses the whole step, naming it, and none is deleted.

Each is a DELETE with a ``uid`` precondition, never a finalizer edit: the attacher finishes the
detach and removes its finalizer. Gone, or already being deleted, is already done.
"""

from __future__ import annotations

from typing import Any

from bot.actions import interlocks_release as rules
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
    meta,
)
from bot.actions.declarations import VolumeAttachmentsDeleteParams
from bot.actions.kube_storage import va_delete_change


def _to_delete(env: Env, p: VolumeAttachmentsDeleteParams) -> list[tuple[Obj, Change]]:
    """The named VolumeAttachments that still need a DELETE, from one list of all of them."""
    by_name = {str(meta(v)["name"]): v for v in env.kube.list_volume_attachments()}
    out = []
    for name in sorted(set(p.names)):
        va = by_name.get(name)
        change = va_delete_change(va, name)
        if va is not None and change is not None:
            out.append((va, change))
    return out


def plan_delete_many(p: VolumeAttachmentsDeleteParams, env: Env) -> Plan:
    todo = _to_delete(env, p)
    facts: list[Fact] = []
    if todo:
        rules.check_va_deletes(env, vas=[va for va, _ in todo], facts=facts)
    return Plan(action="k8s.volumeattachments.delete", params={},
                changes=tuple(c for _, c in todo), facts=tuple(facts))


def apply_delete_many(plan: Plan, p: VolumeAttachmentsDeleteParams, env: Env) -> Result:
    todo = _to_delete(env, p)
    names = sorted(set(p.names))
    if not todo:
        return Result(data={"deleted": [], "count": 0}, already_done=True,
                      message=f"the {len(names)} VolumeAttachment(s) are already gone or being "
                              "deleted")
    rules.check_va_deletes(env, vas=[va for va, _ in todo], facts=[])  # live reads, never the plan's
    deleted = []
    for va, _ in todo:
        name = str(meta(va)["name"])
        try:
            env.kube.delete_volume_attachment(name=name, uid=str(meta(va).get("uid") or ""))
        except PermanentError as e:
            if e.code != "NotFound":
                raise
            continue  # gone since the read: its attacher finished it
        deleted.append(name)
    return Result(data={"deleted": deleted, "count": len(deleted)},
                  message=f"deleted {len(deleted)} VolumeAttachment(s): {', '.join(deleted[:10])}"
                          + (" ..." if len(deleted) > 10 else ""))


VOLUMEATTACHMENTS_DELETE = action(
    "k8s.volumeattachments.delete", VolumeAttachmentsDeleteParams, destructive=True,
    summary="Delete {{ names | length }} leftover VolumeAttachment(s)",
    description="DELETE (never a finalizer edit) of VolumeAttachments whose nodes are gone or "
                "whose instances are terminated, once EC2 no longer attaches their volumes "
                "there; one set of reads for all, interlock 10 for each (one refused refuses "
                "the step).",
    plan=plan_delete_many, apply=apply_delete_many)

ACTIONS: tuple[ActionSpec[Any], ...] = (VOLUMEATTACHMENTS_DELETE,)
