"""A new database is made from the models and stamped at head (``app.store.db.create_schema``),
not by running every migration: these tests hold that to the schema the migrations make, object
by object, on SQLite and PostgreSQL, and the stamp to the newest migration."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from app.store.db import HEAD_REVISION, _alembic_config, check_schema, create_schema, make_engine, upgrade
from tests.conftest import PG_URL, pg_dump, pg_skip_reason
from tests.resources import missing


def test_the_stamp_is_the_newest_migration() -> None:
    """A migration added without moving ``HEAD_REVISION`` fails here (a new database would be
    stamped with the revision before it, and migrated again on its next start)."""
    from alembic.script import ScriptDirectory

    assert ScriptDirectory.from_config(_alembic_config("sqlite://")).get_current_head() == HEAD_REVISION


def _clauses(sql: str) -> tuple[list[str], list[str]]:
    """A ``CREATE TABLE``'s column definitions (in order) and table constraints (sorted), each
    with its whitespace collapsed: the migrations' batch mode writes the same table with other
    line breaks and its constraints in another order."""
    body = sql[sql.index("(") + 1 : sql.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    clauses = [" ".join(p.split()) for p in parts]
    constraint = re.compile(r"^(CONSTRAINT|PRIMARY KEY|FOREIGN KEY|UNIQUE|CHECK)\b", re.IGNORECASE)
    return [c for c in clauses if not constraint.match(c)], sorted(c for c in clauses if constraint.match(c))


def sqlite_schema(path: Path) -> dict[tuple[str, str], Any]:
    """Every table and index of a SQLite file as SQLite itself reads it back: each table's columns
    (name, type, not null, default, key position, in order), foreign keys, indexes (unique, origin,
    partial, columns) and its statement's clauses; each index's statement."""
    conn = sqlite3.connect(path)
    out: dict[tuple[str, str], Any] = {}
    for kind, name, table, sql in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"):
        if kind == "table":
            indexes = []
            for _, index, unique, origin, partial in conn.execute(f'PRAGMA index_list("{name}")'):
                columns = [tuple(r) for r in conn.execute(f'PRAGMA index_xinfo("{index}")')]
                indexes.append((index, unique, origin, partial, columns))
            out[(kind, name)] = (
                [tuple(r) for r in conn.execute(f'PRAGMA table_xinfo("{name}")')],
                sorted(tuple(r) for r in conn.execute(f'PRAGMA foreign_key_list("{name}")')),
                sorted(indexes),
                _clauses(sql),
            )
        else:
            out[(kind, name)] = (table, None if sql is None else " ".join(sql.split()))
    conn.close()
    return out


def test_a_new_sqlite_file_has_the_schema_the_migrations_make(tmp_path: Path) -> None:
    made, migrated = tmp_path / "made.db", tmp_path / "migrated.db"
    engine = make_engine(f"sqlite:///{made}")
    assert create_schema(engine)
    assert not create_schema(engine)  # tables there already: nothing done
    engine.dispose()
    upgrade(f"sqlite:///{migrated}")
    ours, theirs = sqlite_schema(made), sqlite_schema(migrated)
    assert len(ours) > 40 and ("table", "calls") in ours and ("table", "alembic_version") in ours
    assert ours == theirs
    with sqlite3.connect(made) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD_REVISION,)]
        assert conn.execute("PRAGMA page_size").fetchone() == (16384,)
    # SQLite's record of the ids AUTOINCREMENT gave: the migrations' copy of otlp_batches (0005, batch
    # mode) leaves a row of 0 for it, which says what no row says (the next id is one above the largest)
    assert _sequences(made) == _sequences(migrated) == {}


def _sequences(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return {name: seq for name, seq in conn.execute("SELECT name, seq FROM sqlite_sequence") if seq}


def test_a_new_sqlite_file_is_made_at_head_and_then_opens_as_it_is(tmp_path: Path) -> None:
    """``check_schema`` on a new file makes it (no migration runs: the migrations' scripts are
    never loaded), then finds it at head; the migrations find nothing to do on it."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    engine = make_engine(url)
    check_schema(engine, url, auto_migrate=True)
    check_schema(engine, url, auto_migrate=False)
    engine.dispose()
    upgrade(url)  # at head: nothing to do
    with sqlite3.connect(tmp_path / "new.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD_REVISION,)]


def _pg_dump(schema: str) -> str:
    return pg_dump(schema, "--schema-only").replace(schema, "SCHEMA")


@pytest.fixture()
def two_schemas() -> Iterator[tuple[str, str]]:
    reason = pg_skip_reason()
    if reason:
        missing(f"PostgreSQL at {PG_URL}", reason)
    if not shutil.which("pg_dump"):
        missing("pg_dump", "install the PostgreSQL client")
    names = (f"made_{uuid.uuid4().hex[:10]}", f"migrated_{uuid.uuid4().hex[:10]}")
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        for name in names:
            conn.execute(text(f'CREATE SCHEMA "{name}"'))
    try:
        yield names
    finally:
        with admin.begin() as conn:
            for name in names:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()


def test_a_new_postgresql_schema_is_the_one_the_migrations_make(two_schemas: tuple[str, str]) -> None:
    made, migrated = two_schemas
    engine = make_engine(f"{PG_URL}?options=-csearch_path%3D{made}")
    assert create_schema(engine)
    assert not create_schema(engine)
    engine.dispose()
    upgrade(f"{PG_URL}?options=-csearch_path%3D{migrated}")
    ours, theirs = _pg_dump(made), _pg_dump(migrated)
    assert "CREATE TABLE SCHEMA.calls" in ours and "CREATE INDEX" in ours
    assert ours == theirs


OPEN_AND_LIST_ALEMBIC = """
import sys
from app.settings import load_settings
from app.store.importer import open_store
open_store(load_settings(database_url=sys.argv[1])).dispose()
print(sorted(m for m in sys.modules if m.split(".")[0] in ("alembic", "mako")))
"""


def test_opening_a_new_or_current_database_loads_no_alembic(tmp_path: Path) -> None:
    """What ``toollens import`` opens its database with: Alembic (and the migrations it reads)
    took a fifth of a small import's start; it is loaded only to migrate."""
    import os
    import sys

    url = f"sqlite:///{tmp_path / 'new.db'}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for _ in ("new", "at head"):
        done = subprocess.run(
            [sys.executable, "-c", OPEN_AND_LIST_ALEMBIC, url], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]"
    with sqlite3.connect(tmp_path / "new.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(HEAD_REVISION,)]
