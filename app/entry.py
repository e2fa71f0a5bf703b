"""The ``toollens`` console script: ``score`` and ``--help`` answer at once, every other command
loads the typer app.

A CI job runs ``toollens score`` on every push. Importing ``app.cli`` (typer, rich, every command
group) and letting typer read the arguments (with pydantic) cost more than scoring a small file,
so the plain forms of ``score`` skip both (``app.commands.score``), and ``toollens --help`` (and
``toollens COMMAND --help``) prints typer's help rendered in advance (``app.commands.help_text``)
when the terminal is wide enough for typer to print exactly that.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    args = sys.argv[1:]
    if (
        args[-1:] == ["--help"] and os.path.basename(sys.argv[0]) == "toollens" and _columns() >= 80
    ):  # typer's help is 78 columns wide from 80 on
        from app.commands.help_text import page

        text = page(args)
        if text is not None:
            sys.stdout.write(text)
            return
    if args[:1] == ["score"]:
        from app.commands.score import run_argv

        code = run_argv(args[1:])
        if code is not None:
            sys.exit(code)
    from app.cli import main as typer_main

    typer_main()


def _columns() -> int:
    """``shutil.get_terminal_size().columns`` without importing shutil (4 ms, with bz2 and lzma)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


if __name__ == "__main__":
    main()
