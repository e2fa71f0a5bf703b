"""Databases for the store tests: a fresh SQLite file, and a fresh schema in
the machine's PostgreSQL, each made by ``alembic upgrade head`` and thrown
away after the test; the ``shared_data`` mark's files checked before a test
(a missing resource follows ``tests/resources.py``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

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


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of each kind."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'toollens.db'}"
        upgrade(url)
        yield url
        return
    yield from _pg_schema()


@pytest.fixture()
def pg_url() -> Iterator[str]:
    """A migrated, empty schema of the machine's PostgreSQL (for what only it can share, e.g. replicas)."""
    yield from _pg_schema()


def _pg_schema() -> Iterator[str]:
    reason = pg_skip_reason()
    if reason:
        missing(f"PostgreSQL at {PG_URL}",
                f"{reason}; start it (trust auth, database `test`) or point TOOLLENS_TEST_PG_URL at one")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    try:
        upgrade(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
