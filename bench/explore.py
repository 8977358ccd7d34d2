"""How many timelines per second the explorer plays, and what a large exploration finds.

For each runbook (default: every shipped runbook with a default scenario), ``--timelines``
timelines are drawn from ``--seed`` and played on ``--workers`` processes (each its own sandbox:
moto keeps EC2 state per process). Prints timelines per second per core, violations found (each
shrunk, with its seed, saved under ``--save``), and the steps and interlocks the search reached.

Target: at least 5 timelines per second per core for ``node-dead-ngns`` (stretch 20). The
baseline this started from, on this 2-core machine: 0.65 timelines/s per core (1.5 s each: 0.9 s
staging the scenario, 0.6 s playing the run over HTTP). Exits 1 if the target or a search missed
(a violation found). Not part of ``make test``; ``make explore`` runs it.

    .venv/bin/python bench/explore.py [--runbooks node-dead-ngns,...] [--timelines 200] [--workers 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = 5.0  # timelines per second per core, node-dead-ngns


def _work(job: tuple[str, str, int, int, str]) -> dict[str, Any]:
    from bot.sim.explore.search import OPTIONS_FOR, base_timeline, explore, save_case

    runbook, scenario, seed, count, save = job
    base = base_timeline(runbook, scenario, options=OPTIONS_FOR.get(runbook))
    report = explore(base, count=count, seed=seed)
    saved = [str(save_case(f, Path(save))) for f in report.failures]
    return {"played": report.played, "seconds": report.seconds, "ends": report.ends,
            "steps": {k: sorted(v) for k, v in report.coverage.steps.items()},
            "interlocks": sorted(report.coverage.interlocks),
            "failures": [(f.timeline.invariant, f.timeline.note, f.timeline.words())
                         for f in report.failures], "saved": saved}


def main() -> int:
    from bot.sim.explore.search import SCENARIO_FOR

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runbooks", default=",".join(SCENARIO_FOR))
    parser.add_argument("--timelines", type=int, default=100, help="per runbook")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save", default="explore-cases")
    args = parser.parse_args()
    missed = []
    for runbook in [r for r in args.runbooks.split(",") if r]:
        scenario = SCENARIO_FOR[runbook]
        n = max(1, args.workers)
        jobs = [(runbook, scenario, args.seed * 1000 + i, args.timelines // n + (i < args.timelines % n),
                 args.save) for i in range(n)]
        start = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(n) as pool:
            results = pool.map(_work, jobs)
        wall = time.perf_counter() - start
        played = sum(r["played"] for r in results)
        busy = sum(r["seconds"] for r in results)
        per_core = played / busy if busy else 0.0
        steps: dict[str, set[str]] = {}
        for r in results:
            for k, v in r["steps"].items():
                steps.setdefault(k, set()).update(v)
        ran = sorted(k for k, v in steps.items() if v - {"skipped"})
        interlocks = sorted({i for r in results for i in r["interlocks"]})
        ends: dict[str, int] = {}
        for r in results:
            for k, v in r["ends"].items():
                ends[k] = ends.get(k, 0) + v
        failures = [f for r in results for f in r["failures"]]
        print(f"{runbook} on {scenario}: {played} timelines in {wall:.1f} s on {n} worker(s): "
              f"{per_core:.2f} timelines/s per core; {len(failures)} violation(s)")
        print("   ends:", ", ".join(f"{k} {v}" for k, v in sorted(ends.items())))
        print(f"   steps run: {len(ran)}; interlocks: {', '.join(interlocks) or 'none'}")
        for inv, note, words in failures:
            print(f"   VIOLATION {inv}: {note}\n" + "\n".join("      " + line for line in words.splitlines()))
        for r in results:
            for s in r["saved"]:
                print("   saved:", s)
        if failures:
            missed.append(f"{runbook}: {len(failures)} violation(s)")
        if runbook == "node-dead-ngns" and per_core < TARGET:
            missed.append(f"node-dead-ngns: {per_core:.2f} timelines/s per core, target {TARGET}")
    for m in missed:
        print("MISSED:", m)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
