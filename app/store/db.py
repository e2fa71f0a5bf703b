"""Engines, sessions and the schema version check.

SQLite gets WAL mode and a busy timeout so that a running evaluation and the
dashboard can share one file; PostgreSQL is reached through the same URL
variable. Nothing is created at import time.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from app.settings import SettingsError
from app.store.errors import Busy, SchemaMismatch, Unreachable

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
SQLITE_BUSY_MS = 30_000  # how long a writer waits for another's lock (docs/operations.md): TOOLLENS_DB_BUSY_TIMEOUT
BUSY_TIMEOUT = "TOOLLENS_DB_BUSY_TIMEOUT"
MIGRATION_LOCK = 0x746F6F6C  # PostgreSQL advisory lock held by a migration ("tool")
# Pages of a new SQLite file. SQLite writes each page as a WAL frame of its own (and copies it
# again at checkpoints), so 4 KiB pages made a staged OTLP request (about 300 KB, held as one
# row) about 80 frames; 16 KiB pages cost half the CPU there, and less for the bulk inserts of
# calls too. A file made before keeps its pages (SQLite changes them only on VACUUM, outside WAL).
SQLITE_PAGE_SIZE = 16_384
# the newest migration (migrations/versions), stamped on a new database: a new migration moves it
# (tests/store/test_fresh_schema.py fails until it does)
HEAD_REVISION = "0017"
VERSION_TABLE = "alembic_version"


@functools.cache
def direct_sqlite_binding() -> None:
    """Let ``sqlite3`` bind ``None`` and ``bool`` without its adapter search.

    Python's sqlite3 binds only exact ``int``, ``float``, ``str`` and ``bytes``
    directly; every other value (``None`` and ``bool`` included) goes through
    the adapter registry first, and a failed search formats an AttributeError
    message each time. A stored call has a dozen such values, so that search
    took a quarter of the instructions of an import's inserts. Adapters that
    give back what would be bound anyway skip it: ``None`` stays ``None``
    (NULL; ``{}.get`` is a C callable that returns None) and a ``bool`` becomes
    the ``int`` sqlite3 binds for it. Registered once per process."""
    sqlite3.register_adapter(type(None), cast("Callable[[None], None]", {}.get))
    sqlite3.register_adapter(bool, int)


def busy_ms() -> int:
    """How long a SQLite writer waits for another's write lock (and any process for a migration
    in progress), in milliseconds: ``TOOLLENS_DB_BUSY_TIMEOUT`` seconds, 30 by default."""
    raw = os.environ.get(BUSY_TIMEOUT, "").strip()
    if not raw:
        return SQLITE_BUSY_MS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 86_400:
        raise SettingsError(f"{BUSY_TIMEOUT}: seconds between 0 and 86400 (got {raw[:40]!r})")
    return int(seconds * 1000)


def make_engine(url: str, **kw: Any) -> Engine:
    """An engine with the per-dialect settings this app relies on."""
    if url.startswith("sqlite"):
        direct_sqlite_binding()
        wait = busy_ms()
        engine = create_engine(url, connect_args={"timeout": wait / 1000, "check_same_thread": False}, **kw)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # let SQLAlchemy's BEGIN below drive transactions
            cur = dbapi_conn.cursor()
            cur.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")  # takes effect only while the file is empty
            try:
                cur.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as exc:  # a read-only file (``mode=ro``) keeps its journal mode:
                if "readonly" not in str(exc):  # it is only read
                    raise
            cur.execute(f"PRAGMA busy_timeout={wait}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            # writers take the write lock up front (no lock-upgrade deadlocks
            # between two writers); readers stay concurrent under WAL
            immediate = conn.get_execution_options().get("sqlite_immediate", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    return create_engine(url, pool_pre_ping=True, **kw)


def close_idle_connections(sessions: sessionmaker[Session]) -> None:
    """Close the pooled SQLite connections no one is using (each keeps its page cache, up to
    ``cache_size``): they are opened again, in about a millisecond, when next needed. A pool
    that is not a ``QueuePool`` (an in-memory database's single connection) and PostgreSQL's
    are left alone."""
    engine = sessions.kw.get("bind")
    if isinstance(engine, Engine) and engine.dialect.name == "sqlite" and isinstance(engine.pool, QueuePool):
        engine.dispose(close=True)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def busy_error(exc: BaseException, url: str | None = None) -> Busy | None:
    """A lock that outlasted the wait, said as such (None for another error):
    SQLite's "database is locked" after the busy timeout, PostgreSQL's
    ``lock_not_available`` after ``lock_timeout``."""
    orig = getattr(exc, "orig", None) or exc
    where = f" {database_label(url)}" if url else ""
    seconds = max(1, round(busy_ms() / 1000))
    if isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig):
        return Busy(
            f"the database{where} stayed locked by another writer for {seconds} s (the busy timeout, "
            f"{BUSY_TIMEOUT}): try again once that writer is done",
            retry_after=seconds,
        )
    if getattr(orig, "sqlstate", None) == "55P03":  # lock_not_available
        return Busy(
            f"the database{where} kept a lock held by another writer for {seconds} s (the busy timeout, "
            f"{BUSY_TIMEOUT}): try again once that writer is done",
            retry_after=seconds,
        )
    return None


def read_only_error(exc: BaseException) -> bool:
    """A write the database refuses because it is read-only: SQLite's "attempt to write a readonly
    database" (a read-only file, ``mode=ro``), PostgreSQL's ``read_only_sql_transaction`` (a
    replica, ``default_transaction_read_only``)."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, sqlite3.OperationalError):
        return "readonly" in str(orig)
    return getattr(orig, "sqlstate", None) == "25006"


