"""The world events a timeline is made of: what can happen to a cluster, its machines, its
storage, its control plane and its people while a runbook runs.

Each kind says what it may target (read from the staged world when a timeline is drawn, so a
saved timeline names concrete nodes and volumes and replays the same way), how likely it is
(``weight``), and what it does to the sandbox. Events are applied between two ticks of the run;
those of the ``people`` family instead change how the next decision is taken (late, rejected, by
the wrong person) or interrupt the bot (a crash before or after a write, resumed by a fresh
runner over the same database).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.sim.controllers.context import instance_id
from bot.sim.controllers.node_status import SICK_CAUSES
from bot.sim.sandbox import Sandbox

# people and bot events: handled by the driver, not applied to the sandbox
PEOPLE = ("approve-late", "approval-expires", "reject", "wrong-approver", "self-approve", "abort",
          "crash", "crash-after-write", "crash-after-write-away", "second-worker", "break-glass",
          "start-after-stop")


@dataclass(frozen=True)
class Event:
    """One world event: ``kind`` from ``KINDS``, at ``round`` of the run's drive loop."""

    round: int
    kind: str
    target: str = ""
    arg: str = ""

    def words(self) -> str:
        return KINDS[self.kind].words.format(target=self.target, arg=self.arg)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"round": self.round, "kind": self.kind}
        if self.target:
            out["target"] = self.target
        if self.arg:
            out["arg"] = self.arg
        return out


# (sandbox) -> candidate targets; (sandbox, target, arg) -> None
Targets = Callable[[Sandbox], list[str]]
Apply = Callable[[Sandbox, str, str], None]


@dataclass(frozen=True)
class Kind:
    family: str  # node, instance, storage, cloud, people
    weight: float
    words: str
    targets: Targets | None = None  # None: no target
    args: tuple[str, ...] = ()  # drawn uniformly when given
    apply: Apply | None = None  # None: a people event


def _nodes(sb: Sandbox) -> list[str]:
    return sorted(n["metadata"]["name"] for n in sb.list("Node"))


def _pods_with_claims(sb: Sandbox) -> list[str]:
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in sb.list("Pod")
                  if any("persistentVolumeClaim" in v for v in p["spec"].get("volumes") or ()))


def _volumes(sb: Sandbox) -> list[str]:
    return sorted(sb.ec2.attachments())


def _iid(sb: Sandbox, node: str) -> str | None:
    obj = sb.find("Node", None, node)
    return instance_id(obj) if obj else None


def _on_instance(do: Callable[[Sandbox, str], None]) -> Apply:
    def run(sb: Sandbox, node: str, _arg: str) -> None:
        iid = _iid(sb, node)
        if iid and sb.ec2.instance_state(iid) not in ("terminated", "absent"):
            do(sb, iid)
            sb.settle()
    return run


def _start(sb: Sandbox, iid: str) -> None:
    """A start (a reboot of one running): EC2 refuses StartInstances on an instance still
    stopping, shutting down or starting (IncorrectInstanceState), so those are left as they are."""
    if sb.ec2.instance_state(iid) in ("stopped", "running"):
        sb.ec2.repair(iid)


def _kubelet_recovers(sb: Sandbox, node: str, _arg: str) -> None:
    iid = _iid(sb, node)
    if not iid:
        return
    sick = sb.ctx.state.get("kubelet_sick", {}) if sb.ctx else {}
    sick.pop(node, None)
    if sb.ec2.instance_state(iid) == "running":
        sb.ec2.set_hung(iid, False)
    sb.settle()


def _kubelet_sick(sb: Sandbox, node: str, cause: str) -> None:
    if sb.find("Node", None, node):
        sb.sicken_kubelet(node, cause)


def _partition(sb: Sandbox, node: str, _arg: str) -> None:
    if _iid(sb, node):
        sb.partition(node, True)


def _heal_partition(sb: Sandbox, node: str, _arg: str) -> None:
    if _iid(sb, node):
        sb.partition(node, False)


