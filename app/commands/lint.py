"""``toollens lint``: the description linter (see ``app.core.lint``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

# app.core.lint's SIMILAR_THRESHOLD and LOOKALIKE_THRESHOLD (tests/test_cli_startup.py checks they agree),
# written out so that `toollens --help` does not import the core.
SIMILAR_THRESHOLD = 0.5
LOOKALIKE_THRESHOLD = 0.3


def lint(
    toolset: Annotated[Path, typer.Argument(help="A toolset file, or a suite file (with its pairs).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the findings as one JSON object.")] = False,
    similar: Annotated[float, typer.Option(min=0.0, max=1.0, help="Similarity at which a pair reads alike.")]
    = SIMILAR_THRESHOLD,
    lookalike: Annotated[float, typer.Option(min=0.0, max=1.0, help="Similarity at which a pair needs a "
                                              "negative delimitation.")] = LOOKALIKE_THRESHOLD,
) -> None:
    """Lint tool descriptions: look-alike pairs, negative delimitation, argument formats, preconditions.

    Exit 0: no finding; 1: findings; 2: bad input."""
    from app.cli import _fail
    from app.core.errors import ToolLensError
    from app.core.lint import lint_json, lint_toolset, load_lint_target

    try:
        target, pairs = load_lint_target(toolset)
    except ToolLensError as exc:
        raise _fail(str(exc)) from None
    findings = lint_toolset(target, pairs, similar=similar, lookalike=lookalike)
    if as_json:
        sys.stdout.write(json.dumps(lint_json(target, findings), ensure_ascii=False) + "\n")
    else:
        console = Console(soft_wrap=True)
        head = f"{target.name or toolset.name} {target.label} {target.version}: {len(target)} tools, "
        console.print(Text(head + f"{len(findings)} findings", style="bold"))
        for f in findings:
            score = "" if f.score is None else f" (similarity {f.score:.2f})" if f.rule != "similar_pair" else ""
            console.print(Text.assemble((f"{f.rule}  ", "yellow"), f.message, score))
    if findings:
        raise typer.Exit(code=1)


def register(cli: typer.Typer) -> None:
    cli.command("lint")(lint)
