"""``api hash-token``: the ``sha256:HEX`` an ``api.tokens`` entry holds for an automation's token.

Apart from ``bot/cli/api.py`` (``api serve``), it adds itself to the same ``api`` command. The
token is read from standard input (hidden at a terminal), never from the command line, where
``ps`` and shell history would keep it; ``--new`` makes one (32 random bytes) and prints it once.
"""

from __future__ import annotations

import argparse
import getpass
import secrets
import sys
from typing import Any

MIN_TOKEN = 16  # characters: a token is a password no one types, so it can be long


def register(sub: Any) -> None:
    api = sub.choices.get("api")
    if api is None:
        api = sub.add_parser("api", help="the authenticated HTTP API (terminals, scripts)")
        api.add_subparsers(dest="api_command", metavar="COMMAND")
        api.set_defaults(handler=lambda _args: api.print_help() or 2)
    (inner,) = [a for a in api._actions if isinstance(a, argparse._SubParsersAction)]
    p = inner.add_parser(
        "hash-token", help="the api.tokens entry for an automation's API token",
        description="Print the sha256:HEX to put under api.tokens.NAME in the config for an API "
        "token, read from standard input (hidden at a terminal), or made with --new. The config "
        "holds only the hash; the token itself is sent as 'Authorization: Bearer TOKEN'.")
    p.add_argument("--new", action="store_true",
                   help="make a new random token, print it once, then its hash")
    p.add_argument("--name", default="NAME", help="the name to show in the config line")
    p.set_defaults(handler=cmd_hash_token)


def cmd_hash_token(args: argparse.Namespace) -> int:
    from bot.frontends.api.auth import hash_token

    if args.new:
        token = "rbt_" + secrets.token_urlsafe(32)
        print(f"token (give it to the automation now; only its hash is kept): {token}")
    else:
        token = (getpass.getpass("API token: ") if sys.stdin.isatty()
                 else sys.stdin.readline()).strip()
        if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
            print(f"runbook-bot: error: a token is one word of at least {MIN_TOKEN} characters; "
                  "make one with --new", file=sys.stderr)
            return 2
    print(f'api:\n  tokens:\n    {args.name}: "{hash_token(token)}"')
    return 0
