"""The ``toollens`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from app.commands import DB_HELP
from app.commands.common import environment_error, fail, new_database, read_settings, settings_for
from app.importers import taking
from app.store.gc_tuning import cap_malloc_arenas, collect_cycles_rarely

IMPORT_GROUP_BY_HELP = (f"{', '.join(taking('group_by'))}: one trajectory per value of this span or resource "
                        "attribute, not one per trace.")

cli = typer.Typer(
    name="toollens",
    help="Why does your agent fail at using tools? Five separate failures, measured against mocked tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich formatting doubled the start-up of `toollens --help`
)


@cli.callback()
def _root() -> None:
    """ToolLens command line."""


PricesOption = Annotated[Path | None, typer.Option(
    "--prices", help="A price file (model: USD per million input, output, cached tokens) over the bundled "
                     "prices; default: TOOLLENS_PRICES.")]


@cli.command()
def score(
    suite: Annotated[Path, typer.Argument(help="Suite file (YAML or JSON), or a folder `toollens convert` wrote "
                                               "(every suite in it, with its trajectories.jsonl).")],
    trajectories: Annotated[Path | None, typer.Argument(
        help="Trajectory records, one JSON object per line (default for a folder: its trajectories.jsonl).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object (docs/formats.md).")]
    = False,
    top: Annotated[int, typer.Option(help="How many confusions and failing cases to list.")] = 10,
    fail_on_blocking: Annotated[bool, typer.Option(
        "--fail-on-blocking", help="Exit 1 when a blocking family (hallucinated tools, hallucination after "
                                   "error: threshold zero) is above zero: a CI check without a database.")] = False,
    prices: PricesOption = None,
    lenient: Annotated[bool, typer.Option(
        "--lenient", help="For imported suites: mistakes in the suite and records of cases it lacks are warnings "
                          "(those records are left out of every figure), not errors.")] = False,
) -> None:
    """Score trajectories against a suite, without a database.

    `toollens score DIR` scores every suite of a folder `toollens convert` wrote with its trajectories, in one
    report. Exit 0: scored; 1: a blocking family above zero (with --fail-on-blocking); 2: bad input (a mistake in the
    suite, records of cases it lacks)."""
    from app.commands.score import run

    code = run(suite, trajectories, as_json=as_json, top=top, fail_on_blocking=fail_on_blocking, prices=prices,
               lenient=lenient)
    if code:
        raise typer.Exit(code=code)


# -- the store ---------------------------------------------------------------

db_cli = typer.Typer(help="The database: schema migrations.", no_args_is_help=True)
cli.add_typer(db_cli, name="db")

DbOption = Annotated[
    str | None, typer.Option("--db", help=DB_HELP)
]


@db_cli.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Apply the migrations to the database."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.store.db import database_label, upgrade

    settings = settings_for(db)
    shown = database_label(settings.database_url)
    try:
        upgrade(settings.database_url)
    except (SQLAlchemyError, OSError) as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise fail(f"cannot upgrade the database {shown}: {detail[0] if detail else type(exc).__name__}") from None
    Console(stderr=True, soft_wrap=True).print(Text(f"database at head: {shown}"))


@cli.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="Trajectory records (JSONL, docs/formats.md), or traces in --format.")],
    run: Annotated[str, typer.Option(help="Run name (created, or appended to while it is open).")],
    suite: Annotated[Path | None, typer.Option(help="The suite the trajectories ran against (default: the "
                                                    "one the conversion builds).")] = None,
    format_: Annotated[str, typer.Option("--format", help="Source format (see `toollens convert`).")] = "toollens",
    tools: Annotated[Path | None, typer.Option(help="Tool-schema file for a source without a suite.")] = None,
    domain: Annotated[str | None, typer.Option(help="Domain of a multi-domain tool-schema file.")] = None,
    group_by: Annotated[str | None, typer.Option("--group-by", help=IMPORT_GROUP_BY_HELP)] = None,
    model: Annotated[str, typer.Option(help="Model label.")] = "",
    agent: Annotated[str, typer.Option(help="Agent label.")] = "",
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="Store the good lines, list the bad ones.")] = False,
    keep_open: Annotated[bool, typer.Option("--keep-open", help="Leave the run open for more imports.")] = False,
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Trajectories per transaction.")] = 500,
    db: DbOption = None,
) -> None:
    """Stream a trajectories file into the store, scoring it on the way."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError
    from app.importers import Options
    from app.store.importer import import_file

    console = Console(stderr=True, soft_wrap=True)
    options = Options(tools=tools, domain=domain, group_by=group_by)
    try:
        if format_ == "toollens" and suite is not None and options == Options():
            result = import_file(settings_for(db), file, suite_path=suite, run_name=run, model=model, agent=agent,
                                 skip_bad=skip_bad, finish=not keep_open, batch=batch)
        else:
            from app.importers.store import import_converted

            result = import_converted(settings_for(db), file, format_, options, suite_path=suite, run_name=run,
                                      model=model, agent=agent, skip_bad=skip_bad, finish=not keep_open, batch=batch,
                                      on_note=lambda note: console.print(Text(f"note: {note}", style="yellow")))
    except ToolLensError as exc:
        raise fail(str(exc)) from None
    except (SQLAlchemyError, OSError) as exc:
        raise environment_error(exc) from None
    for line, message in result.skipped[:50]:
        console.print(Text(f"skipped {file}:{line}: {message}", style="yellow"))
    if len(result.skipped) > 50:
        console.print(Text(f"… and {len(result.skipped) - 50} more skipped lines", style="yellow"))
    console.print(Text(f"run {result.run_id} ({run}): stored {result.trajectories} trajectories, "
                       f"{result.calls} calls; skipped {len(result.skipped)} lines"))


@cli.command()
def export(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    out: Annotated[Path, typer.Option(help="Output JSONL file ('-' for standard output).")],
    db: DbOption = None,
) -> None:
    """Write a stored run back as ToolLens trajectory records (docs/formats.md)."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError
    from app.store.importer import export_run

    try:
        n = export_run(read_settings(db), run, out)
    except ToolLensError as exc:
        raise fail(str(exc)) from None
    except (SQLAlchemyError, OSError) as exc:
        raise environment_error(exc) from None
    if str(out) != "-":
        Console(stderr=True, soft_wrap=True).print(Text(f"wrote {n} records to {out}"))


@cli.command()
def serve(
    host: Annotated[str, typer.Option(
        help="Interface to listen on; answered as a Host name too (others: TOOLLENS_ALLOWED_HOSTS).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    db: DbOption = None,
    root_path: Annotated[str, typer.Option(help="Path prefix a reverse proxy serves the app under, e.g. /toollens "
                                                "(the proxy strips it; links keep it).")] = "",
) -> None:
    """Start the web app (uvicorn)."""
    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError
    from app.web.app import create_app

    cap_malloc_arenas()  # before any thread: the request threads share the heap (docs/otlp-receiver.md)
    settings = settings_for(db)
    new_database(settings.database_url)
    if "otlp_warm_start" not in settings.model_fields_set:  # a server: ready for a burst of spans from the start
        settings.otlp_warm_start = True
    settings.listen_host = host
    try:
        app = create_app(settings)
    except ToolLensError as exc:
        raise fail(str(exc)) from None
    except (SQLAlchemyError, OSError) as exc:
        raise environment_error(exc) from None
    collect_cycles_rarely()
    uvicorn.run(app, host=host, port=port, root_path=root_path.rstrip("/"))


from app.commands import register_all  # noqa: E402  (after the core commands, so --help lists them first)

register_all(cli)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
