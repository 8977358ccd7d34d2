"""Declarations of every shipped action: name, params model, destructive flag, summary.

Pure data: importing this module imports no SDK. The validator checks runbooks against it; the
implementations in kube.py / ec2.py / flow.py attach behaviour to these names. Params are checked
here, before any API is called: node names, instance ids and volume ids must have their real forms.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.actions.registry import registry
from bot.runbook.model import Duration

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NodeName = Annotated[
    str,
    Field(pattern=DNS1123_SUBDOMAIN, max_length=253,
          description="A node name in DNS-1123 form, e.g. ip-10-0-12-34.ec2.internal"),
]
ObjectName = Annotated[
    str,
    Field(pattern=DNS1123_SUBDOMAIN, max_length=253,
          description="A Kubernetes object name in DNS-1123 form: lowercase letters, digits, '-' "
                      "and '.', e.g. data-es-0"),
]
InstanceId = Annotated[
    str, Field(pattern=r"^i-[0-9a-f]{8,17}$", description="An EC2 instance id, e.g. i-0abc12345678")
]
VolumeId = Annotated[
    str, Field(pattern=r"^vol-[0-9a-f]{8,17}$", description="An EBS volume id, e.g. vol-0abc1234")
]
_QUALIFIED = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
              r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
TaintKey = Annotated[
    str, Field(pattern=_QUALIFIED, max_length=317,
               description="A taint key: an optional DNS-1123 prefix and '/', then a name of at "
                           "most 63 letters, digits, '-', '_' or '.', e.g. "
                           "node.kubernetes.io/out-of-service")
]
TaintValue = Annotated[
    str, Field(pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", max_length=63,
               description="A taint value: at most 63 letters, digits, '-', '_' or '.', e.g. "
                           "nodeshutdown")
]
Finalizer = Annotated[
    str, Field(pattern=_QUALIFIED, max_length=317,
               description="A finalizer name, e.g. kubernetes.io/pv-protection")
]
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    cluster: str | None = Field(
        default=None, description="Configured cluster name; needed when several are configured."
    )


class NodeParams(_Params):
    node: NodeName


class TaintParams(_Params):
    node: NodeName
    key: TaintKey = OUT_OF_SERVICE_TAINT
    value: TaintValue = "nodeshutdown"
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoExecute"


class UntaintParams(_Params):
    node: NodeName
    key: TaintKey = OUT_OF_SERVICE_TAINT
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class PodsListParams(_Params):
    node: NodeName | None = None
    namespace: ObjectName | None = None
    selector: str | None = Field(default=None, description="A label selector, e.g. app=es")
    claims: tuple[str, ...] | None = Field(
        default=None, description="Only pods using one of these claims, as namespace/name")


class PodParams(_Params):
    pod: ObjectName
    namespace: ObjectName = "default"


class VolumeAttachmentsListParams(_Params):
    node: NodeName | None = None
    pv: ObjectName | None = None


class WaitGoneParams(_Params):
    node: NodeName
    timeout: Duration = 600.0


class PvParams(_Params):
    name: ObjectName


class PvListParams(_Params):
    storage_class: ObjectName | None = None
    claim_namespace: ObjectName | None = None


class PvcParams(_Params):
    name: ObjectName
    namespace: ObjectName = "default"


class StorageClassAuditParams(_Params):
    pass


class FinalizersRemoveParams(_Params):
    kind: Literal["PersistentVolume", "PersistentVolumeClaim", "VolumeAttachment"]
    name: ObjectName
    namespace: ObjectName | None = Field(default=None, description="For PersistentVolumeClaim.")
    finalizers: tuple[Finalizer, ...] | None = Field(
        default=None, description="Which finalizers to remove; all when omitted."
    )

    @model_validator(mode="after")
    def _claims_are_namespaced(self) -> Self:
        if self.kind == "PersistentVolumeClaim" and self.namespace is None:
            raise ValueError("namespace is required for a PersistentVolumeClaim")
        return self


class InstanceParams(_Params):
    instance_id: InstanceId


class InstanceStopParams(_Params):
    instance_id: InstanceId
    force: bool = True


class VolumesListParams(_Params):
    instance_id: InstanceId | None = None
    volume_ids: tuple[VolumeId, ...] | None = None
    tags: dict[str, str] | None = None


class VolumeParams(_Params):
    volume_id: VolumeId


class VolumeDetachParams(_Params):
    volume_id: VolumeId
    instance_id: InstanceId | None = None
    force: bool = False


class ConfirmParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    item: Annotated[str, Field(min_length=1, max_length=2000)]


class NotifyParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    message: Annotated[str, Field(min_length=1, max_length=3000)]


class WaitParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    duration: Duration


_D = registry.declare
_D("k8s.node.get", params=NodeParams, destructive=False,
   summary="Read node {{ node }}", description="Ready condition, taints, instance id and zone.")
_D("k8s.node.taint", params=TaintParams, destructive=True,
   summary="Taint node {{ node }} with {{ key }}={{ value }}:{{ effect }}",
   description="Add a taint, read-modify-write checked by resourceVersion.")
_D("k8s.node.untaint", params=UntaintParams, destructive=True,
   summary="Remove taint {{ key }} from node {{ node }}",
   description="Remove a taint, read-modify-write checked by resourceVersion.")
_D("k8s.node.cordon", params=NodeParams, destructive=False,
   summary="Cordon node {{ node }}", description="Mark the node unschedulable.")
_D("k8s.node.uncordon", params=NodeParams, destructive=False,
   summary="Uncordon node {{ node }}", description="Mark the node schedulable again.")
_D("k8s.pods.list", params=PodsListParams, destructive=False,
   summary="List pods{% if node %} on {{ node }}{% endif %}",
   description="Pods by node or selector, with their status reasons.")
_D("k8s.pod.events", params=PodParams, destructive=False,
   summary="Read events of pod {{ namespace }}/{{ pod }}",
   description="Event reasons and messages; detects Multi-Attach and affinity conflicts.")
_D("k8s.volumeattachments.list", params=VolumeAttachmentsListParams, destructive=False,
   summary="List VolumeAttachments{% if node %} on {{ node }}{% endif %}",
   description="VolumeAttachments by node or PV, with attach/detach errors.")
_D("k8s.volumeattachments.wait_gone", params=WaitGoneParams, destructive=False,
   summary="Wait for VolumeAttachments on {{ node }} to go",
   description="Polls until no VolumeAttachment names the node, reporting progress.")
_D("k8s.pv.get", params=PvParams, destructive=False,
   summary="Read PersistentVolume {{ name }}",
   description="The EBS volume id (CSI or in-tree) and zone affinity.")
_D("k8s.pv.list", params=PvListParams, destructive=False,
   summary="List PersistentVolumes", description="PVs with EBS volume ids and zones.")
_D("k8s.pvc.get", params=PvcParams, destructive=False,
   summary="Read PersistentVolumeClaim {{ namespace }}/{{ name }}",
   description="The claim, its phase and its bound volume.")
_D("k8s.storageclasses.audit", params=StorageClassAuditParams, destructive=False,
   summary="Audit StorageClass binding modes",
   description="Binding mode against the zones in use.")
_D("k8s.finalizers.remove", params=FinalizersRemoveParams, destructive=True,
   summary="Remove finalizers from {{ kind }} {{ name }}",
   description="Clear finalizers; refused while the PV's EBS volume still exists.")
_D("aws.ec2.instance.get", params=InstanceParams, destructive=False,
   summary="Read EC2 instance {{ instance_id }}",
   description="State, state reason and status checks.")
_D("aws.ec2.instance.stop", params=InstanceStopParams, destructive=True,
   summary="Stop EC2 instance {{ instance_id }}{% if force %} (force){% endif %}",
   description="Fence the instance and wait for it to be stopped.")
_D("aws.ec2.volumes.list", params=VolumesListParams, destructive=False,
   summary="List EBS volumes", description="By instance, ids or tags.")
_D("aws.ec2.volume.get", params=VolumeParams, destructive=False,
   summary="Read EBS volume {{ volume_id }}", description="State and attachments.")
_D("aws.ec2.volume.detach", params=VolumeDetachParams, destructive=True,
   summary="Detach EBS volume {{ volume_id }}{% if force %} with FORCE{% endif %}",
   description="Detach at EC2 and wait for available; only from a stopped instance.")
_D("aws.ec2.volume.delete", params=VolumeParams, destructive=True,
   summary="Delete EBS volume {{ volume_id }}", description="Only an available volume.")
_D("manual.confirm", params=ConfirmParams, destructive=False,
   summary="Confirm: {{ item }}", description="A person confirms a checklist item.")
_D("notify", params=NotifyParams, destructive=False,
   summary="Notify: {{ message }}", description="A message to the run's channel or terminal.")
_D("wait", params=WaitParams, destructive=False,
   summary="Wait", description="Wait for a duration.")

# Diagnosis actions declare themselves next to their implementation.
from bot.actions import reports as _reports  # noqa: E402,F401
