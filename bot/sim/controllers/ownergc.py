"""The garbage collector: dependents go with their owners, as kube-controller-manager's do.

Kubernetes links objects by ``metadata.ownerReferences``: a ReplicaSet names its Deployment, a pod
its ReplicaSet, StatefulSet, Job or DaemonSet, a node's CSINode and Lease (both written by its
kubelet) the Node. The workload controllers never delete what an owner leaves behind; the garbage
collector does, as the DELETE of the owner asked (``bot.sim.propagation``):

- ``Background``: the owner is gone at once; the collector deletes every dependent none of whose
  owners is left (an owner under the same name but with another uid counts as gone), with an
  ordinary delete: a pod on a dead node then stays Terminating, like any other.
- ``Foreground``: the owner stays, with ``deletionTimestamp`` and ``foregroundDeletion``; the
  collector deletes its dependents (in the foreground too when they have dependents of their own)
  and lifts the finalizer once no dependent that blocks it (``blockOwnerDeletion``) exists: a pod
  Terminating on a dead node keeps its ReplicaSet and Deployment.
- ``Orphan``: the owner stays with the ``orphan`` finalizer until the collector has removed the
  owner's entry from its dependents' ownerReferences.

A dependent that still has an owner loses only its references to the gone ones. An owner that
another finalizer holds (a Node Karpenter's termination finalizer keeps) still exists, so its
dependents wait. A reference to a kind the sandbox does not serve is left alone: the real
collector cannot resolve it either. The real one reacts to watch events within seconds; this one
looks at every stored object each pass, which is as prompt and needs no graph.
"""

from __future__ import annotations

import contextlib
from typing import Any

from bot.sim.controllers.context import Context
from bot.sim.errors import ApiError
from bot.sim.propagation import (
    BACKGROUND,
    FOREGROUND,
    FOREGROUND_FINALIZER,
    ORPHAN,
    ORPHAN_FINALIZER,
)
from bot.sim.resources import BY_KIND, Resource

# Every stored kind but Events, which never have owners here and are the most numerous.
KINDS = tuple(kind for kind in BY_KIND if kind != "Event")

Key = tuple[str, str, str]  # kind, namespace, name


def _owner_res(ref: dict[str, Any]) -> Resource | None:
    """The served resource an ownerReference names (kind and API group), or None."""
    res = BY_KIND.get(str(ref.get("kind", "")))
    api_version = str(ref.get("apiVersion", ""))
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    return res if res is not None and res.group == group else None


