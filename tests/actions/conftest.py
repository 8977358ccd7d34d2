"""Fixtures for the action tests: a fake Kubernetes API and moto EC2 over HTTP, and a ``World``
that builds incident states (dead node, attached volume, stuck attachment) in both at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from moto.server import ThreadedMotoServer

from bot.actions.catalog import ClusterClients, RegistryCatalog, build_catalog
from bot.actions.registry import Registry
from bot.clients.ec2 import Ec2Client, boto3_client
from bot.clients.kube import KubeClient
from bot.config import ClusterConfig, PolicyConfig, Settings
from bot.engine.plan import ApiCall, Plan, Result
from bot.engine.ports import ManualClock, StepContext
from tests.fakes.ec2_proxy import ThrottlingProxy
from tests.fakes.kube_api import FakeKubeApi

REGION = "us-east-1"
ZONE = "us-east-1a"
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@dataclass
class Ec2Backend:
    """moto, the throttling proxy in front of it, and clients built once (botocore loads its
    service model per session, which is slow enough to matter when repeated per test)."""

    url: str
    proxy: Any
    arrange: Any  # straight to moto, for arranging state
    product: Any  # through the proxy, what the product's Ec2Client wraps

    def reset(self) -> None:
        # no moto reset (it costs ~0.5 s): every test creates fresh instance and volume ids
        self.proxy.throttle_next = 0
        self.proxy.throttle_actions.clear()
        self.proxy.fail_next.clear()
        self.proxy.fail_actions.clear()
        self.proxy.requests.clear()
        self.proxy.ignore_dry_run = False
        self.proxy.impaired.clear()


@pytest.fixture(scope="session")
def ec2_backend() -> Iterator[Ec2Backend]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    proxy = ThrottlingProxy(url)
    arrange = boto3.client("ec2", region_name=REGION, endpoint_url=url,
                           config=Config(retries={"mode": "standard"}), **CREDS)
    product = boto3_client(region=REGION, endpoint_url=proxy.url, credentials=CREDS)
    yield Ec2Backend(url=url, proxy=proxy, arrange=arrange, product=product)
    proxy.close()
    server.stop()


@dataclass
class World:
    """One cluster's Kubernetes API and EC2 account, and the catalog wired to both."""

    kube: Any  # FakeKubeApi
    proxy: Any  # ThrottlingProxy in front of moto
    ec2: Any  # a raw boto3 client for arranging EC2 state
    catalog: RegistryCatalog
    clock: ManualClock
    overrides: frozenset[str] = frozenset()
    contexts: list[StepContext] = field(default_factory=list)
    instances: list[str] = field(default_factory=list)  # EC2 ids this test created
    volumes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)  # what a test's arrange step wants to keep

    def ctx(self, *, dry_run: bool = False, overrides: frozenset[str] | None = None,
            poll: bool = False, last_result: dict[str, Any] | None = None) -> StepContext:
        ctx = StepContext(run_id="rb-test1", step_id="s1", requester="alice", clock=self.clock,
                          dry_run=dry_run, poll=poll, last_result=last_result,
                          overrides=self.overrides if overrides is None else overrides)
        self.contexts.append(ctx)
        return ctx

    def plan(self, action: str, *, dry_run: bool = False, overrides: frozenset[str] | None = None,
             **params: Any) -> tuple[Plan, list[ApiCall]]:
        ctx = self.ctx(dry_run=dry_run, overrides=overrides)
        return self.catalog.plan(action, params, ctx), ctx.calls

    def apply(self, plan: Plan, *, overrides: frozenset[str] | None = None, poll: bool = False,
              last_result: dict[str, Any] | None = None) -> tuple[Result, list[ApiCall]]:
        """``poll``: a later apply of a step whose first apply was not done, as the engine marks
        it; ``last_result``: what the previous apply returned, which the engine hands a poll."""
        ctx = self.ctx(overrides=overrides, poll=poll, last_result=last_result)
        return self.catalog.apply(plan.action, plan, ctx), ctx.calls

    def run(self, action: str, **params: Any) -> Result:
        plan, _ = self.plan(action, **params)
        return self.apply(plan)[0]

    def until_done(self, plan: Plan, *, overrides: frozenset[str] | None = None, limit: int = 20,
                   between: Callable[[], object] | None = None
                   ) -> tuple[list[Result], list[ApiCall]]:
        """Apply, then poll as the engine would until done: every poll's result, and all calls."""
        calls: list[ApiCall] = []
        results: list[Result] = []
        last: dict[str, Any] | None = None
        for n in range(limit):
            result, more = self.apply(plan, overrides=overrides, poll=n > 0, last_result=last)
            last = dict(result.data) if result.data else last
            calls.extend(more)
            results.append(result)
            if result.done:
                return results, calls
            self.clock.advance(result.retry_after)
            if between is not None:  # the world moves on while the step waits
                between()
        raise AssertionError(f"{plan.action} not done after {limit} polls")

    def writes(self) -> list[str]:
        """Write requests that reached either API so far (the fakes' own request logs)."""
        kube = [f"{m} {p}" for m, p in self.kube.requests if m != "GET"]
        ec2 = [a for a in self.proxy.requests if not a.startswith("Describe")]
        return kube + ec2

    # -- arranging EC2 ---------------------------------------------------------------------------

    def instance(self, *, state: str = "running", zone: str = ZONE,
                 cluster: str | None = "test") -> str:
        """An instance, tagged as the node group of ``cluster`` tags its machines (None: untagged)."""
        tags = [{"ResourceType": "instance", "Tags": [
            {"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]}] if cluster else []
        iid = self.ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                                     Placement={"AvailabilityZone": zone},
                                     TagSpecifications=tags)["Instances"][0]["InstanceId"]
        if state in {"stopped", "terminated"}:
            if state == "stopped":
                self.ec2.stop_instances(InstanceIds=[iid], Force=True)
            else:
                self.ec2.terminate_instances(InstanceIds=[iid])
        self.instances.append(str(iid))
        return str(iid)

    def volume(self, *, attach_to: str | None = None, zone: str = ZONE,
               tags: dict[str, str] | None = None) -> str:
        kw: dict[str, Any] = {}
        if tags:
            kw["TagSpecifications"] = [{"ResourceType": "volume",
                                        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
        vid = str(self.ec2.create_volume(Size=10, AvailabilityZone=zone, **kw)["VolumeId"])
        if attach_to:
            self.ec2.attach_volume(VolumeId=vid, InstanceId=attach_to, Device="/dev/xvdf")
        self.volumes.append(vid)
        return vid

    def instance_state(self, iid: str) -> str:
        r = self.ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        return str(r["State"]["Name"])

    def volume_state(self, vid: str) -> str | None:
        vols = self.ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [vid]}])["Volumes"]
        return str(vols[0]["State"]) if vols else None

    # -- arranging Kubernetes --------------------------------------------------------------------

    def node(self, name: str, *, ready: str = "True", instance_id: str | None = None,
             zone: str = ZONE, taints: list[dict[str, str]] | None = None,
             provider_id: str | None = None, rebooted: bool = True,
             cordoned_by: str | None = None) -> dict[str, Any]:
        """A node; one with the out-of-service taint carries the bot's record of the boot it was
        tainted on, and has booted again since unless ``rebooted=False``."""
        pid = provider_id if provider_id is not None else (
            f"aws:///{zone}/{instance_id}" if instance_id else "")
        notes: dict[str, str] = {}
        if any(t.get("key") == "node.kubernetes.io/out-of-service" for t in taints or ()):
            notes = {"runbook-bot.io/out-of-service-boot-id": "boot-at-taint",
                     "runbook-bot.io/out-of-service-at": "2026-01-01T00:00:00+00:00"}
        if cordoned_by:
            notes["runbook-bot.io/cordoned-by-run"] = cordoned_by
        return dict(self.kube.put("nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone},
                         "annotations": notes},
            "spec": {"providerID": pid, "taints": list(taints or [])},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                       "nodeInfo": {"bootID": "boot-now" if rebooted else "boot-at-taint"}},
        }))

    def dead_node(self, instance_id: str, *, name: str | None = None,
                  down_for: float = 600.0) -> str:
        """A node on the instance, silent for ``down_for`` seconds, its instance status check
        impaired: the dead machine a fence needs."""
        name = name or f"ip-{instance_id[2:14]}.ec2.internal"
        self.proxy.impaired.add(instance_id)
        since = self.clock.now() - timedelta(seconds=down_for)
        self.node(name, ready="Unknown", instance_id=instance_id)
        obj = self.kube.get("nodes", name)
        stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
        obj["status"]["conditions"][0].update(lastTransitionTime=stamp, lastHeartbeatTime=stamp)
        self.kube.put("nodes", obj)
        self.lease(name, renewed=since)
        return name

    def lease(self, node: str, *, renewed: datetime) -> None:
        """The kubelet's Lease, last renewed at ``renewed``."""
        self.kube.put("leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}})

    def pv(self, name: str, *, volume_id: str, zone: str = ZONE, legacy: bool = False,
           claim: tuple[str, str] | None = None, finalizers: list[str] | None = None,
           terminating: bool = False, phase: str = "Bound", reclaim: str | None = None,
           driver: str = "ebs.csi.aws.com") -> None:
        spec: dict[str, Any] = {"storageClassName": "gp3", "nodeAffinity": {"required": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": [zone]}]}]}}}
        if legacy:
            spec = {"storageClassName": "gp2",
                    "awsElasticBlockStore": {"volumeID": f"aws://{zone}/{volume_id}"}}
        else:
            spec["csi"] = {"driver": driver, "volumeHandle": volume_id}
        if reclaim:
            spec["persistentVolumeReclaimPolicy"] = reclaim
        if claim:
            spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
        meta: dict[str, Any] = {"name": name, "finalizers": finalizers or ["kubernetes.io/pv-protection"]}
        if terminating:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.kube.put("persistentvolumes", {"apiVersion": "v1", "kind": "PersistentVolume",
                                            "metadata": meta, "spec": spec,
                                            "status": {"phase": phase}})

    def pvc(self, name: str, *, namespace: str = "default", volume_name: str,
            terminating: bool = False) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": namespace,
                                "finalizers": ["kubernetes.io/pvc-protection"]}
        if terminating:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.kube.put("persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": {"volumeName": volume_name, "storageClassName": "gp3"},
            "status": {"phase": "Bound"}})

    def released_volume(self, pv: str = "pv-r", *, claim: str = "data-gone-0",
                        reclaim: str = "Delete", phase: str = "Released") -> str:
        """An EBS volume the CSI driver created for ``pv`` (tagged as it tags), and its PV, whose
        claim is gone: what the reclaim policy then applies to."""
        vid = self.volume(tags={"CSIVolumeName": pv, "ebs.csi.aws.com/cluster": "true",
                                "kubernetes.io/created-for/pv/name": pv,
                                "kubernetes.io/created-for/pvc/name": claim,
                                "kubernetes.io/created-for/pvc/namespace": "default"})
        self.pv(pv, volume_id=vid, claim=("default", claim), phase=phase, reclaim=reclaim,
                finalizers=["external-provisioner.volume.kubernetes.io/finalizer"])
        return vid

    def va(self, name: str, *, node: str, pv: str, attached: bool = True,
           detach_error: str | None = None, terminating: bool = False,
           attacher: str = "ebs.csi.aws.com") -> None:
        status: dict[str, Any] = {"attached": attached}
        if detach_error:
            status["detachError"] = {"time": "2026-01-01T00:00:00Z", "message": detach_error}
        meta: dict[str, Any] = {"name": name, "finalizers": ["external-attacher/ebs-csi-aws-com"]}
        if terminating:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.kube.put("volumeattachments", {
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": meta,
            "spec": {"attacher": attacher, "nodeName": node,
                     "source": {"persistentVolumeName": pv}},
            "status": status})

    def pod(self, name: str, *, node: str, namespace: str = "default", terminating: bool = False,
            pvc: str | None = None, waiting: str | None = None, labels: dict[str, str] | None = None,
            tolerations: list[dict[str, str]] | None = None) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {},
                                "uid": f"uid-{namespace}-{name}"}
        if terminating:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        status: dict[str, Any] = {"phase": "Pending" if waiting else "Running", "conditions": [
            {"type": "Ready", "status": "False" if waiting else "True"}]}  # as its kubelet posts
        if waiting:
            status["containerStatuses"] = [{"name": "c", "state": {"waiting": {"reason": waiting}}}]
        vols = [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}] if pvc else []
        spec: dict[str, Any] = {"nodeName": node, "volumes": vols}
        if tolerations:
            spec["tolerations"] = tolerations
        self.kube.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                               "spec": spec, "status": status})

    def event(self, pod: str, *, reason: str, message: str, namespace: str = "default",
              when: str = "2026-01-01T00:00:00Z") -> None:
        n = len(list(self.kube.items("events")))
        self.kube.put("events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod}.{n}", "namespace": namespace},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace},
            "type": "Warning", "reason": reason, "message": message, "count": 1,
            "lastTimestamp": when})

    def storage_class(self, name: str, *, mode: str | None = None,
                      zones: list[str] | None = None) -> None:
        sc: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                              "metadata": {"name": name}, "provisioner": "ebs.csi.aws.com"}
        if mode:
            sc["volumeBindingMode"] = mode
        if zones:
            sc["allowedTopologies"] = [{"matchLabelExpressions": [
                {"key": "topology.ebs.csi.aws.com/zone", "values": zones}]}]
        self.kube.put("storageclasses", sc)

    def taints(self, node: str) -> list[str]:
        obj = self.kube.get("nodes", node)
        return [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in obj["spec"].get("taints") or ()]


