"""What a run's own AWS session costs: the first write of a run, and every later one.

With a cluster ``role_arn``, a run's first EC2 write assumes the role for the run (SourceIdentity,
session tags) and builds a botocore client on those credentials; later writes of the run with the
same approvers reuse it. Against the sandbox's STS and EC2 endpoint (moto), this prints the time
of a run's first ``StopInstances`` (a DryRun-free write the sandbox refuses cheaply: an unknown
instance) and of the next ones, and how many AssumeRole requests crossed the wire.

    .venv/bin/python bench/run_sessions.py [--runs 20] [--writes 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.clients.attribution import Attribution
from bot.clients.ec2 import Ec2Client
from bot.config import ClusterConfig
from bot.errors import RunbookBotError
from bot.sim.iam import CREDENTIALS
from bot.sim.sandbox import Sandbox

ROLE = "arn:aws:iam::123456789012:role/runbook-bot"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--writes", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sb = Sandbox("node-dead", workdir=Path(tmp) / "sb")
        sb.start()
        try:
            cfg = ClusterConfig(name="bench", region=sb.region, role_arn=ROLE, max_attempts=1)
            ec2 = Ec2Client.from_cluster(cfg, endpoint_url=sb.ec2.endpoint,
                                         sts_endpoint_url=sb.ec2.endpoint, credentials=CREDENTIALS)
            first: list[float] = []
            later: list[float] = []
            for n in range(args.runs):
                who = Attribution.of(run_id=f"rb-bench{n}", requester="alice", approvers=["bob"])
                for w in range(args.writes):
                    view = ec2.bound([], acting_for=who)
                    t0 = time.perf_counter()
                    # the instance does not exist: the request is still made and signed
                    with contextlib.suppress(RunbookBotError):
                        view.stop_instances(["i-0123456789abcdef0"], force=False)
                    (first if w == 0 else later).append((time.perf_counter() - t0) * 1000)
            assumed = sum(1 for c in sb.ec2.sts.calls
                          if c.action == "AssumeRole" and c.source_identity.startswith("rb-bench"))
        finally:
            sb.stop()
    print(f"runs {args.runs}, writes per run {args.writes}, AssumeRole per run "
          f"{assumed / args.runs:.1f}")
    print(f"first write of a run (AssumeRole + client + call): median "
          f"{statistics.median(first):.1f} ms, max {max(first):.1f} ms")
    print(f"later writes (session reused): median {statistics.median(later):.1f} ms, "
          f"max {max(later):.1f} ms")


if __name__ == "__main__":
    main()
