"""Time to recovery: from a node's death to every affected pod Running and Ready again.

In the sandbox, on the simulated clock, with EKS's default timers (each printed with where its
figure comes from), for ``node-dead`` (the instance is already stopped: a StatefulSet pod, and a
Deployment pod), ``node-hung`` (kernel hang: the kubelet is silent, the instance runs and must be
fenced) and a 10-node zone outage (``az-outage``, one of the ten hung). The single-node scenarios
are staged the moment the node dies (option ``at_death``); the zone outage is staged at the end of
the grace period, and its clock is counted from the outage, 50 s earlier.

Each is measured:

1. doing nothing, without and with the node group replacing the instance (an Auto Scaling
   group's EC2 health check, ``replacement=true``);
2. EKS node auto repair (option ``auto_repair``: a node NotReady for 30 minutes is replaced);
3. the bot started by the stock alert (``KubeNodeNotReady``, ``for: 15m`` after the node went
   NotReady), running ``node-dead-ngns`` (``zone-outage-ngns`` for the zone);
4. the bot started by its own node watcher (``bot/runtime/node_watcher.py``, a pass every 5 s;
   the run its notice suggests is started at once; ``--model-watcher``: at Lease stale +
   ``detect_after`` instead); a run that leaves nodes for later is started again once it ends;
5. the floor: the earliest moment the policy lets anyone act (grace period, the watcher's
   ``detect_after``, and for a running machine EC2's status check, or ``fence_ambiguous_after``),
   then the fence, the taint, the detach, the attach and the pod's start as the sandbox times
   them, acted on directly with no human in the loop.

The approver answers ``--approval-delay`` seconds (60) after a step first asks; a step held by
an interlock's wait is retried when its message says, and break-glass (the zone's out-of-service
cap) is given by two people at the same moment. The bot's own overhead is (4) minus the floor
minus the part of the approver's delay that fell after the floor could act (what the policy's
waits already covered is not counted twice). For a case with a hung machine it also prints
what (4) would be if the fence's hold were re-checked every 15 s. Targets: overhead under 10 s
in every case; a hung node's StatefulSet pod Running within floor + 70 s with the watcher, and
under 5 minutes unless the policy's waits already put the floor there (then it says which, and
why they are worth it).

Writes ``bench/recovery.json`` and the table between ``<!-- recovery-table -->`` markers in
README.md (tests/test_readme_recovery_table.py checks they agree). Exits 1 if a target is missed.
Not part of ``make test``.

    .venv/bin/python bench/recovery.py [--approval-delay 60] [--model-watcher] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "recovery.json"
README = ROOT / "README.md"
BEGIN, END = "<!-- recovery-table -->", "<!-- /recovery-table -->"
COMMAND = ".venv/bin/python bench/recovery.py"
HORIZON = 3600.0  # "never": not recovered an hour after the death
ALERT_FOR = 900.0  # KubeNodeNotReady: for: 15m
OOS = "node.kubernetes.io/out-of-service"
ZONE = "ap-southeast-1a"

# (name, scenario, options, workload, how many seconds after the death the scenario is ready)
CASES: list[tuple[str, str, dict[str, Any], str, float]] = [
    ("node-dead, StatefulSet pod", "node-dead", {"at_death": True}, "sts", 0.0),
    ("node-dead, Deployment pod", "node-dead-deployment", {"at_death": True}, "deploy", 0.0),
    ("node-hung, StatefulSet pod", "node-hung", {"at_death": True}, "sts", 0.0),
    ("zone outage, 10 nodes (1 hung)", "az-outage", {"nodes": 10, "hung": 1}, "zone", 50.0),
]
COLUMNS = ("nothing", "node group", "auto repair", "bot, 15m alert", "bot, watcher", "floor")


def timers() -> list[tuple[str, str, str]]:
    """The timers the sandbox runs with, and where each figure comes from."""
    from bot.sim.controllers.attachdetach import MAX_WAIT_FOR_UNMOUNT
    from bot.sim.controllers.nodes import GRACE_PERIOD
    from bot.sim.controllers.replacement import DEFAULTS, JOIN_AFTER, REPAIR_AFTER
    from bot.sim.ec2_instances import Timing
    t = Timing()
    return [
        ("node monitor grace period", f"{GRACE_PERIOD:.0f} s", "Kubernetes default (EKS does not change it)"),
        ("not-ready/unreachable toleration", "300 s", "Kubernetes default (DefaultTolerationSeconds)"),
        ("attach/detach forced detach", f"{MAX_WAIT_FOR_UNMOUNT:.0f} s",
         "Kubernetes maxWaitForUnmountDuration; on in EKS"),
        ("EC2 stop (OS shutdown)", f"{t.stop_seconds:.0f} s", "sandbox's model"),
        ("forced stop of a hung guest", f"{t.os_shutdown_timeout:.0f} s",
         "sandbox's model (AWS publishes no figure)"),
        ("status check reads impaired", f"{t.status_check_delay:.0f} s",
         "sandbox's model (AWS: checks run every minute)"),
        ("EBS detach / attach", "0 s", "sandbox default (options ebs_*_seconds; AWS: no figure)"),
        ("pod start (image, readiness)", "0 s", "sandbox: not modelled"),
        ("node group replaces an unhealthy instance", f"{DEFAULTS['managed-node-group']:.0f} s",
         "sandbox's model of the ASG EC2 health check"),
        ("replacement node joins", f"{JOIN_AFTER:.0f} s", "sandbox's model"),
        ("EKS node auto repair (Ready)", f"{REPAIR_AFTER:.0f} s",
         "AWS EKS docs, node-repair.html: Ready, repair after 30m"),
        ("stock alert KubeNodeNotReady", f"{ALERT_FOR:.0f} s", "kubernetes-mixin: for: 15m"),
    ]


def _seconds(stamp: str, t0: datetime) -> float:
    return (datetime.fromisoformat(stamp.replace("Z", "+00:00")) - t0).total_seconds()


def affected(sb: Any, dead: list[str]) -> list[tuple[str, str, str]]:
    """(namespace, owner kind, name or owner) of every workload pod on the dead nodes."""
    keys = []
    for p in sb.list("Pod"):
        if p["spec"].get("nodeName") not in dead or p["metadata"]["namespace"] == "kube-system":
            continue
        owner = (p["metadata"].get("ownerReferences") or [{}])[0]
        if owner.get("kind") == "StatefulSet":
            keys.append((p["metadata"]["namespace"], "StatefulSet", p["metadata"]["name"]))
        elif owner.get("kind") == "ReplicaSet":
            keys.append((p["metadata"]["namespace"], "ReplicaSet", owner["name"]))
    return sorted(set(keys))


def recovered(sb: Any, keys: list[tuple[str, str, str]], dead: list[str], t0: datetime) -> float | None:
    """Seconds from the death to the last affected pod Running and Ready elsewhere (containers'
    ``startedAt``: the sandbox's pods are Ready when they start), or None while one is not."""
    worst = 0.0
    for ns, kind, name in keys:
        best = None
        for p in sb.list("Pod", ns):
            owner = (p["metadata"].get("ownerReferences") or [{}])[0].get("name")
            if (p["metadata"]["name"] if kind == "StatefulSet" else owner) != name:
                continue
            st = p.get("status") or {}
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or ())
            if p["spec"].get("nodeName") in dead or st.get("phase") != "Running" or not ready:
                continue
            started = [cs["state"]["running"]["startedAt"] for cs in st.get("containerStatuses") or ()
                       if cs.get("state", {}).get("running")]
            if started and p["metadata"].get("deletionTimestamp") is None:
                at = max(_seconds(s, t0) for s in started)
                best = at if best is None else min(best, at)
        if best is None:
            return None
        worst = max(worst, best)
    return worst


