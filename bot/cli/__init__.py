"""The ``runbook-bot`` command line: the one place that wires settings, store, clients, front-ends.

Each command group lives in its own module with a ``register(subparsers)`` function. Handlers
import what they need when they run, so ``runbook-bot --help`` and ``validate`` never import
boto3, kubernetes or slack (``bench/startup.py`` measures it).

Exit status, the same for every command:

    0   done (for ``run``: the run succeeded, or waits for someone else's approval; for a dry
        run: a real run would succeed; for ``diagnose``: nothing was found)
    1   the command ran and the answer is no: a run failed or was aborted, a dry run found a
        step where a real run would stop, a command was refused,
        a run or runbook was not found, a runbook or a run parameter is invalid, the audit chain
        is broken, ``diagnose`` found something
    2   nothing was attempted: the command line is wrong (argparse's usage errors, or an option's
        value such as ``--tz``), or the configuration is invalid or names a state database that
        cannot be opened or written (``ConfigError``); ``diagnose`` could not make its scan
    3   ``run`` (and ``follow``, and ``approve``/``confirm``/``retry`` when they carry the run to
        its end): the run finished every step, but its runbook's outcome rules
        (``spec.outcome``) ended it ``partial``: the incident is only partly resolved
    130 interrupted

Errors are one line each on stderr, ``runbook-bot: error: ...``, never a traceback.

``--config FILE`` (before or after the command) names the config file; ``-v`` prints which config
file the command reads, and how it was found, on stderr (``bot.config.find_config``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from bot import __version__
from bot.cli import logs
from bot.errors import ConfigError, RunbookBotError

EXIT_REFUSED = 1
EXIT_USAGE = 2  # argparse's own code for a bad command line; also a bad configuration
EXIT_PARTIAL = 3  # a run ended partial: not a refusal, not a success either

# Order here is the order of `runbook-bot --help`.
COMMAND_MODULES = (
    "bot.cli.runbooks",  # validate, list, show, schema
    "bot.cli.runs",  # run, approve, reject, abort, runs, status
    "bot.cli.diagnose",  # diagnose
    "bot.cli.audit",  # audit verify
    "bot.cli.export",  # export
    "bot.cli.demo",  # demo
    "bot.cli.sim",  # sim up, sim scenarios
    "bot.cli.slack",  # slack serve
    "bot.cli.alerts",  # alerts serve
    "bot.cli.api",  # api serve
    "bot.cli.api_tokens",  # api hash-token (after bot.cli.api: it joins the api command)
    "bot.cli.mcp",  # mcp serve (HTTP, or --stdio as a client of the API)
    "bot.cli.db",  # db status, db upgrade
    "bot.cli.config",  # config path, config check
)

DESCRIPTION = """\
runbook-bot walks on-call engineers through incident runbooks written in YAML: each step is
planned, guarded, approved by a second person where it is destructive, and recorded in a
tamper-evident audit log.

Start here:
  runbook-bot list                      the runbooks you can run
  runbook-bot show node-dead-ngns       its steps, approvals and guards
  runbook-bot run node-dead-ngns -p node=NODE --dry-run
  runbook-bot demo                      watch a full recovery in the built-in sandbox

Two modes:
  client mode   with a server (server.url in the config, $RUNBOOK_BOT_SERVER or --server URL),
                run, the decisions, follow, status, runs, export, audit and diagnose go through
                the bot's API with your token: the bot holds the database and the credentials.
  local mode    without one, this command opens its own database with its own credentials:
                whoever runs it holds the powers. For demo, sim, rehearsals and single-user
                set-ups; it refuses to write to a database a server serves.
"""


class _Parser(argparse.ArgumentParser):
    """The top-level parser: an unknown command is answered with the nearest one."""

    def error(self, message: str) -> NoReturn:
        import difflib
        import re

        typed = re.search(r"invalid choice: '([^']*)'", message)
        commands = [c for a in self._actions if isinstance(a, argparse._SubParsersAction)
                    for c in a.choices]
        close = difflib.get_close_matches(typed.group(1), commands, n=1) if typed else []
        if typed:
            message = (f"unknown command '{typed.group(1)}'"
                       + (f": did you mean '{close[0]}'?" if close else "")
                       + " (runbook-bot --help lists every command)")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="runbook-bot",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"runbook-bot {__version__}")
    logs.add_arguments(parser)
    _global_options(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue  # a command group not built into this install
            raise
        module.register(sub)
    for command in _commands(parser):
        _global_options(command, default=argparse.SUPPRESS)
    return parser


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser, nested ones (``slack serve``) included."""
    out: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):  # aliases share a parser
                out += [command, *_commands(command)]
    return out


def _global_options(parser: argparse.ArgumentParser, *, default: object) -> None:
    """``--config`` and ``-v``, accepted before the command and after it."""
    parser.add_argument("--config", metavar="FILE", default=default,
                        help="the config file (default: $RUNBOOK_BOT_CONFIG, ./runbook-bot.yaml, "
                        "then $XDG_CONFIG_HOME/runbook-bot/config.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=False if default is None else default,
                        help="say which config file is read, and how it was found; with "
                        "status, every skipped step and the expressions behind the words")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    from bot.cli.wiring import stores_closed
    from bot.config import find_config, use_config

    try:
        logs.configure_from(args)
        with use_config(args.config), stores_closed():
            if args.verbose:
                path, how = find_config()
                print(f"runbook-bot: config: {path} ({how})" if path else f"runbook-bot: config: "
                      f"{how}", file=sys.stderr)
            return int(handler(args) or 0)
    except RunbookBotError as e:
        for line in str(e).splitlines() or [type(e).__name__]:
            print(f"runbook-bot: error: {line}", file=sys.stderr)
        return EXIT_USAGE if isinstance(e, ConfigError) else EXIT_REFUSED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `runbook-bot show X | head`: the reader left; say nothing more.
        sys.stderr.close()
        return 0

