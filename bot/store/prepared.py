"""The store's hottest writes on the DB-API cursor: a tick's save, the claim, renewal and
release of a run's lease, its step rows and audit events are statements a run writes dozens of
times, and SQLAlchemy's per-call execution (compiled-cache lookup, execution context, result
object) costs several times what SQLite takes to run them.

``execute(conn, statement, params)`` (and ``first`` for one with RETURNING: the claim answers with
the run's row) runs such a statement inside the SQLAlchemy transaction that holds ``conn``:
SQLAlchemy's compiler writes its SQL and names its binds once per dialect and param names (SQLite's
``?`` places or psycopg's ``%(name)s``, literal binds such as ``version + 1`` included, as
``construct_params`` fills them), each value goes through its type's bind processor, the
statement goes to the cursor of the same DB-API connection, and SQLAlchemy's commit or rollback
ends it. A DB-API error is raised as SQLAlchemy wraps it (``OperationalError``,
``IntegrityError``...), so callers catch what they always caught.

The full ``Connection.execute`` runs instead wherever it could behave otherwise: a returned column
the dialect would convert, a column default computed in Python, any connection, engine or
dialect with event listeners (so a statement counter, a tracer, a ``handle_error`` hook still
sees every statement), ``echo`` on, or execution options set (a schema translation, a logging
token). The count of statements is the same either way. A lost connection is invalidated as
SQLAlchemy invalidates it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import Executable

Params = Mapping[str, Any] | Sequence[Mapping[str, Any]]


class _Prepared:
    """One statement compiled for one dialect: its SQL, and how a call's params become binds."""

    __slots__ = ("compiled", "order", "plain", "processors", "returns", "sql")

    def __init__(self, statement: Executable, conn: Connection, keys: tuple[str, ...],
                 many: bool) -> None:
        dialect = conn.dialect
        # compiled as Connection.execute compiles it: for these param names, for one row or many
        self.compiled: Any = statement.compile(  # type: ignore[attr-defined]
            dialect=dialect, column_keys=list(keys), for_executemany=many)
        self.sql = str(self.compiled)
        self.order: tuple[str, ...] | None = (tuple(self.compiled.positiontup)
                                              if self.compiled.positional else None)
        # what the dialect does to a value before it is bound (SQLite: floats made floats)
        escaped = getattr(self.compiled, "escaped_bind_names", None) or {}
        self.processors = tuple((escaped.get(name, name), proc)
                                for b, name in self.compiled.bind_names.items()
                                if (proc := b.type.dialect_impl(dialect).bind_processor(dialect))
                                is not None)
        returning = getattr(self.compiled, "returning", None)
        self.returns = returning is None or bool(returning)  # unknown: assume it does
        # columns returned as the driver gives them, with nothing for the dialect to convert
        rows_as_given = returning is not None and all(
            col.type.dialect_impl(dialect).result_processor(dialect, None) is None
            for col in returning)
        # a column default computed in Python for a column the params leave out
        defaults = bool(getattr(self.compiled, "insert_prefetch", True)
                        or getattr(self.compiled, "update_prefetch", True))
        self.plain = (bool(getattr(statement, "is_dml", False)) and not defaults
                      and (not self.returns or rows_as_given))

    def binds(self, params: Mapping[str, Any]) -> Any:
        values = self.compiled.construct_params(params)
        for name, proc in self.processors:
            values[name] = proc(values[name])
        return values if self.order is None else tuple(values[k] for k in self.order)


_prepared: dict[tuple[int, int, tuple[str, ...], bool], tuple[Any, Any, _Prepared]] = {}


def _prepare(statement: Executable, conn: Connection, params: Params) -> _Prepared:
    first = params if isinstance(params, Mapping) else params[0]
    many = not isinstance(params, Mapping) and len(params) > 1
    keys = tuple(sorted(first))
    dialect = conn.dialect  # its driver and paramstyle too: one engine's SQL is not another's
    key = (id(statement), id(dialect), keys, many)
    held = _prepared.get(key)
    if held is None or held[0] is not statement or held[1] is not dialect:
        # the statement and dialect themselves are kept, so their ids are not reused meanwhile
        held = _prepared[key] = (statement, dialect, _Prepared(statement, conn, keys, many))
    return held[2]


def _watched(conn: Connection) -> bool:
    """Whether anything observes or reshapes statements on ``conn``: its events, its engine's or
    its dialect's (``handle_error``, ``do_execute``), echo, or execution options (a schema
    translation, a logging token). SQLAlchemy checks these same flags before dispatching; a flag
    it does not have counts as watched."""
    engine = conn.engine
    return bool(getattr(conn, "_has_events", True) or getattr(engine, "_has_events", True)
                or getattr(conn.dialect, "_has_events", True) or engine.echo
                or getattr(conn, "_echo", False) or conn.get_execution_options())


def execute(conn: Connection, statement: Executable, params: Params) -> int:
    """Run ``statement`` (an INSERT, UPDATE or DELETE without RETURNING) with ``params`` (one
    mapping, or a list for many rows) in ``conn``'s transaction; the rows it matched."""
    if not isinstance(params, Mapping) and not params:  # no rows: as SQLAlchemy does it
        return int(conn.execute(statement, params).rowcount)
    prepared = _prepare(statement, conn, params)
    if prepared.returns:
        raise ValueError("a statement with RETURNING is run with prepared.first")
    if not prepared.plain or _watched(conn):
        return int(conn.execute(statement, params).rowcount)
    return int(_on_cursor(conn, prepared, params, fetch=False))


def first(conn: Connection, statement: Executable, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """Run ``statement`` (an INSERT, UPDATE or DELETE with RETURNING) with ``params`` in
    ``conn``'s transaction; the first row it returned, or None."""
    prepared = _prepare(statement, conn, params)
    if not prepared.returns:
        raise ValueError("a statement without RETURNING is run with prepared.execute")
    if not prepared.plain or _watched(conn):
        row = conn.execute(statement, params).first()
        return None if row is None else tuple(row)
    found = _on_cursor(conn, prepared, params, fetch=True)
    return None if found is None else tuple(found)


def _on_cursor(conn: Connection, prepared: _Prepared, params: Params, *, fetch: bool) -> Any:
    """The statement on the DB-API cursor: the rows it matched, or (``fetch``) its first row."""
    raw = conn.connection.driver_connection
    assert raw is not None
    cursor = raw.cursor()
    many = not isinstance(params, Mapping)
    binds: Any = (prepared.binds(params) if isinstance(params, Mapping)
                  else [prepared.binds(p) for p in params])
    try:
        if many:
            cursor.executemany(prepared.sql, binds)
        else:
            cursor.execute(prepared.sql, binds)
        return cursor.fetchone() if fetch else cursor.rowcount
    except conn.dialect.loaded_dbapi.Error as e:
        # as SQLAlchemy raises it: wrapped, and a lost connection invalidated (never reused)
        gone = bool(conn.dialect.is_disconnect(e, raw, cursor))
        wrapped = DBAPIError.instance(prepared.sql, binds, e, conn.dialect.loaded_dbapi.Error,
                                      hide_parameters=conn.engine.hide_parameters,
                                      connection_invalidated=gone, dialect=conn.dialect,
                                      ismulti=many)
        if gone:
            conn.invalidate(wrapped)
        raise wrapped from e
    finally:
        with contextlib.suppress(Exception):  # a cursor of a lost connection may not close
            cursor.close()