class Case:
    """One scenario, staged afresh for each measurement."""

    def __init__(self, scenario: str, options: dict[str, Any], workload: str, offset: float) -> None:
        self.scenario, self.options, self.workload, self.offset = scenario, options, workload, offset

    def dead(self, facts: dict[str, Any]) -> list[str]:
        return list(facts["dead_nodes"]) if self.workload == "zone" else [facts["node"]]

    @property
    def has_hung(self) -> bool:
        return bool(self.options.get("hung")) if self.workload == "zone" else self.scenario == "node-hung"

    def hung(self, facts: dict[str, Any]) -> list[str]:
        if self.workload == "zone":
            return list(facts["hung"])
        return [facts["node"]] if self.scenario == "node-hung" else []


def _wait(sb: Any, keys: list[tuple[str, str, str]], dead: list[str], t0: datetime,
          until: float = HORIZON) -> float | None:
    while (sb.clock.now() - t0).total_seconds() < until:
        got = recovered(sb, keys, dead, t0)
        if got is not None:
            return got
        sb.advance(30)
    return recovered(sb, keys, dead, t0)


def baseline(case: Case, extra: dict[str, Any]) -> float | None:
    """Nobody acts: the controllers and the node group (``extra``) alone."""
    from bot.engine.ports import ManualClock
    from bot.sim.sandbox import Sandbox
    sb = Sandbox(case.scenario, clock=ManualClock(), options={**case.options, **extra})
    sb.start()
    try:
        t0 = sb.clock.now() - timedelta(seconds=case.offset)
        dead = case.dead(sb.facts)
        return _wait(sb, affected(sb, dead), dead, t0)
    finally:
        sb.stop()


