"""The terminal's subcommands for the verbs of ``bot.engine.verbs``, generated from its table.

Each verb's arguments become argparse arguments: a positional one (also accepted as
``--name VALUE``, so ``reject RUN_ID --reason TEXT`` and ``reject RUN_ID TEXT...`` are the same),
or an option. argparse only gathers the words; ``values`` hands them to the table's ``finish``,
which checks and converts them with the rules and messages Slack's ``/runbook`` uses. A mistake
is a usage error (exit 2) naming the argument and what would be valid.
"""

from __future__ import annotations

import argparse
from typing import Any

from bot.engine.verbs import BY_NAME, Arg, Verb, VerbError, finish, terminal_person

_OPT = "_opt"  # the dest suffix of an argument given as an option


class _Intermixed(argparse.ArgumentParser):
    """Options anywhere among the words, as in Slack: ``break-glass RUN --nodes 3 reason...``
    (argparse's plain parse would end REASON at the first option)."""

    _inside = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inside:  # parse_known_intermixed_args calls back here, twice
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def add_verb(sub: Any, name: str, *, description: str = "") -> argparse.ArgumentParser:
    """The subcommand for verb ``name``; the caller adds what only the terminal has (``--as``,
    ``--follow``) and its handler."""
    verb = BY_NAME[name]
    usual, sub._parser_class = sub._parser_class, _Intermixed
    try:
        p: argparse.ArgumentParser = sub.add_parser(
            name, help=verb.help,
            description=description or verb.help[0].upper() + verb.help[1:] + ".")
    finally:
        sub._parser_class = usual
    for i, a in enumerate(verb.args):
        _add(p, a, first=i == 0)
    p.set_defaults(verb=name, verb_parser=p)
    return p


def _add(p: argparse.ArgumentParser, a: Arg, *, first: bool) -> None:
    if first and a.positional and a.required and a.kind == "word":
        p.add_argument(a.name, metavar=a.shown, help=a.help)
        return
    if a.positional:
        nargs = "*" if a.kind in ("rest", "pairs") else "?"
        p.add_argument(a.name, nargs=nargs, metavar=a.shown, help=a.help)
    dashed = [n for n in a.aliases if n.startswith("-")]
    names = [n for n in dashed if not n.startswith("--")] + [a.option] + \
        [n for n in dashed if n.startswith("--")]
    helptext = f"the same as {a.shown}" if a.positional else a.help
    if a.kind == "flag":
        p.add_argument(*names, dest=a.name + _OPT, action="store_true", help=helptext)
    elif a.kind == "pairs":
        p.add_argument(*names, dest=a.name + _OPT, action="append", metavar=a.shown,
                       help=helptext)
    else:
        p.add_argument(*names, dest=a.name + _OPT, metavar=a.shown, help=helptext)


def _raw(verb: Verb, args: argparse.Namespace) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for a in verb.args:
        by_position = getattr(args, a.name, None)
        by_option = getattr(args, a.name + _OPT, None)
        twice = by_option not in (None, [], False) and by_position not in (None, [])
        if twice and a.kind != "pairs":
            raise VerbError(f"{a.shown} is given twice: by position and as {a.option}")
        if a.kind == "pairs":
            raw[a.name] = [*(by_position or []), *(by_option or [])]
        elif by_option not in (None, [], False):
            raw[a.name] = [by_option] if a.kind == "rest" else by_option
        else:
            raw[a.name] = by_position
    return raw


def values(args: argparse.Namespace) -> dict[str, Any]:
    """The verb's checked values from a parsed command line; a mistake exits 2 naming it."""
    verb = BY_NAME[args.verb]
    try:
        return finish(verb, _raw(verb, args), terminal_person, prefix="runbook-bot ")
    except VerbError as e:
        args.verb_parser.error(str(e))
        raise  # not reached: error() exits