def missing_schema_error(exc: BaseException) -> bool:
    """The database no longer holds ToolLens's tables: SQLite's "no such table", PostgreSQL's
    ``undefined_table`` or ``invalid_schema_name`` (the schema or file was dropped under a running server)."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, sqlite3.OperationalError):
        return str(orig).startswith("no such table")
    return getattr(orig, "sqlstate", None) in ("42P01", "3F000")


@contextmanager
def session_scope(factory: sessionmaker[Session], *, write: bool = False) -> Iterator[Session]:
    """One transaction: committed on success, rolled back on any error.
    ``write`` takes SQLite's write lock at the start of the transaction (a
    lock that outlasted the wait is SQLAlchemy's OperationalError, which
    callers retry; ``busy_error`` says it to a person at the edges)."""
    session = factory()
    try:
        if write:
            session.connection(execution_options={"sqlite_immediate": True})
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _alembic_config(url: str) -> Any:
    from alembic.config import Config

    if not (MIGRATIONS / "env.py").is_file():
        raise SchemaMismatch(f"migrations not found at {MIGRATIONS}")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply the migrations (``toollens db upgrade``)."""
    from alembic import command

    command.upgrade(_alembic_config(url), revision)


def runs_behind(url: str) -> int:
    """How many runs a database holds while its schema is older than this code's (what ``toollens db
    upgrade`` is about to migrate: runs an older ToolLens stored); 0 at head or for a new database.
    A missing SQLite file is not created here."""
    from alembic.script import ScriptDirectory
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and (not parsed.database or not Path(parsed.database).exists()):
        return 0
    engine = make_engine(url)
    try:
        current = current_revision(engine)
        if current is None or current == ScriptDirectory.from_config(_alembic_config(url)).get_current_head():
            return 0
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM runs")).scalar_one())
    finally:
        engine.dispose()


