"""``toollens score``, run straight from argv: the command a CI job calls on every push.

Loading typer (with pydantic) and the command tree cost more than scoring a small file, so
the console script (``app.entry``) hands the plain forms of ``score`` to ``run_argv``, which
imports neither typer nor pydantic, nor rich until it prints a table or an error. Anything
else (``--help``, a mistake, an unusual spelling) returns None and goes to the typer command
in ``app.cli``, which stays the definition of the command, its help and its error messages.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

# option -> (parameter, the value it takes: None, "int" or "path"); tests/test_cli_startup.py checks it
# against the typer command
OPTIONS = {"--json": ("as_json", None), "--top": ("top", "int"), "--fail-on-blocking": ("fail_on_blocking", None),
           "--prices": ("prices", "path")}


def parse(argv: list[str]) -> dict[str, object] | None:
    """The arguments after ``score`` as the typer command reads them, or None when they are
    anything but two paths and the options above, each at most once, ``--top`` in digits and
    ``--prices`` a path."""
    given: dict[str, object] = {}
    paths: list[Path] = []
    args = iter(argv)
    for arg in args:
        if not arg.startswith("-") and arg:
            paths.append(Path(arg))
            continue
        option, eq, value = arg.partition("=")
        name, kind = OPTIONS.get(option, ("", None))
        if not name or name in given or (eq and kind is None):
            return None
        if kind is None:
            given[name] = True
            continue
        value = value if eq else next(args, "")
        if kind == "int":
            if not (value.isascii() and value.isdigit()):
                return None
            given[name] = int(value)
        elif value and not value.startswith("-"):
            given[name] = Path(value)
        else:
            return None
    if len(paths) != 2:
        return None
    return {"suite": paths[0], "trajectories": paths[1], **given}


def run_argv(argv: list[str]) -> int | None:
    """Run ``toollens score`` from the arguments after ``score``: its exit status, or None when
    the typer command should read them (see ``parse``)."""
    parsed = parse(argv)
    if parsed is None or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None
    try:
        return run(**parsed)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return 130  # as typer does
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the reader left: exit quietly
        return 1


def run(suite: Path, trajectories: Path, *, as_json: bool = False, top: int = 10,
        fail_on_blocking: bool = False, prices: Path | None = None) -> int:
    """Score, print the report, and return the exit status: 0 scored; 1 a blocking family above
    zero (with ``fail_on_blocking``); 2 bad input."""
    from app.core.errors import ToolLensError
    from app.core.evaluate import score_trajectories
    from app.core.gate import BLOCKING
    from app.core.prices import load_prices
    from app.core.records import read_jsonl
    from app.core.suite import load_suite
    from app.core.usage import UsageTally

    usage = UsageTally()
    try:
        loaded = load_suite(suite)
        table = load_prices(prices)
        if not trajectories.is_file():
            raise ToolLensError(f"{trajectories}: file not found")
        report = score_trajectories(loaded, read_jsonl(trajectories), usage=usage)
    except ToolLensError as exc:
        print_error(str(exc))
        return 2
    data = report.to_json()
    data["usage"] = usage.to_json(table)
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        from rich.console import Console

        from app.report_view import render_report

        render_report(Console(), data, suite_name=loaded.name, toolset_version=loaded.toolset.version, top=top)
    blocking = [f"{family.replace('_', ' ')} {data[family]['num']}/{data[family]['den']}"
                for family in BLOCKING if data[family]["num"] > 0]
    if fail_on_blocking and blocking:
        print_error(", ".join(blocking) + " (must be zero)", label="blocking: ")
        return 1
    return 0


def print_error(message: str, *, label: str = "error: ") -> None:
    """One line on standard error, the label in bold red on a terminal: the CLI's errors."""
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True).print(Text.assemble((label, "bold red"), message), highlight=False, soft_wrap=True)