def earliest(policy: Any, detect_after: float, hung: bool, status_delay: float) -> float:
    """Seconds after the death before the policy lets anyone act on the node: its Lease has
    been stale past the grace period and ``detect_after`` (the watcher's wait, counted like the
    grace period from the last renewal); a running machine is fenced once it has been silent
    ``fence_min_not_ready`` and EC2's status check confirms it is down, or after
    ``fence_ambiguous_after`` by break-glass, whichever comes first."""
    act = max(policy.node_monitor_grace_period, detect_after)
    if hung:
        act = max(act, policy.fence_min_not_ready,
                  min(status_delay, policy.fence_ambiguous_after))
    return act


def floor(case: Case, policy: Any, detect_after: float) -> tuple[float | None, dict[str, float]]:
    """Act directly at the earliest moment: force-stop the hung machines, wait until stopped,
    taint every dead node out-of-service; then wait for the pods."""
    from bot.engine.ports import ManualClock
    from bot.sim.ec2_instances import Timing
    from bot.sim.sandbox import Sandbox
    sb = Sandbox(case.scenario, clock=ManualClock(), options=dict(case.options))
    sb.start()
    try:
        t0 = sb.clock.now() - timedelta(seconds=case.offset)
        facts = sb.facts
        dead, hung = case.dead(facts), case.hung(facts)
        keys = affected(sb, dead)
        act = earliest(policy, detect_after, bool(hung), Timing().status_check_delay)
        sb.advance(act - (sb.clock.now() - t0).total_seconds(), step=1.0)
        ec2 = sb.ec2_client()
        ids = [sb._instance(n) for n in hung]
        if ids:
            ec2.stop_instances(InstanceIds=ids, Force=True)
            while any(sb.ec2.instance_state(i) != "stopped" for i in ids):
                sb.advance(1, step=1.0)
        stages = {"may act": act, "stopped": (sb.clock.now() - t0).total_seconds()}
        for name in dead:
            sb.store.mutate("Node", None, name, lambda n: n["spec"].setdefault("taints", []).append(
                {"key": OOS, "value": "nodeshutdown", "effect": "NoExecute"}))
        sb.settle()
        while recovered(sb, keys, dead, t0) is None and (sb.clock.now() - t0).total_seconds() < HORIZON:
            sb.advance(1, step=1.0)
        return recovered(sb, keys, dead, t0), stages
    finally:
        sb.stop()


RETRY_IN = re.compile(r"retry the step in (\d+) s")