def _delete_node(sb: Sandbox, node: str, _arg: str) -> None:
    if sb.find("Node", None, node):
        sb.store.delete(sb.res("Node"), None, node)
        sb.settle()


def _replace_node(sb: Sandbox, node: str, _arg: str) -> None:
    iid = _iid(sb, node)
    if iid:
        sb.ec2.terminate_now(iid)
    _delete_node(sb, node, "")


def _spot_interrupted(sb: Sandbox, node: str, _arg: str) -> None:
    """EC2 reclaims a Spot instance: a two-minute notice, then termination."""
    iid = _iid(sb, node)
    if iid and sb.ec2.instance_state(iid) not in ("terminated", "shutting-down"):
        sb.at(120.0, lambda: sb.ec2.terminate_now(iid))


def _delete_claim(sb: Sandbox, claim: str, _arg: str) -> None:
    ns, _, name = claim.partition("/")
    if sb.find("PersistentVolumeClaim", ns, name):
        sb.store.delete(sb.res("PersistentVolumeClaim"), ns, name)
        sb.settle()


def _claims(sb: Sandbox) -> list[str]:
    return sorted(f"{c['metadata']['namespace']}/{c['metadata']['name']}"
                  for c in sb.list("PersistentVolumeClaim"))


def _force_delete_pod(sb: Sandbox, pod: str, _arg: str) -> None:
    ns, _, name = pod.partition("/")
    if sb.find("Pod", ns, name):
        sb.store.delete(sb.res("Pod"), ns, name, grace_seconds=0)
        sb.settle()


def _impair(sb: Sandbox, vid: str, _arg: str) -> None:
    sb.ec2.zone.impaired_volumes.setdefault(vid, sb.clock.now())
    sb.settle()


def _stick_volume(sb: Sandbox, vid: str, _arg: str) -> None:
    vol = sb.ec2.volume(vid)
    if vol is not None and vol.attachment is not None:
        sb.ec2.mark_stuck(vid)
        sb.settle()


def _api_throttle(sb: Sandbox, _t: str, rate: str) -> None:
    sb.api.throttle_rate = float(rate)


def _ec2_throttle(sb: Sandbox, _t: str, rate: str) -> None:
    sb.ec2.throttle_rate = float(rate)


def _informer_lag(sb: Sandbox, _t: str, seconds: str) -> None:
    sb.informer_lag = float(seconds)


