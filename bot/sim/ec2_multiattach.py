"""io2 Multi-Attach volumes for the sandbox's EC2: moto keeps one attachment per volume.

EC2 lets an io1/io2 volume created with ``MultiAttachEnabled`` be attached to several instances of
its zone at once; each attachment is its own (DescribeVolumes lists them all, DetachVolume and
its ``Force`` act on the one instance named). moto stores ``MultiAttachEnabled`` but silently moves
its single attachment on a second AttachVolume. The proxy keeps moto's attachment as the first
holder and the others here (instance id -> device):

- AttachVolume of a Multi-Attach volume attached elsewhere records another holder (``VolumeInUse``
  for one the instance already holds, as EC2);
- DetachVolume of another holder drops it (``detaching`` in the answer, gone on the next read);
  of moto's own attachment while others hold the volume, detaches it in moto and hands moto's
  attachment to the next holder, so the volume stays ``in-use``;
- DescribeVolumes lists every holder in ``attachmentSet``.

The invariants do not count Multi-Attach holders as a double attach: sharing is the point of it.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree


class MultiAttach:
    def __init__(self) -> None:
        self.extra: dict[str, dict[str, str]] = {}  # volume id -> instance id -> device

    @staticmethod
    def enabled(vol: Any) -> bool:
        return bool(getattr(vol, "multi_attach_enabled", False))

    def holds(self, vid: str, iid: str) -> bool:
        return iid in self.extra.get(vid, {})

    def add(self, vid: str, iid: str, device: str) -> None:
        self.extra.setdefault(vid, {})[iid] = device

    def drop(self, vid: str, iid: str) -> None:
        self.extra.get(vid, {}).pop(iid, None)
        if not self.extra.get(vid):
            self.extra.pop(vid, None)

    def others(self, vid: str) -> list[tuple[str, str]]:
        """(instance id, device) of the holders besides moto's attachment."""
        return sorted(self.extra.get(vid, {}).items())

    def hand_over(self, backend: Any, vol: Any) -> None:
        """moto's attachment is being detached while others hold the volume: detach it in moto and
        give moto's attachment to the next holder."""
        att = vol.attachment
        backend.detach_volume(vol.id, att.instance.id, att.device)
        iid, device = self.others(vol.id)[0]
        self.drop(vol.id, iid)
        backend.attach_volume(vol.id, iid, device)

    def rewrite(self, body: bytes) -> bytes:
        """DescribeVolumes: every holder in each Multi-Attach volume's ``attachmentSet``."""
        if not self.extra:
            return body
        root = ElementTree.fromstring(body)
        changed = False
        for item in root.iter():
            if not item.tag.endswith("}item"):
                continue
            ns = item.tag[:-len("item")]
            vid = item.findtext(f"{ns}volumeId")
            atts = item.find(f"{ns}attachmentSet")
            if vid not in self.extra or atts is None or item.find(f"{ns}size") is None:
                continue  # only the volumes themselves, not their attachment items
            for iid, device in self.others(vid):
                row = ElementTree.SubElement(atts, f"{ns}item")
                for tag, text in (("volumeId", vid), ("instanceId", iid), ("device", device),
                                  ("status", "attached"),
                                  ("attachTime", "2026-01-01T00:00:00.000Z"),
                                  ("deleteOnTermination", "false")):
                    ElementTree.SubElement(row, f"{ns}{tag}").text = text
            changed = True
        if not changed:
            return body
        return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
