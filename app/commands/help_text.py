"""What ``toollens [COMMAND …] --help`` prints on a terminal of 80 columns or more (or into a pipe):
typer's own help, rendered in advance (``app.commands.help_pages``), so that printing it loads
neither typer nor the command groups. A help that names a path of this install is not kept:
typer prints it (a default would differ from one install to the next).

Generated: ``python -m app.commands.help_text`` writes the pages again from the typer app after a
command or its help changes (tests/cli/test_cli_startup.py says when).
"""

from __future__ import annotations

from app.commands.help_pages import HELP

ROOT_HELP = HELP[""]


def page(args: list[str]) -> str | None:
    """The help ``toollens ARGS`` prints (ARGS ending in ``--help``, the words before it naming a
    command), or None when it was not rendered in advance."""
    if not args or args[-1] != "--help" or any(a.startswith("-") for a in args[:-1]):
        return None
    return HELP.get(" ".join(args[:-1]))


def commands() -> list[list[str]]:
    """Every command and group of the typer app, the root first (hidden ones left out)."""
    import typer.main

    from app.cli import cli

    def walk(command: object, path: list[str]) -> list[list[str]]:
        found = [path]
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not sub.hidden:
                found += walk(sub, [*path, name])
        return found

    return walk(typer.main.get_command(cli), [])


def render(path: list[str] | None = None) -> str:
    """``toollens PATH --help`` as the typer app prints it on a terminal 80 columns wide."""
    import contextlib
    import io
    import os

    from app.cli import cli

    out, columns = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli([*(path or []), "--help"], prog_name="toollens")
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return out.getvalue()


def render_all() -> dict[str, str]:
    """Every page kept: the help of each command and group, but those that name a path of this install."""
    from pathlib import Path

    install = str(Path(__file__).resolve().parents[2])
    pages = {" ".join(path): render(path) for path in commands()}
    return {key: text for key, text in pages.items() if install not in text}


if __name__ == "__main__":
    from pathlib import Path

    target = Path(__file__).with_name("help_pages.py")
    lines = [
        '"""Typer\'s help of every command, rendered in advance by ``python -m app.commands.help_text``:',
        'do not edit."""',
        "",
        "HELP = {",
    ]
    for key, text in render_all().items():  # a string per line of help: readable, and under ruff's width
        lines += [f"    {key!r}: (", *(f"        {line!r}" for line in text.splitlines(keepends=True)), "    ),"]
    target.write_text("\n".join([*lines, "}", ""]), encoding="utf-8")
