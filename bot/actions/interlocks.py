"""Interlocks 1-10: safety rules no runbook can switch off, checked with live reads.

Each check reads the world itself, at plan time and again at apply time, and never trusts a value
cached in the plan: an instance that was ``stopped`` when the plan was approved may have been started
since. Everything read is appended to ``facts`` (with ``read_at``), so a changed world changes the
plan's hash and voids an approval given for the old one. Refusals go through ``ctx.interlock()``,
which only break-glass (two approvers and a reason, handled by the engine) can override.

Objects are read with the parsers in ``objects.py`` (providerID -> instance id, PV -> EBS volume
id, Ready condition), the ones the actions use too, so the interlocks and the results a runbook
sees can never disagree. This module holds the rules only: each reads the world through ``Env``.
Rules 2 and 10, which take a volume from a machine, live in ``interlocks_release.py`` (split into
the reads and the judgement of one volume, so a batch applies the same rule on one set of reads)
and are named here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.actions.authoring import (
    CSI_NODE_ID,
    FENCED_STATES,
    OUT_OF_SERVICE_TAINT,
    TAG_CREATED_FOR_PV,
    TAG_CSI_VOLUME_NAME,
    TAINT_AT,
    TAINT_BOOT_ID,
    Env,
    Fact,
    InterlockBlocked,
    Obj,
    annotations_of,
    boot_id_of,
    csi_instance_id_of,
    ebs_driver_of_pv,
    ebs_volume_id_of_pv,
    ec2_tags,
    has_taint,
    heartbeat_of,
    instance_id_of,
    instance_state,
    is_ebs_driver,
    meta,
    nodes_of_instance,
    parse_time,
    pod_claims,
    pod_finished,
    pv_named_by_tags,
    ready_condition,
    terminating,
    va_node,
    zone_of_node,
)
from bot.actions.interlocks_release import RULE_FORCE_DETACH as RULE_FORCE_DETACH
from bot.actions.interlocks_release import RULE_VA_DELETE as RULE_VA_DELETE
from bot.actions.interlocks_release import check_force_detach as check_force_detach
from bot.actions.interlocks_release import check_va_delete as check_va_delete
from bot.actions.liveness import AMBIGUOUS, DEAD, READY, SICK, classify

RULE_OOS_TAINT = "oos-taint"  # 1
RULE_OOS_UNTAINT = "oos-untaint"  # 3
RULE_FINALIZERS = "finalizer-volume"  # 4
RULE_BLAST_RADIUS = "blast-radius"  # 5
RULE_FINALIZER_BLOCKER = "finalizer-blocker"  # 6
RULE_VOLUME_DELETE = "volume-delete"  # 7
RULE_FENCE = "fence-live"  # 8
RULE_FENCE_WAIT = "fence-wait"  # 8, for a machine that may be alive: break-glass cannot lift it yet
RULE_FENCE_CLUSTER = "fence-cluster"  # 8, another cluster's machine: break-glass never lifts it
CLUSTER_TAG = "kubernetes.io/cluster/"
RULE_ZONE = "zone-scope"  # 9: refuses outright, break-glass cannot lift it (not in RULES)
RULES = (RULE_OOS_TAINT, RULE_FORCE_DETACH, RULE_OOS_UNTAINT, RULE_FINALIZERS, RULE_BLAST_RADIUS,
         RULE_FINALIZER_BLOCKER, RULE_VOLUME_DELETE, RULE_FENCE)
PV_PROTECTION = "kubernetes.io/pv-protection"
PVC_PROTECTION = "kubernetes.io/pvc-protection"


def check_out_of_service_taint(env: Env, *, node: Obj, facts: list[Fact],
                               instances: Mapping[str, Obj] | None = None,
                               fresh: bool = False) -> None:
    """1: the node is NotReady and its EC2 instance is stopped/terminated, as read right now.

    The instance is the one in ``spec.providerID``; when the EBS CSI driver registered the node
    under a different instance id, which machine the node is cannot be confirmed: refused.
    ``instances``: a DescribeInstances just made for a whole batch, instead of one per node.
    ``fresh`` (right before the write): EC2 is asked again, never answered from an earlier read
    of the same pass, since a machine someone starts in between would be tainted running."""
    name = node["metadata"]["name"]
    status, _ = ready_condition(node)
    facts.append(env.fact(f"node {name}", "ready", status))
    iid = instance_id_of(node)
    facts.append(env.fact(f"node {name}", "instance_id", iid))
    if iid is None:
        env.ctx.interlock(
            rule=RULE_OOS_TAINT, ok=False,
            message=f"node {name} has no EC2 instance in its providerID, so the bot cannot confirm "
                    "it is shut down; power it off out of band and use break-glass if certain")
        return
    csi = csi_instance_id_of(node)
    if csi is not None and csi != iid:
        facts.append(env.fact(f"node {name}", "csi_instance_id", csi))
        env.ctx.interlock(
            rule=RULE_OOS_TAINT, ok=False,
            message=f"node {name} names instance {iid} in its providerID but {csi} in "
                    f"{CSI_NODE_ID}; the bot cannot tell which machine to confirm is shut down. "
                    "Find out which instance the node runs on before tainting it")
        return
    read = instances if instances is not None else env.ec2.describe_instances([iid], fresh=fresh)
    state = instance_state(read.get(iid))
    facts.append(env.fact(f"instance {iid}", "state", state))
    env.ctx.interlock(
        rule=RULE_OOS_TAINT, ok=status != "True" and state in FENCED_STATES,
        message=f"node {name} is Ready={status} and instance {iid} is {state}; the out-of-service "
                "taint needs a NotReady node whose instance is stopped or terminated. Fence it "
                "first (aws.ec2.instance.stop with force) and wait for 'stopped'")


def check_blast_radius(env: Env, *, targets: Sequence[str], nodes: Iterable[Obj],
                       facts: list[Fact]) -> list[str]:
    """5: at most ``policy.max_out_of_service_nodes`` nodes carry the out-of-service taint once
    ``targets`` carry it too. A break-glass override names how many it allows (``count``).
    Returns the other nodes that carry it."""
    limit = env.settings.policy.max_out_of_service_nodes
    mine = set(targets)
    others = sorted(n["metadata"]["name"] for n in nodes
                    if has_taint(n, OUT_OF_SERVICE_TAINT) and n["metadata"]["name"] not in mine)
    facts.append(env.fact(f"cluster {env.cluster.name}", "out_of_service_nodes", others))
    count = len(others) + len(mine)
    what = next(iter(mine)) if len(mine) == 1 else f"{len(mine)} nodes"
    env.ctx.interlock(
        rule=RULE_BLAST_RADIUS, ok=count <= limit, count=count,
        message=f"{len(others)} node(s) already carry {OUT_OF_SERVICE_TAINT} "
                f"({', '.join(others[:10]) or 'none'}); tainting {what} would make {count}, over "
                f"the limit of {limit}. Untaint repaired nodes first, raise "
                "policy.max_out_of_service_nodes, or for a declared zone outage break glass "
                f"naming the number of nodes allowed (--nodes {count})")
    return others


def check_out_of_service_untaint(env: Env, *, node: Obj, facts: list[Fact]) -> None:
    """3: the node is Ready, no pod on it is terminating, no VolumeAttachment names it, and the
    kernel that ran when the taint went on is gone: the node's bootID differs from the one the
    taint recorded, or its instance was started after the taint."""
    name = node["metadata"]["name"]
    status, _ = ready_condition(node)
    facts.append(env.fact(f"node {name}", "ready", status))
    stuck = sorted(f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
                   for p in env.kube.list_pods(node=name) if terminating(p))
    facts.append(env.fact(f"node {name}", "terminating_pods", stuck))
    vas = sorted(v["metadata"]["name"] for v in env.kube.list_volume_attachments()
                 if va_node(v) == name)
    facts.append(env.fact(f"node {name}", "volume_attachments", vas))
    problems = ([f"node is Ready={status}"] if status != "True" else []) + (
        [f"{len(stuck)} pod(s) still terminating ({', '.join(stuck[:5])})"] if stuck else []) + (
        [f"{len(vas)} VolumeAttachment(s) remain"] if vas else []) + _old_kernel(env, node, facts)
    env.ctx.interlock(
        rule=RULE_OOS_UNTAINT, ok=not problems,
        message=f"cannot remove {OUT_OF_SERVICE_TAINT} from {name}: {'; '.join(problems)}. "
                "Controllers read the taint from a cache (kubernetes #142331): wait until the node "
                "is repaired and Ready and its pods and attachments are gone")


def _old_kernel(env: Env, node: Obj, facts: list[Fact]) -> list[str]:
    """What is missing from the proof that the node no longer runs the kernel it ran when tainted."""
    name = meta(node)["name"]
    notes = annotations_of(node)
    recorded, boot = notes.get(TAINT_BOOT_ID), boot_id_of(node)
    tainted_at = parse_time(notes.get(TAINT_AT))
    facts.append(env.fact(f"node {name}", "boot_id_at_taint", recorded))
    facts.append(env.fact(f"node {name}", "boot_id", boot))
    if recorded and boot and boot != recorded:
        return []
    iid = instance_id_of(node)
    launched = None
    if iid is not None and tainted_at is not None:
        inst = env.ec2.describe_instances([iid]).get(iid)
        launched = parse_time((inst or {}).get("LaunchTime"))
        facts.append(env.fact(f"instance {iid}", "launch_time",
                              launched.isoformat() if launched else None))
        if launched is not None and launched > tainted_at:
            return []  # a start after the taint: a new boot whatever the kubelet reports
    if not recorded or not tainted_at:
        return ["no boot id was recorded when the taint was applied, and no instance start after "
                "it is on record, so nothing proves the old kernel is gone"]
    return [f"its bootID is still {boot}, the one it had when tainted at {notes.get(TAINT_AT)}, and "
            "its instance has not been started since: the same kernel may still hold the old "
            "mounts (restart or repair the machine first)"]


def _pv_behind(env: Env, *, kind: str, obj: Obj) -> tuple[Obj | None, str | None]:
    """The PV behind a PV, PVC or VolumeAttachment (or a VolumeAttachment's inline spec), and the
    EBS driver it is known to use even when the PV cannot be read (the VolumeAttachment's attacher)."""
    if kind == "PersistentVolume":
        return obj, ebs_driver_of_pv(obj)
    spec = obj.get("spec") or {}
    if kind == "PersistentVolumeClaim":
        claimed = str(spec.get("volumeName") or "")
        pv = env.kube.find(lambda: env.kube.get_pv(claimed)) if claimed else None
        return pv, ebs_driver_of_pv(pv) if pv is not None else None
    attacher = spec.get("attacher")
    pv_name = str((spec.get("source") or {}).get("persistentVolumeName") or "")
    pv = env.kube.find(lambda: env.kube.get_pv(pv_name)) if pv_name else None
    if pv is None:
        inline = (spec.get("source") or {}).get("inlineVolumeSpec") or {}
        pv = {"spec": inline} if inline else None
    driver = ebs_driver_of_pv(pv) if pv is not None else None
    return pv, driver or (str(attacher) if is_ebs_driver(attacher) else None)


def check_finalizer_removal(env: Env, *, kind: str, obj: Obj, facts: list[Fact]) -> None:
    """4: the EBS volume behind the PV (of this PVC / VolumeAttachment) no longer exists.

    Fails closed: an object of an EBS driver (the EBS CSI driver, EKS Auto Mode's, in-tree; for a
    VolumeAttachment its ``spec.attacher``) whose volume cannot be resolved is refused."""
    name = meta(obj).get("name")
    pv, driver = _pv_behind(env, kind=kind, obj=obj)
    vid = ebs_volume_id_of_pv(pv) if pv is not None else None
    facts.append(env.fact(f"{kind} {name}", "driver", driver))
    facts.append(env.fact(f"{kind} {name}", "volume_id", vid))
    if vid is None:
        env.ctx.interlock(
            rule=RULE_FINALIZERS, ok=driver is None,
            message=f"{kind} {name} belongs to the EBS driver {driver} but the bot cannot tell "
                    "which EBS volume is behind it (its PersistentVolume is gone or names no "
                    "volume), so it cannot confirm the volume is gone; find the volume by its tags "
                    f"({TAG_CREATED_FOR_PV}, {TAG_CSI_VOLUME_NAME}) and use break-glass if certain")
        return  # not EBS (or refused above): nothing the bot knows can leak
    vol = env.ec2.describe_volumes([vid]).get(vid)
    state = "absent" if vol is None else str(vol.get("State"))
    facts.append(env.fact(f"volume {vid}", "state", state))
    env.ctx.interlock(
        rule=RULE_FINALIZERS, ok=state in {"absent", "deleted", "deleting"},
        message=f"EBS volume {vid} still exists ({state}); clearing finalizers now would leak a "
                "billed volume and drift the API from EC2. Check it is unused, delete it at EC2 "
                "(aws.ec2.volume.delete) first, then remove the finalizers")


def _claim_users(env: Env, claim: str) -> list[str]:
    """Pods that have not finished and mount ``namespace/name``."""
    ns = claim.split("/", 1)[0]
    return sorted(f"{ns}/{meta(p)['name']}" for p in env.kube.list_pods(namespace=ns)
                  if not pod_finished(p) and claim in pod_claims(p))


def check_finalizer_blocker(env: Env, *, kind: str, obj: Obj, remove: list[str],
                            facts: list[Fact]) -> None:
    """6: a finalizer is removed only from an object being deleted, and never while the reason it
    exists still holds: ``pv-protection`` on a Bound PV, ``pvc-protection`` on a claim a pod uses."""
    name = meta(obj).get("name")
    ns = meta(obj).get("namespace")
    target = f"{ns}/{name}" if ns else str(name)
    deleting = terminating(obj)
    facts.append(env.fact(f"{kind} {target}", "terminating", deleting))
    if not deleting:
        env.ctx.interlock(
            rule=RULE_FINALIZER_BLOCKER, ok=False,
            message=f"{kind} {target} is not being deleted: removing its finalizers "
                    f"({', '.join(remove)}) would only strip the protection of a live object")
        return
    phase = (obj.get("status") or {}).get("phase")
    if kind == "PersistentVolume" and PV_PROTECTION in remove:
        facts.append(env.fact(f"{kind} {target}", "phase", phase))
        ref = (obj.get("spec") or {}).get("claimRef") or {}
        env.ctx.interlock(
            rule=RULE_FINALIZER_BLOCKER, ok=phase != "Bound",
            message=f"PersistentVolume {target} is Bound to claim {ref.get('namespace')}/"
                    f"{ref.get('name')}: {PV_PROTECTION} keeps it while the claim uses it, and the "
                    "claim still works. Nothing is stuck; stop here (delete the claim first if the "
                    "data is really no longer wanted)")
    if kind == "PersistentVolumeClaim" and PVC_PROTECTION in remove:
        users = _claim_users(env, target)
        facts.append(env.fact(f"{kind} {target}", "used_by", users))
        env.ctx.interlock(
            rule=RULE_FINALIZER_BLOCKER, ok=not users,
            message=f"claim {target} is still used by {', '.join(users[:5])}: {PVC_PROTECTION} "
                    "keeps it until those pods finish or are deleted")


def check_volume_delete(env: Env, *, volume: Obj, pv_name: str | None, facts: list[Fact]) -> None:
    """7: an EBS volume is deleted only when no one owns it any more.

    Its driver's tags must name a PV (and the one the step names, if it names one); that PV must
    use this volume, have reclaim policy ``Delete``, be ``Released`` or ``Failed`` with no live
    claim, and no pod that has not finished may mount the claim. Fails closed: an untagged volume,
    or one whose PV is gone, is refused."""
    vid = str(volume.get("VolumeId"))
    tags = ec2_tags(volume)
    owner = pv_named_by_tags(tags)
    facts.append(env.fact(f"volume {vid}", "pv_tag", owner))
    problems: list[str] = []
    if owner is None:
        problems.append(f"it carries no {TAG_CREATED_FOR_PV} or {TAG_CSI_VOLUME_NAME} tag, so the "
                        "bot cannot tell which PersistentVolume owns it")
    elif pv_name is not None and owner != pv_name:
        problems.append(f"its tags name PersistentVolume {owner}, not {pv_name}")
    else:
        pv = env.kube.find(lambda: env.kube.get_pv(owner))
        problems += _owner_problems(env, pv, owner, vid, facts)
    env.ctx.interlock(
        rule=RULE_VOLUME_DELETE, ok=not problems,
        message=f"EBS volume {vid} will not be deleted: {'; '.join(problems)}. Deleting it would "
                "destroy data someone still owns")


def _owner_problems(env: Env, pv: Obj | None, owner: str, vid: str, facts: list[Fact]) -> list[str]:
    if pv is None:
        facts.append(env.fact(f"PersistentVolume {owner}", "exists", False))
        return [f"PersistentVolume {owner} is gone, so its reclaim policy cannot be read"]
    spec = pv.get("spec") or {}
    phase = (pv.get("status") or {}).get("phase")
    policy = spec.get("persistentVolumeReclaimPolicy")
    facts += [env.fact(f"PersistentVolume {owner}", "phase", phase),
              env.fact(f"PersistentVolume {owner}", "reclaim_policy", policy)]
    problems = []
    if ebs_volume_id_of_pv(pv) != vid:
        problems.append(f"PersistentVolume {owner} does not use it")
    if policy != "Delete":
        problems.append(f"PersistentVolume {owner} has reclaim policy {policy}: its owner asked "
                        "to keep the disk")
    ref = spec.get("claimRef") or {}
    claim = f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else None
    if phase not in ("Released", "Failed"):
        problems.append(f"PersistentVolume {owner} is {phase}"
                        + (f" to claim {claim}" if claim else ""))
    if claim is not None:
        ns, name = claim.split("/", 1)
        live = env.kube.find(lambda: env.kube.get_pvc(namespace=ns, name=name))
        live_uid = meta(live).get("uid") if live is not None else None
        if live is not None and (not ref.get("uid") or live_uid == ref.get("uid")):
            problems.append(f"claim {claim} still exists")
        users = _claim_users(env, claim)
        facts.append(env.fact(f"claim {claim}", "used_by", users))
        if users:
            problems.append(f"claim {claim} is still mounted by {', '.join(users[:5])}")
    return problems


class Rechecked:
    """Runs an action's interlocks again for every newer version of the object it writes.

    ``KubeClient.update`` re-reads the object after a 409 Conflict; the write that caused the
    conflict may be the very change an interlock is about (the kubelet marking the node Ready
    again), so a re-read object is checked again before the change is re-applied to it.
    """

    def __init__(self, env: Env, checked: Obj | None, check: Callable[[Obj], None]) -> None:
        self.env, self.check = env, check
        self.version = meta(checked or {}).get("resourceVersion")

    def __call__(self, live: Obj) -> None:
        version = meta(live).get("resourceVersion")
        if version != self.version:
            self.check(live)
            self.version = version
            # one override is one audit event, however many versions it was checked against
            self.env.ctx.overridden[:] = list(dict.fromkeys(self.env.ctx.overridden))


def check_fence(env: Env, *, instance_id: str, instance: Obj | None, facts: list[Fact]) -> None:
    """8: the machine behind the instance is dead, not sick and not maybe-partitioned.

    Read live, at plan and again at apply: the Nodes naming the instance (a live list, not the
    run's first read), each one's Lease, and the instance's status checks. A node whose kubelet is
    alive (its Lease fresh, or ``Ready=False`` with a fresh heartbeat) is refused, and only
    break-glass lifts that; a silent node EC2 does not confirm is down is refused outright until
    it has been silent for ``policy.fence_ambiguous_after``, and then only break-glass lifts it.
    """
    iid = instance_id
    checks = env.ec2.describe_instance_status([iid]).get(iid) if instance is not None else None
    if instance is not None and "LaunchTime" not in instance:
        # a state read from DescribeInstanceStatus carries no tags: whose cluster it is, is asked
        instance = env.ec2.describe_instances([iid]).get(iid) or instance
    nodes = nodes_of_instance(env.kube.list_nodes(), iid)
    leases = {meta(n)["name"]: env.kube.get_node_lease(meta(n)["name"]) for n in nodes}
    refusal = fence_problems(env, instance_id=iid, instance=instance, checks=checks or {},
                             nodes=nodes, leases=leases, facts=facts)
    enforce_fence(env, instance_id=iid, refusal=refusal)


@dataclass(frozen=True)
class FenceRefusal:
    """Why rule 8 refuses one instance: ``problems`` break-glass may lift, ``hold`` it may not."""

    problems: tuple[str, ...] = ()
    hold: str | None = None
    foreign: str | None = None  # the instance is another cluster's: nothing lifts that

    def __bool__(self) -> bool:
        return bool(self.problems) or self.hold is not None or self.foreign is not None

    def text(self) -> str:
        return "; ".join([*(x for x in (self.foreign, self.hold) if x), *self.problems])


def cluster_names(instance: Obj | None) -> set[str]:
    """The clusters an instance's tags name (node groups, Karpenter, Auto Mode tag them)."""
    tags = ec2_tags(instance)
    return {k.removeprefix(CLUSTER_TAG) for k in tags if k.startswith(CLUSTER_TAG)} | {
        tags[k] for k in ("eks:eks-cluster-name", "eks:cluster-name") if tags.get(k)}


def enforce_fence(env: Env, *, instance_id: str, refusal: FenceRefusal) -> None:
    if refusal.foreign is not None:
        raise InterlockBlocked(RULE_FENCE_CLUSTER, (
            f"refusing to fence (stop or terminate) instance {instance_id}: {refusal.foreign}"))
    if refusal.hold is not None:
        raise InterlockBlocked(RULE_FENCE_WAIT, (
            f"refusing to fence (stop or terminate) instance {instance_id}: {refusal.text()}"),
            recheck_after=env.settings.policy.hold_recheck_seconds,
            until="EC2 confirms the machine is down (then it may be fenced), its kubelet is "
                  "back, or it has been silent for policy.fence_ambiguous_after (then only "
                  "break-glass fences it)")
    env.ctx.interlock(
        rule=RULE_FENCE, ok=not refusal,
        message=f"refusing to fence (stop or terminate) instance {instance_id}: {refusal.text()}. "
                "A fence is only for a dead machine: its kubelet silent past the grace period "
                "and EC2 confirming it is down")


def fence_problems(env: Env, *, instance_id: str, instance: Obj | None, checks: Obj | None,
                   nodes: list[Obj], leases: Mapping[str, Obj | None],
                   facts: list[Fact]) -> FenceRefusal:
    """Why rule 8 refuses to stop one instance, from reads already made (empty: it may).

    A batch reads every node, every Lease and every instance in one list each, then asks this
    for each instance, so a fence of many instances applies the same rule as a fence of one.
    Facts are what was read, never an age: a plan read twice of an unchanged world hashes the same.
    """
    iid = instance_id
    policy = env.settings.policy
    now = env.ctx.clock.now()
    state = instance_state(instance)
    st = checks or {}
    facts.append(env.fact(f"instance {iid}", "state", state))
    facts.append(env.fact(f"instance {iid}", "status_checks", {
        "system": (st.get("SystemStatus") or {}).get("Status"),
        "instance": (st.get("InstanceStatus") or {}).get("Status"),
        "events": sorted(str(e.get("Code")) for e in st.get("Events") or ())}))
    facts.append(env.fact(f"instance {iid}", "nodes", sorted(meta(n)["name"] for n in nodes)))
    problems: list[str] = []
    hold: str | None = None
    foreign: str | None = None
    if instance is not None and "LaunchTime" in instance:  # described: its tags were read
        names, want = cluster_names(instance), env.cluster.eks_name
        facts.append(env.fact(f"instance {iid}", "clusters", sorted(names)))
        if names and want not in names:
            foreign = (f"its tags say it belongs to cluster {', '.join(sorted(names))}, not "
                       f"{want}: the node read through this cluster's kubeconfig names a machine "
                       "of another cluster (node names repeat across clusters). Check the "
                       "cluster's kubeconfig, context and region, or its eks_cluster setting")
        elif not names:
            problems.append(f"instance {iid} carries no cluster tag (kubernetes.io/cluster/{want} "
                            "or eks:eks-cluster-name), so the bot cannot confirm it is a machine "
                            f"of cluster {want}")
    if state == "pending":
        problems.append(f"instance {iid} is pending: someone is starting it (a restart?); ask "
                        "who before fencing it, and wait for its node to come back instead")
    if not nodes:
        lv = classify(node=None, lease=None, instance=instance, status=checks, now=now,
                      grace=policy.node_monitor_grace_period)
        facts.append(env.fact(f"instance {iid}", "liveness", lv.verdict))
        if lv.verdict != DEAD:
            problems.append(f"no Node names instance {iid}, and EC2 does not confirm it is down "
                            f"({lv.words().split(': ', 1)[-1]}), so nothing shows its machine is "
                            "dead; it may still write to its volumes")
    for node in nodes:
        name = meta(node)["name"]
        lv = classify(node=node, lease=leases.get(name), instance=instance, status=checks,
                      now=now, grace=policy.node_monitor_grace_period)
        e = lv.evidence
        _, since = ready_condition(node)
        renewed = ((leases.get(name) or {}).get("spec") or {}).get("renewTime")
        facts.append(env.fact(f"node {name}", "liveness", {
            "verdict": lv.verdict, "cause": lv.cause, "ready": e.ready, "reason": e.reason,
            "message": e.message, "ready_since": since,
            # a live kubelet renews every 10 s: its times are not facts, or no plan would hold
            "lease_renewed": "within the grace period" if lv.kubelet_alive else renewed,
            "last_heartbeat": None if lv.kubelet_alive else heartbeat_of(node),
            "conditions": dict(e.conditions)}))
        if lv.verdict == READY:
            problems.append(f"node {name} is Ready again ({lv.words()})")
        elif lv.verdict == SICK:
            problems.append(f"node {name}: {lv.words()}. Fix the cause instead: {lv.advice()}. "
                            "Only break-glass fences a machine whose kubelet is alive")
        elif e.silent_for is None:
            problems.append(f"node {name} is Ready={e.ready} but neither its Lease nor its Ready "
                            "condition has a time, so how long it has been silent is unknown")
        elif lv.verdict == AMBIGUOUS:
            wait = policy.fence_ambiguous_after
            if e.silent_for < wait:
                hold = (f"node {name}: {lv.words()}. A machine that may be alive is fenced only "
                        f"by break-glass, and only once it has been silent for "
                        f"policy.fence_ambiguous_after ({wait:.0f} s): {e.silent_for:.0f} s so far, "
                        f"retry the step in {wait - e.silent_for:.0f} s")
            else:
                problems.append(f"node {name}: {lv.words()}; silent for {e.silent_for:.0f} s. "
                                "THE MACHINE MAY BE ALIVE: only break-glass fences it")
        elif e.silent_for < max(policy.fence_min_not_ready, policy.node_monitor_grace_period):
            problems.append(f"node {name} has been silent for {e.silent_for:.0f} s only, less "
                            f"than policy.fence_min_not_ready ({policy.fence_min_not_ready:.0f} s)")
    return FenceRefusal(tuple(problems), hold, foreign)


def check_zone(env: Env, *, zone: str, named: Iterable[str], nodes: Iterable[Obj],
               facts: list[Fact]) -> None:
    """9: a zone outage acts only on nodes of its zone: every node it names exists and carries
    that zone (``topology.kubernetes.io/zone``), as read now. Not a filter: a node of another
    zone in the list refuses the whole step, and break-glass does not lift it (start a run for
    the other zone instead)."""
    by_name = {meta(n)["name"]: n for n in nodes}
    wrong: list[str] = []
    for name in named:
        node = by_name.get(name)
        where = zone_of_node(node) if node is not None else None
        if where != zone:
            wrong.append(f"{name} ({'not a node of this cluster' if node is None else f'zone {where}'})")
    facts.append(env.fact(f"zone {zone}", "nodes_outside", wrong))
    if wrong:
        raise InterlockBlocked(RULE_ZONE, (
            f"this run is for zone {zone}, but {len(wrong)} of its nodes are not in it: "
            f"{', '.join(wrong[:10])}{' ...' if len(wrong) > 10 else ''}. A zone outage never "
            "touches another zone; drop those nodes, or start a run for their zone"))