class Approver:
    """Answers each step ``delay`` seconds after it first asked; follows an interlock's hold."""

    def __init__(self, r: Any, delay: float, t0: datetime, hold_poll: float | None = None) -> None:
        self.r, self.delay, self.t0 = r, delay, t0
        self.hold_poll = hold_poll  # re-check a hold this often instead of when it says
        self.asked: dict[str, float] = {}
        self.retried: set[str] = set()
        self.waits: list[tuple[str, float, float]] = []  # (step, asked, answered), seconds from t0

    def now(self) -> float:
        return float((self.r.clock.now() - self.t0).total_seconds())

    def command(self, state: Any, s: Any) -> Any:
        from bot.engine.commands import BreakGlass, Retry
        from bot.sim.rehearsal import APPROVERS
        rule = (s.blocked or {}).get("rule")
        if rule == "fence-wait":  # a hold: look again now, then when its fresh message says
            key = f"{state.run_id}/{s.key}"
            m = RETRY_IN.search(str(s.blocked.get("message", "")))
            if key in self.retried and self.hold_poll:
                self.r.sandbox.advance(self.hold_poll)
            elif key in self.retried and m:
                self.r.sandbox.advance(float(m.group(1)))
            self.retried.add(key)
            return Retry(run_id=state.run_id, actor=APPROVERS[0], step=s.key)
        if s.blocked:  # a declared zone outage: two people break glass (the cap, stuck hosts)
            given = {v.by for v in s.votes if v.kind == "break_glass"}
            who = next(a for a in APPROVERS if a not in given)
            count = int(s.blocked["count"]) if s.blocked.get("count") else None
            return BreakGlass(run_id=state.run_id, actor=who, reason="zone outage declared",
                              step=s.key, nodes=count)
        return self.r.approve_all(state, s)

    def play(self, run_id: str) -> Any:
        from bot.engine.state import RUN_TERMINAL
        r = self.r
        state = r.runner.drive(run_id)
        for _ in range(1000):
            if state.status in RUN_TERMINAL:
                return state
            if state.status == "awaiting_approval":
                s = next(x for x in state.steps.values() if x.status == "awaiting_approval")
                first = self.asked.setdefault(f"{run_id}/{s.key}", self.now())
                if (s.blocked or {}).get("recheck") and s.next_check_at:
                    # a timed hold: the bot plans the step again by itself; nobody retries
                    due = datetime.fromisoformat(s.next_check_at)
                    r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))
                    state = r.runner.drive(run_id)
                    continue
                if self.now() < first + self.delay:
                    r.sandbox.advance(first + self.delay - self.now())
                    self.waits.append((s.key, first, self.now()))
                    state = r.runner.drive(run_id)
                    continue
                cmd = self.command(state, s)
                if cmd is None:
                    return state
                r.submit(cmd)
            elif state.next_check_at:
                due = datetime.fromisoformat(state.next_check_at)
                r.sandbox.advance(max(0.0, (due - r.clock.now()).total_seconds()))
            state = r.runner.drive(run_id)
        raise AssertionError(f"run {run_id} did not finish ({state.status})")


def watch(r: Any, policy: Any, detect_after: float, t0: datetime) -> tuple[str, dict[str, str]]:
    """The bot's own node watcher (``bot/runtime/node_watcher.py``) against the sandbox, a pass
    every 5 s of simulated time, until it hands on a notice that names a runbook."""
    from bot.clients.ec2 import Ec2Client
    from bot.clients.kube import KubeClient
    from bot.diagnose.node_watch import triage_with
    from bot.engine.node_watch import NodeNotice, Thresholds
    from bot.runtime.node_watcher import NodeWatcher
    from bot.sim.sandbox import BOT_CONTEXT
    from bot.store.node_notices import NoticeLog
    sb, calls = r.sandbox, []
    kube = KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT,
                                  pool=sb.kube_transport()).bound(calls, read_only=True)
    ec2 = Ec2Client(client=sb.ec2_client(as_bot=True)).bound(calls, read_only=True)
    seen: list[NodeNotice] = []
    watcher = NodeWatcher(
        "sandbox", nodes=kube.watch_nodes, leases=kube.watch_node_leases,
        triage=triage_with(ec2, grace=policy.node_monitor_grace_period),
        claims=NoticeLog(r.store.engine), on_notice=seen.append, clock=sb.clock,
        thresholds=Thresholds(grace=policy.node_monitor_grace_period, detect_after=detect_after,
                              max_out_of_service=policy.max_out_of_service_nodes),
        watch_timeout=0, calls=calls)
    while (sb.clock.now() - t0).total_seconds() < HORIZON:
        watcher.step()
        hit = next((n for n in seen if n.suggestion is not None), None)
        if hit is not None and hit.suggestion is not None:
            return hit.suggestion.runbook, {**hit.suggestion.params, "cluster": "sandbox"}
        sb.advance(5)
    raise AssertionError("the node watcher noticed nothing in an hour")


