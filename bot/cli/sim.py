"""``sim up`` and ``sim scenarios``: run a sandbox cluster in the foreground for demos and game days.

``sim up`` stages a named incident, writes a kubeconfig and an env file (``AWS_ENDPOINT_URL_EC2``,
region, dummy credentials, ``KUBECONFIG``) so that kubectl, boto3 and the bot reach it exactly as they
reach production, prints both paths and then ``ready``, and runs the controllers on real time times
``--time-scale`` until SIGINT or SIGTERM. Only argparse is imported at module level: the sandbox
(moto, the servers) loads when the command runs, never for ``runbook-bot --help``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("sim", help="run the sandbox: a simulated Kubernetes-on-AWS cluster",
                       description="A simulated Kubernetes-on-AWS cluster that kubectl, boto3 and the "
                       "bot talk to, staged as a named incident.")
    sim = p.add_subparsers(dest="sim_command", metavar="COMMAND")
    p.set_defaults(handler=lambda _args: (p.print_help(), 2)[1])

    up = sim.add_parser("up", help="stage a scenario and serve it until interrupted",
                        description="Stage SCENARIO, write the kubeconfig and env file, print their "
                        "paths and then a line `ready`; serve until SIGINT or SIGTERM.")
    up.add_argument("--scenario", required=True, metavar="NAME", help="see `runbook-bot sim scenarios`")
    up.add_argument("--kubeconfig", metavar="PATH", help="where to write the kubeconfig "
                    "(default: a new temporary directory)")
    up.add_argument("--env-file", metavar="PATH", help="where to write the env file "
                    "(default: next to the kubeconfig)")
    up.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                    help="simulated seconds per real second (default 1; 60 makes a minute pass each second)")
    up.add_argument("--seed", type=int, metavar="N", help="seed for names and ids (default: the scenario's)")
    up.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="a scenario option, e.g. nodes=100 for az-outage (repeatable)")
    up.set_defaults(handler=cmd_up)

    ls = sim.add_parser("scenarios", help="the scenarios, one line each",
                        description="List the scenarios `sim up` can stage.")
    ls.set_defaults(handler=cmd_scenarios)

    from bot.cli import explore
    explore.register(sim)


def cmd_scenarios(args: argparse.Namespace) -> int:
    from bot.sim.scenarios import SCENARIOS

    width = max(len(name) for name in SCENARIOS)
    for name, scenario in SCENARIOS.items():
        print(f"{name:<{width}}  {scenario.summary}")
    return 0


def _options(pairs: list[str]) -> dict[str, Any]:
    from bot.errors import ParamError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ParamError(f"--option expects KEY=VALUE, got {pair!r}")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(raw)
                    break
                except ValueError:
                    continue
        out[key] = value
    return out


def cmd_up(args: argparse.Namespace) -> int:
    import signal
    import threading
    from datetime import UTC, datetime
    from pathlib import Path

    from bot.engine.ports import ManualClock
    from bot.errors import ParamError
    from bot.sim.sandbox import Sandbox
    from bot.sim.scenarios import SCENARIOS

    if args.scenario not in SCENARIOS:
        raise ParamError(f"unknown scenario {args.scenario!r}; known: {', '.join(SCENARIOS)}")
    if args.time_scale <= 0:
        raise ParamError("--time-scale must be positive")
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    sb = Sandbox(args.scenario, seed=args.seed, clock=clock, time_scale=args.time_scale,
                 options=_options(args.option))
    if args.kubeconfig:
        sb.kubeconfig_path = Path(args.kubeconfig).resolve()
    if args.env_file:
        sb.env_path = Path(args.env_file).resolve()
    elif args.kubeconfig:
        sb.env_path = sb.kubeconfig_path.with_name("sandbox.env")
    for path in (sb.kubeconfig_path, sb.env_path):
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        sb.start()
        # Staging took simulated minutes: move them into the past, so ages kubectl prints are right.
        sb.rebase(datetime.now(UTC).replace(microsecond=0))
        sb.start_background()
        print(f"kubeconfig: {sb.kubeconfig_path}")
        print(f"env file: {sb.env_path}")
        facts = ", ".join(f"{k}={v}" for k, v in sb.facts.items() if isinstance(v, str))
        print(f"scenario {args.scenario} (seed {sb.seed}): {facts}", file=sys.stderr)
        print("kubeconfig contexts: sandbox (cluster admin, the default), runbook-bot (the bot's "
              "ServiceAccount, allowed what deploy/rbac.yaml grants)", file=sys.stderr)
        print("ready", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        sb.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    print("stopped", file=sys.stderr)
    return 0
