"""Builds the product from settings: store, action catalog, runbook source, runner.

Every command that touches runs (the terminal commands, ``slack serve``, ``demo``) gets its parts
here, so they all share one store and one policy, and tests can build the same thing with their own
clock or clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.config import Settings
from bot.errors import NotFound


def open_store(settings: Settings) -> Any:
    from bot.store.db import Database

    return Database(settings.database_url, audit_key=settings.audit_key,
                    redact_patterns=settings.redact_patterns)


def build_runner(settings: Settings, *, store: Any = None, notifiers: Sequence[Any] = (),
                 clock: Any = None, clients_factory: Any = None, membership: Any = None) -> Any:
    from bot.actions.catalog import build_catalog
    from bot.actions.registry import registry
    from bot.engine.ports import SystemClock
    from bot.engine.runner import Runner
    from bot.runbook.source import DirectorySource

    return Runner(store=store or open_store(settings),
                  catalog=build_catalog(settings, clients_factory=clients_factory),
                  runbooks=DirectorySource(settings.runbooks_dir, catalog=registry),
                  policy=settings.policy, clock=clock or SystemClock(), membership=membership,
                  notifiers=notifiers, lease_seconds=settings.lease_seconds)


def identity(settings: Settings, as_user: str | None) -> str:
    """The person at the keyboard: the real uid's account, or ``--as`` where the config allows it."""
    from bot.frontends.term.identity import terminal_identity

    return terminal_identity(settings.policy, as_user)


def run_id_arg(text: str) -> str:
    """A run id as typed on the command line (case, spaces, no prefix), or NotFound saying why."""
    from bot.engine.ids import parse_run_id

    try:
        return parse_run_id(text)
    except ValueError as e:
        raise NotFound(str(e)) from None
