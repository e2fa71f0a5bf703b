"""``toollens score``: the typer definition of the command (its help and its slow path).

The console script runs the plain forms straight from argv (``app.commands.score``); this is the
command's definition, its help and what it does with anything unusual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

PricesOption = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        help="A price file (model: USD per million input, output, cached tokens) over the bundled "
        "prices; default: TOOLLENS_PRICES.",
    ),
]


def register(cli: typer.Typer) -> None:
    cli.command("score")(score)


def score(
    suite: Annotated[
        Path,
        typer.Argument(
            help="Suite file (YAML or JSON), or a folder `toollens convert` wrote "
            "(every suite in it, with its trajectories.jsonl)."
        ),
    ],
    trajectories: Annotated[
        Path | None,
        typer.Argument(
            help="Trajectory records, one JSON object per line (default for a folder: its trajectories.jsonl)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON object (docs/formats.md).")
    ] = False,
    top: Annotated[int, typer.Option(help="How many confusions and failing cases to list.")] = 10,
    fail_on_blocking: Annotated[
        bool,
        typer.Option(
            "--fail-on-blocking",
            help="Exit 1 when a blocking family (hallucinated tools, hallucination after "
            "error: threshold zero) is above zero: a CI check without a database.",
        ),
    ] = False,
    prices: PricesOption = None,
    lenient: Annotated[
        bool,
        typer.Option(
            "--lenient",
            help="For imported suites: mistakes in the suite and records of cases it lacks are warnings "
            "(those records are left out of every figure), not errors.",
        ),
    ] = False,
) -> None:
    """Score trajectories against a suite, without a database.

    `toollens score DIR` scores every suite of a folder `toollens convert` wrote with its trajectories, in one
    report. Exit 0: scored; 1: a blocking family above zero (with --fail-on-blocking); 2: bad input (a mistake in the
    suite, records of cases it lacks)."""
    from app.commands.score import run

    code = run(
        suite, trajectories, as_json=as_json, top=top, fail_on_blocking=fail_on_blocking, prices=prices, lenient=lenient
    )
    if code:
        raise typer.Exit(code=code)
