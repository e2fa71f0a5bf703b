"""The ``toollens`` command line: the root of the command tree. Every command lives in
``app.commands``; errors a command can meet become one line and exit 2 in one place
(``app.commands.common.CommandGroup``)."""

from __future__ import annotations

import typer

from app.commands import register_all
from app.commands.common import CommandGroup

cli = typer.Typer(
    name="toollens",
    cls=CommandGroup,
    help="Why does your agent fail at using tools? Five separate failures, measured against mocked tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich formatting doubled the start-up of `toollens --help`
)


@cli.callback()
def _root() -> None:
    """ToolLens command line."""


register_all(cli)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
