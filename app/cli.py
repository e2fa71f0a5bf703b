"""The ``toollens`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from app.core.errors import ToolLensError
from app.core.evaluate import score_trajectories
from app.core.records import read_jsonl
from app.core.suite import load_suite
from app.report_view import render_report

cli = typer.Typer(
    name="toollens",
    help="Why does your agent fail at using tools? Five separate failures, measured against mocked tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@cli.callback()
def _root() -> None:
    """ToolLens command line."""


def _fail(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, markup=True, soft_wrap=True)
    return typer.Exit(code=2)


@cli.command()
def score(
    suite: Annotated[Path, typer.Argument(help="Suite file (YAML or JSON).")],
    trajectories: Annotated[Path, typer.Argument(help="Trajectory records, one JSON object per line.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the SPEC §5 JSON object.")] = False,
    top: Annotated[int, typer.Option(help="How many confusions and failing cases to list.")] = 10,
) -> None:
    """Score trajectories against a suite, without a database."""
    try:
        loaded = load_suite(suite)
        if not trajectories.is_file():
            raise _fail(f"{trajectories}: file not found")
        report = score_trajectories(loaded, read_jsonl(trajectories))
    except ToolLensError as exc:
        raise _fail(str(exc)) from None
    data = report.to_json()
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
        return
    render_report(Console(), data, suite_name=loaded.name, toolset_version=loaded.toolset.version, top=top)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
