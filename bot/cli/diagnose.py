"""``diagnose``: read a cluster once and say what is wrong and which runbook to run.

Exit status: 0 when nothing is found, 1 when something is, 2 when the scan itself could not be
made (API server unreachable, a read forbidden, EC2 refusing): a broken scan never reads as a
clean cluster nor as a finding.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_FOUND = 1
EXIT_SCAN_FAILED = 2


def register(sub: Any) -> None:
    p = sub.add_parser(
        "diagnose", help="scan a cluster read-only: what is wrong, and which runbook to run",
        description="Read the cluster and its EC2 side once (nodes, pods, volumes, attachments, "
        "storage classes, events, instances) and print each finding with its evidence, severity, "
        "the runbook that applies with its params filled in, and a ready command line. Changes "
        "nothing. Exit status 0: nothing found; 1: something found; 2: the scan failed.")
    p.add_argument("--cluster", metavar="NAME",
                   help="a configured cluster (needed when several are configured)")
    p.add_argument("--namespace", "-n", metavar="NS", help="only findings about this namespace")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--pod", metavar="POD",
                      help="only findings about this pod (in --namespace, if given)")
    only.add_argument("--node", metavar="NODE", help="only findings about this node")
    p.add_argument("--format", "-f", dest="fmt", choices=("text", "json"), default="text",
                   help="text for people (default), JSON for machines")
    from bot.cli.remote import add_server_option

    add_server_option(p)
    p.set_defaults(handler=cmd_diagnose)


def cmd_diagnose(args: argparse.Namespace) -> int:
    from bot.cli.wiring import scanner
    from bot.config import load_settings
    from bot.diagnose import Scope
    from bot.errors import ConfigError, RunbookBotError
    from bot.present.diagnosis import report_text

    settings = load_settings()  # an invalid config: ConfigError, exit 2 like every command
    from bot.cli.remote import server_of

    if (server := server_of(args, settings)) is not None:
        from bot.cli import remote

        return remote.cmd_diagnose(args, server)
    scope = Scope(cluster=args.cluster or "", namespace=args.namespace, pod=args.pod,
                  node=args.node)
    try:
        report = scanner(settings)(scope)
    except ConfigError:
        raise
    except RunbookBotError as e:
        print(f"runbook-bot: error: the scan failed, nothing was concluded: {e}", file=sys.stderr)
        return EXIT_SCAN_FAILED
    if args.fmt == "json":
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(report_text(report))
    return EXIT_FOUND if report.findings else 0
