"""The params models of the shipped actions, and the forms of the values they take.

Params are checked against these models before any API is called: node and object names, instance
ids, volume ids, taint keys and finalizers must have their real forms, and an error names the field
and the form expected (each form's ``description``). Each action's definition (``kube.py``,
``ec2.py``, ``flow.py``) names its model here. Pure data: importing this module imports no SDK.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.actions.objects import OUT_OF_SERVICE_TAINT as OUT_OF_SERVICE_TAINT  # the taint's default
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
QUALIFIED_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
              r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
TaintKey = Annotated[
    str, Field(pattern=QUALIFIED_NAME, max_length=317,
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
    str, Field(pattern=QUALIFIED_NAME, max_length=317,
               description="A finalizer name, e.g. kubernetes.io/pv-protection")
]


class ClusterParams(BaseModel):
    """The base of an action's params that reads or writes a cluster: no unknown field, and the
    optional ``cluster`` every such action takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cluster: str | None = Field(
        default=None, description="Configured cluster name; needed when several are configured."
    )


class NodeParams(ClusterParams):
    node: NodeName


class LivenessParams(NodeParams):
    instance_id: str | None = Field(
        default=None, pattern=r"^i-[0-9a-f]{8,17}$",
        description="For a Node already deleted: the EC2 instance behind it (EC2 alone then "
                    "says whether the machine is down).")


class NodeGetParams(NodeParams):
    from_list: bool = Field(
        default=False,
        description="Read the node out of the list of every node: one request that also answers, "
                    "in the same pass, the node list the fence's and the out-of-service taint's "
                    "interlocks read (a GET and a LIST otherwise).")


class TaintParams(ClusterParams):
    node: NodeName
    key: TaintKey = OUT_OF_SERVICE_TAINT
    value: TaintValue = "nodeshutdown"
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoExecute"


class UntaintParams(ClusterParams):
    node: NodeName
    key: TaintKey = OUT_OF_SERVICE_TAINT
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class PodsListParams(ClusterParams):
    node: NodeName | None = None
    namespace: ObjectName | None = None
    selector: str | None = Field(default=None, description="A label selector, e.g. app=es")
    claims: tuple[str, ...] | None = Field(
        default=None, description="Only pods using one of these claims, as namespace/name")


ClaimRef = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                       r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", max_length=317,
               description="A PersistentVolumeClaim as namespace/name, e.g. search/data-es-0")
]


class ClaimsStatusParams(ClusterParams):
    claims: tuple[ClaimRef, ...] = Field(description="The claims to judge, as namespace/name")
    away_from: NodeName = Field(description="The node a pod must not be on to count: the dead one")


class PodParams(ClusterParams):
    pod: ObjectName
    namespace: ObjectName = "default"


class PodDeleteParams(ClusterParams):
    pod: ObjectName
    namespace: ObjectName = "default"
    node: NodeName = Field(description="The node the pod must still be bound to")
    grace_period_seconds: int | None = Field(
        default=None, ge=1, description="Seconds to terminate; the pod's own when omitted. Never 0")


class VolumeAttachmentsListParams(ClusterParams):
    node: NodeName | None = None
    pv: ObjectName | None = None


class VolumeAttachmentDeleteParams(ClusterParams):
    name: ObjectName


class VolumeAttachmentsDeleteParams(ClusterParams):
    names: tuple[ObjectName, ...] = Field(
        min_length=1, max_length=1000,
        description="The leftover VolumeAttachments, e.g. the names of "
                    "k8s.zone.leftover_attachments")


class WaitGoneParams(ClusterParams):
    node: NodeName
    timeout: Duration = 600.0


class PvParams(ClusterParams):
    name: ObjectName


class PvListParams(ClusterParams):
    storage_class: ObjectName | None = None
    claim_namespace: ObjectName | None = None


class PvcParams(ClusterParams):
    name: ObjectName
    namespace: ObjectName = "default"


class StorageClassAuditParams(ClusterParams):
    pass


class FinalizersRemoveParams(ClusterParams):
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


class InstanceParams(ClusterParams):
    instance_id: InstanceId


class InstanceStopParams(ClusterParams):
    instance_id: InstanceId
    force: bool = True


class InstanceTerminateParams(ClusterParams):
    instance_id: InstanceId


class NodeClaimDeleteParams(ClusterParams):
    node: NodeName
    instance_id: InstanceId


class VolumesListParams(ClusterParams):
    instance_id: InstanceId | None = None
    volume_ids: tuple[VolumeId, ...] | None = None
    tags: dict[str, str] | None = None


class VolumeParams(ClusterParams):
    volume_id: VolumeId


class VolumeDetachParams(ClusterParams):
    volume_id: VolumeId
    instance_id: InstanceId | None = None
    force: bool = False
    wait: bool = Field(default=True, description="Poll until the volume is off the instance; "
                                                 "false: done once EC2 accepted the detach")


