"""StatefulSets, the EBS provisioner and the scheduler: how pods come back and where they land.

The StatefulSet controller recreates a missing ordinal (never while the old pod still exists, even
Terminating: that is why a dead node blocks recovery). The provisioner creates an EBS volume for a
PVC at once (``Immediate``) or in the zone of ``volume.kubernetes.io/selected-node``
(``WaitForFirstConsumer``), and pins the PV to that zone with ``nodeAffinity``. The scheduler runs
the filters that decide the seed incidents (taints, node selector, capacity, pod anti-affinity, PV
zone) and reports failures with the real ``0/N nodes are available: ...`` text.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from bot.sim.controllers.context import (
    AUTO_DRIVER,
    DRIVER,
    EBS_ZONE,
    IN_TREE,
    ZONE,
    Context,
    node_ready,
    pod_pvcs,
)
from bot.sim.controllers.gc import _tolerates
from bot.sim.controllers.protection import PROVISIONER_FINALIZER
from bot.sim.nodegroups import volume_tags
from bot.sim.selectors import label_selector
from bot.sim.store import ts

SELECTED_NODE = "volume.kubernetes.io/selected-node"
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]


def reconcile_statefulsets(ctx: Context) -> None:
    for sts in ctx.items("StatefulSet"):
        if sts["metadata"].get("deletionTimestamp"):
            continue  # being deleted: it creates nothing more (the garbage collector's now)
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        spec = sts["spec"]
        ready = 0
        for i in range(int(spec.get("replicas", 1))):
            pod_name = f"{name}-{i}"
            for tpl in spec.get("volumeClaimTemplates") or []:
                claim = f"{tpl['metadata']['name']}-{pod_name}"
                if ctx.find("PersistentVolumeClaim", ns, claim) is None:
                    pvc = copy.deepcopy(tpl)
                    pvc["metadata"] = {"name": claim, "namespace": ns,
                                       "labels": dict(spec["template"]["metadata"].get("labels", {})),
                                       "finalizers": ["kubernetes.io/pvc-protection"]}
                    pvc["status"] = {"phase": "Pending"}
                    ctx.store.create(ctx.store_res("PersistentVolumeClaim"), pvc, ns)
                    ctx.event(sts, type="Normal", reason="SuccessfulCreate",
                              message=f"create Claim {claim} Pod {pod_name} in StatefulSet {name} success",
                              source="statefulset-controller")
            pod = ctx.find("Pod", ns, pod_name)
            if pod is not None:
                if pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get(
                        "deletionTimestamp"):
                    ready += 1
                continue
            tpl = copy.deepcopy(spec["template"])
            pod_spec = tpl["spec"]
            pod_spec.setdefault("tolerations", [])
            for tol in DEFAULT_TOLERATIONS:
                if not any(t.get("key") == tol["key"] for t in pod_spec["tolerations"]):
                    pod_spec["tolerations"].append(dict(tol))
            pod_spec["hostname"] = pod_name
            vols = [v for v in pod_spec.get("volumes") or []]
            for ctpl in spec.get("volumeClaimTemplates") or []:
                vols.append({"name": ctpl["metadata"]["name"], "persistentVolumeClaim": {
                    "claimName": f"{ctpl['metadata']['name']}-{pod_name}"}})
            pod_spec["volumes"] = vols
            labels = dict(tpl.get("metadata", {}).get("labels", {}))
            labels["statefulset.kubernetes.io/pod-name"] = pod_name
            ctx.store.create(ctx.store_res("Pod"), {
                "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                  "name": name, "uid": sts["metadata"]["uid"],
                                                  "controller": True}]},
                "spec": pod_spec, "status": {"phase": "Pending"}}, ns)
            ctx.event(sts, type="Normal", reason="SuccessfulCreate",
                      message=f"create Pod {pod_name} in StatefulSet {name} successful",
                      source="statefulset-controller")

        def status(s: dict[str, Any], ready: int = ready) -> None:
            s["status"] = _sts_status(s, ready)
        current = ctx.find("StatefulSet", ns, name)
        if current is None or current.get("status") != _sts_status(current, ready):
            ctx.store.mutate("StatefulSet", ns, name, status)  # else as reported: nothing to write


def _sts_status(s: dict[str, Any], ready: int) -> dict[str, Any]:
    return {"replicas": int(s["spec"].get("replicas", 1)), "readyReplicas": ready,
            "availableReplicas": ready, "currentReplicas": int(s["spec"].get("replicas", 1)),
            "observedGeneration": s["metadata"].get("generation", 1)}


def _zones(ctx: Context) -> list[str]:
    return sorted({n["metadata"].get("labels", {}).get(ZONE, "") for n in ctx.items("Node")} - {""})


def reconcile_provisioner(ctx: Context) -> None:
    if ctx.state.get("csi_controller_down"):
        return
    for pvc in ctx.items("PersistentVolumeClaim"):
        if pvc["spec"].get("volumeName") or pvc["metadata"].get("deletionTimestamp"):
            continue
        sc = ctx.find("StorageClass", None, pvc["spec"].get("storageClassName", ""))
        if sc is None or sc.get("provisioner") not in (DRIVER, AUTO_DRIVER, IN_TREE):
            continue
        driver = sc["provisioner"]
        ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
        if sc.get("volumeBindingMode", "Immediate") == "WaitForFirstConsumer":
            node = ctx.find("Node", None, pvc["metadata"].get("annotations", {}).get(SELECTED_NODE, ""))
            if node is None:
                continue
            zone = node["metadata"]["labels"][ZONE]
        else:
            allowed = [v for t in sc.get("allowedTopologies") or []
                       for e in t.get("matchLabelExpressions") or [] for v in e.get("values") or []]
            zones = allowed or _zones(ctx)
            if not zones:
                continue
            # Immediate binding ignores where the consumer can run: any zone, here a seeded one.
            zone = zones[int(pvc["metadata"]["uid"][:8], 16) % len(zones)]
        size = pvc["spec"].get("resources", {}).get("requests", {}).get("storage", "10Gi")
        gib = int(str(size).rstrip("Gi") or 10)
        try:
            tags = volume_tags(ctx.options, pv=f"pvc-{pvc['metadata']['uid']}", pvc=name, namespace=ns)
            vol = ctx.ec2_client.create_volume(
                AvailabilityZone=zone, Size=gib, VolumeType="gp3", TagSpecifications=[
                    {"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}])
        except Exception as e:  # throttling, mostly: report it and try again on the next pass
            ctx.event(pvc, type="Warning", reason="ProvisioningFailed",
                      message=f'failed to provision volume with StorageClass "{sc["metadata"]["name"]}": '
                              f"rpc error: code = Internal desc = {_err(e)}",
                      source=f"{driver}_ebs-csi-controller")
            continue
        pv_name = f"pvc-{pvc['metadata']['uid']}"
        ctx.store.create(ctx.store_res("PersistentVolume"), make_pv(
            pv_name, vol["VolumeId"], zone, size, ns, name, pvc["metadata"]["uid"],
            sc["metadata"]["name"], pvc["spec"].get("accessModes") or ["ReadWriteOnce"],
            driver=driver, reclaim=sc.get("reclaimPolicy", "Delete")))
        bind_pvc(ctx, ns, name, pv_name, size, pvc["spec"].get("accessModes") or ["ReadWriteOnce"])
        ctx.event(pvc, type="Normal", reason="ProvisioningSucceeded",
                  message=f"Successfully provisioned volume {pv_name}",
                  source=f"{driver}_ebs-csi-controller")


def _err(e: Exception) -> str:
    err = (getattr(e, "response", None) or {}).get("Error", {})
    return f"{err.get('Code', type(e).__name__)}: {err.get('Message', str(e))}"


def make_pv(pv_name: str, volume_id: str, zone: str, size: str, ns: str, claim: str, claim_uid: str,
            sc: str, modes: list[str], *, driver: str = DRIVER, reclaim: str = "Delete") -> dict[str, Any]:
    """A PV as the external-provisioner writes it (admission adds ``pv-protection``).

    For the in-tree ``kubernetes.io/aws-ebs`` provisioner (migrated to the EBS CSI driver) the PV
    keeps the in-tree ``awsElasticBlockStore`` source and the zone label, as migration writes it.
    """
    if driver == IN_TREE:
        pv = make_pv(pv_name, volume_id, zone, size, ns, claim, claim_uid, sc, modes, reclaim=reclaim)
        del pv["spec"]["csi"]
        pv["spec"]["awsElasticBlockStore"] = {"volumeID": f"aws://{zone}/{volume_id}", "fsType": "ext4"}
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] = ZONE
        pv["metadata"]["annotations"].update({"pv.kubernetes.io/provisioned-by": IN_TREE,
                                              "pv.kubernetes.io/migrated-to": DRIVER})
        return pv
    return {
        "metadata": {"name": pv_name,
                     "finalizers": [PROVISIONER_FINALIZER] if reclaim == "Delete" else [],
                     "annotations": {"pv.kubernetes.io/provisioned-by": driver,
                                     "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                                     "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""}},
        "spec": {"capacity": {"storage": size}, "accessModes": modes,
                 "persistentVolumeReclaimPolicy": reclaim, "storageClassName": sc,
                 "claimRef": {"kind": "PersistentVolumeClaim", "namespace": ns, "name": claim,
                              "uid": claim_uid},
                 "csi": {"driver": driver, "volumeHandle": volume_id, "fsType": "ext4"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": EBS_ZONE, "operator": "In", "values": [zone]}]}]}}},
        "status": {"phase": "Bound"},
    }


def bind_pvc(ctx: Context, ns: str, name: str, pv_name: str, size: str, modes: list[str]) -> None:
    def apply(p: dict[str, Any]) -> None:
        p["spec"]["volumeName"] = pv_name
        p["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
        p["status"] = {"phase": "Bound", "capacity": {"storage": size}, "accessModes": modes}
    ctx.store.mutate("PersistentVolumeClaim", ns, name, apply)


def _affinity_ok(node: dict[str, Any], terms: list[dict[str, Any]]) -> bool:
    labels = node["metadata"].get("labels", {})
    # The EBS zone label and the well-known zone label are the same fact on a node.
    if ZONE in labels:
        labels = {**labels, EBS_ZONE: labels.get(EBS_ZONE, labels[ZONE])}
    for term in terms:
        ok = True
        for e in term.get("matchExpressions") or []:
            value, op, values = labels.get(e["key"]), e.get("operator", "In"), e.get("values") or []
            if (op == "In" and value not in values) or (op == "NotIn" and value in values) or \
                    (op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None):
                ok = False
        if ok:
            return True
    return not terms


def _pv_terms(ctx: Context, pod: dict[str, Any]) -> tuple[list[list[dict[str, Any]]], bool]:
    """Node-affinity terms of the pod's bound PVs, and whether an Immediate claim is still unbound."""
    terms, unbound = [], False
    for claim in pod_pvcs(pod):
        pvc = ctx.find("PersistentVolumeClaim", pod["metadata"]["namespace"], claim)
        if pvc is None:
            unbound = True
            continue
        if not pvc["spec"].get("volumeName"):
            sc = ctx.find("StorageClass", None, pvc["spec"].get("storageClassName", ""))
            if sc is None or sc.get("volumeBindingMode", "Immediate") != "WaitForFirstConsumer":
                unbound = True
            continue
        pv = ctx.find("PersistentVolume", None, pvc["spec"]["volumeName"])
        req = (pv or {}).get("spec", {}).get("nodeAffinity", {}).get("required", {})
        if req:
            terms.append(req.get("nodeSelectorTerms") or [])
    return terms, unbound


