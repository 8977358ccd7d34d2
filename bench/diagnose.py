"""What one ``diagnose`` scan costs on a 100-node zone outage: API calls and wall time.

At 3 a.m. the scan is the first thing on-call runs, so it must answer in seconds whatever the
cluster's size, with a number of requests that does not grow with the number of broken nodes.
Stages ``az-outage`` (default 100 dead nodes of 150, 500 volumes), then scans it through the bot's
own identity (RBAC and IAM enforced) several times and prints the calls per kind, the findings and
the wall time of each scan.

Run: ``.venv/bin/python bench/diagnose.py`` (``--nodes N``, ``--volumes-per-node M``, ``--runs R``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bot.actions.builtin import builtin_actions
from bot.actions.catalog import ClusterClients
from bot.clients.ec2 import Ec2Client
from bot.clients.kube import KubeClient
from bot.diagnose import Scope, catalogue_of, diagnose
from bot.runbook.source import DirectorySource
from bot.sim.rehearsal import REPO, Rehearsal
from bot.sim.sandbox import BOT_CONTEXT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--volumes-per-node", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    runbooks = catalogue_of(DirectorySource((str(REPO / "runbooks"),), catalog=builtin_actions()))
    options = {"nodes": args.nodes, "volumes_per_node": args.volumes_per_node}
    t0 = time.perf_counter()
    with Rehearsal("az-outage", options=options, workdir=Path(tempfile.mkdtemp())) as r:
        sb = r.sandbox
        print(f"az-outage: {len(sb.list('Node'))} nodes, {len(sb.list('Pod'))} pods, "
              f"{len(sb.list('VolumeAttachment'))} VolumeAttachments, {len(sb.list('Event'))} "
              f"events; staged in {time.perf_counter() - t0:.1f} s")
        kube = KubeClient.from_config(kubeconfig=str(sb.kubeconfig_path), context=BOT_CONTEXT)
        clients = ClusterClients.of(kube=kube, ec2=Ec2Client(client=sb.ec2_client(as_bot=True)))
        cfg = r.settings.cluster("sandbox")
        times, report = [], None
        for _ in range(args.runs):
            start = time.perf_counter()
            report = diagnose(cfg, clients, Scope(cluster="sandbox"), now=r.clock.now(),
                              runbooks=runbooks)
            times.append(time.perf_counter() - start)
        assert report is not None
        print(f"calls per scan: {report.calls} (one request per 500 objects of each of 7 kinds, "
              "DescribeInstances per 200 nodes, DescribeInstanceStatus for running NotReady "
              "instances, one DescribeVolumes)")
        for f in report.findings:
            print(f"finding: {f.severity.value} {f.kind} -> {f.command}")
        print(f"wall time per scan over {args.runs} runs: median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s")
        print(f"IAM refusals: {len(sb.ec2.refused)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
