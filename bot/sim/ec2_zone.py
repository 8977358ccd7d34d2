"""A failed Availability Zone as EC2 shows it: stuck hosts, no capacity, impaired EBS volumes.

The sandbox's ``az-outage`` kills instances; a real zone failure is worse in three ways EC2 shows
through its API, and this module answers them for ``Ec2Sim`` (mixed in, like ``ec2_instances``):

- **Stuck hosts.** StopInstances says of an instance stuck ``stopping`` that "there might be an
  issue with the underlying host computer", and that ``Force`` is the remedy. When the host itself
  failed, even that does not help: the request is accepted (the answer says ``stopping``) and the
  instance stays ``stopping``. EC2's troubleshooting guide leaves such an instance to AWS support;
  the sandbox holds the stop for ``stuck_seconds`` (sandbox option; never, unless set), whatever
  ``Force`` or ``SkipOsShutdown`` asked. A termination is held too: the guide says an instance
  that stays ``shutting-down`` for several hours is treated as stuck and forcibly terminated by
  EC2, which the sandbox does after ``stuck_seconds`` or, unset, three hours (our reading of
  "several"). Which instances are on stuck hosts is the scenario's choice (``hold``).
- **No capacity.** RunInstances into an impaired zone fails with ``InsufficientInstanceCapacity``,
  EC2's message naming the zone and the zones that still have the type; the replacement
  controllers (an Auto Scaling group, Karpenter) get the same answer (``launch_refusal``).
- **Impaired volumes.** moto does not implement DescribeVolumeStatus; it is answered here for
  every volume: ``ok`` (``io-enabled`` and ``io-performance`` passed/normal), or, for a volume
  whose I/O EBS disabled because its data may be inconsistent after the host failure,
  ``impaired``: ``io-enabled`` failed, a ``potential-data-inconsistency`` event ("Awaiting
  Action: Enable IO") and an ``enable-volume-io`` action, as the EBS user guide's "volume status
  checks" and "volume events" pages describe them. Filters: ``availability-zone``,
  ``volume-status.status``, ``volume-status.details-name``, ``volume-status.details-status``,
  ``event.event-type``, ``action.code``; another filter name is refused as EC2 refuses one.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.sim.ec2_instances import Ec2Refusal, refuse_dry_run

NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
SEVERAL_HOURS = 3 * 3600.0  # when EC2 forcibly terminates an instance stuck shutting-down
FILTERS = ("availability-zone", "volume-status.status", "volume-status.details-name",
           "volume-status.details-status", "event.event-type", "action.code")


@dataclass
class ZoneFailure:
    """What of the region is broken: hosts that hold their instances, zones without capacity,
    volumes whose I/O is disabled (volume id -> when)."""

    stuck_hosts: set[str] = field(default_factory=set)
    stuck_seconds: float | None = None  # None: a stop on a stuck host never completes
    impaired_zones: set[str] = field(default_factory=set)
    impaired_volumes: dict[str, datetime] = field(default_factory=dict)

    def hold(self, instance_id: str) -> None:
        self.stuck_hosts.add(instance_id)

    def stop_seconds(self, instance_id: str, asked: float | None) -> float | None:
        """How long a stop of this instance takes: as asked, unless its host is stuck."""
        return self.stuck_seconds if instance_id in self.stuck_hosts else asked

    def terminate_seconds(self, instance_id: str, asked: float) -> float:
        if instance_id not in self.stuck_hosts:
            return asked
        return SEVERAL_HOURS if self.stuck_seconds is None else self.stuck_seconds

    def rebase(self, delta: Any) -> None:
        self.impaired_volumes = {k: v + delta for k, v in self.impaired_volumes.items()}


def launch_refusal(failure: ZoneFailure, zone: str, instance_type: str,
                   zones: tuple[str, ...]) -> Ec2Refusal | None:
    """EC2's answer to a launch of ``instance_type`` into ``zone`` while the zone is impaired."""
    if zone not in failure.impaired_zones:
        return None
    others = ", ".join(z for z in zones if z not in failure.impaired_zones)
    return Ec2Refusal("InsufficientInstanceCapacity", (
        f"We currently do not have sufficient {instance_type} capacity in the Availability Zone "
        f"you requested ({zone}). Our system will be working on provisioning additional capacity. "
        f"You can currently get {instance_type} capacity by not specifying an Availability Zone "
        f"in your request or choosing {others}."), 500)


