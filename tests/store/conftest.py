"""Store backends: a SQLite file, and a private schema on the PostgreSQL at 127.0.0.1:5432."""

from __future__ import annotations

import secrets

import pytest

PG = "postgresql+psycopg://127.0.0.1:5432/test"


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


@pytest.fixture
def pg_url():
    import sqlalchemy as sa

    _postgres_or_skip()
    schema = f"rbtest_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    yield f"{PG}?options=-csearch_path%3D{schema}"
    with admin.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return request.getfixturevalue("pg_url")
