"""Shared test configuration: the two store backends. Area fixtures live in tests/<area>/conftest.py.

``db_url`` runs a test on a SQLite file and on a private schema of the PostgreSQL server at
127.0.0.1:5432 (database ``test``), the store for shared and highly available installations.

moto keeps EC2 state process-wide, so a process runs one sandbox at a time. The sandbox tests'
pool (tests/sim/kit.py) keeps its sandbox running between the tests of tests/sim; before a test
of another directory it is stopped, so a test that starts its own sandbox finds none running,
whatever ran before it in this process (a pytest-xdist worker runs any mix of files).
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG = "postgresql+psycopg://127.0.0.1:5432/test"

# the terminal shows times in the machine's zone: the golden outputs are written in UTC wherever
# the tests run
os.environ["TZ"] = "UTC"
time.tzset()


def _postgres_or_skip() -> None:
    sa = pytest.importorskip("sqlalchemy")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install runbook-bot[postgres])")
    probe = sa.create_engine(PG)
    try:
        with probe.connect():
            pass
    except Exception as e:  # no server here: say so, do not pretend
        pytest.skip(f"no PostgreSQL at 127.0.0.1:5432 database test ({type(e).__name__})")
    finally:
        probe.dispose()


def pytest_runtest_setup(item: pytest.Item) -> None:
    kit = sys.modules.get("tests.sim.kit")  # imported only where the sandbox tests were collected
    if kit is not None and Path(kit.__file__).parent not in item.path.parents:
        kit.Pool.close_all()


@contextmanager
def pg_schema() -> Iterator[str]:
    """The URL of a private, empty schema of the PostgreSQL server, dropped afterwards."""
    import sqlalchemy as sa

    _postgres_or_skip()
    schema = f"rbtest_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg_schema() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return str(request.getfixturevalue("pg_url"))
