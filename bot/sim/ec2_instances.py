"""EC2 instance lifecycle for the sandbox: transitions that take simulated time, and EC2's refusals.

moto moves an instance from ``running`` to ``stopped`` inside the StopInstances call and stops any
instance it is asked to. EC2 does neither (StopInstances/TerminateInstances API reference, "Methods
for stopping an instance"):

- stop: ``running -> stopping -> stopped`` once the guest's OS shutdown finished (``stop_seconds``,
  60 s by default). A hung guest never finishes it: without ``Force`` the instance stays ``stopping``.
  ``Force`` also tries the OS shutdown first and cuts the power when it has not finished within
  ``os_shutdown_timeout``; ``SkipOsShutdown`` cuts the power at once (``power_off_seconds``).
  An instance on a host that failed with its zone holds any stop, and a termination (``ec2_zone``).
- start: ``stopped -> pending -> running`` after ``start_seconds``; the guest boots anew, so the
  Node's ``nodeInfo.bootID`` changes (``boots``).
- terminate: ``-> shutting-down -> terminated`` after ``terminate_seconds``; its EBS data volumes
  (DeleteOnTermination false, as the CSI driver attaches them) detach.
- refusals, all checked before anything changes: a Spot instance (one-time request, as Karpenter
  and managed node groups launch them) or an instance-store root -> ``UnsupportedOperation``; stop
  protection (``disableApiStop``) or a managed instance (EKS Auto Mode's, ``ec2_managed``) ->
  ``OperationNotPermitted``; ``pending``, ``shutting-down`` and
  ``terminated`` cannot be stopped -> ``IncorrectInstanceState``.

Transitions complete on the sandbox clock: ``tick()`` runs first in every controller pass.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64,
         "stopped": 80}
NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
USER_SHUTDOWN = ("Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown")


@dataclass(frozen=True)
class Timing:
    """How long EC2 takes, in simulated seconds (sandbox options of the same names)."""

    stop_seconds: float = 60.0  # a healthy guest's OS shutdown, then stopped
    os_shutdown_timeout: float = 120.0  # how long Force waits for the OS before cutting power
    power_off_seconds: float = 5.0  # SkipOsShutdown: power cut at once
    start_seconds: float = 30.0  # pending -> running
    terminate_seconds: float = 60.0  # shutting-down -> terminated
    describe_lag: float = 2.0  # Describe calls show the state before a change for this long
    snapshot_seconds: float = 120.0  # an EBS snapshot is pending, its progress climbing, this long
    status_check_delay: float = 180.0  # a hung guest's status check is reported failed this late

    @classmethod
    def instant(cls) -> Timing:
        return cls(stop_seconds=0, os_shutdown_timeout=0, power_off_seconds=0, start_seconds=0,
                   terminate_seconds=0, describe_lag=0, snapshot_seconds=0, status_check_delay=0)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Timing:
        known = cls.__dataclass_fields__
        values = {}
        for key, value in options.items():
            if key not in known:
                continue
            try:
                values[key] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"option {key}={value!r}: expected a number of seconds") from None
            if values[key] < 0:
                raise ValueError(f"option {key}={value!r}: expected a number of seconds >= 0")
        return cls(**values)


@dataclass
class Transition:
    to: str  # "stopped", "running" or "terminated"
    due: datetime | None  # None: never on its own (a hung guest ignoring the OS shutdown)
    started: datetime


@functools.lru_cache(maxsize=4096)  # every kubelet asks on every pass
def boot_id(instance_id: str, boot: int) -> str:
    """The guest's bootID for its n-th boot (0: the boot the scenario found it in)."""
    seed = instance_id if boot == 0 else f"{instance_id}/boot/{boot}"
    return str(uuid.UUID(hashlib.sha256(seed.encode()).hexdigest()[:32]))


