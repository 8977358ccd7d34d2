"""A zone outage recovered by the bot against a careful engineer's kubectl and AWS CLI procedure.

The ``az-outage`` sandbox with 10, 50 and 100 dead nodes (one in ten still ``running``: a hung
guest that must be fenced). Both sides start from a fresh copy of the same sandbox and are counted
on the wire by ``bench/wire.py``, which sees every request to the API server and every EC2 query,
plan-time and safety reads included.

- The bot runs ``zone-outage-ngns`` with its defaults (batches of 10); approvals are given at
  once, and the blast-radius cap is passed by break-glass naming the number of nodes.
- The engineer's procedure makes the checks the bot makes, once each: ``aws sts
  get-caller-identity`` (the right account), one ``kubectl get nodes`` for the zone, one ``aws
  ec2 describe-instances`` for all; what a fence would destroy for good (``aws ec2
  describe-instance-types`` for instance store, ``kubectl get pods -A`` and ``kubectl get pv``
  for local volumes); for the running ones the checks a fence needs (``kubectl get leases -n
  kube-node-lease``: no kubelet renews its Lease; ``aws ec2 describe-instance-status``: EC2
  confirms the machine is impaired), one ``aws ec2 stop-instances --force`` for them,
  ``describe-instances`` until they are stopped, ``kubectl taint`` per node, one ``kubectl get
  volumeattachments`` per poll until the nodes hold none, one ``aws ec2 describe-volumes`` for
  what EC2 still attaches, and at the end whether the claims' pods run again (``kubectl get pods
  -A``) on volumes EBS has not impaired (``aws ec2 describe-volume-status``). Sandbox time moves
  between polls as it does for the bot.

The worst day (``--variants``): ``stuck``, one dead machine in twenty on a host that failed with
the zone (its forced stop never completes; the bot calls it stuck after ``stop_timeout``, 5m here,
and the declared outage's two people break glass on its taint and forced detach; the procedure
does what the declared outage's people would do at the same deadline: taints it, gives a detach
under way 10 minutes, then forces it), and ``replacement``, the Auto Scaling group replacing every
dead instance 400 s after the failure, mid-run (its Nodes deleted; the procedure's taint of a
deleted node fails and is skipped). For each, the figures above and, for the bot, how many nodes
were put out of service, were stuck, were gone, and the simulated time from the start of the run to
the last claim recovered (or blocked with its remedy).

Targets: fewer requests than the procedure at every size and variant, reads growing slower than
the number of nodes (per node, fewer at 100 than at 10), and wall time no worse. Prints the
figures; exits 1 if a target is missed. Needs kubectl and the AWS CLI: ``aws`` on PATH, else it
installs ``awscli`` from PyPI into a virtual environment of its own (the CLI pins its botocore,
which must not replace the bot's). Not part of ``make test``.

    .venv/bin/python bench/zone_outage.py [--sizes 10,50,100] [--variants kind,stuck,replacement]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.wire import Wire
from bot.engine.commands import BreakGlass
from bot.engine.ports import ManualClock
from bot.engine.runstate import RunState, StepState
from bot.sim.rehearsal import APPROVERS, Rehearsal
from bot.sim.sandbox import Sandbox

ZONE = "ap-southeast-1a"
OOS = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
POLL = 15.0


def aws_cli() -> str:
    found = shutil.which("aws")
    if found:
        return found
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "runbook-bot-bench"
    exe = home / "awscli" / "bin" / "aws"
    if not exe.exists():
        print("installing awscli from PyPI into", home / "awscli", file=sys.stderr)
        venv.create(home / "awscli", with_pip=True)
        subprocess.run([str(home / "awscli" / "bin" / "pip"), "install", "-q", "awscli"], check=True)
    return str(exe)


VARIANTS: dict[str, dict[str, Any]] = {
    "kind": {},
    "stuck": {"stuck": "n/20"},
    "replacement": {"replacement": True, "replace_after": 400, "os_shutdown_timeout": 600},
}
STOP_TIMEOUT = 300.0


def options(n: int, variant: str = "kind") -> dict[str, Any]:
    extra = {k: (max(1, n // 20) if v == "n/20" else v) for k, v in VARIANTS[variant].items()}
    return {"nodes": n, "hung": max(1, n // 10), **extra}


class WiredRehearsal(Rehearsal):
    """A rehearsal whose bot reaches the sandbox through the counting proxy."""

    def start(self) -> None:
        self.sandbox.start()
        self.wire = Wire(self.sandbox)
        self.kubeconfig, self.ec2_endpoint = str(self.wire.kubeconfig_path), self.wire.ec2_endpoint
        started = self.sandbox.start
        self.sandbox.start = lambda: None  # type: ignore[method-assign]
        try:
            super().start()
        finally:
            self.sandbox.start = started  # type: ignore[method-assign]

    def stop(self) -> None:
        self.wire.close()
        super().stop()


def bot_side(n: int, workdir: Path, variant: str = "kind") -> dict[str, Any]:
    r = WiredRehearsal("az-outage", options=options(n, variant), workdir=workdir)
    r.start()
    try:
        r.sandbox.advance(300)  # NotReady for longer than policy.fence_min_not_ready
        r.wire.reset()

        def decide(state: RunState, s: StepState) -> Any:
            # a declared zone outage: two people break glass on the cap, on tainting stuck
            # hosts and on detaching what they hold
            if s.blocked and s.blocked.get("rule") in ("blast-radius", "oos-taint", "force-detach"):
                given = {v.by for v in s.votes if v.kind == "break_glass"}
                who = next(a for a in APPROVERS if a not in given)
                count = int(s.blocked["count"]) if s.blocked.get("count") else None
                return BreakGlass(run_id=state.run_id, actor=who, reason="zone outage declared",
                                  step=s.key, nodes=count)
            return r.approve_all(state, s)

        began = r.clock.now()
        start = time.perf_counter()
        st = r.run("zone-outage-ngns", decide=decide, zone=ZONE,
                   stop_timeout=f"{STOP_TIMEOUT:.0f}s")
        wall = time.perf_counter() - start
        assert st.status in ("succeeded", "partial"), st.outcome
        outcomes: dict[str, str] = {}
        for s in st.steps.values():
            if s.step_id in ("recover", "taint_stuck") and s.result:
                outcomes |= {i["node"]: i["outcome"] for i in s.result["items"]}
        tainted = [x for x in r.sandbox.list("Node") if any(
            t["key"] == "node.kubernetes.io/out-of-service" for t in x["spec"].get("taints") or ())]
        if variant == "kind":
            assert st.status == "succeeded" and len(tainted) == n, (st.outcome, len(tainted))
        placement = st.steps["placement"]
        last = (datetime.fromisoformat(str(placement.finished_at)) - began).total_seconds() \
            if placement.finished_at else float("nan")
        values = list(outcomes.values())
        return {"total": r.wire.total(), "reads": r.wire.total(reads=True),
                "writes": r.wire.total(reads=False), "wall": wall, "counts": r.wire.counts(),
                "out_of_service": values.count("tainted") + values.count("done"),
                "stuck": sum(1 for s in st.steps.values() if s.step_id == "recover" and s.result
                             for i in s.result["items"] if i["outcome"] == "stuck"),
                "gone": values.count("gone"), "last_claim": last, "status": str(st.status)}
    finally:
        r.stop()


class Shell:
    """The engineer's terminal: kubectl and the AWS CLI with the sandbox's env, through the proxy."""

    def __init__(self, sb: Sandbox, wire: Wire, aws: str, cache: Path) -> None:
        self.env = {**os.environ, **wire.env, "AWS_PAGER": "",
                    "AWS_MAX_ATTEMPTS": "8", "AWS_RETRY_MODE": "standard"}
        self.aws, self.cache = aws, cache

    def kubectl(self, *args: str) -> Any:
        out = subprocess.run(["kubectl", f"--cache-dir={self.cache}", *args], env=self.env,
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out) if "-o" in args else out

    def aws_sts(self, *args: str) -> Any:
        return subprocess.run([self.aws, "sts", *args, "--output", "json"], env=self.env,
                              check=True, capture_output=True, text=True).stdout

    def ec2(self, *args: str) -> Any:
        out = subprocess.run([self.aws, "ec2", *args, "--output", "json"], env=self.env,
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out) if out.strip() else {}


def states(sh: Shell, ids: list[str]) -> dict[str, str]:
    data = sh.ec2("describe-instances", "--instance-ids", *ids)
    return {i["InstanceId"]: i["State"]["Name"] for r in data["Reservations"] for i in r["Instances"]}


def held_volumes(sh: Shell, ids: list[str]) -> dict[str, str]:
    """Data volumes (the EBS CSI driver's, by tag) EC2 still attaches to the dead instances."""
    data = sh.ec2("describe-volumes", "--filters",
                  f"Name=attachment.instance-id,Values={','.join(ids)}")
    return {v["VolumeId"]: a["State"] for v in data.get("Volumes", ())
            if any(t["Key"] == "CSIVolumeName" for t in v.get("Tags") or ())
            for a in v.get("Attachments") or () if a["InstanceId"] in ids}


def script_side(n: int, workdir: Path, aws: str, variant: str = "kind") -> dict[str, Any]:
    sb = Sandbox("az-outage", workdir=workdir, clock=ManualClock(), options=options(n, variant))
    sb.start()
    wire = Wire(sb)
    try:
        sb.advance(300)
        wire.reset()
        sh = Shell(sb, wire, aws, workdir / "kube-cache")
        start = time.perf_counter()
        sh.aws_sts("get-caller-identity")  # the right account, before anything is stopped
        nodes = sh.kubectl("get", "nodes", "-l", f"topology.kubernetes.io/zone={ZONE}", "-o", "json")
        dead = {x["metadata"]["name"]: x["spec"]["providerID"].rsplit("/", 1)[1]
                for x in nodes["items"]
                if next(c["status"] for c in x["status"]["conditions"] if c["type"] == "Ready") != "True"}
        ids = sorted(dead.values())
        described = sh.ec2("describe-instances", "--instance-ids", *ids)
        found = [i for r in described["Reservations"] for i in r["Instances"]]
        running = [i["InstanceId"] for i in found if i["State"]["Name"] == "running"]
        # no machine whose data lives on its own disks is fenced: instance-store types, and
        # local/hostPath PVs or pods' local volumes on these nodes
        sh.ec2("describe-instance-types", "--instance-types",
               *sorted({i["InstanceType"] for i in found}))
        sh.kubectl("get", "pods", "-A", "-o", "json")
        pvs = sh.kubectl("get", "pv", "-o", "json")
        if running:
            # a running machine is stopped only once its kubelet is known silent (its Lease not
            # renewed) and EC2's status checks say it is impaired: a live kubelet is not fenced
            sh.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json")
            sh.ec2("describe-instance-status", "--include-all-instances", "--instance-ids", *running)
            sh.ec2("stop-instances", "--force", "--instance-ids", *running)
            deadline = sb.clock.now().timestamp() + STOP_TIMEOUT  # a host may never let go
            while any(s not in ("stopped", "terminated") for s in states(sh, running).values()) \
                    and sb.clock.now().timestamp() < deadline:
                sb.advance(POLL)
        # the machines off are tainted; on a declared outage, the stuck ones too (the bot's
        # break-glass), once the deadline has passed
        for name in sorted(dead):
            with contextlib.suppress(subprocess.CalledProcessError):
                sh.kubectl("taint", "node", name, OOS)  # fails if its node group deleted it
        waited = sb.clock.now().timestamp() + 360
        while sb.clock.now().timestamp() < waited:
            vas = sh.kubectl("get", "volumeattachments", "-o", "json")
            if not [v for v in vas["items"] if v["spec"]["nodeName"] in dead]:
                break
            sb.advance(POLL)
        held = held_volumes(sh, ids)
        # a detach under way is given 10 minutes before it is forced, as the bot does
        waited = sb.clock.now().timestamp() + 600
        while any(st in ("detaching", "busy") for st in held.values()) \
                and sb.clock.now().timestamp() < waited:
            sb.advance(POLL)
            held = held_volumes(sh, ids)
        for vid in sorted(held):
            sh.ec2("detach-volume", "--force", "--volume-id", vid)
        while held:
            sb.advance(POLL)
            held = held_volumes(sh, ids)
        # recovered? the claims' pods run again, on volumes EBS has not impaired
        sh.kubectl("get", "pods", "-A", "-o", "json")
        vols = sorted({pv["spec"]["csi"]["volumeHandle"] for pv in pvs["items"]
                       if (pv["spec"].get("csi") or {}).get("driver") == "ebs.csi.aws.com"})
        sh.ec2("describe-volume-status", "--volume-ids", *vols)
        wall = time.perf_counter() - start
        return {"total": wire.total(), "reads": wire.total(reads=True),
                "writes": wire.total(reads=False), "wall": wall, "counts": wire.counts()}
    finally:
        wire.close()
        sb.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,50,100")
    parser.add_argument("--variants", default="kind,stuck,replacement",
                        help=f"which outages: {', '.join(VARIANTS)}")
    parser.add_argument("--verbose", action="store_true", help="print the requests by kind")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not shutil.which("kubectl"):
        print("kubectl is needed on PATH", file=sys.stderr)
        return 2
    aws = aws_cli()
    variants = [v for v in args.variants.split(",") if v]
    rows = []
    print(f"{'variant':>11} {'nodes':>5}  {'bot req':>7} {'reads':>5} {'writes':>6} {'wall s':>6}   "
          f"{'script req':>10} {'reads':>5} {'writes':>6} {'wall s':>6}   "
          f"{'out':>4} {'stuck':>5} {'gone':>4} {'last claim s':>12}  outcome")
    for variant in variants:
        for n in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                bot = bot_side(n, Path(tmp) / "bot", variant)
                man = script_side(n, Path(tmp) / "script", aws, variant)
            rows.append((variant, n, bot, man))
            print(f"{variant:>11} {n:>5}  {bot['total']:>7} {bot['reads']:>5} {bot['writes']:>6} "
                  f"{bot['wall']:>6.2f}   {man['total']:>10} {man['reads']:>5} {man['writes']:>6} "
                  f"{man['wall']:>6.2f}   {bot['out_of_service']:>4} {bot['stuck']:>5} "
                  f"{bot['gone']:>4} {bot['last_claim']:>12.0f}  {bot['status']}")
            if args.verbose:
                print("   bot:", dict(sorted(bot["counts"].items())))
                print("   script:", dict(sorted(man["counts"].items())))
    missed = []
    for variant, n, bot, man in rows:
        if bot["total"] >= man["total"]:
            missed.append(f"{variant}, {n} nodes: the bot made {bot['total']} requests, the "
                          f"script {man['total']}")
        if bot["wall"] > man["wall"]:
            missed.append(f"{variant}, {n} nodes: the bot took {bot['wall']:.2f}s, the script "
                          f"{man['wall']:.2f}s")
    kind = [(n, bot, man) for variant, n, bot, man in rows if variant == "kind"]
    per_node = [bot["reads"] / n for n, bot, _ in kind]
    if len(kind) > 1 and not all(b < a for a, b in itertools.pairwise(per_node)):
        missed.append("the bot's reads per node do not fall as nodes grow: "
                      + ", ".join(f"{n}: {r:.2f}" for (n, _, _), r in zip(kind, per_node, strict=True)))
    for m in missed:
        print("MISSED:", m)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
