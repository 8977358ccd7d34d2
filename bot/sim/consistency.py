"""Eventually consistent Describe calls: for a short while after a change, EC2 shows the old state.

The EC2 API is eventually consistent ("Eventual consistency in the Amazon EC2 API"): the result of
a command may not be visible at once to the commands that follow. A DescribeInstances right after
StopInstances may still say ``running``, a DescribeVolumes right after DetachVolume may still show
the attachment. Code that acts on one read right after a write is wrong on EC2 and right on moto,
whose reads are immediate.

Before a request (StopInstances, StartInstances, TerminateInstances, AttachVolume, DetachVolume)
changes an instance or a volume, the sandbox keeps that object's Describe item as moto serves it
then; for ``describe_lag`` simulated seconds after the change, Describe answers carry the kept item
in place of the fresh one. A transition completing on its own later (``stopping`` to ``stopped``)
is visible at once: there is no command whose result lags. Only objects the caller's own filters
still return are affected (moto filters on the fresh state); DescribeInstanceStatus is not delayed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from xml.etree import ElementTree

ElementTree.register_namespace("", "http://ec2.amazonaws.com/doc/2016-11-15")  # moto's spelling

# action -> (path to the items, the id element, the kind of object)
ITEMS = {
    "DescribeInstances": ("{ns}reservationSet/{ns}item/{ns}instancesSet/{ns}item", "instanceId",
                          "instance"),
    "DescribeVolumes": ("{ns}volumeSet/{ns}item", "volumeId", "volume"),
}
DESCRIBE = {"instance": ("DescribeInstances", "InstanceId"), "volume": ("DescribeVolumes", "VolumeId")}


class StaleReads:
    def __init__(self, *, lag: Callable[[], float], now: Callable[[], datetime],
                 fetch: Callable[[str, dict[str, Any]], bytes]) -> None:
        self.lag, self.now, self.fetch = lag, now, fetch
        self.kept: dict[str, tuple[datetime, ElementTree.Element]] = {}  # id -> (until, old item)

    def before_change(self, kind: str, ident: str) -> None:
        """Keep the object's item as it is now, to be served until ``describe_lag`` has passed."""
        lag = self.lag()
        if lag <= 0:
            return
        until = self.now() + timedelta(seconds=lag)
        if ident in self.kept and self.kept[ident][0] > self.now():
            self.kept[ident] = (until, self.kept[ident][1])  # keep the oldest view, for longer
            return
        action, param = DESCRIBE[kind]
        item = self._item(action, self.fetch(action, {f"{param}.1": ident}), ident)
        if item is not None:
            self.kept[ident] = (until, item)

    def rewrite(self, action: str, body: bytes) -> bytes:
        if action not in ITEMS or not self.kept:
            return body
        now = self.now()
        for ident in [i for i, (until, _) in self.kept.items() if until <= now]:
            del self.kept[ident]
        if not self.kept:
            return body
        path, key, _ = ITEMS[action]
        root = ElementTree.fromstring(body)
        changed = False
        for parent in root.findall(path.format(ns="{*}").rsplit("/", 1)[0]):
            for i, child in enumerate(list(parent)):
                found = child.findtext(f"{{*}}{key}")
                if found is not None and found in self.kept:
                    ident = found
                    parent[i] = copy.deepcopy(self.kept[ident][1])
                    changed = True
        if not changed:
            return body
        return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)

    def _item(self, action: str, body: bytes, ident: str) -> ElementTree.Element | None:
        path, key, _ = ITEMS[action]
        root = ElementTree.fromstring(body)
        for item in root.findall(path.format(ns="{*}")):
            if item.findtext(f"{{*}}{key}") == ident:
                return item
        return None

