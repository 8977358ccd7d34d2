"""Engines for the state database's URL (SQLite with WAL, or PostgreSQL), and the URL as it may be
shown: its password is never printed (``masked``). Importable from ``bot.store.db`` too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from bot.errors import ConfigError


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and logs."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    return parsed.render_as_string(hide_password=True)


def without_password(text: str, url: str) -> str:
    try:
        password = make_url(url).password
    except ArgumentError:
        password = None
    return text.replace(str(password), "***") if password else text


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and its directory created."""
    if url.startswith("sqlite"):
        memory = url in ("sqlite://", "sqlite:///:memory:")
        if not memory:
            path = Path(url.split("///", 1)[1]) if "///" in url else None
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    why = ("a file is in the way" if isinstance(e, FileExistsError)
                           else e.strerror)
                    raise ConfigError(f"cannot open the state database {url}: cannot create "
                                      f"directory {path.parent}: {why}") from e
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if memory:
            kwargs["poolclass"] = StaticPool
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi: Any, _record: Any) -> None:
            cur = dbapi.cursor()
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    try:
        return create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as e:
        raise ConfigError(f"the database URL {masked(url)!r} needs a driver that is not installed "
                          f"({e.name}); "
                          "for PostgreSQL install runbook-bot[postgres]") from e
