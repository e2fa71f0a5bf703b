"""What every command shares: one-line exits for bad input and for an unreachable
database or unwritable file, the settings a ``--db`` option gives, a session on the
store and the report of a suite's mistakes.

Light on purpose (typer only): every command module imports it at start-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.settings import Settings


def fail(message: str) -> typer.Exit:
    """Print ``message`` as an error; the exit (status 2) to raise."""
    from app.commands.score import print_error

    print_error(message)
    return typer.Exit(code=2)


def environment_error(exc: Exception) -> typer.Exit:
    """A database that cannot be reached or a file that cannot be written:
    say so in one line, not with a traceback."""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return fail(f"{type(exc).__name__}: {detail[0] if detail else ''}")


def settings_for(db: str | None) -> Settings:
    """The settings, with ``--db`` (when given) as the database."""
    from app.settings import SettingsError, load_settings

    try:
        return load_settings(database_url=db) if db else load_settings()
    except SettingsError as exc:
        raise fail(str(exc)) from None


@contextmanager
def store_session(db: str | None, *, write: bool = False) -> Iterator[Session]:
    """A session on the store for one command: ToolLens errors and an
    unreachable database or unwritable file become one-line exits (status 2)."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError
    from app.store.db import make_sessionmaker, session_scope
    from app.store.importer import open_store

    try:
        engine = open_store(settings_for(db))
        try:
            with session_scope(make_sessionmaker(engine), write=write) as session:
                yield session
        finally:
            engine.dispose()
    except ToolLensError as exc:
        raise fail(str(exc)) from None
    except (SQLAlchemyError, OSError) as exc:
        raise environment_error(exc) from None


@contextmanager
def suite_mistakes(consequence: str) -> Iterator[None]:
    """Around a suite check: every mistake on its own line, then exit 2."""
    from app.commands.score import print_mistakes
    from app.core.errors import ToolLensError
    from app.core.suite_check import SuiteProblems

    try:
        yield
    except SuiteProblems as exc:
        raise typer.Exit(code=print_mistakes(exc, consequence)) from None
    except ToolLensError as exc:
        raise fail(str(exc)) from None
