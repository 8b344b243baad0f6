"""Running a built statement on the driver's own cursor.

SQLAlchemy's execution layer (the execution context, parameter processing, the result
and its rows) costs tens of microseconds per statement in Python, several times what
SQLite itself takes for most of a worker's statements, since SQLite runs in the process.
A worker's cycle runs about ten statements, so on SQLite that layer was a sixth of a
job's time.

A :class:`DirectPlan` is made once per statement: SQLAlchemy compiles it (the SQL text
is SQLAlchemy's own), and the plan keeps the text, where each positional parameter comes
from, the type processors of the parameters and of the result columns, and a row class
with the result's column names. Running it is then one ``cursor.execute`` and a tuple
per row.

Only statements whose text does not depend on their parameters can be planned: an
expanding ``IN`` or a parameter rendered at execution (``POSTCOMPILE``) cannot, nor an
``INSERT`` whose columns follow the parameters given; :func:`plan` returns None for
those and the caller runs them through SQLAlchemy.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SADialect

_MISSING = object()


class DirectResult:
    """The part of SQLAlchemy's result API that readyq's statements use."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[Any]:
        return self._rows

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> _Scalars:
        return _Scalars([r[0] for r in self._rows])

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class _Scalars(list):  # type: ignore[type-arg]
    """First columns, iterable and with ``all()``, as ``Result.scalars()``."""

    def all(self) -> list[Any]:
        return list(self)


class DirectPlan:
    """A compiled statement, ready to run on a DBAPI cursor (see the module's doc).

    A plan is shared by the threads of a process; its one late attribute, the row
    class, is the same whichever thread makes it.
    """

    __slots__ = ("_binds", "_processors", "_row", "sql")

    def __init__(
        self,
        sql: str,
        binds: list[tuple[str, str, Any, bool, Callable[[Any], Any] | None]],
        processors: list[Callable[[Any], Any] | None] | None,
    ) -> None:
        self.sql = sql
        self._binds = binds
        self._row: type[tuple[Any, ...]] | None = None
        self._processors = processors

    def args(self, params: Mapping[str, Any] | None) -> tuple[Any, ...]:
        """The positional values for ``params`` (keyed as for ``Connection.execute``).

        Raises KeyError for a required parameter that ``params`` lacks.
        """
        given = params or {}
        out = []
        for key, name, default, call, process in self._binds:
            value = given.get(key, _MISSING)
            if value is _MISSING:
                value = given.get(name, default)
                if value is _MISSING:
                    raise KeyError(key)
                if call and value is default:
                    value = default()
            out.append(value if process is None or value is None else process(value))
        return tuple(out)

    def rows(self, raw: list[tuple[Any, ...]], description: Sequence[Any]) -> list[Any]:
        """The driver's rows as named tuples, through the columns' result processors.

        The names are the driver's column names, which are the labels SQLAlchemy
        compiled into the text (the names its own rows carry); the row class is made at
        the first execution.
        """
        make = self._row
        if make is None:
            names = [d[0] for d in description]
            make = self._row = collections.namedtuple("Row", names, rename=True)
            if self._processors is not None and len(self._processors) != len(names):
                raise RuntimeError(f"{len(names)} columns where {len(self._processors)} "
                                   f"were compiled: {self.sql}")
        procs = self._processors
        if procs is None:
            # tuple.__new__ fills the row class from each driver row with no Python frame
            # per row; the driver's rows have exactly the described columns.
            return list(map(functools.partial(tuple.__new__, make), raw))
        return [
            make(*(v if p is None or v is None else p(v) for p, v in zip(procs, r, strict=True)))
            for r in raw
        ]


def plan(stmt: Any, dialect: SADialect) -> DirectPlan | None:
    """Compile ``stmt`` for ``dialect`` into a plan, or None when it cannot run direct."""
    if not isinstance(stmt, (sa.Select, sa.CompoundSelect, sa.Update, sa.Delete)):
        return None
    compiled = stmt.compile(dialect=dialect)
    text = compiled.string
    names = compiled.positiontup
    if names is None or "POSTCOMPILE" in text:
        return None
    binds: list[tuple[str, str, Any, bool, Callable[[Any], Any] | None]] = []
    for name in names:
        bind = compiled.binds[name]
        if bind.expanding:
            return None
        # A value given at execution wins; else the bound value, or the callable's
        # value read at each execution (as ``BindParameter.effective_value``).
        call = bind.callable is not None
        default = bind.callable if call else (_MISSING if bind.required else bind.value)
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        binds.append((bind.key, name, default, call, process))
    processors: list[Callable[[Any], Any] | None] | None = None
    columns = _result_columns(stmt)
    if columns is not None:
        found = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns]
        processors = found if any(p is not None for p in found) else None
    return DirectPlan(text, binds, processors)


def _result_columns(stmt: Any) -> Any:
    """The columns of the statement's rows (for a DML statement, its RETURNING), or None
    when it returns no rows."""
    if isinstance(stmt, (sa.Select, sa.CompoundSelect)):
        return stmt.selected_columns
    return stmt.exported_columns if len(stmt.exported_columns) else None
