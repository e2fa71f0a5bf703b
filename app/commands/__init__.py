"""Command groups of the ``toollens`` CLI, one module per area.

Each module listed in ``MODULES`` defines ``register(cli: typer.Typer) -> None``
and imports heavy SDKs (openai, anthropic, mcp) inside its commands only, so
``toollens --help`` stays fast.
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # not typing's: `toollens --help` imports this package, and typing costs 5 ms
if TYPE_CHECKING:  # `toollens score` imports app.commands.score without typer
    import typer

DB_HELP = "A SQLite file's path or a database URL (default: TOOLLENS_DATABASE_URL or ./toollens.db)."

MODULES: tuple[str, ...] = (
    "score_command",
    "store",
    "serve",
    "convert",
    "toolset",
    "lint",
    "run",
    "show",
    "gate",
    "demo",
    "mcp",
    "judge",
    "curate",
    "fix",
)


def register_all(cli: typer.Typer) -> None:
    """Add every area's commands to the root CLI."""
    for name in MODULES:
        import_module(f"{__name__}.{name}").register(cli)
