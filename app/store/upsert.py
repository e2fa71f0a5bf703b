"""One row written in one statement, inserted or replaced (``INSERT … ON CONFLICT DO UPDATE``, SQLite's or
PostgreSQL's by the session's dialect): two processes writing one key at once (two ``toollens db backfill``,
two replicas finishing one run) both succeed, the later one's values standing, where a read then an insert
fails the second on the key on PostgreSQL (its read does not see the first's uncommitted row)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.store.models import Base


def upsert_row(session: Session, table: type[Base], key: dict[str, Any], values: dict[str, Any]) -> None:
    """Write ``table``'s row of primary key ``key`` (every column of it, in the key's order) with
    ``values``, inserted or replaced. The session's copy of that row, if it holds one, is read again."""
    ins = (postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert)(table)
    session.execute(
        ins.values(**key, **values).on_conflict_do_update(
            index_elements=list(key), set_={name: ins.excluded[name] for name in values}
        )
    )
    held = session.identity_map.get(session.identity_key(table, tuple(key.values())))
    if held is not None:
        session.expire(held)
