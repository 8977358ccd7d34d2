"""EBS snapshots that take time in the sandbox, as on EC2.

moto answers CreateSnapshot with a snapshot already ``completed`` at ``100%``. On EC2 a snapshot
is ``pending`` for minutes (the first, full snapshot of a large volume for much longer) and its
``progress`` climbs; a runbook that deletes the volume behind it must wait for ``completed`` and
show the wait. The sandbox keeps when each snapshot was created (on its clock) and, until
``snapshot_seconds`` have passed, rewrites the snapshot's ``status`` and ``progress`` in the
CreateSnapshot and DescribeSnapshots answers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from xml.etree import ElementTree


class PendingSnapshots:
    def __init__(self, *, seconds: Callable[[], float], now: Callable[[], datetime]) -> None:
        self.seconds, self.now = seconds, now
        self.created: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def progress(self, snapshot_id: str) -> int:
        """How far the snapshot is, in percent (100: completed)."""
        with self._lock:
            started = self.created.get(snapshot_id)
        total = self.seconds()
        if started is None or total <= 0:
            return 100
        done = (self.now() - started).total_seconds() / total
        return 100 if done >= 1 else max(0, int(done * 100))

    def rewrite(self, action: str, body: bytes) -> bytes:
        """CreateSnapshot's answer (its root) or DescribeSnapshots' items, as EC2 would show them
        now: ``pending`` with the progress so far, until the snapshot is due."""
        root = ElementTree.fromstring(body)
        if action == "CreateSnapshot":
            sid = root.findtext("{*}snapshotId")
            if sid:
                with self._lock:
                    self.created[sid] = self.now()
            items = [root]
        elif action == "DescribeSnapshots":
            items = root.findall("{*}snapshotSet/{*}item")
        else:
            return body
        changed = False
        for item in items:
            pct = self.progress(item.findtext("{*}snapshotId") or "")
            status, progress = item.find("{*}status"), item.find("{*}progress")
            if pct >= 100 or status is None or status.text != "completed":
                continue
            status.text = "pending"
            if progress is not None:
                progress.text = f"{pct}%"
            changed = True
        return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True) if changed else body
