"""Dead-node incidents whose workload is not a StatefulSet (registered in ``bot.sim.scenarios``).

- ``node-dead-deployment``: a Deployment of one replica with a gp3 ReadWriteOnce claim, its pod on
  the node in ap-southeast-1a that dies (instance stopped), as in ``node-dead``. The ReplicaSet does
  not wait for the evicted pod (Terminating on the dead node) to go: a replacement is created at
  once, and sticks on Multi-Attach on the other node of the zone. Two pods name one claim, so a
  success check that counts pods fails a correct recovery.

Options: ``scaled_to_zero=true``: someone scaled the Deployment to 0 after the node died (the
replacement is deleted; only the Terminating pod on the dead node is left, and no consumer of the
claim is wanted). ``finished_job=true``: a Job that ran a migration against the same claim on the
same node ran to completion (the Job controller's ``Complete``) before the node died; its Succeeded
pod is still listed with the claim.
"""

from __future__ import annotations

from typing import Any

from bot.sim.controllers.context import ZONE, ebs_source, instance_id, va_name
from bot.sim.controllers.jobs import run_seconds
from bot.sim.staging import (
    ZONES,
    Scenario,
    Stage,
    add_nodes,
    at_death,
    lose_contact,
    namespace,
    storage_class,
)

SHOP = "shop"
APP = "cart"
CLAIM = "cart-data"
IMAGE = "public.ecr.aws/docker/library/postgres:16"


def _flag(sb: Stage, name: str) -> bool:
    return str(sb.options.get(name, False)).lower() in ("1", "true", "yes")


def deployment(sb: Stage, *, zone: str) -> None:
    """The claim and a Deployment of one replica using it, kept in ``zone`` (where its EBS volume
    will be: an EBS volume cannot leave its zone)."""
    sb.create("PersistentVolumeClaim", {
        "metadata": {"name": CLAIM, "namespace": SHOP},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                 "resources": {"requests": {"storage": "20Gi"}}}}, SHOP)
    labels = {"app": APP}
    sb.create("Deployment", {
        "metadata": {"name": APP, "namespace": SHOP},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 # the default strategy: maxSurge 25% (1 pod), maxUnavailable 25% (0 pods)
                 "strategy": {"type": "RollingUpdate"},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "nodeSelector": {ZONE: zone},
                     "containers": [{"name": "postgres", "image": IMAGE,
                                     "resources": {"requests": {"cpu": "250m"}},
                                     "volumeMounts": [{"name": "data",
                                                       "mountPath": "/var/lib/postgresql/data"}]}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}],
                     "terminationGracePeriodSeconds": 30}}}}, SHOP)


def _pods(sb: Stage) -> list[dict[str, Any]]:
    return [p for p in sb.list("Pod", SHOP) if p["metadata"].get("labels", {}).get("app") == APP]


def _finished_job(sb: Stage, node: str) -> str:
    """A Job that ran a migration against the claim on ``node``, run to completion by the Job
    controller before the node died; its ``Succeeded`` pod stays (nothing deletes it)."""
    assert sb.ctx is not None
    name = f"{APP}-migrate"
    sb.create("Job", {
        "metadata": {"name": name, "namespace": SHOP},
        "spec": {"completions": 1, "backoffLimit": 0, "template": {
            "metadata": {"labels": {"app": f"{APP}-migrate"}},
            "spec": {"nodeName": node, "restartPolicy": "Never",  # where the claim is attached
                     "containers": [{"name": "migrate", "image": IMAGE}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}]}}}},
        SHOP)
    sb.advance(run_seconds(sb.ctx) + 10)
    job = sb.get("Job", SHOP, name)
    assert any(c["type"] == "Complete" for c in job["status"].get("conditions") or ()), job["status"]
    [pod] = [p for p in sb.list("Pod", SHOP)
             if p["metadata"].get("labels", {}).get("job-name") == name]
    assert pod["status"]["phase"] == "Succeeded"
    return str(pod["metadata"]["name"])


def build_node_dead_deployment(sb: Stage) -> dict[str, Any]:
    namespace(sb, SHOP)
    for zone in ZONES:
        add_nodes(sb, zone, 2)
    storage_class(sb, "gp3", "WaitForFirstConsumer", default=True)
    deployment(sb, zone=ZONES[0])
    sb.advance(10)
    [pod] = _pods(sb)
    node = pod["spec"]["nodeName"]
    pvc = sb.get("PersistentVolumeClaim", SHOP, CLAIM)
    pv = sb.get("PersistentVolume", None, pvc["spec"]["volumeName"])
    driver, vid = ebs_source(pv) or ("", "")
    iid = instance_id(sb.get("Node", None, node))
    assert iid
    facts: dict[str, Any] = {
        "namespace": SHOP, "deployment": APP, "pod": pod["metadata"]["name"], "node": node,
        "dead_node": node, "instance_id": iid, "pvc": CLAIM, "pv": pv["metadata"]["name"],
        "volume_id": vid, "zone": ZONES[0], "volume_attachment": va_name(vid, node, driver)}
    if _flag(sb, "finished_job"):
        facts["job_pod"] = _finished_job(sb, node)
    sb.ec2.set_state(iid, "stopped", reason_code="Server.InternalError",
                     reason_message="Server.InternalError: Internal error on the host")
    if at_death(sb):  # staged the moment it died (bench/recovery.py)
        return {**facts, "new_pod": None, "new_node": None, "died_at": sb.now_ts()}
    lose_contact(sb)
    sb.advance(300)  # tolerationSeconds: the pod is evicted, Terminating; the replacement is made
    sb.advance(5)
    [new] = [p for p in _pods(sb) if p["metadata"]["name"] != facts["pod"]]
    facts.update(new_pod=new["metadata"]["name"], new_node=new["spec"].get("nodeName"))
    if _flag(sb, "scaled_to_zero"):
        sb.store.mutate("Deployment", SHOP, APP, lambda d: d["spec"].update(replicas=0))
        # the ReplicaSet deletes the waiting replacement, which its live kubelet stops within its
        # grace period (30 s); the evicted pod stays
        sb.advance(35, step=5)
        facts["scaled_to_zero"] = True
    return facts


WORKLOAD_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("node-dead-deployment", "like node-dead, for a Deployment of one replica with a gp3 "
             "RWO claim: the evicted pod stays Terminating on the dead node and its replacement "
             "sticks on Multi-Attach (options scaled_to_zero=true: the Deployment was then scaled "
             "to 0; finished_job=true: a finished Job's Succeeded pod names the same claim)", 1,
             build_node_dead_deployment, {}),
)