class VolumeDetachTarget(BaseModel):
    """One volume of a batched detach and the instance it comes off. A row of
    ``k8s.zone.held_volumes`` passes as it is: its other keys (the PV, the attachment state it was
    listed in) are not read, since the plan reads every attachment again."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    volume_id: VolumeId
    instance_id: InstanceId


class VolumesDetachParams(ClusterParams):
    volumes: tuple[VolumeDetachTarget, ...] = Field(
        min_length=1, max_length=1000,
        description="The volumes and the instance each comes off, e.g. the items of "
                    "k8s.zone.held_volumes")
    force: bool = Field(default=False, description=(
        "Allow Force for an attachment stuck detaching or busy, behind interlock 2 for every "
        "volume"))


class VolumesWaitDetachedParams(ClusterParams):
    volume_ids: tuple[VolumeId, ...]
    instance_id: InstanceId | None = None
    instance_ids: tuple[InstanceId, ...] = Field((), description=(
        "Several instances (a zone's): an attachment to any of them still counts"))
    timeout: Duration = 600.0

    @model_validator(mode="after")
    def _some_instance(self) -> VolumesWaitDetachedParams:
        if self.instance_id is None and not self.instance_ids:
            raise ValueError("give instance_id (or instance_ids): the instance the volumes "
                             "should come off")
        return self


class ConfirmParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    item: Annotated[str, Field(min_length=1, max_length=2000)]


class NotifyParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    message: Annotated[str, Field(min_length=1, max_length=3000)]


class WaitParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    duration: Duration


class VolumeDeleteParams(ClusterParams):
    volume_id: VolumeId
    pv: ObjectName | None = Field(
        default=None, description="The PersistentVolume the volume must belong to (its tags).")


class VolumeSnapshotParams(ClusterParams):
    volume_id: VolumeId
    pv: ObjectName | None = Field(default=None, description="The PersistentVolume, for the tags.")
    wait: bool = Field(default=True, description="Poll until the snapshot is completed.")


ZoneName = Annotated[
    str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$",
               description="An availability zone, e.g. ap-southeast-1a")
]


class ZoneSurveyParams(ClusterParams):
    zone: ZoneName
    nodes: tuple[NodeName, ...] | None = Field(
        default=None, description="Only these nodes (all must be in the zone); every NotReady "
                                  "node of the zone when omitted")
    max_nodes: int | None = Field(
        default=None, ge=1, le=1000,
        description="Refuse, before any change, when more NotReady nodes than this are found")


class ZoneBatchParams(ClusterParams):
    zone: ZoneName
    nodes: tuple[NodeName, ...] = Field(min_length=1, max_length=1000,
                                        description="The batch: nodes of the zone")
    stop_timeout: Duration = Field(600.0, description=(
        "How long each instance may take to stop (or terminate) after the batch's fence before "
        "its node is called stuck; the others do not wait for it"))
    without_stop: bool = Field(False, description=(
        "Taint nodes whose instance is still stopping (a host stuck in a failed zone) without a "
        "confirmed stop: interlock 1 refuses it unless two people break glass"))
    wait_held: bool = Field(False, description=(
        "While rule 8 holds a machine of the batch (silent, but EC2 does not confirm it is down "
        "yet), wait, planned again by itself, instead of leaving the node out"))


class ZoneWaitParams(ClusterParams):
    nodes: tuple[NodeName, ...] = Field(max_length=1000)
    timeout: Duration = 600.0
    gone: tuple[NodeName, ...] = Field(default=(), max_length=1000, description=(
        "Those of the nodes deleted during the run: their attachments go only when the "
        "attach/detach controller's 6-minute wait ends, so they are checked each minute"))


class ZoneHeldParams(ClusterParams):
    nodes: tuple[NodeName, ...] = Field(max_length=1000, description="The dead nodes")
    instance_ids: tuple[InstanceId, ...] = Field(max_length=1000, description="Their instances")


class ZoneLeftoverParams(ClusterParams):
    nodes: tuple[NodeName, ...] = Field(max_length=1000, description=(
        "The nodes deleted during the run (gone): their VolumeAttachments left behind"))


class ZonePlacementParams(ClusterParams):
    zone: ZoneName
    nodes: tuple[NodeName, ...] = Field(max_length=1000, description=(
        "The dead nodes put out of service (or deleted): their pods must run elsewhere"))
    pvs: tuple[ObjectName, ...] = Field(max_length=100_000,
                                        description="The PersistentVolumes the dead nodes held")
    left: tuple[NodeName, ...] = Field(default=(), max_length=1000, description=(
        "The NotReady nodes the run left as they were (dropped, failed, stuck): a claim whose pod "
        "is still on one waits for that node, not for time"))