class ZoneFailures:
    """Mixed into ``Ec2Sim``: the actions a failed zone changes."""

    zone: ZoneFailure
    backend: Any
    region: str

    def _do_RunInstances(self, params: dict[str, str]) -> bytes | None:
        zone = params.get("Placement.AvailabilityZone", "")
        zones = tuple(sorted(z.name for z in self.backend.describe_availability_zones()))
        refusal = launch_refusal(self.zone, zone, params.get("InstanceType", "m1.small"), zones)
        if refusal is not None:
            raise refusal
        return None  # moto launches it

    def _do_DescribeVolumeStatus(self, params: dict[str, str]) -> bytes:
        asked = [v for k, v in sorted(params.items(), key=lambda kv: _index(kv[0]))
                 if k.startswith("VolumeId.")]
        filters = _filters(params)
        volumes = self.backend.volumes
        for vid in asked:
            if vid not in volumes:
                raise Ec2Refusal("InvalidVolume.NotFound", f"The volume '{vid}' does not exist.")
        refuse_dry_run(params)
        rows = [_Row(vid, volumes[vid].zone.name, self.zone.impaired_volumes.get(vid))
                for vid in (asked or sorted(volumes))]
        rows = [r for r in rows if _matches(r, filters)]
        items = "".join(_xml(r) for r in rows)
        return (f'<DescribeVolumeStatusResponse xmlns="{NS}"><requestId>{uuid.uuid4()}</requestId>'
                f"<volumeStatusSet>{items}</volumeStatusSet></DescribeVolumeStatusResponse>").encode()


@dataclass
class _Row:
    volume_id: str
    zone: str
    impaired_since: datetime | None

    @property
    def status(self) -> str:
        return "impaired" if self.impaired_since else "ok"

    @property
    def details(self) -> list[tuple[str, str]]:
        return [("io-enabled", "failed" if self.impaired_since else "passed"),
                ("io-performance", "not-applicable" if self.impaired_since else "normal")]

    @property
    def event_id(self) -> str:
        return "evol-" + hashlib.sha256(self.volume_id.encode()).hexdigest()[:17]


def _filters(params: dict[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for key, name in params.items():
        if not (key.startswith("Filter.") and key.endswith(".Name")):
            continue
        if name not in FILTERS:
            raise Ec2Refusal("InvalidParameterValue", f"The filter '{name}' is invalid")
        head = key[:-len(".Name")]
        out[name] = {v for k, v in params.items() if k.startswith(f"{head}.Value.")}
    return out


def _matches(row: _Row, filters: dict[str, set[str]]) -> bool:
    have: dict[str, set[str]] = {
        "availability-zone": {row.zone}, "volume-status.status": {row.status},
        "volume-status.details-name": {n for n, _ in row.details},
        "volume-status.details-status": {s for _, s in row.details},
        "event.event-type": {"potential-data-inconsistency"} if row.impaired_since else set(),
        "action.code": {"enable-volume-io"} if row.impaired_since else set()}
    return all(have[name] & values for name, values in filters.items())


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _xml(row: _Row) -> str:
    details = "".join(f"<item><name>{n}</name><status>{s}</status></item>" for n, s in row.details)
    events = actions = ""
    if row.impaired_since:
        events = (f"<item><eventId>{row.event_id}</eventId><eventType>potential-data-inconsistency"
                  "</eventType><description>Awaiting Action: Enable IO</description>"
                  f"<notBefore>{_stamp(row.impaired_since)}</notBefore></item>")
        actions = (f"<item><code>enable-volume-io</code><eventId>{row.event_id}</eventId>"
                   "<eventType>potential-data-inconsistency</eventType><description>Enable "
                   "volume I/O</description></item>")
    return (f"<item><volumeId>{row.volume_id}</volumeId><availabilityZone>{row.zone}"
            f"</availabilityZone><volumeStatus><status>{row.status}</status><details>{details}"
            f"</details></volumeStatus><eventsSet>{events}</eventsSet><actionsSet>{actions}"
            "</actionsSet></item>")


def _index(key: str) -> tuple[str, int]:
    head, _, tail = key.partition(".")
    return head, int(tail) if tail.isdigit() else 0