def bot(case: Case, start_after: float | None, delay: float, policy: Any = None,
        detect_after: float = 60.0, hold_poll: float | None = None) -> dict[str, Any]:
    """The bot started ``start_after`` seconds after the death, or (None) when its own watcher
    suggests a run; returns the time to recovery and the run's stages."""
    from bot.present.recovery import stage_times
    from bot.sim.rehearsal import Rehearsal
    r = Rehearsal(case.scenario, options=dict(case.options))
    r.start()
    try:
        t0 = r.clock.now() - timedelta(seconds=case.offset)
        facts = r.facts
        dead = case.dead(facts)
        keys = affected(r.sandbox, dead)
        runbook, params = ("zone-outage-ngns", {"zone": ZONE}) if case.workload == "zone" else \
            ("node-dead-ngns", {"node": facts["node"]})
        if start_after is None:
            runbook, params = watch(r, policy, detect_after, t0)
        else:
            r.sandbox.advance(max(0.0, start_after - (r.clock.now() - t0).total_seconds()))
        started = (r.clock.now() - t0).total_seconds()
        approver = Approver(r, delay, t0, hold_poll)
        runs, run_ids = [], []
        for _ in range(3):  # a run that left nodes for later ("re-run this runbook") is re-run
            run_id = r.start_run(runbook, **params)
            run_ids.append(run_id)
            state = approver.play(run_id)
            runs.append(str(state.status))
            if state.status == "succeeded" or recovered(r.sandbox, keys, dead, t0) is not None:
                break
            r.sandbox.advance(delay)  # the operator reads the summary and starts it again
        got = _wait(r.sandbox, keys, dead, t0)
        stages = {"run_started": started}
        for run_id in run_ids:  # W2's reading of the runs' audit events
            for st in stage_times(r.events(run_id)):
                name = f"{st.stage}[{st.step}]" if st.stage.startswith("approval") else st.stage
                stages.setdefault(name, _seconds(st.at, t0))
        if got is not None:
            stages["all pods Ready"] = got
        return {"time": got, "status": "/".join(runs), "stages": stages,
                "waits": approver.waits,
                "break_glass": [c.nodes for c, _ in r.submitted if type(c).__name__ == "BreakGlass"]}
    finally:
        r.stop()


def human_share(waits: list[tuple[str, float, float]], act: float) -> float:
    """The approver's waits that fell after the floor could have acted (not hidden by policy)."""
    return sum(max(0.0, b - max(a, act)) for _, a, b in waits)


WATCHER = True  # False: model the watcher's start as Lease stale + detect_after


def detect_after_default() -> tuple[float, str]:
    """The watcher's ``detect_after`` (its Thresholds' default) and how the watcher is run."""
    from bot.engine.node_watch import Thresholds
    if WATCHER:
        return Thresholds().detect_after, ("the bot's node watcher (bot/runtime/node_watcher.py), "
                                           "a pass every 5 s; the run it suggests is started at once")
    return Thresholds().detect_after, "MODELLED: the run starts at Lease stale + detect_after"


