"""The controllers' EC2 clients that skip botocore: ``SeedClient`` and ``ProxyClient``.

Split out of ``ec2`` because they are the proxy's callers, not the proxy: the sandbox hands one
of them to the controllers as ``Context.ec2_client``. ``SeedClient`` answers the calls a scenario's
build makes in-process, by the proxy's rules, without crossing the endpoint; ``ProxyClient``
writes the same calls in the Query API and sends them through the proxy's request handler (the
in-process transport). Both refuse with ``SeedError`` (``ec2_moto``), botocore's error shape.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode
from xml.etree import ElementTree

from bot.sim.ec2_instances import Ec2Refusal
from bot.sim.ec2_moto import SeedError
from bot.sim.iam import ADMIN_KEY

if TYPE_CHECKING:
    from bot.sim.ec2 import Ec2Sim


class SeedClient:
    """The three calls the provisioner and attacher make, answered in-process by the same rules.

    A scenario builds its healthy cluster before anyone connects: hundreds of CreateVolume and
    AttachVolume calls over HTTP would take seconds each hundred, so the build talks to moto's
    backend directly, through the proxy's behaviour checks. ``Sandbox.start`` swaps in the boto3
    client once the scenario is built; from then on every EC2 call crosses the endpoint.
    """

    def __init__(self, sim: Ec2Sim) -> None:
        self.sim = sim

    def _check(self, params: dict[str, str]) -> bytes | None:
        fn = getattr(self.sim, f"_do_{params['Action']}")
        try:
            with self.sim._lock:
                self.sim.seeding = True
                try:
                    return fn(params)
                finally:
                    self.sim.seeding = False
        except Ec2Refusal as e:
            raise SeedError(e.code, e.message) from e
        finally:
            self.sim.notify()

    def create_volume(self, *, AvailabilityZone: str, Size: int, VolumeType: str = "gp3",
                      TagSpecifications: list[dict[str, Any]] | None = None,
                      **_: Any) -> dict[str, Any]:
        vol = self.sim.backend.create_volume(size=Size, zone_name=AvailabilityZone,
                                             volume_type=VolumeType)
        tags = {t["Key"]: t["Value"] for spec in TagSpecifications or ()
                for t in spec.get("Tags") or ()}
        if tags:
            self.sim.backend.create_tags([vol.id], tags)
        return {"VolumeId": vol.id, "AvailabilityZone": AvailabilityZone, "Size": Size,
                "State": "available"}

    def attach_volume(self, *, VolumeId: str, InstanceId: str, Device: str) -> dict[str, Any]:
        if self._check({"Action": "AttachVolume", "VolumeId": VolumeId, "InstanceId": InstanceId,
                        "Device": Device}) is None:  # None: not a Multi-Attach holder kept aside
            self.sim.backend.attach_volume(VolumeId, InstanceId, Device)
        return {"VolumeId": VolumeId, "InstanceId": InstanceId, "Device": Device, "State": "attached"}

    def detach_volume(self, *, VolumeId: str, InstanceId: str = "", Force: bool = False) -> dict[str, Any]:
        params = {"Action": "DetachVolume", "VolumeId": VolumeId, "InstanceId": InstanceId,
                  "Force": "true" if Force else "false"}
        if self._check(params) is not None:
            return {"VolumeId": VolumeId, "InstanceId": params["InstanceId"], "State": "detaching"}
        self.sim.backend.detach_volume(VolumeId, params["InstanceId"], "")
        return {"VolumeId": VolumeId, "InstanceId": params["InstanceId"], "State": "detached"}

    def delete_volume(self, *, VolumeId: str) -> dict[str, Any]:
        """The EBS CSI controller's delete of a released volume: EC2 refuses an attached one."""
        vol = self.sim.volume(VolumeId)
        if vol is None:
            raise SeedError("InvalidVolume.NotFound", f"The volume '{VolumeId}' does not exist.")
        if vol.attachment is not None:
            raise SeedError("VolumeInUse", f"Volume {VolumeId} is currently attached to "
                                           f"{vol.attachment.instance.id}")
        self.sim.backend.delete_volume(VolumeId)
        return {}


