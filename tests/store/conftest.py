"""Store tests use the shared ``db_url`` and ``pg_url`` fixtures of tests/conftest.py, and ``db``:
a store on ``db_url`` (SQLite, then PostgreSQL), closed after the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.store.db import Database


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = Database(db_url, audit_key="k")
    yield d
    d.close()
