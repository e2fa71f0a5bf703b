"""``toollens show``: a stored run's figures in the terminal, as ``score`` prints a file's."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from app.commands.common import DbOption, store_session


def register(cli: typer.Typer) -> None:
    cli.command("show")(show)


def show(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the figures as one JSON object (the shape of "
            "`score --json`, its cases a first page, plus `run`).",
        ),
    ] = False,
    top: Annotated[
        int, typer.Option(min=1, max=1000, help="How many causes, confusions and failing cases to list.")
    ] = 10,
    db: DbOption = None,
) -> None:
    """Show a stored run: the five families, pass^k, what went wrong and the failing cases.

    Exit 0: shown; 2: no such run, or a database that cannot be opened."""
    from rich.text import Text

    from app.commands.report_view import render_report, report_console
    from app.store import ingest, queries

    with store_session(db) as session:
        found = ingest.find_run(session, run)
        public = queries.get_run(session, found.id)
        data = queries.figures(session, found.id)
        data["run"] = {
            "id": public.id,
            "name": public.name,
            "agent": public.agent,
            "model": public.model,
            "suite": public.suite,
            "suite_version": public.suite_version,
            "status": public.status,
            "toolset": public.toolset,
            "toolset_label": public.toolset_label,
        }
        failing = queries.list_trajectories(session, found.id, passed=False, limit=top)
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
        return
    data["cases"] = [c.model_dump() for c in failing.data]
    console = report_console()
    who = " · ".join(x for x in (public.agent, public.model) if x)
    console.print(Text(f"run {public.id} ({public.name}) · {who} · {public.status}", style="bold"))
    render_report(
        console,
        data,
        suite_name=f"{public.suite} v{public.suite_version}",
        toolset_version=public.toolset_label or public.toolset_version,
        top=top,
        failing_total=failing.count,
        passed=(public.passed, public.scored),
    )
    serve = "toollens serve" + (f" --db {db}" if db else "")
    console.print(Text(f"On the dashboard: `{serve}`, then /runs/{public.id}", style="dim"))
