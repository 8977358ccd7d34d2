"""Schema migrations: every table the bot creates is brought to its newest revision at start.

One Alembic environment (``bot/store/migrations/env.py``) serves every part that keeps tables in
the state database. A part is a ``Component``: its table metadata, the directory of its revision
files and its own version table. The store registers its own here; a front-end with tables of its
own (the Slack front-end's ``persistence.py``) defines a component beside its tables and passes it
to ``ensure_schema`` on the same engine, so the store never imports a front-end.

``ensure_schema`` reads the database's revision first; at the newest revision (every start but the
first after an upgrade) it changes nothing and takes no lock. Otherwise it takes an exclusive lock
and migrates: on PostgreSQL a session advisory lock keyed by the schema (``current_schema()``), so
replicas starting together on one database take turns and the later ones find nothing to do, while
the same server's other schemas are not held up; on SQLite an exclusive transaction. A database
whose revision this code does not know (written by a newer version) is refused with a message
saying so, rather than run against a schema it does not understand.

Databases made before migrations existed (``create_all``) hold exactly the tables of the first
revision: the first revision adopts tables already there and creates what is missing.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, text
from sqlalchemy.engine import Connection, Engine

from bot.errors import ConfigError

ENVIRONMENT = Path(__file__).with_name("migrations")


@dataclass(frozen=True)
class Component:
    """A part's tables and their revisions, tracked in the part's own version table."""

    name: str
    metadata: MetaData = field(compare=False, hash=False)
    versions: Path
    version_table: str


def _config(component: Component) -> Config:
    cfg = Config()
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("script_location", str(ENVIRONMENT))
    cfg.set_main_option("version_locations", str(component.versions))
    cfg.attributes["component"] = component
    return cfg


@cache
def _script(component: Component) -> ScriptDirectory:
    return ScriptDirectory.from_config(_config(component))


def heads(component: Component) -> set[str]:
    """The newest revisions this code has for ``component``."""
    return set(_script(component).get_heads())


def known(component: Component) -> set[str]:
    """Every revision this code has for ``component``."""
    return {s.revision for s in _script(component).walk_revisions()}


def current(conn: Connection, component: Component) -> set[str]:
    """The revisions the database is at for ``component`` (empty before its first migration)."""
    ctx = MigrationContext.configure(conn, opts={"version_table": component.version_table})
    return set(ctx.get_current_heads())


def _check_known(component: Component, at: set[str], url: str) -> None:
    unknown = sorted(at - known(component))
    if unknown:
        raise ConfigError(
            f"the state database {url} has {component.name} schema revision {', '.join(unknown)}, "
            f"which this runbook-bot does not know (it knows up to {', '.join(sorted(heads(component)))}): "
            "it was migrated by a newer version; run that version, or restore a backup made "
            "before the upgrade")


def ensure_schema(engine: Engine, component: Component, *, shown: str = "") -> bool:
    """Migrate ``component``'s tables to the newest revision; True when anything was done."""
    shown = shown or engine.url.render_as_string(hide_password=True)
    want = heads(component)
    with engine.connect() as conn:
        at = current(conn, component)
        conn.rollback()
    _check_known(component, at, shown)
    if at == want:
        return False
    with _exclusive(engine) as conn:
        at = current(conn, component)  # another replica may have migrated while we waited
        _check_known(component, at, shown)
        if at == want:
            return False
        _upgrade(conn, component)
    return True


def _upgrade(conn: Connection, component: Component) -> None:
    cfg = _config(component)
    cfg.attributes["connection"] = conn
    script = _script(component)

    def upgrade(rev: Any, _ctx: MigrationContext) -> Any:
        return script._upgrade_revs("heads", rev)  # what `alembic upgrade heads` runs

    with EnvironmentContext(cfg, script, fn=upgrade, destination_rev="heads"):
        script.run_env()
    conn.commit()


_THREADS = threading.Lock()  # one migration at a time in this process too


@contextmanager
def _exclusive(engine: Engine) -> Iterator[Connection]:
    """A connection holding the migration lock of the engine's database (and schema)."""
    with _THREADS, engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            schema = conn.execute(text("SELECT current_schema()")).scalar() or "public"
            key = lock_key(schema)
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
            conn.commit()  # a session lock outlives the transaction; the migration has its own
            try:
                yield conn
            finally:
                conn.rollback()
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
            return
        if engine.dialect.name == "sqlite":
            # SQLite's own write lock, held from here to the migration's commit: another process
            # waits for it (the busy timeout), then finds the schema migrated
            conn.exec_driver_sql("BEGIN EXCLUSIVE")
        try:
            yield conn
        finally:
            conn.rollback()  # nothing left to undo after a migration's commit


def lock_key(schema: str) -> int:
    """The advisory lock key of migrations in ``schema``: a signed 64-bit number."""
    digest = hashlib.sha256(f"runbook-bot schema migration {schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
