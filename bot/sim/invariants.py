"""The safety invariants, checked after every controller pass and recorded with timestamps.

They are what a runbook must never cause (DOMAIN.md §1): two writers on one block device, the
out-of-service taint on a machine that may still be writing, a volume pulled from under a
machine that still runs with it mounted, or a fence (stop, terminate) of a machine whose guest
still runs. A standing violation (two attachments, a taint on a running machine) is recorded
when it starts, and not again while it persists; a deed (a detach from or a fence of a live
machine) is recorded each time it is done: the second stop of a machine started again is a
second harm, though its words are the first's.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.sim.controllers.context import OOS_TAINT, Context, ebs_source, has_taint, instance_id, pod_pvcs
from bot.sim.store import ts


@dataclass(frozen=True)
class Violation:
    time: str
    # double-attach | attached-elsewhere | oos-taint-on-running | detach-from-live | fence-of-live
    kind: str
    details: str
    cause: str = ""  # the API write the controllers were reacting to, when there was one


def check(ctx: Context) -> list[tuple[str, str]]:
    """(kind, details) of every invariant broken right now."""
    found: list[tuple[str, str]] = []
    attachments = ctx.ec2.attachments()
    for vid, rows in sorted(attachments.items()):
        live = sorted({iid for iid, state in rows if state != "detached"})
        if len(live) > 1 and not ctx.ec2.multi_attach(vid):  # io2 Multi-Attach: shared on purpose
            found.append(("double-attach", f"{vid} attached to {', '.join(live)}"))
    nodes = {n["metadata"]["name"]: n for n in ctx.items("Node")}
    for pod in ctx.items("Pod"):
        node = nodes.get(pod["spec"].get("nodeName") or "")
        if node is None or pod.get("status", {}).get("phase") != "Running":
            continue
        mine = instance_id(node)
        for claim in pod_pvcs(pod):
            pvc = ctx.find("PersistentVolumeClaim", pod["metadata"]["namespace"], claim)
            pv = ctx.find("PersistentVolume", None, (pvc or {}).get("spec", {}).get("volumeName", ""))
            src = ebs_source(pv)
            if src is None:
                continue
            vid = src[1]
            if ctx.ec2.multi_attach(vid):
                continue  # io2 Multi-Attach: its other holders share it on purpose
            for iid, state in attachments.get(vid, []):
                if iid != mine and state != "detached" and ctx.ec2.instance_state(iid) == "running":
                    found.append(("attached-elsewhere",
                                  f"{vid} attached to running {iid} while pod "
                                  f"{pod['metadata']['namespace']}/{pod['metadata']['name']} uses it "
                                  f"on {node['metadata']['name']}"))
    for name, node in sorted(nodes.items()):
        node_iid = instance_id(node)
        if has_taint(node, OOS_TAINT) and node_iid and ctx.ec2.instance_state(node_iid) == "running":
            found.append(("oos-taint-on-running",
                          f"node {name} has {OOS_TAINT} but instance {node_iid} is running"))
    return found


def deeds(ctx: Context) -> list[tuple[str, str]]:
    """(kind, details) of every harm done so far, in order, repeats included.

    A detach from a machine that runs and last reported the volume mounted (a partitioned node,
    or the timeout detach against a live one): whatever it was writing is cut off mid-write.
    A fence (StopInstances, TerminateInstances) of a machine whose guest still runs: a live
    kubelet reporting Ready=False, or a partitioned machine, is stopped mid-write."""
    return [("detach-from-live", details) for _when, details in ctx.state.get("live_detaches", ())] + [
        ("fence-of-live", details) for _when, details in getattr(ctx.ec2, "live_fences", ())]


class InvariantLog:
    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self._active: set[tuple[str, str]] = set()
        self._deeds = 0  # how many of ``deeds`` are recorded

    def record(self, ctx: Context, *, cause: tuple[str, str] | None = None) -> None:
        """Record violations that started, and harms done since the last record; ``cause``
        (time, write) names the write that led to them, so with informer lag they are dated and
        attributed to it, not to the later reaction."""
        when, what = cause or (ts(ctx.now), "")
        now = set(check(ctx))
        for kind, details in sorted(now - self._active):
            self.violations.append(Violation(when, kind, details, what))
        self._active = now
        done = deeds(ctx)
        for kind, details in done[self._deeds:]:
            self.violations.append(Violation(when, kind, details, what))
        self._deeds = len(done)