def _cpu(value: Any) -> float:
    s = str(value or "0")
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def _filter(ctx: Context, pod: dict[str, Any], node: dict[str, Any], pods: list[dict[str, Any]],
            pv_terms: list[list[dict[str, Any]]]) -> str | None:
    """The first failing filter's reason for this node, or None if the pod fits."""
    return (_node_usable(pod, node) or _node_affinity(pod, node) or _capacity(pod, node, pods)
            or next((_VOLUME_CONFLICT for terms in pv_terms if not _affinity_ok(node, terms)),
                    None)
            or _anti_affinity(ctx, pod, node, pods))


_AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
_VOLUME_CONFLICT = "node(s) had volume node affinity conflict"


def _node_usable(pod: dict[str, Any], node: dict[str, Any]) -> str | None:
    """Unschedulable, an untolerated taint, not ready: why no pod goes there, or None."""
    if node["spec"].get("unschedulable"):
        return "node(s) were unschedulable"
    for taint in node["spec"].get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod, taint)[0]:
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    if not node_ready(node):
        return "node(s) were not ready"
    return None


def _node_affinity(pod: dict[str, Any], node: dict[str, Any]) -> str | None:
    """The pod's node selector and required node affinity against the node's labels."""
    spec = pod["spec"]
    labels = node["metadata"].get("labels", {})
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return _AFFINITY_MISMATCH
    req = spec.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    if req and not _affinity_ok(node, req.get("nodeSelectorTerms") or []):
        return _AFFINITY_MISMATCH
    return None


