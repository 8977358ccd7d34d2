"""``db status`` and ``db upgrade``: the state database's schema revision, and migrating it.

Every command that opens the database migrates it at start (under a lock, see
``bot.store.migrate``), so ``db upgrade`` is needed only to migrate ahead of a rollout, from a
Kubernetes Job or an init container for instance. ``db status`` prints, for every part that keeps
tables (the store, the Slack front-end), the revision the database is at and the newest this
version knows; its exit code is 1 while they differ (a migration pending, or a database migrated
by a newer version). The Slack front-end's tables are made by the first ``slack serve``, so a
database only workers (or terminals) have used has none, and that is no migration pending: a part
that is made where it is first used counts as behind only once it exists.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("db", help="the state database's schema: status, upgrade",
                       description="Show or migrate the state database's schema (docs/ha.md).")
    s = p.add_subparsers(dest="db_command", metavar="COMMAND")
    st = s.add_parser("status", help="the schema revision of each part, and the newest known",
                      description="Print each part's schema revision; exit 1 if one is behind.")
    st.set_defaults(handler=cmd_status)
    up = s.add_parser("upgrade", help="migrate every table to the newest revision",
                      description="Migrate every table the bot creates to the newest revision "
                      "(what every command does at start), then exit.")
    up.set_defaults(handler=cmd_upgrade)
    p.set_defaults(handler=lambda args: p.print_help() or 2)


def _components() -> list[tuple[Any, bool]]:
    """Every part that keeps tables, and whether it is made where it is first used (so may be
    absent from a healthy database): the store is made by every command, the Slack front-end's
    tables by ``slack serve`` only."""
    from bot.frontends.slack.persistence import SLACK
    from bot.store.db import STORE

    return [(STORE, False), (SLACK, True)]


def cmd_status(args: argparse.Namespace) -> int:
    from bot.config import load_settings
    from bot.store.db import make_engine, masked
    from bot.store.migrate import current, heads, known

    settings = load_settings()
    engine = make_engine(settings.database_url)
    behind = False
    try:
        with engine.connect() as conn:
            print(f"database: {masked(settings.database_url)}")
            for component, on_first_use in _components():
                at, want = current(conn, component), heads(component)
                state = ("up to date" if at == want else "not created" if not at
                         else "newer than this version" if at - known(component) else "behind")
                behind = behind or (at != want and bool(at or not on_first_use))
                print(f"  {component.name}: at {', '.join(sorted(at)) or '-'}; newest "
                      f"{', '.join(sorted(want))} ({state})")
                if not at and on_first_use:
                    print("    (made when the front-end that keeps it first starts: nothing pending)")
    finally:
        engine.dispose()
    return 1 if behind else 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    from bot.cli.wiring import open_store
    from bot.config import load_settings
    from bot.frontends.slack.persistence import SLACK
    from bot.store.db import masked
    from bot.store.migrate import ensure_schema

    settings = load_settings()
    store = open_store(settings)  # migrates the store's tables
    try:
        ensure_schema(store.engine, SLACK, shown=masked(settings.database_url))
    finally:
        store.close()
    print("schema: up to date")
    return 0
