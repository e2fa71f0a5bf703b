"""Databases for the store tests: a fresh SQLite file, and a fresh schema in
the machine's PostgreSQL, each a copy of one made by ``alembic upgrade head``
once per test process (a file copied; the schema's ``pg_dump`` replayed under
another name), thrown away after the test; the ``shared_data`` mark's files checked before a test
(a missing resource follows ``tests/resources.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import buildinfo
from app.store.db import upgrade
from tests.resources import missing, require_data

# Starlette's TestClient sends ``Host: testserver``: answered like the loopback names it stands for
os.environ.setdefault("TOOLLENS_ALLOWED_HOSTS", "localhost,127.0.0.1,::1,testserver")

PG_URL = os.environ.get("TOOLLENS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _pg_reason() -> str | None:
    try:
        engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
    except Exception as exc:  # any failure to connect: say why
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test a compiled core module older than its source: the old code would run."""
    config.addinivalue_line("markers", "shared_data(*paths): the test reads these shared sample files")
    stale = [] if buildinfo.pure_python_requested() else buildinfo.stale_modules()
    if stale:
        raise pytest.UsageError(
            f"{', '.join(stale)} changed after compilation: run `make build` "
            "(or `pip install -e .`), or set TOOLLENS_PURE_PYTHON=1 to test the sources"
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("shared_data"):
        require_data(*mark.args)


_PG_SKIP: str | None = None
_PG_CHECKED = False


def pg_skip_reason() -> str | None:
    """Why PostgreSQL cannot be used (checked once per run), or None."""
    global _PG_SKIP, _PG_CHECKED
    if not _PG_CHECKED:
        _PG_SKIP, _PG_CHECKED = _pg_reason(), True
    return _PG_SKIP


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head, once: each test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "toollens.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of each kind."""
    if request.param == "sqlite":
        path = tmp_path / "toollens.db"
        shutil.copyfile(request.getfixturevalue("_sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    yield from _pg_schema()


@pytest.fixture()
def pg_url() -> Iterator[str]:
    """A migrated, empty schema of the machine's PostgreSQL (for what only it can share, e.g. replicas)."""
    yield from _pg_schema()


_PG_DUMP: str | None = None  # the DDL and rows of a schema migrated to head, its name a placeholder
_PLACEHOLDER = f"toollens_template_{uuid.uuid4().hex[:12]}"


def pg_dump(schema: str, *options: str) -> str:
    """``pg_dump`` of one schema of the test database (no owner, no privileges, ``options`` added), without
    psql's meta-commands (``\\restrict KEY``: not SQL, and a new key each dump)."""
    url = make_url(PG_URL)
    dump = subprocess.run(
        [
            "pg_dump",
            "-h",
            url.host or "127.0.0.1",
            "-p",
            str(url.port or 5432),
            "-U",
            url.username or "postgres",
            "-d",
            url.database or "test",
            "--schema",
            schema,
            "--no-owner",
            "--no-privileges",
            *options,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))


def _pg_template() -> str | None:
    """``pg_dump`` of a schema migrated to head, made once per process (None without ``pg_dump``:
    then every schema is migrated)."""
    global _PG_DUMP
    if _PG_DUMP is None and shutil.which("pg_dump"):
        admin = create_engine(PG_URL)
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{_PLACEHOLDER}"'))
        try:
            upgrade(f"{PG_URL}?options=-csearch_path%3D{_PLACEHOLDER}")
            _PG_DUMP = pg_dump(_PLACEHOLDER, "--inserts")
        finally:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{_PLACEHOLDER}" CASCADE'))
            admin.dispose()
    return _PG_DUMP


def _pg_schema() -> Iterator[str]:
    reason = pg_skip_reason()
    if reason:
        missing(
            f"PostgreSQL at {PG_URL}",
            f"{reason}; start it (trust auth, database `test`) or point TOOLLENS_TEST_PG_URL at one",
        )
    schema = f"t_{uuid.uuid4().hex[:12]}"
    dump = _pg_template()
    admin = create_engine(PG_URL)
    url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    try:
        with admin.begin() as conn:
            if dump is None:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            else:  # the dump creates the schema
                conn.exec_driver_sql(dump.replace(_PLACEHOLDER, schema))
        if dump is None:
            upgrade(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