class ProxyClient:
    """The controllers' EC2 calls over the in-process transport, as botocore would send them.

    The four calls the EBS CSI driver's controller makes (create, attach, detach, delete) are
    written in the Query API as botocore writes them (the same parameters, an idempotency token
    on CreateVolume, the sandbox's own access key in the credential scope) and cross the proxy's
    request handler like any request: recorded on the wire, throttled, answered by the proxy's
    rules or by moto. A refusal raises with botocore's ``response["Error"]``; nothing is retried
    (the controllers' botocore client makes a single attempt). botocore's client side costs about
    a millisecond a call, and the attacher retries a stuck detach on every controller pass.
    """

    def __init__(self, sim: Ec2Sim, *, key: str = ADMIN_KEY) -> None:
        self.sim, self.key = sim, key

    def _call(self, action: str, params: list[tuple[str, str]]) -> Any:
        body = urlencode([("Action", action), ("Version", "2016-11-15"), *params],
                         quote_via=quote, safe="-_.~").encode()
        now = datetime.now(UTC)
        headers = [("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"),
                   ("X-Amz-Date", now.strftime("%Y%m%dT%H%M%SZ")),
                   ("Authorization", f"AWS4-HMAC-SHA256 Credential={self.key}/{now:%Y%m%d}/"
                                     f"{self.sim.region}/ec2/aws4_request, "
                                     "SignedHeaders=content-type;host;x-amz-date, Signature=0")]
        status, _headers, data = self.sim.send("POST", f"{self.sim.endpoint}/", headers, body)
        try:
            root = ElementTree.fromstring(data)
        except ElementTree.ParseError:
            root = None
        if root is not None:
            for el in root.iter():
                el.tag = el.tag.rsplit("}", 1)[-1]
        if status >= 300:
            code = (root.findtext(".//Code") if root is not None else None) or str(status)
            raise SeedError(code, (root.findtext(".//Message") if root is not None else "") or "")
        return root

    def create_volume(self, *, AvailabilityZone: str, Size: int, VolumeType: str = "gp3",
                      TagSpecifications: list[dict[str, Any]] | None = None,
                      **_: Any) -> dict[str, Any]:
        params = [("AvailabilityZone", AvailabilityZone), ("Size", str(Size)),
                  ("VolumeType", VolumeType)]
        for i, spec in enumerate(TagSpecifications or (), 1):
            params.append((f"TagSpecification.{i}.ResourceType", str(spec["ResourceType"])))
            for j, tag in enumerate(spec.get("Tags") or (), 1):
                params += [(f"TagSpecification.{i}.Tag.{j}.Key", str(tag["Key"])),
                           (f"TagSpecification.{i}.Tag.{j}.Value", str(tag["Value"]))]
        params.append(("ClientToken", str(uuid.uuid4())))
        root = self._call("CreateVolume", params)
        return {"VolumeId": root.findtext("volumeId"), "AvailabilityZone": AvailabilityZone,
                "Size": Size, "State": root.findtext("status")}

    def attach_volume(self, *, VolumeId: str, InstanceId: str, Device: str) -> dict[str, Any]:
        root = self._call("AttachVolume", [("VolumeId", VolumeId), ("InstanceId", InstanceId),
                                           ("Device", Device)])
        return {"VolumeId": VolumeId, "InstanceId": InstanceId, "Device": Device,
                "State": root.findtext("status")}

    def detach_volume(self, *, VolumeId: str, InstanceId: str | None = None,
                      Force: bool | None = None) -> dict[str, Any]:
        params = [("VolumeId", VolumeId)]
        if InstanceId is not None:
            params.append(("InstanceId", InstanceId))
        if Force is not None:
            params.append(("Force", "true" if Force else "false"))
        root = self._call("DetachVolume", params)
        return {"VolumeId": root.findtext("volumeId"), "InstanceId": root.findtext("instanceId"),
                "Device": root.findtext("device"), "State": root.findtext("status")}

    def delete_volume(self, *, VolumeId: str) -> dict[str, Any]:
        self._call("DeleteVolume", [("VolumeId", VolumeId)])
        return {}
