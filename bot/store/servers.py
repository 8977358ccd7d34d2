"""Which API servers serve this database, so the terminal's local mode does not write past them.

Once a bot serves its API (``runbook-bot api serve``), runs and decisions are meant to go through
it: the server knows who is asking (their token) and holds the credentials. A terminal in local
mode (its own database URL and credentials: whoever runs it holds the powers) that is pointed at
the same database would bypass that. So the server records its URL here when it starts
(``record_server``), and a local-mode write command looks (``served_by``) and refuses, naming the
server, unless the config sets ``local_mode_override: true``. This is a guard against mistakes,
not a control: whoever holds the database URL can write to it anyway.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine

from bot.store.schema import servers_t as t


class HasEngine(Protocol):
    @property
    def engine(self) -> Engine: ...


def record_server(store: HasEngine, url: str, *, now: datetime | None = None) -> None:
    """Record that the API at ``url`` serves this database (called by ``api serve`` at start)."""
    at = (now or datetime.now(UTC)).isoformat()
    host = socket.gethostname()
    with store.engine.begin() as conn:
        if conn.execute(update(t).where(t.c.url == url).values(host=host, started_at=at)).rowcount:
            return
        conn.execute(insert(t).values(url=url, host=host, started_at=at))


def forget_server(store: HasEngine, url: str) -> None:
    """The API at ``url`` no longer serves this database (a decommissioned server)."""
    with store.engine.begin() as conn:
        conn.execute(delete(t).where(t.c.url == url))


def served_by(store: HasEngine) -> str | None:
    """The URL of the server that most recently recorded itself here, or None."""
    with store.engine.connect() as conn:
        row = conn.execute(select(t.c.url).order_by(t.c.started_at.desc()).limit(1)).first()
    return None if row is None else str(row[0])


def refusal(url: str) -> str:
    return (f"this database is served by {url}: use --server {url} (or set server.url), or set "
            "local_mode_override: true in the config to write to it anyway")