def _capacity(pod: dict[str, Any], node: dict[str, Any], pods: list[dict[str, Any]]) -> str | None:
    """Room on the node: its pod count and the CPU its pods request."""
    on_node = [p for p in pods if p["spec"].get("nodeName") == node["metadata"]["name"]]
    alloc = node.get("status", {}).get("allocatable", {})
    if len(on_node) >= int(alloc.get("pods", 110)):
        return "Too many pods"
    want = sum(_cpu(c.get("resources", {}).get("requests", {}).get("cpu"))
               for c in pod["spec"].get("containers") or [])
    used = sum(_cpu(c.get("resources", {}).get("requests", {}).get("cpu"))
               for p in on_node for c in p["spec"].get("containers") or [])
    if want and used + want > _cpu(alloc.get("cpu", "64")):
        return "Insufficient cpu"
    return None


def _anti_affinity(ctx: Context, pod: dict[str, Any], node: dict[str, Any],
                   pods: list[dict[str, Any]]) -> str | None:
    """The pod's required anti-affinity: no matching pod in the node's topology domain."""
    anti = pod["spec"].get("affinity", {}).get("podAntiAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []
    for term in anti:
        sel = term.get("labelSelector", {}).get("matchLabels", {})
        match = label_selector(",".join(f"{k}={v}" for k, v in sel.items()))
        key = term.get("topologyKey", "kubernetes.io/hostname")
        if any(_same_domain(ctx, pod, node, other, key) and match(other) for other in pods):
            return "node(s) didn't match pod anti-affinity rules"
    return None


def _same_domain(ctx: Context, pod: dict[str, Any], node: dict[str, Any], other: dict[str, Any],
                 key: str) -> bool:
    """``other`` (not ``pod`` itself) runs on a node with the same ``key`` as ``node``."""
    other_node = ctx.find("Node", None, other["spec"].get("nodeName") or "")
    if other_node is None or other["metadata"]["name"] == pod["metadata"]["name"]:
        return False
    if key == "kubernetes.io/hostname":
        return bool(other_node["metadata"]["name"] == node["metadata"]["name"])
    return bool(other_node["metadata"].get("labels", {}).get(key)
                == node["metadata"].get("labels", {}).get(key))


def reconcile_scheduler(ctx: Context) -> None:
    nodes = ctx.items("Node")
    pods = ctx.items("Pod")
    for index, pod in enumerate(pods):
        if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            continue
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        pv_terms, unbound = _pv_terms(ctx, pod)
        reasons: Counter[str] = Counter()
        fits: list[dict[str, Any]] = []
        for node in nodes:
            if unbound:
                reasons["pod has unbound immediate PersistentVolumeClaims"] += 1
                continue
            why = _filter(ctx, pod, node, pods, pv_terms)
            if why is None:
                fits.append(node)
            else:
                reasons[why] += 1
        if not fits:
            total = len(nodes)
            detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            msg = f"0/{total} nodes are available: {detail}." if detail else \
                f"0/{total} nodes are available."
            msg += f" preemption: 0/{total} nodes are available: {total} Preemption is not helpful " \
                   "for scheduling."

            def unsched(p: dict[str, Any], msg: str = msg) -> None:
                p.setdefault("status", {})["phase"] = "Pending"
                p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                              "reason": "Unschedulable", "message": msg,
                                              "lastTransitionTime": ts(ctx.now)}]
            ctx.store.mutate("Pod", ns, name, unsched)
            ctx.event(pod, type="Warning", reason="FailedScheduling", message=msg,
                      source="default-scheduler")
            continue
        load = Counter(p["spec"].get("nodeName") for p in pods)
        # Default spreading: fewest pods of the same owner in the zone, then least loaded node.
        owner = pod["metadata"].get("labels", {}).get("app")
        zone_of = {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(ZONE) for n in nodes}
        siblings = Counter(zone_of.get(p["spec"].get("nodeName") or "") for p in pods
                           if owner and p["metadata"].get("labels", {}).get("app") == owner
                           and p["spec"].get("nodeName"))
        target = min(fits, key=lambda n: (siblings[zone_of[n["metadata"]["name"]]],
                                          load[n["metadata"]["name"]], n["metadata"]["name"]))
        tname = target["metadata"]["name"]
        for claim in pod_pvcs(pod):
            pvc = ctx.find("PersistentVolumeClaim", ns, claim)
            if pvc is not None and not pvc["spec"].get("volumeName"):
                def select(p: dict[str, Any], tname: str = tname) -> None:
                    p["metadata"].setdefault("annotations", {})[SELECTED_NODE] = tname
                ctx.store.mutate("PersistentVolumeClaim", ns, claim, select)

        def bind(p: dict[str, Any], tname: str = tname) -> None:
            p["spec"]["nodeName"] = tname
            p.setdefault("status", {})["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        bound = ctx.store.mutate("Pod", ns, name, bind)
        # Later pods in this pass must see this one on its node (capacity, anti-affinity).
        pods[index] = bound or pod
        ctx.event(pod, type="Normal", reason="Scheduled",
                  message=f"Successfully assigned {ns}/{name} to {tname}", source="default-scheduler")
