"""k8s.pv.blockers: which finalizer keeps a PersistentVolume Terminating, and why.

A PV stuck Terminating is not one problem but four, and each wants a different answer:

- ``kubernetes.io/pv-protection`` on a ``Bound`` PV: someone deleted a PV still in use. Nothing is
  stuck: the claim keeps working, and the finalizer goes when the claim is released. Stop.
- ``kubernetes.io/pvc-protection`` on its claim: a pod that has not finished still mounts it.
- the provisioner's ``external-provisioner.volume.kubernetes.io/finalizer``: the CSI driver has not
  deleted the disk; its ``VolumeFailedDelete`` events say why (often ``VolumeInUse``), and without
  any event the EBS CSI controller may not be running at all.
- the attacher's ``external-attacher/<driver>``: a VolumeAttachment still names the PV.

The verdict is the first of these that holds, so a runbook can stop, hand over, or go on to the
cleanup; ``verdict`` is ``orphaned`` only when nothing but the driver's own finalizers is left and
no claim, pod or attachment holds the PV. Read-only: everything is read in ``apply``.
"""

from __future__ import annotations

from typing import Any

from bot.actions.authoring import (
    ActionSpec,
    Env,
    Obj,
    Plan,
    Result,
    action,
    ebs_driver_of_pv,
    ebs_volume_id_of_pv,
    meta,
    pod_claims,
    pod_finished,
    terminating,
)
from bot.actions.declarations import PvParams

PV_PROTECTION = "kubernetes.io/pv-protection"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PROVISIONER_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
ATTACHER_PREFIX = "external-attacher/"
FAILED_DELETE = "VolumeFailedDelete"


def claim_of(pv: Obj, live: Obj | None, pods: list[Obj]) -> tuple[str | None, Obj | None, list[str]]:
    """The PV's claim (``ns/name``), the live claim if it is still this PV's, and its users, from
    the claim read (``live``, None when gone) and the pods of its namespace."""
    ref = (pv.get("spec") or {}).get("claimRef") or {}
    if not ref.get("name"):
        return None, None, []
    claim = f"{ref.get('namespace') or 'default'}/{ref['name']}"
    if live is not None and ref.get("uid") and meta(live).get("uid") != ref.get("uid"):
        live = None  # a new claim of the same name: not this PV's
    users = sorted(f"{meta(p).get('namespace')}/{meta(p)['name']}" for p in pods
                   if not pod_finished(p) and claim in pod_claims(p))
    return claim, live, users


def latest_failed_delete(events: list[Obj]) -> str | None:
    """The message of the latest ``VolumeFailedDelete`` among a PV's events."""
    failed = [e for e in events if e.get("reason") == FAILED_DELETE]
    failed.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return str(failed[-1].get("message") or "") if failed else None


def diagnose(env: Env, name: str) -> Obj:
    k = env.kube
    pv = k.find(lambda: k.get_pv(name))
    if pv is None:
        return {"name": name, "exists": False, "terminating": False, "verdict": "gone",
                "blockers": [], "finalizers": [], "claim": None, "claim_users": [],
                "volume_id": None, "driver": None, "phase": None, "reclaim_policy": None,
                "failed_delete": None, "volume_attachments": [], "why": f"PV {name} is gone"}
    ref = (pv.get("spec") or {}).get("claimRef") or {}
    live, pods = None, []
    if ref.get("name"):
        ns, claim_name = str(ref.get("namespace") or "default"), str(ref["name"])
        live = k.find(lambda: k.get_pvc(namespace=ns, name=claim_name))
        pods = k.list_pods(namespace=ns)
    claim = claim_of(pv, live, pods)
    vas = k.list_volume_attachments()
    events = (k.list_object_events(kind="PersistentVolume", name=name)
              if PROVISIONER_FINALIZER in (meta(pv).get("finalizers") or ()) else [])
    return blockers(pv, claim, vas, latest_failed_delete(events))


def blockers(pv: Obj, claim_read: tuple[str | None, Obj | None, list[str]], all_vas: list[Obj],
             failed: str | None) -> Obj:
    """Which finalizer keeps the PV and why (``verdict``, ``why``), from objects already read: the
    PV, its claim (``claim_of``), every VolumeAttachment and its latest failed delete."""
    name = str(meta(pv).get("name"))
    spec = pv.get("spec") or {}
    phase = (pv.get("status") or {}).get("phase")
    finalizers = list(meta(pv).get("finalizers") or ())
    claim, live, users = claim_read
    vas = sorted(meta(v)["name"] for v in all_vas
                 if ((v.get("spec") or {}).get("source") or {}).get("persistentVolumeName") == name)
    if PROVISIONER_FINALIZER not in finalizers:
        failed = None
    found: list[Obj] = []
    if PV_PROTECTION in finalizers and phase == "Bound":
        found.append({"finalizer": PV_PROTECTION, "verdict": "bound",
                      "reason": f"PV {name} is Bound to claim {claim}, which still works: "
                                f"{PV_PROTECTION} keeps it until the claim is released"})
    if live is not None and (users or PVC_PROTECTION in (meta(live).get("finalizers") or ())):
        found.append({"finalizer": PVC_PROTECTION, "verdict": "claim-in-use",
                      "reason": f"claim {claim} still exists"
                                + (f" and is mounted by {', '.join(users[:5])}" if users else "")})
    if PROVISIONER_FINALIZER in finalizers:
        found.append({"finalizer": PROVISIONER_FINALIZER, "verdict": "csi-delete-failing",
                      "reason": f"the CSI driver has not deleted the disk: {failed}" if failed
                      else "the CSI driver has not deleted the disk and reported nothing "
                           "(no VolumeFailedDelete event: is the EBS CSI controller running?)"})
    attacher = [f for f in finalizers if f.startswith(ATTACHER_PREFIX)]
    if attacher and vas:
        found.append({"finalizer": attacher[0], "verdict": "attached",
                      "reason": f"VolumeAttachment(s) {', '.join(vas[:3])} still name the PV"})
    verdict = ("not-terminating" if not terminating(pv) else
               found[0]["verdict"] if found else "orphaned")
    why = "; ".join(b["reason"] for b in found) or (
        f"PV {name} is not being deleted" if verdict == "not-terminating" else
        f"only {', '.join(finalizers) or 'no'} finalizer(s) remain and nothing holds the PV")
    return {"name": name, "exists": True, "terminating": terminating(pv), "phase": phase,
            "reclaim_policy": spec.get("persistentVolumeReclaimPolicy"),
            "driver": ebs_driver_of_pv(pv), "volume_id": ebs_volume_id_of_pv(pv),
            "finalizers": finalizers, "claim": claim, "claim_exists": live is not None,
            "claim_users": users, "volume_attachments": vas, "failed_delete": failed,
            "blockers": found, "verdict": verdict, "why": why}


def plan_blockers(p: PvParams, env: Env) -> Plan:
    return Plan(action="k8s.pv.blockers", params={})


def apply_blockers(plan: Plan, p: PvParams, env: Env) -> Result:
    data = diagnose(env, p.name)
    return Result(data=data, message=f"PV {p.name}: {data['verdict']}: {data['why']}")


PV_BLOCKERS = action(
    "k8s.pv.blockers", PvParams, destructive=False,
    summary="Find what keeps PersistentVolume {{ name }} Terminating",
    description="Which finalizer blocks the PV and why: a Bound claim, a pod using the claim, a "
                "failing CSI delete (VolumeFailedDelete), or a VolumeAttachment.",
    plan=plan_blockers, apply=apply_blockers)

ACTIONS: tuple[ActionSpec[Any], ...] = (PV_BLOCKERS,)
