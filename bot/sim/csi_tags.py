"""The tags the EBS CSI driver puts on a volume it creates, so the sandbox's volumes carry them too.

The driver tags every volume ``CSIVolumeName=<pv>`` and ``ebs.csi.aws.com/cluster=true``, and with
the external-provisioner's ``--extra-create-metadata`` (on in the EKS add-on) the PV, claim and
namespace it was created for. The bot reads these to tell which PersistentVolume owns a volume
before it deletes one, and IAM policies condition on them.
"""

from __future__ import annotations

from typing import Any


def volume_tags(*, pv: str, pvc: str, namespace: str) -> dict[str, str]:
    return {"CSIVolumeName": pv, "ebs.csi.aws.com/cluster": "true",
            "kubernetes.io/created-for/pv/name": pv, "kubernetes.io/created-for/pvc/name": pvc,
            "kubernetes.io/created-for/pvc/namespace": namespace}


def tag_specifications(tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