def measure(delay: float) -> dict[str, Any]:
    from bot.config import PolicyConfig
    policy = PolicyConfig()
    detect_after, detect_source = detect_after_default()
    rows = []
    for name, scenario, options, workload, offset in CASES:
        case = Case(scenario, options, workload, offset)
        fl, floor_stages = floor(case, policy, detect_after)
        act = floor_stages["may act"]
        alert = bot(case, policy.node_monitor_grace_period + ALERT_FOR, delay)
        if WATCHER:
            watched = bot(case, None, delay, policy, detect_after)
        else:
            watched = bot(case, policy.node_monitor_grace_period + detect_after, delay)
        times = {"nothing": baseline(case, {}), "node group": baseline(case, {"replacement": True}),
                 "auto repair": baseline(case, {"auto_repair": True}),
                 "bot, 15m alert": alert["time"], "bot, watcher": watched["time"], "floor": fl}
        overhead = None
        if watched["time"] is not None and fl is not None:
            overhead = watched["time"] - fl - human_share(watched["waits"], act)
        # what if a held step were re-planned as soon as its hold can lift (the approver looking
        # again every 15 s stands in for a bot that would)
        polled = bot(case, None, delay, policy, detect_after, hold_poll=15.0)["time"] \
            if WATCHER and case.has_hung else None
        rows.append({"case": name, "times": times, "overhead": overhead, "act_at": act,
                     "floor_stages": floor_stages,
                     "hold_rechecked_15s": polled,
                     "stages": watched["stages"], "waits": watched["waits"],
                     "break_glass": watched["break_glass"], "status": watched["status"]})
        print(f"  measured {name}", file=sys.stderr)
    return {"command": COMMAND, "approval_delay": delay,
            "policy": {"node_monitor_grace_period": policy.node_monitor_grace_period,
                       "fence_min_not_ready": policy.fence_min_not_ready,
                       "fence_ambiguous_after": policy.fence_ambiguous_after,
                       "max_out_of_service_nodes": policy.max_out_of_service_nodes,
                       "detect_after": detect_after},
            "detect_source": detect_source,
            "timers": [list(t) for t in timers()], "rows": rows}


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "never (>1 h)"
    return f"{value / 60:.1f} min" if value >= 600 else f"{value:.0f} s"


def render_markdown(results: dict[str, Any]) -> str:
    """The README table: one row per case, the times from the death to every pod Ready."""
    p = results["policy"]
    lines = [f"Time from node death to every affected pod Running and Ready (simulated, sandbox "
             f"with EKS's default timers; approver answers after {results['approval_delay']:.0f} s; "
             f"policy `fence_min_not_ready` {p['fence_min_not_ready']:.0f} s, "
             f"`fence_ambiguous_after` {p['fence_ambiguous_after']:.0f} s, watcher `detect_after` "
             f"{p['detect_after']:.0f} s). Produced by `{results['command']}`:", "",
             "| case | " + " | ".join(COLUMNS) + " | bot overhead |",
             "|---" * (len(COLUMNS) + 2) + "|"]
    for row in results["rows"]:
        cells = [_fmt(row["times"][c]) for c in COLUMNS]
        over = "n/a" if row["overhead"] is None else f"{row['overhead']:.0f} s"
        lines.append(f"| {row['case']} | " + " | ".join(cells) + f" | {over} |")
    hung = next((r for r in results["rows"] if r["case"].startswith("node-hung")), None)
    if hung is not None:
        t = hung["times"]
        lines += ["", f"A hung node's StatefulSet pod, with the bot's watcher and a "
                      f"{results['approval_delay']:.0f} s approver: {_fmt(t['bot, watcher'])} "
                      f"after the death (floor {_fmt(t['floor'])}; stock alert "
                      f"{_fmt(t['bot, 15m alert'])}; EKS node auto repair {_fmt(t['auto repair'])})."]
        why = why_over_five(results)
        if why is not None:
            lines[-1] += " " + why
    if results["detect_source"].startswith("MODELLED"):
        lines += ["", "The watcher's detection is modelled (Lease stale + `detect_after`)."]
    return "\n".join(lines) + "\n"


def write_readme(table: str, readme: Path = README) -> None:
    text = readme.read_text()
    block = f"{BEGIN}\n{table}{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        anchor = "The safe order is the easy path:"
        text = text.replace(anchor, block + "\n\n" + anchor, 1)
    readme.write_text(text)


def missed_targets(results: dict[str, Any]) -> list[str]:
    missed = []
    for row in results["rows"]:
        if row["overhead"] is None or row["overhead"] >= 10:
            missed.append(f"{row['case']}: the bot's own overhead is {_fmt(row['overhead'])} (target < 10 s)")
        if row["case"].startswith("node-hung"):
            t, fl = row["times"]["bot, watcher"], row["times"]["floor"]
            if t is None or fl is None or t > fl + 70:
                missed.append(f"{row['case']}: with the watcher {_fmt(t)}, floor {_fmt(fl)} "
                              "(target floor + 70 s)")
            # under 5 minutes, unless the policy's own waits put the floor there already
            if t is None or (t >= 300 and (fl is None or fl < 300)):
                missed.append(f"{row['case']}: with the watcher {_fmt(t)} (target under 5 minutes)")
    return missed