class Ec2Refusal(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


class InstanceLifecycle:
    """Mixed into ``Ec2Sim``: the instance actions it answers itself, and the clock they run on."""

    hung: set[str]
    launched: set[str]  # instances whose LaunchTime is on the sandbox clock
    managed: Any  # bot.sim.ec2_managed.ManagedInstances: EKS Auto Mode's machines
    zone: Any  # bot.sim.ec2_zone.ZoneFailure: hosts that hold their instances' stops
    stuck: dict[str, str]
    hang_stuck: set[str]
    shadow: dict[str, list[str]]
    backend: Any
    instance: Callable[[str], Any]
    instance_state: Callable[[str], str]
    changed: Callable[[], None]
    now: Callable[[], datetime]
    _lock: Any
    timing: Timing
    transitions: dict[str, Transition]
    boots: dict[str, int]

    def _stale_before(self, kind: str, ident: str) -> None:  # overridden by Ec2Sim
        pass

    # -- state, set directly by scenarios --------------------------------------------------------

    def set_state(self, instance_id: str, state: str, *, reason_code: str = "",
                  reason_message: str = "") -> None:
        """Put an instance in ``state`` at once (a crash, a repair); cancels a transition under way."""
        from moto.ec2.models.instances import StateReason  # deferred: this module needs no moto to load

        inst = self.instance(instance_id)
        assert inst is not None, instance_id
        if state == "running" and inst._state.name != "running":
            self.boots[instance_id] = self.boots.get(instance_id, 0) + 1
            # EC2's LaunchTime is when the instance last entered 'running': a start moves it
            inst.launch_time = self.now().astimezone(UTC).replace(tzinfo=None)
            self.launched.add(instance_id)
        self.transitions.pop(instance_id, None)
        inst._state.name, inst._state.code = state, CODES[state]
        if reason_code:
            inst.state_reason = StateReason(reason_message or reason_code, reason_code)

    def repair(self, instance_id: str) -> None:
        """The machine is repaired and booted again: running, responsive, a new boot."""
        self.hung.discard(instance_id)
        if self.instance_state(instance_id) == "running":
            self.boots[instance_id] = self.boots.get(instance_id, 0) + 1  # a reboot
        self.set_state(instance_id, "running")

    def boot_id(self, instance_id: str) -> str:
        return boot_id(instance_id, self.boots.get(instance_id, 0))

    def terminate_now(self, instance_id: str) -> None:
        """Start a termination as an Auto Scaling group or Karpenter would (no API refusals)."""
        if self.instance_state(instance_id) not in ("shutting-down", "terminated", "missing"):
            self._begin(instance_id, "shutting-down", "terminated",
                        self.zone.terminate_seconds(instance_id, self.timing.terminate_seconds))

    # -- the clock ---------------------------------------------------------------------------

    def rebase(self, delta: timedelta) -> None:
        """Shift pending transitions, and launch times, with the sandbox clock (``Sandbox.rebase``)."""
        for t in self.transitions.values():
            t.started += delta
            if t.due is not None:
                t.due += delta
        for r in self.backend.reservations.values():
            for inst in r.instances:
                if inst.id in self.launched:
                    inst.launch_time += delta

    def _launched(self) -> None:
        """Instances moto just launched get a LaunchTime on the sandbox clock, as EC2 gives the
        time of the launch (moto's is the host's clock, months away from the sandbox's): a check
        that a machine was started again since some moment compares like with like."""
        now = self.now().astimezone(UTC).replace(tzinfo=None)
        for r in self.backend.reservations.values():
            for inst in r.instances:
                if inst.id not in self.launched:
                    self.launched.add(inst.id)
                    inst.launch_time = now

    def tick(self) -> bool:
        """Complete the transitions that are due; True when one did."""
        with self._lock:
            return self._tick()

    def _tick(self) -> bool:
        now = self.now()
        due = sorted(i for i, t in self.transitions.items() if t.due is not None and t.due <= now)
        for iid in due:
            t = self.transitions.pop(iid)
            if t.to == "stopped":
                self.set_state(iid, "stopped", reason_code=USER_SHUTDOWN[0],
                               reason_message=USER_SHUTDOWN[1])
                self.hung.discard(iid)
            elif t.to == "running":
                self.set_state(iid, "running")
            else:
                self._terminated(iid)
        return bool(due)

    def _terminated(self, iid: str) -> None:
        for vid, vol in sorted(self.backend.volumes.items()):
            if vol.attachment is not None and vol.attachment.instance.id == iid:
                self._stale_before("volume", vid)
                self.backend.detach_volume(vid, iid, vol.attachment.device)
                self.stuck.pop(vid, None)
                self.hang_stuck.discard(vid)
        self.instance(iid).terminate()
        self.hung.discard(iid)
        self.set_state(iid, "terminated", reason_code=USER_SHUTDOWN[0],
                       reason_message=USER_SHUTDOWN[1])

    def _begin(self, iid: str, now_state: str, to: str, seconds: float | None) -> None:
        self._stale_before("instance", iid)
        now = self.now()
        inst = self.instance(iid)
        inst._state.name, inst._state.code = now_state, CODES[now_state]
        due = None if seconds is None else now + timedelta(seconds=seconds)
        self.transitions[iid] = Transition(to=to, due=due, started=now)

    # -- the actions -------------------------------------------------------------------------

    def _instances(self, params: dict[str, str]) -> list[tuple[str, Any]]:
        ids = [v for k, v in sorted(params.items(), key=lambda kv: _index(kv[0]))
               if k.startswith("InstanceId.")]
        out = []
        for iid in ids:
            inst = self.instance(iid)
            if inst is None:
                raise Ec2Refusal("InvalidInstanceID.NotFound", f"The instance ID '{iid}' does not exist")
            out.append((iid, inst))
        return out

    def _do_StopInstances(self, params: dict[str, str]) -> bytes:
        force = _flag(params, "Force")
        skip_os = _flag(params, "SkipOsShutdown")
        targets = self._instances(params)
        for iid, inst in targets:
            state = inst._state.name
            self.managed.refuse("StopInstances", iid)
            if getattr(inst, "lifecycle", None) == "spot":
                raise Ec2Refusal("UnsupportedOperation", (
                    f"You can't stop the Spot Instance '{iid}' because it is associated with a "
                    "one-time Spot Instance request. You can only stop Spot Instances associated "
                    "with persistent Spot Instance requests."))
            if getattr(inst, "root_device_type", "ebs") != "ebs":
                raise Ec2Refusal("UnsupportedOperation", f"The instance '{iid}' does not have an "
                                 "'ebs' root device type and cannot be stopped.")
            if getattr(inst, "disable_api_stop", False):
                raise Ec2Refusal("OperationNotPermitted", f"The instance '{iid}' may not be stopped. "
                                 "Modify its 'disableApiStop' instance attribute and try again.")
            if state in ("pending", "shutting-down", "terminated"):
                raise Ec2Refusal("IncorrectInstanceState", f"This instance '{iid}' is not in a state "
                                 "from which it can be stopped.")
        refuse_dry_run(params)
        rows = []
        for iid, inst in targets:
            before = inst._state.name
            if before in ("running", "stopping"):
                self._stop(iid, force=force, skip_os=skip_os)
            rows.append((iid, before, inst._state.name))
        self.changed()
        return _state_change("StopInstancesResponse", "instancesSet", rows)

    def _stop(self, iid: str, *, force: bool, skip_os: bool) -> None:
        t = self.timing
        hung = iid in self.hung
        if skip_os:
            seconds: float | None = t.power_off_seconds
        elif hung:
            seconds = t.os_shutdown_timeout if force else None  # the OS never answers the shutdown
        else:
            seconds = t.stop_seconds
        seconds = self.zone.stop_seconds(iid, seconds)  # a failed host holds it, Force or not
        current = self.transitions.get(iid)
        if current is not None and current.to == "stopped":
            if seconds is None:
                return  # a second plain stop changes nothing
            due = self.now() + timedelta(seconds=seconds)
            if current.due is None or due < current.due:
                current.due = due
            return
        self._begin(iid, "stopping", "stopped", seconds)

    def _do_StartInstances(self, params: dict[str, str]) -> bytes:
        targets = self._instances(params)
        for iid, inst in targets:
            if inst._state.name not in ("stopped", "running", "pending"):
                raise Ec2Refusal("IncorrectInstanceState", f"The instance '{iid}' is not in a state "
                                 "from which it can be started.")
        refuse_dry_run(params)
        rows = []
        for iid, inst in targets:
            before = inst._state.name
            if before == "stopped":
                self.hung.discard(iid)
                self._begin(iid, "pending", "running", self.timing.start_seconds)
            rows.append((iid, before, inst._state.name))
        self.changed()
        return _state_change("StartInstancesResponse", "instancesSet", rows)

    def _do_TerminateInstances(self, params: dict[str, str]) -> bytes:
        targets = self._instances(params)
        for iid, inst in targets:
            if inst._state.name != "terminated":
                self.managed.refuse("TerminateInstances", iid)
            for attr in ("disableApiStop", "disableApiTermination"):
                if getattr(inst, _snake(attr), False) and inst._state.name != "terminated":
                    raise Ec2Refusal("OperationNotPermitted", f"The instance '{iid}' may not be "
                                     f"terminated. Modify its '{attr}' instance attribute and try again.")
        refuse_dry_run(params)
        rows = []
        for iid, inst in targets:
            before = inst._state.name
            if before not in ("shutting-down", "terminated"):
                seconds = self.timing.power_off_seconds if _flag(params, "SkipOsShutdown") else (
                    self.timing.terminate_seconds)
                seconds = self.zone.terminate_seconds(iid, seconds)
                self._begin(iid, "shutting-down", "terminated", seconds)
            rows.append((iid, before, inst._state.name))
        self.changed()
        return _state_change("TerminateInstancesResponse", "instancesSet", rows)


def _flag(params: dict[str, str], name: str) -> bool:
    return params.get(name, "false").lower() == "true"


def refuse_dry_run(params: dict[str, str]) -> None:
    """What EC2 answers a request with ``DryRun=true`` that passed every check: 412."""
    if _flag(params, "DryRun"):
        raise Ec2Refusal("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412)


def _index(key: str) -> tuple[str, int]:
    head, _, tail = key.partition(".")
    return head, int(tail) if tail.isdigit() else 0


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _state_change(tag: str, items_tag: str, rows: list[tuple[str, str, str]]) -> bytes:
    items = "".join(
        f"<item><instanceId>{iid}</instanceId><currentState><code>{CODES[cur]}</code><name>{cur}"
        f"</name></currentState><previousState><code>{CODES[prev]}</code><name>{prev}</name>"
        f"</previousState></item>" for iid, prev, cur in rows)
    return (f'<{tag} xmlns="{NS}"><requestId>{uuid.uuid4()}</requestId><{items_tag}>{items}'
            f"</{items_tag}></{tag}>").encode()