def database_label(url: str) -> str:
    """A database as a person names it: a SQLite file's path, else the URL without its password."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return str(Path(parsed.database).resolve()) if parsed.database else "in memory"
    return parsed.render_as_string(hide_password=True)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return stored_revision(conn)


def stored_revision(conn: Connection) -> str | None:
    """The schema's revision as Alembic stamps it (``alembic_version``), None for a database
    without one; read with one query, without loading Alembic (a fifth of a small import's start)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    found = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalars().all()
    if len(found) > 1:  # more than one head: Alembic says what is wrong
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(conn).get_current_revision()
    return str(found[0]) if found else None


def create_schema(engine: Engine) -> bool:
    """Make an empty database's schema at head in one transaction: the tables and indexes of
    the models (``app.store.models``) and Alembic's stamp of the head revision, which is what
    the migrations make (``tests/store/test_fresh_schema.py`` compares the two, table by table,
    on SQLite and PostgreSQL) in a tenth of the time. Holds the migration lock as a migration
    does; False (nothing done) when the database has tables by then (another process made them)."""
    from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table

    from app.store.models import Base

    version = Table(  # as Alembic's MigrationContext makes it
        VERSION_TABLE,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
    )
    with engine.connect() as conn:
        conn.execution_options(sqlite_immediate=True)
        with conn.begin():
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = {busy_ms()}")
            lock_migrations(conn)
            if inspect(conn).get_table_names():
                return False
            version.create(conn)
            Base.metadata.create_all(conn, checkfirst=False)
            conn.execute(version.insert().values(version_num=HEAD_REVISION))
    return True


def lock_migrations(conn: Connection) -> None:
    """In a migration's transaction: hold what a migration holds. SQLite: the
    write lock, taken by the transaction's ``BEGIN IMMEDIATE``; PostgreSQL: an
    advisory lock of the schema, released with the transaction."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK}, hashtext(current_schema()))")


def settled_revision(engine: Engine) -> str | None:
    """The schema's revision once no migration is running: waits for one in
    progress (SQLite: its write lock, up to the busy timeout; PostgreSQL: its
    advisory lock, up to the same time), then reads the revision."""
    with engine.connect() as conn:
        conn.execution_options(sqlite_immediate=True)
        with conn.begin() as tx:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = {busy_ms()}")
            lock_migrations(conn)
            revision = stored_revision(conn)
            tx.rollback()
    return revision


def _settled_or(current: str | None, engine: Engine, url: str) -> str | None:
    """``settled_revision``, or ``current`` where the lock cannot be taken at all (a
    read-only file); a migration that outlasted the busy timeout is ``Busy``."""
    try:
        return settled_revision(engine)
    except OperationalError as exc:
        busy = busy_error(exc, url)
        if busy is not None:
            raise busy from None
        return current


def check_schema(engine: Engine, url: str, *, auto_migrate: bool = True) -> None:
    """Make sure the database schema is the one this code expects.

    An empty database is made at head when ``auto_migrate`` is on (the first start
    on a new SQLite file: ``create_schema``); an older or newer one is refused with
    a message that says what to do. Alembic is loaded only to migrate, or to name a
    revision this code does not know."""
    head = HEAD_REVISION
    try:
        current = current_revision(engine)
        if current != head:  # a migration in progress shows the schema before it: wait for it to end
            current = _settled_or(current, engine, url)
    except OperationalError as exc:
        reason = str(exc.orig or exc).strip().splitlines()
        raise Unreachable(
            f"cannot open the database {database_label(url)}: {reason[0] if reason else 'no reason'}"
        ) from None
    if current == head:
        return
    if current is None:
        if inspect(engine).get_table_names() and not auto_migrate:
            raise SchemaMismatch("the database has tables but no ToolLens schema version; is it the right database?")
        if not auto_migrate:
            raise SchemaMismatch("the database is empty: run `toollens db upgrade`")
        if not create_schema(engine):  # another process made tables meanwhile: the migrations say what they are
            upgrade(url)
        return
    from alembic.script import ScriptDirectory

    known = {rev.revision for rev in ScriptDirectory.from_config(_alembic_config(url)).walk_revisions()}
    if current not in known:
        raise SchemaMismatch(
            f"the database schema ({current}) is newer than this version of ToolLens (head {head}): upgrade ToolLens"
        )
    raise SchemaMismatch(f"the database schema ({current}) is older than this code ({head}): run `toollens db upgrade`")
