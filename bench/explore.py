"""How many timelines per second the explorer plays, and what a large exploration finds.

For each runbook (default: every shipped runbook with a default scenario), ``--timelines``
timelines are drawn from ``--seed`` and played on ``--workers`` processes (each its own sandbox:
moto keeps EC2 state per process). Prints timelines per second per core, violations found (each
shrunk, with its seed, saved under ``--save``), the timelines also played over HTTP and whether
they agreed, and the steps and interlocks the search reached.

Per core is timelines per CPU second of the workers and every process they forked (staging and
the HTTP cross-checks included): on a machine others share, wall time counts their work too.
Timelines per second of each worker's wall time is printed beside it: the same on an idle
machine for the forks, which never wait; lower for ``--no-fork``, which waits on its servers'
threads and sockets half the time (0.69 by wall time, 1.3 by CPU time).

Target: at least 5 timelines per second per core for ``node-dead-ngns`` (stretch 20). The
baseline this started from, on this 2-core machine: 0.65 timelines/s per core (1.5 s each: 0.9 s
staging the scenario, 0.6 s playing the run over HTTP). How fast this machine is varies from day
to day (the same code, one worker, no HTTP checks: 5.7 on one day, 2.5 on another), so
``--baseline N`` also plays N timelines the baseline's way (staged afresh, over HTTP) with
today's code in the same run and prints the speed-up over it: what forking and the in-process
transport buy on today's machine. It is not the speed-up over the baseline (that would be 7.7x):
the baseline's way has got faster too, with the sandbox's and the store's own speed-ups. Where
the time goes: docs/explore.md, "How a timeline is made cheap". Exits 1 if the target or a
search missed (a violation found, or the two ways of playing disagreed). Not part
of ``make test``; ``make explore`` runs it.

    .venv/bin/python bench/explore.py [--runbooks node-dead-ngns,...] [--timelines 200] [--workers 2]
    .venv/bin/python bench/explore.py --runbooks node-dead-ngns --timelines 100 --workers 2
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
BASELINE = 0.65  # what this started from: staged afresh and played over HTTP per timeline


def _work(job: tuple[str, str, int, int, str, bool]) -> dict[str, Any]:
    from bot.sim.explore.search import OPTIONS_FOR, explore, save_case
    from bot.sim.explore.timeline import Timeline

    runbook, scenario, seed, count, save, fork = job
    before = os.times()
    # the params are those diagnose suggests on the first timeline's staged world
    base = Timeline(runbook, scenario, {}, options=dict(OPTIONS_FOR.get(runbook) or {}))
    report = explore(base, count=count, seed=seed, fork=fork)
    after = os.times()
    cpu = sum(getattr(after, f) - getattr(before, f)
              for f in ("user", "system", "children_user", "children_system"))
    saved = [str(save_case(f, Path(save))) for f in report.failures]
    return {"played": report.played, "seconds": report.seconds, "cpu": cpu,
            "checked": report.checked, "errors": report.errors, "ends": report.ends,
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
    parser.add_argument("--baseline", type=int, default=4, metavar="N",
                        help="for node-dead-ngns, also play N timelines the baseline's way, now, "
                             "on this machine (0: skip): the speed-up does not depend on how "
                             "busy or fast the machine is today")
    parser.add_argument("--no-fork", action="store_true",
                        help="stage each timeline afresh and play it over HTTP (the baseline's way)")
    args = parser.parse_args()
    missed = []
    for runbook in [r for r in args.runbooks.split(",") if r]:
        scenario = SCENARIO_FOR[runbook]
        n = max(1, args.workers)
        jobs = [(runbook, scenario, args.seed * 1000 + i, args.timelines // n + (i < args.timelines % n),
                 args.save, not args.no_fork) for i in range(n)]
        start = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(n) as pool:
            results = pool.map(_work, jobs)
        wall = time.perf_counter() - start
        played = sum(r["played"] for r in results)
        cpu = sum(r["cpu"] for r in results)
        per_core = played / cpu if cpu else 0.0
        busy = sum(r["seconds"] for r in results)  # each worker's wall time in its search
        checked = sum(r["checked"] for r in results)
        errors = [e for r in results for e in r["errors"]]
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
              f"{per_core:.2f} timelines/s per core by CPU time ({cpu:.1f} s), "
              f"{played / busy if busy else 0.0:.2f} by each worker's wall time; "
              f"{len(failures)} violation(s)")
        if runbook == "node-dead-ngns":
            print(f"   baseline: {BASELINE:.2f} timelines/s per core (staged afresh and played "
                  f"over HTTP per timeline); target {TARGET:.0f}")
            if args.baseline and not args.no_fork:
                with multiprocessing.get_context("spawn").Pool(1) as pool:
                    [base] = pool.map(_work, [(runbook, scenario, args.seed * 1000 + 999,
                                               args.baseline, args.save, False)])
                now = base["played"] / base["cpu"] if base["cpu"] else 0.0
                print(f"   the baseline's way with today's code (staged afresh, over HTTP): "
                      f"{base['played']} timelines, {now:.2f} per core; forks and the in-process "
                      f"transport play {per_core / now if now else 0.0:.1f}x as many per CPU second")
        print(f"   played over HTTP too: {checked}, "
              + (f"{len(errors)} ended otherwise" if errors else "each with the same result"))
        for e in errors:
            print(f"   EXPLORER ERROR: {e}")
        print("   ends:", ", ".join(f"{k} {v}" for k, v in sorted(ends.items())))
        print(f"   steps run: {len(ran)}; interlocks: {', '.join(interlocks) or 'none'}")
        for inv, note, words in failures:
            print(f"   VIOLATION {inv}: {note}\n" + "\n".join("      " + line for line in words.splitlines()))
        for r in results:
            for s in r["saved"]:
                print("   saved:", s)
        if failures:
            missed.append(f"{runbook}: {len(failures)} violation(s)")
        if errors:
            missed.append(f"{runbook}: {len(errors)} explorer error(s)")
        if runbook == "node-dead-ngns" and per_core < TARGET:
            missed.append(f"node-dead-ngns: {per_core:.2f} timelines/s per core, target {TARGET}")
    for m in missed:
        print("MISSED:", m)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
