"""The stages of a recovery a step's result shows: what ``stage.reached`` events a success records.

A run's time to recovery is read from its audit events (``bot.present.recovery``). Most stages
are already there: detected (``run.linked``'s ``detected_at``), the run's start (``run.created``),
each approval asked and given. The rest are facts about the world that only a step's result
shows; this table says which, from the action and its result alone (``docs/action-results.md``),
so every runbook that calls these actions records them the same way:

- ``fenced``: an instance read, stopped or terminated is ``stopped``/``terminated`` (a machine
  found already off counts from when the run saw it), a NodeClaim delete saw it ``terminated``,
  a zone's fence stopped machines;
- ``tainted``: the node carries the ``node.kubernetes.io/out-of-service`` taint;
- ``attachments_gone``: a wait for a node's (or a zone's) VolumeAttachments ended with none left;
- ``volume_attached`` and ``pod_running``: a claim is served by a pod Running and Ready on
  another node (its volume is attached there), from ``k8s.claims.status``.

A stage may be seen more than once (the node-dead runbook reads the instance before and after
its fence); readers keep the first time of each stage and subject. Not in a dry run: it changes
nothing, so what it reads is no stage of a recovery. Pure: the conductor calls it when a step
succeeds, with the time the runtime gave it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bot.engine import events as ev
from bot.engine.events import EventData

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"

_Seen = Callable[[Mapping[str, Any], str, str], list[EventData]]


def _fenced(r: Mapping[str, Any], at: str, source: str) -> list[EventData]:
    if r.get("state") in ("stopped", "terminated"):
        return [ev.stage_reached("fenced", at=at, source=source)]
    return []


def _nodeclaim(r: Mapping[str, Any], at: str, source: str) -> list[EventData]:
    return [ev.stage_reached("fenced", at=at, source=source)] if r.get("state") == "terminated" else []


def _tainted(r: Mapping[str, Any], at: str, source: str) -> list[EventData]:
    taints = r.get("taints") or ()
    if r.get("exists") is not False and any(isinstance(t, Mapping) and t.get("key") == OUT_OF_SERVICE
                                            for t in taints):
        return [ev.stage_reached("tainted", at=at, source=source, node=_str(r.get("node")))]
    return []


def _gone(r: Mapping[str, Any], at: str, source: str) -> list[EventData]:
    if r.get("count") == 0:
        return [ev.stage_reached("attachments_gone", at=at, source=source)]
    return []


def _zone_fenced(r: Mapping[str, Any], at: str, source: str) -> list[EventData]:
    seen = []
    if r.get("stopped"):
        seen.append(ev.stage_reached("fenced", at=at, source=source))
    if r.get("out_of_service"):
        seen.append(ev.stage_reached("tainted", at=at, source=source))
    return seen


def _claims(r: Mapping[str, Any], at: str, source: str) -> list[EventData]:
    served = [i for i in r.get("items") or () if isinstance(i, Mapping) and i.get("running_elsewhere")]
    if not r.get("satisfied") or not served:
        return []
    seen = [ev.stage_reached("volume_attached", at=at, source=source,
                             volume=_str(i.get("volume_id"))) for i in served]
    for i in served:
        pod = next((p for p in i.get("pods") or () if isinstance(p, Mapping)
                    and p.get("phase") == "Running" and p.get("ready", True)
                    and not p.get("terminating")), None)
        seen.append(ev.stage_reached("pod_running", at=at, source=source,
                                     node=_str(pod.get("node")) if pod else None,
                                     pod=_str(pod.get("name")) if pod else None))
    return seen


def _str(value: Any) -> str | None:
    return str(value) if value else None


SEEN: Mapping[str, _Seen] = {
    "aws.ec2.instance.get": _fenced,  # a machine seen off: fenced already, or by this run
    "aws.ec2.instance.stop": _fenced,
    "aws.ec2.instance.terminate": _fenced,
    "k8s.nodeclaim.delete": _nodeclaim,
    "k8s.node.taint": _tainted,
    "k8s.volumeattachments.wait_gone": _gone,
    "k8s.zone.fence_taint": _zone_fenced,
    "k8s.zone.wait_detached": _gone,
    "k8s.claims.status": _claims,
}


def reached(action: str | None, result: Mapping[str, Any], *, step: str, at: str) -> list[EventData]:
    """The ``stage.reached`` events a success of ``step`` (calling ``action``) records."""
    seen = SEEN.get(action or "")
    return seen(result, at, f"step:{step}") if seen is not None else []