WHY_OVER_FIVE = (
    "Over 5 minutes because the floor is: a running machine is fenced only once EC2's status "
    "check confirms the guest is down ({status} in the sandbox; until then, or until "
    "`fence_ambiguous_after`, a silent machine may be partitioned and still writing), and EC2's "
    "forced stop first gives the guest's OS its graceful-shutdown timeout ({shutdown} in the "
    "sandbox; a guest whose network died but whose OS runs flushes its file systems). Both "
    "waits are worth their minutes: skipping either can corrupt or double-write a volume.")


def why_over_five(results: dict[str, Any]) -> str | None:
    """The policy's waits that make the hung case's floor 5 minutes or more, in words."""
    hung = next((r for r in results["rows"] if r["case"].startswith("node-hung")), None)
    fl = hung["times"]["floor"] if hung else None
    if fl is None or fl < 300:
        return None
    timers = {name: value for name, value, _ in results["timers"]}
    return WHY_OVER_FIVE.format(status=timers.get("status check reads impaired", "?"),
                                shutdown=timers.get("forced stop of a hung guest", "?"))


def report(results: dict[str, Any], out: Callable[[str], None] = print) -> None:
    p = results["policy"]
    out("timers (value, source):")
    for name, value, source in results["timers"]:
        out(f"  {name:<42} {value:>7}  {source}")
    out(f"policy: fence_min_not_ready={p['fence_min_not_ready']:.0f}s "
        f"fence_ambiguous_after={p['fence_ambiguous_after']:.0f}s "
        f"node_monitor_grace_period={p['node_monitor_grace_period']:.0f}s; zone: out-of-service cap "
        f"max_out_of_service_nodes={p['max_out_of_service_nodes']}")
    out(f"watcher detect_after={p['detect_after']:.0f}s: {results['detect_source']}")
    out(f"approver answers after {results['approval_delay']:.0f} s of simulated time")
    out("")
    out(f"{'case':<32}" + "".join(f"{c:>16}" for c in COLUMNS) + f"{'overhead':>10}")
    for row in results["rows"]:
        over = "n/a" if row["overhead"] is None else f"{row['overhead']:.0f} s"
        out(f"{row['case']:<32}" + "".join(f"{_fmt(row['times'][c]):>16}" for c in COLUMNS)
            + f"{over:>10}")
    out("")
    out("stages of the watcher's run (seconds after the death):")
    for row in results["rows"]:
        stages = ", ".join(f"{k} {v:.0f}" for k, v in row["stages"].items())
        waits = ", ".join(f"{k} asked {a:.0f} answered {b:.0f}" for k, a, b in row["waits"])
        glass = f"; break-glass nodes={row['break_glass']}" if row["break_glass"] else ""
        out(f"  {row['case']}: floor may act at {row['act_at']:.0f}; {stages}; approvals: "
            f"{waits or 'none'}{glass}; runs {row['status']}")
        f = row["floor_stages"]
        out(f"    floor: may act at {f['may act']:.0f} (Lease stale past the grace period and "
            f"detect_after; a running machine once EC2's status check says it is down), instance "
            f"stopped at {f['stopped']:.0f}, tainted then, all pods Ready at {_fmt(row['times']['floor'])}")
        if row.get("hold_rechecked_15s") is not None:
            out(f"    if the fence's hold were re-checked every 15 s (not when its message says): "
                f"{_fmt(row['hold_rechecked_15s'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--approval-delay", type=float, default=60.0)
    parser.add_argument("--model-watcher", action="store_true",
                        help="start the bot at Lease stale + detect_after instead of running the "
                             "node watcher")
    parser.add_argument("--no-write", action="store_true",
                        help="do not write bench/recovery.json and README.md")
    args = parser.parse_args()
    global WATCHER
    WATCHER = not args.model_watcher
    results = measure(args.approval_delay)
    report(results)
    if not args.no_write:
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        write_readme(render_markdown(results))
    why = why_over_five(results)
    if why is not None:
        print(why)
    missed = missed_targets(results)
    for m in missed:
        print("MISSED:", m)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
