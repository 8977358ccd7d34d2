"""``sim explore``: search the failure timelines of a runbook, shrink what breaks an invariant,
and save it as a case the tests replay (``bot.sim.explore``). ``--replay FILE`` plays saved cases.

Exit status: 0 when no timeline broke an invariant, 1 when one did (each printed shrunk, with
its seed, and saved under ``--save``), 2 for bad input, 3 when a timeline played in a fork over
the in-process transport ended otherwise than over HTTP (an explorer error: the sandbox's fault).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sim: Any) -> None:
    p = sim.add_parser(
        "explore", help="search the failure timelines of a runbook for unsafe interleavings",
        description="Play a runbook against a sandbox scenario many times, with world events "
        "(nodes that come back or die, stuck hosts, throttling, late or wrong approvers, "
        "workers killed mid-write) between its ticks; check the safety invariants after each "
        "timeline; shrink and save every counterexample.")
    p.add_argument("--runbook", metavar="NAME|PATH",
                   help="a shipped runbook's name, or the path of a runbook file")
    p.add_argument("--scenario", metavar="NAME",
                   help="the sandbox scenario (default: the incident a shipped runbook is for)")
    p.add_argument("--timelines", type=int, default=50, metavar="N", help="how many (default 50)")
    p.add_argument("--seed", type=int, default=0, metavar="K", help="seed of the search (default 0)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help="stop drawing after this long")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="a runbook param, over what diagnose suggests (repeatable)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a scenario option (repeatable)")
    p.add_argument("--save", metavar="DIR", default="explore-cases",
                   help="where counterexamples are written (default ./explore-cases)")
    p.add_argument("--replay", metavar="FILE", nargs="+",
                   help="play saved timelines instead of searching")
    p.add_argument("--check-every", type=int, default=None, metavar="N",
                   help="play one timeline in N over HTTP too and compare (default 20; 0: none; "
                        "counterexamples always are)")
    p.set_defaults(handler=cmd_explore)


def _runbook(value: str) -> tuple[str, str | None]:
    """(runbook name, runbooks directory or None for the shipped ones)."""
    import yaml

    from bot.errors import ParamError

    path = Path(value)
    if not value.endswith((".yaml", ".yml")):
        return value, None
    if not path.is_file():
        raise ParamError(f"--runbook {value}: no such file")
    name = ((yaml.safe_load(path.read_text()) or {}).get("metadata") or {}).get("name")
    if not name:
        raise ParamError(f"{value}: metadata.name is missing")
    return str(name), str(path.resolve().parent)


def cmd_explore(args: argparse.Namespace) -> int:
    from bot.cli.sim import _options
    from bot.errors import ParamError
    from bot.sim.explore.driver import play
    from bot.sim.explore.search import OPTIONS_FOR, SCENARIO_FOR, base_timeline, explore, save_case
    from bot.sim.explore.timeline import load
    from bot.sim.scenarios import SCENARIOS

    if args.replay:
        bad = 0
        for file in args.replay:
            tl = load(Path(file))
            p = play(tl)
            if not p.found:
                print(f"{file}: holds ({p.status} after {p.rounds} rounds)")
                continue
            bad += 1
            print(f"{file}: BROKEN ({p.status})")
            for f in p.found:
                print(f"  {f.invariant}: {f.details}")
            print("\n".join(["  trace:", *(f"    {line}" for line in p.trace)]))
        return 1 if bad else 0
    if not args.runbook:
        raise ParamError("give --runbook NAME|PATH (or --replay FILE)")
    name, directory = _runbook(args.runbook)
    scenario = args.scenario or SCENARIO_FOR.get(name)
    if scenario is None:
        raise ParamError(f"--scenario is needed for {name}; known: {', '.join(SCENARIOS)}")
    if scenario not in SCENARIOS:
        raise ParamError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    try:
        base = base_timeline(name, scenario, params={k: str(v) for k, v in _options(args.param).items()},
                             options={**OPTIONS_FOR.get(name, {}), **_options(args.option)},
                             runbooks_dir=directory)
    except ValueError as e:
        raise ParamError(str(e)) from None
    print(f"exploring {name} on {scenario}, params "
          + ", ".join(f"{k}={v}" for k, v in sorted(base.params.items())), file=sys.stderr)

    def progress(p: Any) -> None:
        if not p.found:
            print(".", end="", file=sys.stderr, flush=True)
            return
        first = p.found[0]
        print(f"\n! seed {p.timeline.seed}: {first.invariant}: {first.details}", file=sys.stderr,
              flush=True)

    from bot.sim.explore.search import CHECK_EVERY

    every = CHECK_EVERY if args.check_every is None else max(0, args.check_every)
    report = explore(base, count=args.timelines, seed=args.seed, budget=args.budget,
                     runbooks_dir=directory, on_played=progress, check_every=every)
    print(file=sys.stderr)
    print(report.words(_steps(name, directory)))
    for failed in report.failures:
        path = save_case(failed, Path(args.save))
        print(f"\nVIOLATION {failed.timeline.invariant}: {failed.timeline.note}")
        print(failed.timeline.words())
        print(f"saved: {path} (replay: runbook-bot sim explore --replay {path})")
    if report.errors:
        return 3
    return 1 if report.failures else 0


def _steps(name: str, directory: str | None) -> list[str]:
    from bot.actions.builtin import builtin_actions
    from bot.runbook.source import DirectorySource
    from bot.sim.rehearsal import REPO

    source = DirectorySource((directory or str(REPO / "runbooks"),), catalog=builtin_actions())
    runbook, _text, _file = source.get(name)
    return [s.id for s in runbook.spec.steps]
