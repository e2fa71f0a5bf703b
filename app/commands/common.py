"""What every command shares: the one error handler (bad input, an unreachable database or an
unwritable file become one line and exit 2), the one ``--db`` option and the settings it gives,
a session on the store and the report of a suite's mistakes.

Light on purpose (typer only): every command module imports it at start-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from app.commands import DB_HELP

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.settings import Settings


DbOption = Annotated[str | None, typer.Option("--db", help=DB_HELP)]


class CommandGroup(TyperGroup):
    """The root of the command tree, and the CLI's one error handler: what a command raises and
    a person can act on (bad input, a database out of reach, a file that cannot be written) is
    printed as one line and exits 2; anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: Any) -> Any:  # typer's own click Context
        try:
            return super().invoke(ctx)
        except Exception as exc:
            code = exit_for(exc)
            if code is None:
                raise
            raise code from None


def exit_for(exc: Exception) -> typer.Exit | None:
    """The exit (status 2, its line printed) for an error a person can act on; None for any other."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError

    if isinstance(exc, ToolLensError):
        return fail(str(exc))
    if isinstance(exc, (OSError, SQLAlchemyError)):
        return environment_error(exc)
    return None


def fail(message: str) -> typer.Exit:
    """Print ``message`` as an error; the exit (status 2) to raise."""
    from app.commands.terminal_text import print_error

    print_error(message)
    return typer.Exit(code=2)


def environment_error(exc: Exception) -> typer.Exit:
    """A database that cannot be reached or a file that cannot be written:
    say so in one line, not with a traceback (a lock that outlasted the
    wait says so)."""
    from app.store.db import busy_error

    busy = busy_error(exc)
    if busy is not None:
        return fail(str(busy))
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return fail(f"{type(exc).__name__}: {detail[0] if detail else ''}")


def settings_for(db: str | None) -> Settings:
    """The settings, with ``--db`` (when given) as the database."""
    from app.settings import SettingsError, load_settings

    try:
        return load_settings(database_url=db) if db else load_settings()
    except SettingsError as exc:
        raise fail(str(exc)) from None


DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def sqlite_path(url: str) -> Path | None:
    """The file a SQLite URL names (None: another database, or SQLite in memory)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).expanduser().resolve()


def is_default_database(url: str) -> bool:
    """``url`` is the database every command reads without ``--db`` (TOOLLENS_DATABASE_URL or ./toollens.db)."""
    return settings_for(None).database_url == url


def shown_path(path: Path) -> str:
    """A path as one types it here: relative to the working directory when it is under it."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def nearest_database(path: Path) -> Path | None:
    """The existing SQLite file whose name is closest to ``path``'s, in its folder (or the default
    database, when it exists): what a mistyped ``--db`` probably meant."""
    import difflib

    candidates: dict[str, Path] = {}
    if path.parent.is_dir():
        for p in sorted(path.parent.iterdir())[:1000]:
            if p.suffix in DB_SUFFIXES and p.is_file():
                candidates[p.name] = p
    close = difflib.get_close_matches(path.name, list(candidates), n=1, cutoff=0.5)
    if close:
        return candidates[close[0]]
    default = sqlite_path(settings_for(None).database_url)
    return default if default is not None and default != path and default.is_file() else None


def require_database(url: str) -> None:
    """Exit (status 2) when ``url`` names a SQLite file that does not exist: a command that only
    reads never creates a database (an empty one would only say "no run" later)."""
    path = sqlite_path(url)
    if path is None or path.exists():
        return
    near = nearest_database(path)
    hint = (
        f" (did you mean {shown_path(near)}?)"
        if near is not None
        else (" (`toollens demo` records the example runs there; `toollens import` or `toollens run` stores yours)")
    )
    raise fail(f"no database at {path}{hint}; a command that only reads creates none")


def new_database(url: str) -> None:
    """Say so when a server is about to start on a SQLite file that does not exist yet (it makes an
    empty one: traces and API clients fill it), with the existing database it was perhaps meant to be."""
    path = sqlite_path(url)
    if path is None or path.exists():
        return
    from app.commands.terminal_text import print_error

    near = nearest_database(path)
    print_error(
        f"no database at {path}: starting on a new, empty one"
        + (f" (did you mean --db {shown_path(near)}?)" if near is not None else ""),
        label="note: ",
    )


def read_settings(db: str | None) -> Settings:
    """The settings of a command that reads stored runs: its database must exist."""
    settings = settings_for(db)
    require_database(settings.database_url)
    return settings


@contextmanager
def store_session(db: str | None, *, write: bool = False, create: bool | None = None) -> Iterator[Session]:
    """A session on the store for one command (its errors go to ``CommandGroup``).
    ``create`` (default: ``write``): a missing SQLite file is made; otherwise it is an error."""
    from app.store.db import make_sessionmaker, session_scope
    from app.store.importer import open_store

    settings = settings_for(db) if (write if create is None else create) else read_settings(db)
    engine = open_store(settings)
    try:
        with session_scope(make_sessionmaker(engine), write=write) as session:
            yield session
    finally:
        engine.dispose()


@contextmanager
def suite_mistakes(consequence: str) -> Iterator[None]:
    """Around a suite check: every mistake on its own line, then exit 2."""
    from app.commands.terminal_text import print_mistakes
    from app.core.suites.suite_check import SuiteProblems

    try:
        yield
    except SuiteProblems as exc:
        raise typer.Exit(code=print_mistakes(exc, consequence)) from None
