"""Fast bulk writes for the ingest path.

Scoring a batch yields tens of thousands of rows; going through SQLAlchemy's
per-row parameter processing costs more than the database itself. Rows are
written here as plain tuples, with JSON pre-serialised: ``executemany`` on
SQLite, ``COPY`` on PostgreSQL. Ids are allocated up front (under SQLite's
write lock, or from PostgreSQL's sequence) so that child rows can point at
their parents without a round trip per row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.store.errors import Conflict, Unstorable


def allocate_ids(session: Session, table: str, n: int) -> list[int]:
    """``n`` fresh primary keys for ``table``. The caller holds SQLite's write
    lock (a write session), so nobody else can take the same ones."""
    if n == 0:
        return []
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            text("SELECT nextval(pg_get_serial_sequence(:t, 'id')) FROM generate_series(1, :n)"), {"t": table, "n": n}
        )
        return [int(r[0]) for r in rows]
    start = int(conn.exec_driver_sql(f"SELECT coalesce(max(id), 0) FROM {table}").scalar_one())
    return list(range(start + 1, start + n + 1))


Shift = Mapping[str, "int | Sequence[int]"]


def insert_rows(
    session: Session, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], shift: Shift | None = None
) -> None:
    """Insert tuples in column order (JSON columns already as text).

    ``shift`` makes the ids of a batch built without them real: per column, a
    number to add, or the ids that a row's value (a position) stands for.
    SQLite adds contiguous ids in the statement itself; otherwise the rows
    are rebuilt here."""
    if not rows:
        return
    conn = session.connection()
    cols = ", ".join(f'"{c}"' for c in columns)
    marks = ["?"] * len(columns)
    if shift:
        offsets = {columns.index(c): _offset(v) for c, v in shift.items()}
        if conn.dialect.name == "postgresql" or any(o is None for o in offsets.values()):
            rows = _shifted(rows, {columns.index(c): v for c, v in shift.items()})
        else:
            for i, o in offsets.items():
                marks[i] = f"? + {int(o or 0)}"
    if conn.dialect.name == "postgresql":
        import psycopg

        raw = conn.connection.driver_connection
        assert raw is not None
        try:
            with raw.cursor() as cur, cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        except psycopg.errors.UniqueViolation:
            raise Conflict("a trajectory of this batch is stored already (another writer, or a repeat)") from None
        except psycopg.DataError as exc:
            reason = str(exc).splitlines()[0]
            raise Unstorable(f"the database cannot store a value of this batch: {reason}") from None
        return
    conn.exec_driver_sql(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(marks)})", list(rows))


def _offset(value: int | Sequence[int]) -> int | None:
    """What to add to a position to get its id, when the ids are contiguous."""
    if isinstance(value, int):
        return value
    if not value:
        return 0
    return value[0] if list(value) == list(range(value[0], value[0] + len(value))) else None


def _shifted(rows: Sequence[tuple[Any, ...]], shift: Mapping[int, int | Sequence[int]]) -> list[tuple[Any, ...]]:
    out = []
    for row in rows:
        r = list(row)
        for i, v in shift.items():
            r[i] = r[i] + v if isinstance(v, int) else v[r[i]]
        out.append(tuple(r))
    return out