KINDS: dict[str, Kind] = {
    # node
    "kubelet-recovers": Kind("node", 3, "the kubelet of {target} recovers (same boot) and posts "
                             "Ready", _nodes, apply=_kubelet_recovers),
    "kubelet-sick": Kind("node", 2, "the kubelet of {target} stays alive but posts Ready=False "
                         "({arg})", _nodes, SICK_CAUSES, _kubelet_sick),
    "kubelet-silent": Kind("node", 2, "the guest of {target} hangs: its kubelet goes silent",
                           _nodes, apply=_on_instance(lambda sb, i: sb.ec2.set_hung(i))),
    "partition": Kind("node", 1, "{target} is cut off from the API server (its machine runs on)",
                      _nodes, apply=_partition),
    "partition-heals": Kind("node", 1, "the network of {target} comes back", _nodes,
                            apply=_heal_partition),
    "node-deleted": Kind("node", 1, "Node {target} is deleted", _nodes, apply=_delete_node),
    "node-replaced": Kind("node", 1, "the node group replaces {target}: its instance is "
                          "terminated and its Node deleted", _nodes, apply=_replace_node),
    # instance
    "instance-started": Kind("instance", 2, "someone starts the instance of {target} (a new "
                             "boot)", _nodes, apply=_on_instance(_start)),
    # timed on the bot: handled by the driver, which sees the stop
    "start-after-stop": Kind("instance", 1, "someone starts the next machine the bot stops, once "
                             "it has stopped (a person working on it)"),
    "instance-stopped": Kind("instance", 1, "the instance of {target} stops (host failure)",
                             _nodes, apply=_on_instance(lambda sb, i: sb.ec2.set_state(
                                 i, "stopped", reason_code="Server.InternalError",
                                 reason_message="Server.InternalError: Internal error on the host"))),
    "instance-stuck": Kind("instance", 1, "the host of {target} fails: a stop of its instance "
                           "never completes", _nodes,
                           apply=_on_instance(lambda sb, i: sb.ec2.zone.hold(i))),
    "host-failed": Kind("instance", 1, "the host of {target} fails: the instance stays running, "
                        "its guest unreachable, its status checks fail", _nodes,
                        apply=_on_instance(lambda sb, i: sb.ec2.set_host_failed(i))),
    "spot-interrupted": Kind("instance", 1, "EC2 reclaims the instance of {target} (two minutes' "
                             "notice, then terminated)", _nodes, apply=_spot_interrupted),
    "instance-terminated": Kind("instance", 1, "the instance of {target} is terminated", _nodes,
                                apply=_on_instance(lambda sb, i: sb.ec2.terminate_now(i))),
    # storage
    "pod-force-deleted": Kind("storage", 1, "pod {target} is force-deleted", _pods_with_claims,
                              apply=_force_delete_pod),
    "claim-deleted": Kind("storage", 1, "claim {target} is deleted", _claims,
                          apply=_delete_claim),
    "volume-impaired": Kind("storage", 1, "EBS marks volume {target} impaired", _volumes,
                            apply=_impair),
    "detach-stuck": Kind("storage", 1, "the EBS attachment of {target} sticks (busy)", _volumes,
                         apply=_stick_volume),
    # control plane and cloud
    "api-throttled": Kind("cloud", 1, "the API server answers {arg} of requests with 429", None,
                          ("0.2", "0.5"), _api_throttle),
    "api-calm": Kind("cloud", 1, "the API server stops throttling", None, ("0",), _api_throttle),
    "ec2-throttled": Kind("cloud", 1, "EC2 throttles {arg} of requests", None, ("0.2", "0.5"),
                          _ec2_throttle),
    "ec2-calm": Kind("cloud", 1, "EC2 stops throttling", None, ("0",), _ec2_throttle),
    "informer-lag": Kind("cloud", 1, "the controllers see writes {arg} s late", None,
                         ("2", "10"), _informer_lag),
    # people and the bot
    "approve-late": Kind("people", 2, "the next approval comes {arg} minutes late", None,
                         ("5", "20")),
    "approval-expires": Kind("people", 1, "nobody answers the next approval until it expires"),
    "reject": Kind("people", 1, "the next approval is rejected"),
    "wrong-approver": Kind("people", 2, "someone outside the approvers' group tries to approve "
                           "the next step first"),
    "self-approve": Kind("people", 2, "the requester tries to approve their own run's next step"),
    "abort": Kind("people", 1, "a person aborts the run"),
    "crash": Kind("people", 2, "the worker is killed between two ticks and another resumes the "
                  "run"),
    "crash-after-write": Kind("people", 2, "the worker is killed right after its next write "
                              "reaches the cluster or EC2, before it records it; another resumes"),
    "crash-after-write-away": Kind("people", 1, "the worker is killed right after its next "
                                   "write reaches the cluster or EC2, before it records it; no "
                                   "worker drives the run until the next round's events have "
                                   "happened"),
    "second-worker": Kind("people", 1, "a second worker starts driving the same runs"),
    # drawn on a stream of its own (``timeline.draw``), so the other events of a seed stay as
    # they were: weight 0 here
    "break-glass": Kind("people", 0, "two approvers break glass on the next step an interlock "
                        "refuses, with a reason"),
}


def apply(sb: Sandbox, event: Event) -> None:
    """Do a world (non-people) event to the sandbox."""
    kind = KINDS[event.kind]
    assert kind.apply is not None, event.kind
    kind.apply(sb, event.target, event.arg)
