"""The bot's API calls on one dead node against a person typing the same procedure by hand.

For the ``node-dead`` scenario (the instance is already stopped) and ``node-hung`` (it still runs
and must be fenced), this runs ``node-dead-ngns`` through the runner with every approval given at
once, then, on fresh copies of the same sandbox, two people with kubectl and the AWS CLI:

``person`` types the runbook's procedure by hand: every check node-dead-ngns makes, one command
each, reusing what is on the screen until they have waited (as the bot shares reads within a pass):

    kubectl get node NODE -o json                     Ready? which instance?
    aws ec2 describe-instances --instance-ids I       stopped?
    aws ec2 describe-instance-status ...              status checks (a running instance only)
    kubectl get volumeattachments / pv / pods -A      the volumes, claims and pods it holds, and
                                                      whether its pods were force-deleted already
    aws ec2 stop-instances --force ...                only when it still runs; then
    aws ec2 describe-instances ... every 15 s         until stopped; after that wait, the
                                                      attachments, PVs, pods and node again
    aws ec2 describe-volumes --filters attachment.instance-id=I   what EC2 attaches to it
    kubectl taint node NODE node.kubernetes.io/out-of-service=nodeshutdown:NoExecute
    kubectl get pods -A --field-selector spec.nodeName=NODE       pods that tolerate the taint
    kubectl get volumeattachments -o json every 15 s  until none names the node
    aws ec2 describe-volumes --filters attachment.instance-id=I   EC2 let go too
    kubectl get pods -A -o json every 15 s            until the pods run elsewhere
    aws ec2 describe-volumes --volume-ids ... every 15 s   until attached to their new nodes

``minimal`` only does what the fix needs (no status checks, no check for force-deleted pods or
tolerating pods, no re-read before the taint); it is printed for comparison. The bot also reads
what no person types: the live re-plan of every approved step (the node list, for the node's
Ready condition and the cluster-wide count of out-of-service nodes, and the instance's state),
printed apart, and, while the instance runs, its stop protection.

Both sides are counted on the wire by the same proxies (``bench/wire.py``); kubectl's discovery
requests (cached on disk in daily use) are left out. Time is the sandbox's: the people's waits
advance the clock 15 s per poll, the bot's its next check.

Exit status 1 when the bot makes more calls than ``person`` in either scenario (or its run does
not succeed). The AWS CLI is installed from PyPI into the running interpreter when ``aws`` is
missing.

    .venv/bin/python bench/node_dead.py [--scenario node-dead] [--show]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.wire import Request, Wire
from bot.actions.catalog import ClusterClients
from bot.clients.ec2 import Ec2Client, boto3_client
from bot.clients.kube import KubeClient
from bot.sim.iam import CREDENTIALS
from bot.sim.rehearsal import Rehearsal
from bot.sim.sandbox import BOT_CONTEXT, Sandbox

OOS = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
FENCED = ("stopped", "terminated")
POLL = 15.0


class WiredRehearsal(Rehearsal):
    """A rehearsal whose bot reaches the sandbox through the counting proxies."""

    wire: Wire

    def clients(self) -> ClusterClients:
        self.wire = Wire(self.sandbox)
        raw = boto3_client(region=self.sandbox.region, endpoint_url=self.wire.ec2_endpoint,
                           credentials=CREDENTIALS, max_attempts=self.ec2_attempts)
        return ClusterClients.of(
            kube=KubeClient.from_config(kubeconfig=str(self.wire.kubeconfig_path),
                                        context=BOT_CONTEXT),
            ec2=Ec2Client(client=raw))

    def stop(self) -> None:
        if hasattr(self, "wire"):
            self.wire.close()
        super().stop()


def aws_cli() -> str:
    found = shutil.which("aws")
    if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
        return found
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "awscli>=1.33,<2"], check=True)
    found = shutil.which("aws") or str(Path(sys.executable).parent / "aws")
    return found


def bot_run(scenario: str, workdir: Path) -> tuple[list[Request], int, int, str]:
    """The bot's requests on the wire, the API calls its audit records, the requests of the live
    re-plans that follow approvals, and how the run ended."""
    with WiredRehearsal(scenario, workdir=workdir) as r:
        catalog = r.runner.catalog
        plan = catalog.plan
        plans: dict[str, int] = {}
        replanned: list[int] = []

        def planned(name: str, params: Any, ctx: Any) -> Any:
            try:
                return plan(name, params, ctx)
            finally:  # a step planned again was approved in between: its reads are live
                plans[ctx.step_id] = plans.get(ctx.step_id, 0) + 1
                if plans[ctx.step_id] > 1:
                    replanned.append(sum(1 for c in ctx.calls if c.outcome != "cached"))

        catalog.plan = planned  # type: ignore[method-assign]
        r.wire.reset()
        st = r.run("node-dead-ngns", node=r.facts["node"])
        seen = r.wire.api_calls()
        audited = sum(1 for e in r.events(st.run_id) for c in e.payload.get("calls") or ()
                      if c.get("outcome") != "cached")
        return seen, audited, sum(replanned), st.status


class Person:
    """Types commands against the sandbox through the proxies and reads their JSON."""

    def __init__(self, sb: Sandbox, wire: Wire, aws: str, home: Path) -> None:
        self.sb, self.wire, self.aws = sb, wire, aws
        self.env = {**os.environ, **wire.env, "HOME": str(home)}
        self.typed: list[str] = []

    def sh(self, *argv: str) -> Any:
        self.typed.append(" ".join(argv))
        cmd = list(argv)
        if cmd[0] == "aws":
            cmd = [self.aws, *cmd[1:], "--output", "json"]
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {out.stderr.strip()}")
        return json.loads(out.stdout) if out.stdout.strip().startswith(("{", "[")) else out.stdout

    def until(self, check: Callable[[], bool], *, limit: int = 60) -> int:
        for polls in range(1, limit + 1):
            if check():
                return polls
            self.sb.advance(POLL)
        raise RuntimeError("gave up waiting")

    def instance_state(self, iid: str) -> str:
        found = self.sh("aws", "ec2", "describe-instances", "--instance-ids", iid)
        return str(found["Reservations"][0]["Instances"][0]["State"]["Name"])

    def holders(self, node: str) -> tuple[set[tuple[str, str]], list[str], int]:
        """The claims and EBS volumes the node holds, and how many pods use those claims."""
        vas = self.sh("kubectl", "get", "volumeattachments", "-o", "json")["items"]
        pvs = {va["spec"]["source"].get("persistentVolumeName") for va in vas
               if va["spec"]["nodeName"] == node}
        claimed = {(pv["spec"]["claimRef"]["namespace"], pv["spec"]["claimRef"]["name"]): pv
                   for pv in self.sh("kubectl", "get", "pv", "-o", "json")["items"]
                   if pv["metadata"]["name"] in pvs and pv["spec"].get("claimRef")}
        volumes = [pv["spec"]["csi"]["volumeHandle"] for pv in claimed.values()]
        return set(claimed), volumes, len(self.users(set(claimed)))

    def users(self, claims: set[tuple[str, str]]) -> list[dict[str, Any]]:
        pods = self.sh("kubectl", "get", "pods", "-A", "-o", "json")["items"]
        return [p for p in pods if any(
            (p["metadata"]["namespace"], v.get("persistentVolumeClaim", {}).get("claimName"))
            in claims for v in p["spec"].get("volumes") or ())]

    def recover(self, node: str, *, runbook: bool) -> None:
        """The procedure; ``runbook``: every check node-dead-ngns makes, typed by hand, output on
        screen reused until the person has waited; otherwise only what the fix itself needs."""
        n = self.sh("kubectl", "get", "node", node, "-o", "json")
        ready = next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready")
        assert ready != "True", f"{node} is Ready"
        iid = n["spec"]["providerID"].rsplit("/", 1)[-1]
        state = self.instance_state(iid)
        if runbook and state not in FENCED:  # a stopped instance has no status checks
            self.sh("aws", "ec2", "describe-instance-status", "--include-all-instances",
                    "--instance-ids", iid)
        if runbook:  # were the node's pods force-deleted already? (the timeout detach)
            claims, volumes, affected = self.holders(node)
        waited = state not in FENCED
        if waited:
            self.sh("aws", "ec2", "stop-instances", "--force", "--instance-ids", iid)
            self.until(lambda: self.instance_state(iid) == "stopped")
        if not runbook or waited:
            claims, volumes, affected = self.holders(node)
        if runbook and waited:  # minutes later: is it still NotReady before the taint?
            self.sh("kubectl", "get", "node", node, "-o", "json")
        if runbook:  # which EBS volumes EC2 attaches to it
            self.sh("aws", "ec2", "describe-volumes", "--filters",
                    f"Name=attachment.instance-id,Values={iid}")
        self.sh("kubectl", "taint", "node", node, OOS)
        if runbook:  # pods that tolerate the taint keep their volumes
            self.sh("kubectl", "get", "pods", "-A", "--field-selector", f"spec.nodeName={node}",
                    "-o", "json")
        self.until(lambda: not [va for va in self.sh("kubectl", "get", "volumeattachments", "-o",
                                                     "json")["items"]
                                if va["spec"]["nodeName"] == node])
        held = self.sh("aws", "ec2", "describe-volumes", "--filters",
                       f"Name=attachment.instance-id,Values={iid}")["Volumes"]
        assert not [v for v in held if v["VolumeId"] in volumes], "EC2 still holds a data volume"
        self.until(lambda: sum(1 for p in self.users(claims) if p["spec"].get("nodeName") != node
                               and p["status"].get("phase") == "Running") >= affected)
        if volumes:
            self.until(lambda: all(
                v["State"] == "in-use" and v["Attachments"][0]["InstanceId"] != iid
                for v in self.sh("aws", "ec2", "describe-volumes", "--volume-ids",
                                 *volumes)["Volumes"]))


def person_run(scenario: str, workdir: Path, aws: str, *,
               runbook: bool) -> tuple[list[Request], list[str]]:
    with Sandbox(scenario, workdir=workdir / "sandbox") as sb, Wire(sb) as wire:
        person = Person(sb, wire, aws, workdir)
        # kubectl's discovery cache, warm as on an engineer's laptop
        person.sh("kubectl", "get", "nodes", "-o", "name")
        wire.reset()
        person.typed.clear()
        person.recover(sb.facts["node"], runbook=runbook)
        return wire.api_calls(), person.typed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--scenario", action="append", choices=["node-dead", "node-hung"])
    ap.add_argument("--show", action="store_true", help="list every request by kind")
    args = ap.parse_args(argv)
    scenarios = args.scenario or ["node-dead", "node-hung"]
    if not shutil.which("kubectl"):
        print("kubectl is not on PATH", file=sys.stderr)
        return 2
    aws = aws_cli()
    worse = False
    print(f"{'scenario':10} {'side':8} {'calls':>5} {'reads':>5} {'writes':>6} {'audited':>7}  outcome")
    with tempfile.TemporaryDirectory(prefix="bench-node-dead-") as tmp:
        for scenario in scenarios:
            work = Path(tmp) / scenario
            bot, audited, after_approval, status = bot_run(scenario, work / "bot")
            hand, typed = person_run(scenario, work / "person", aws, runbook=True)
            least, fewest = person_run(scenario, work / "minimal", aws, runbook=False)
            bot_outcome = f"{status}; {after_approval} of its calls re-read live after approvals"
            for side, seen, extra, outcome in (("bot", bot, str(audited), bot_outcome),
                                               ("person", hand, "-", f"{len(typed)} commands"),
                                               ("minimal", least, "-", f"{len(fewest)} commands")):
                writes = sum(1 for r in seen if r.write)
                print(f"{scenario:10} {side:8} {len(seen):>5} {len(seen) - writes:>5} {writes:>6} "
                      f"{extra:>7}  {outcome}")
                if args.show:
                    print(Wire.table_of(seen))
            if len(bot) > len(hand) or status != "succeeded":
                worse = True
    print("the bot makes no more calls than the runbook typed by hand" if not worse
          else "FAIL: the bot makes more calls than the runbook typed by hand (or did not succeed)")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