def _key(kind: str, obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return kind, str(meta.get("namespace") or ""), str(meta["name"])


Index = dict[str, list[tuple[Key, dict[str, Any]]]]  # owner uid -> (dependent, its reference)


def _scan(ctx: Context) -> list[tuple[str, dict[str, Any]]]:
    """The objects the collector has work on: those being deleted with one of its finalizers,
    and dependents with an owner that is gone or being deleted in the foreground (a uid no stored
    object has, or one such an object has). Most passes find none, and stop here."""
    settled: set[str] = set()  # uids of stored objects not being deleted in the foreground
    work: list[tuple[str, dict[str, Any]]] = []
    dependents: list[tuple[str, dict[str, Any]]] = []
    for kind in KINDS:
        for obj in ctx.items(kind):
            meta = obj["metadata"]
            finalizers = meta.get("finalizers") or ()
            deleting = bool(meta.get("deletionTimestamp"))
            if deleting and (ORPHAN_FINALIZER in finalizers or FOREGROUND_FINALIZER in finalizers):
                work.append((kind, obj))
            if not (deleting and FOREGROUND_FINALIZER in finalizers):
                settled.add(str(meta.get("uid")))
            if meta.get("ownerReferences") and not deleting:
                dependents.append((kind, obj))
    return work + [(kind, obj) for kind, obj in dependents
                   if any(str(r.get("uid")) not in settled and _owner_res(r) is not None
                          for r in obj["metadata"]["ownerReferences"])]


def _index(ctx: Context) -> Index:
    """Who depends on whom: owner uid -> (dependent, its reference to that owner)."""
    index: Index = {}
    for kind in KINDS:
        for obj in ctx.items(kind):
            for ref in obj["metadata"].get("ownerReferences") or ():
                if ref.get("uid"):
                    index.setdefault(str(ref["uid"]), []).append((_key(kind, obj), ref))
    return index


def _quiet(ctx: Context) -> bool:
    """Nothing since the last pass can have given the collector work: no object was added or
    removed and none was modified while being deleted (like the real collector, which wakes on
    watch events). Renewed Leases and kubelets' status posts leave it asleep; so would a patch that
    points an object's ownerReferences at a missing owner, until the next addition or removal."""
    seen: int | None = ctx.state.get("gc_seen_rv")
    ctx.state["gc_seen_rv"] = int(ctx.store.resource_version)
    changes = ctx.store.changes_since(seen) if seen is not None else None
    return changes is not None and not any(
        c.plural != "events" and (c.type != "MODIFIED" or c.obj["metadata"].get("deletionTimestamp"))
        for c in changes)


def reconcile_garbage_collector(ctx: Context) -> None:
    if _quiet(ctx):
        return
    work = _scan(ctx)
    if not work:
        return
    index = _index(ctx)
    for kind, obj in work:
        current = ctx.find(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if current is None or current["metadata"].get("uid") != obj["metadata"].get("uid"):
            continue  # collected earlier in this pass
        meta = current["metadata"]
        if meta.get("deletionTimestamp"):
            finalizers = meta.get("finalizers") or ()
            if ORPHAN_FINALIZER in finalizers:
                _orphan(ctx, kind, current, index)
            elif FOREGROUND_FINALIZER in finalizers:
                _delete_dependents(ctx, kind, current, index)
        elif meta.get("ownerReferences"):
            _attempt_to_delete(ctx, kind, current, index)


def _owner_state(ctx: Context, ns: str, ref: dict[str, Any]) -> str:
    """``solid``, ``dangling`` (gone, or another object under its name) or ``waiting`` (being
    deleted in the foreground); ``solid`` too when the sandbox cannot resolve the kind."""
    res = _owner_res(ref)
    if res is None:
        return "solid"
    owner = ctx.find(res.kind, ns if res.namespaced else None, str(ref.get("name", "")))
    if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
        return "dangling"
    meta = owner["metadata"]
    if meta.get("deletionTimestamp") and FOREGROUND_FINALIZER in (meta.get("finalizers") or ()):
        return "waiting"
    return "solid"


def _attempt_to_delete(ctx: Context, kind: str, obj: dict[str, Any],
                       index: Index) -> None:
    meta = obj["metadata"]
    ns = str(meta.get("namespace") or "")
    states = {str(ref.get("uid")): _owner_state(ctx, ns, ref) for ref in meta["ownerReferences"]}
    if "solid" in states.values():
        gone = {uid for uid, state in states.items() if state != "solid"}
        if gone:
            ctx.store.mutate(kind, ns or None, meta["name"], lambda o: _drop_refs(o, gone))
        return
    finalizers = meta.get("finalizers") or ()
    if "waiting" in states.values() and index.get(str(meta["uid"])):
        policy = FOREGROUND  # an owner waits on it, and it has dependents of its own
    elif ORPHAN_FINALIZER in finalizers:
        policy = ORPHAN
    elif FOREGROUND_FINALIZER in finalizers:
        policy = FOREGROUND
    else:
        policy = BACKGROUND
    _delete(ctx, kind, obj, policy)


def _delete(ctx: Context, kind: str, obj: dict[str, Any], policy: str) -> None:
    meta = obj["metadata"]
    # gone already, or replaced by another object of that name (the uid precondition): nothing to do
    with contextlib.suppress(ApiError):
        ctx.store.delete(ctx.store_res(kind), meta.get("namespace"), meta["name"],
                         precondition_uid=meta["uid"], propagation=policy)


def _drop_refs(obj: dict[str, Any], uids: set[str]) -> None:
    obj["metadata"]["ownerReferences"] = [
        r for r in obj["metadata"].get("ownerReferences") or () if str(r.get("uid")) not in uids]
    if not obj["metadata"]["ownerReferences"]:
        del obj["metadata"]["ownerReferences"]


def _drop_finalizer(finalizer: str) -> Any:
    def apply(obj: dict[str, Any]) -> None:
        obj["metadata"]["finalizers"] = [
            f for f in obj["metadata"].get("finalizers") or () if f != finalizer]
    return apply


def _orphan(ctx: Context, kind: str, owner: dict[str, Any],
            index: Index) -> None:
    """Unlink every dependent from the owner, then let the owner go."""
    uid = str(owner["metadata"]["uid"])
    for (dkind, ns, name), _ in index.get(uid, ()):
        ctx.store.mutate(dkind, ns or None, name, lambda o: _drop_refs(o, {uid}))
    ctx.store.mutate(kind, owner["metadata"].get("namespace"), owner["metadata"]["name"],
                     _drop_finalizer(ORPHAN_FINALIZER))


def _delete_dependents(ctx: Context, kind: str, owner: dict[str, Any],
                       index: Index) -> None:
    """Foreground: delete the dependents; the owner goes once none that blocks it is left."""
    uid = str(owner["metadata"]["uid"])
    blocking = False
    for (dkind, ns, name), ref in index.get(uid, ()):
        dep = ctx.find(dkind, ns or None, name)
        if dep is None:
            continue
        blocking = blocking or bool(ref.get("blockOwnerDeletion"))
        if not dep["metadata"].get("deletionTimestamp"):
            _attempt_to_delete(ctx, dkind, dep, index)
    if not blocking:
        ctx.store.mutate(kind, owner["metadata"].get("namespace"), owner["metadata"]["name"],
                         _drop_finalizer(FOREGROUND_FINALIZER))
