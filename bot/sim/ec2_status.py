"""EC2 status checks and scheduled events, on the sandbox clock: what DescribeInstanceStatus says.

moto reports every running instance ``ok`` and never has a scheduled event. On EC2 "status checks
are performed every minute" and a check is reported failed only once it has failed, so a guest that
hangs is still ``ok`` for a while: here the instance check of a hung instance turns ``impaired``
(``reachability: failed``) ``status_check_delay`` seconds (180 by default, our reading) after the
hang. A stopping instance is reported impaired at once, as before. A partitioned instance (its
network to the API server cut, the guest fine) is not hung, so its checks stay ``ok``.

A host failure (``Ec2Sim.set_host_failed``: the physical host lost power or network) leaves the
instance ``running`` with an unreachable guest (it is hung, as far as anyone can tell) and also
fails the *system* check after the same delay. A stop and start moves the instance to a new host.

Scheduled events (``Ec2Sim.schedule_event``: ``instance-retirement``, ``instance-stop``,
``instance-reboot``, ``system-reboot``, ``system-maintenance``) are answered in the instance's
``eventsSet``, with an ``instanceEventId``, a description and the window.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from xml.sax.saxutils import escape

CODES = ("instance-reboot", "system-reboot", "system-maintenance", "instance-retirement",
         "instance-stop")
# what EC2's descriptions say, from the examples of "Scheduled events for Amazon EC2 instances"
DESCRIPTIONS = {"instance-retirement": "The instance is running on degraded hardware",
                "instance-stop": "The instance is running on degraded hardware",
                "instance-reboot": "The instance is scheduled for a reboot",
                "system-reboot": "Scheduled reboot",
                "system-maintenance": "Scheduled power maintenance"}


@dataclass
class ScheduledEvent:
    event_id: str
    code: str
    description: str
    not_before: datetime
    not_after: datetime | None
    deadline: datetime | None


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


class StatusChecks:
    def __init__(self, *, delay: Callable[[], float], now: Callable[[], datetime]) -> None:
        self.delay, self.now = delay, now
        self.hung_at: dict[str, datetime] = {}  # when each instance last hung
        self.host_failed: set[str] = set()
        self.events: dict[str, list[ScheduledEvent]] = {}

    def rebase(self, delta: timedelta) -> None:
        self.hung_at = {k: v + delta for k, v in self.hung_at.items()}
        for rows in self.events.values():
            for e in rows:
                e.not_before += delta
                e.not_after = e.not_after + delta if e.not_after else None
                e.deadline = e.deadline + delta if e.deadline else None

    def failed(self, iid: str) -> bool:
        """Whether a hung instance has been hung long enough for a check to report it."""
        since = self.hung_at.get(iid)
        return since is None or (self.now() - since).total_seconds() >= self.delay()

    def schedule(self, iid: str, code: str, *, in_seconds: float, duration: float | None,
                 description: str | None, completed: bool) -> str:
        if code not in CODES:
            raise ValueError(f"scheduled event {code!r}: expected one of {', '.join(CODES)}")
        rows = self.events.setdefault(iid, [])
        digest = hashlib.sha256(f"{iid}/{code}/{len(rows)}".encode()).hexdigest()[:17]
        start = self.now() + timedelta(seconds=in_seconds)
        text = description or DESCRIPTIONS[code]
        rows.append(ScheduledEvent(
            event_id=f"instance-event-{digest}", code=code,
            description=f"[Completed] {text}" if completed else text, not_before=start,
            not_after=start + timedelta(seconds=duration) if duration else None,
            deadline=start + timedelta(days=7) if code in ("system-reboot", "instance-reboot")
            else None))
        return rows[-1].event_id

    def rewrite(self, body: bytes, *, hung: set[str], stopping: set[str]) -> bytes:
        """moto's DescribeInstanceStatus answer with the checks and events of the sandbox."""
        text = body.decode()
        for iid in sorted(hung | stopping | set(self.events)):
            at = text.find(f"<instanceId>{iid}</instanceId>")
            if at < 0:
                continue
            instance_bad = iid in stopping or (iid in hung and self.failed(iid))
            system_bad = iid in hung and iid in self.host_failed and self.failed(iid)
            for tag, bad in (("instanceStatus", instance_bad), ("systemStatus", system_bad)):
                if bad:
                    text = _fail(text, at, tag)
            rows = self.events.get(iid)
            end = text.find("</systemStatus>", at)
            if rows and end >= 0:
                end += len("</systemStatus>")
                text = text[:end] + _events_xml(rows) + text[end:]
        return text.encode()


def _fail(text: str, at: int, tag: str) -> str:
    start = text.find(f"<{tag}>", at)
    end = text.find(f"</{tag}>", start) if start >= 0 else -1
    if end < 0:
        return text
    fixed = text[start:end].replace("<status>ok</status>", "<status>impaired</status>").replace(
        "<status>passed</status>", "<status>failed</status>")
    return text[:start] + fixed + text[end:]


def _events_xml(rows: list[ScheduledEvent]) -> str:
    items = []
    for e in rows:
        parts = [f"<instanceEventId>{e.event_id}</instanceEventId>", f"<code>{e.code}</code>",
                 f"<description>{escape(e.description)}</description>",
                 f"<notBefore>{_stamp(e.not_before)}</notBefore>"]
        if e.not_after:
            parts.append(f"<notAfter>{_stamp(e.not_after)}</notAfter>")
        if e.deadline:
            parts.append(f"<notBeforeDeadline>{_stamp(e.deadline)}</notBeforeDeadline>")
        items.append("<item>" + "".join(parts) + "</item>")
    return "<eventsSet>" + "".join(items) + "</eventsSet>"
