"""Alembic environment: the URL comes from the caller (``toollens db
upgrade``) or from TOOLLENS_DATABASE_URL; batch mode for SQLite."""

from __future__ import annotations

from alembic import context
from sqlalchemy import pool

from app.settings import Settings
from app.store.db import lock_migrations, make_engine
from app.store.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    return url or Settings().database_url


def run_migrations_offline() -> None:
    context.configure(
        url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=_url().startswith("sqlite")
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """All pending migrations in one transaction that holds the database's
    write lock (SQLite) or ToolLens's migration lock (PostgreSQL) from the
    start: another process sees the schema before or after, never half-way,
    and one that meets the migration waits for it (app.store.db.check_schema)."""
    url = _url()
    engine = make_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        connection.execution_options(sqlite_immediate=True)
        with connection.begin():
            lock_migrations(connection)
            context.configure(
                connection=connection, target_metadata=target_metadata, render_as_batch=url.startswith("sqlite")
            )
            with context.begin_transaction():  # inside ours: alembic leaves it to us
                context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