def make_world(*, backend: Ec2Backend, tmp_path: Path, max_oos: int = 3,
               page_size: int = 500, actions: Registry | None = None) -> Iterator[World]:
    backend.reset()
    with FakeKubeApi() as kube:
        kubeconfig = kube.kubeconfig(tmp_path)
        settings = Settings(database_url="sqlite://", clusters={
            "test": ClusterConfig(name="test", kubeconfig=str(kubeconfig), region=REGION)},
            policy=PolicyConfig(max_out_of_service_nodes=max_oos))

        def factory(cfg: ClusterConfig) -> ClusterClients:
            kc = KubeClient.from_config(kubeconfig=cfg.kubeconfig, request_timeout=5.0,
                                        sleep=lambda _s: None, page_size=page_size)
            return ClusterClients.of(kube=kc, ec2=Ec2Client(client=backend.product))

        yield World(kube=kube, proxy=backend.proxy, ec2=backend.arrange, clock=ManualClock(),
                    catalog=build_catalog(settings, clients_factory=factory, actions=actions))


@pytest.fixture
def world(request: pytest.FixtureRequest, ec2_backend: Ec2Backend, tmp_path: Path) -> Iterator[World]:
    """Parametrise indirectly with ``{"max_oos": N, "page_size": N}`` to change the policy."""
    options = getattr(request, "param", {})
    yield from make_world(backend=ec2_backend, tmp_path=tmp_path, **options)
