"""The store's commands: ``db upgrade``, ``db backfill``, ``import`` (a file into a run, scored on the way) and
``export`` (a run back as trajectory records)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.commands.common import DbOption, fail, read_settings, settings_for
from app.importers import taking

IMPORT_GROUP_BY_HELP = (
    f"{', '.join(taking('group_by'))}: one trajectory per value of this span or resource attribute, not one per trace."
)


def register(cli: typer.Typer) -> None:
    db_cli = typer.Typer(help="The database: schema migrations, and what older runs lack.", no_args_is_help=True)
    db_cli.command("upgrade")(db_upgrade)
    db_cli.command("backfill")(db_backfill)
    cli.add_typer(db_cli, name="db")
    cli.command("import")(import_)
    cli.command("export")(export)


def db_upgrade(db: DbOption = None) -> None:
    """Apply the migrations to the database."""
    from rich.console import Console
    from rich.text import Text
    from sqlalchemy.exc import SQLAlchemyError

    from app.store.db import database_label, runs_behind, upgrade

    settings = settings_for(db)
    shown = database_label(settings.database_url)
    try:
        runs = runs_behind(settings.database_url)
        upgrade(settings.database_url)
    except (SQLAlchemyError, OSError) as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise fail(f"cannot upgrade the database {shown}: {detail[0] if detail else type(exc).__name__}") from None
    console = Console(stderr=True, soft_wrap=True)
    console.print(Text(f"database at head: {shown}"))
    if runs:  # runs an older ToolLens stored may lack what pages read and never compute
        were = "run was" if runs == 1 else "runs were"
        console.print(
            Text(
                f"{runs} {were} stored by an older ToolLens: `toollens db backfill` gives those that "
                "lack them their causes, comparison aggregates and kept page figures (pages never write "
                "them; it changes nothing in the others)"
            )
        )


def db_backfill(
    run: Annotated[str | None, typer.Option(help="Only this run (id or name); default: every run.")] = None,
    db: DbOption = None,
) -> None:
    """Compute and keep what runs stored by an older ToolLens lack: the causes of their failed
    trajectories, and a finished run's comparison aggregates and page figures. Pages and read
    commands never do."""
    from rich.console import Console
    from rich.text import Text

    from app.store.backfill import backfill
    from app.store.db import make_sessionmaker
    from app.store.importer import open_store

    engine = open_store(read_settings(db))
    try:
        done = backfill(make_sessionmaker(engine), run)
    finally:
        engine.dispose()
    console = Console(stderr=True, soft_wrap=True)
    for b in done:
        what = [f"{b.causes} causes counted"] if b.causes else []
        what += ["comparison aggregates and page figures kept"] if b.aggregates else []
        what += [f"pairing with run {b.paired_with} kept"] if b.paired_with is not None else []
        if what:
            console.print(Text(f"run {b.run_id} ({b.name}): {', '.join(what)}"))
    changed = sum(1 for b in done if b.causes or b.aggregates or b.paired_with is not None)
    console.print(Text(f"{changed} of {len(done)} runs backfilled; the others had what they need"))


def import_(
    file: Annotated[Path, typer.Argument(help="Trajectory records (JSONL, docs/formats.md), or traces in --format.")],
    run: Annotated[str, typer.Option(help="Run name (created, or appended to while it is open).")],
    suite: Annotated[
        Path | None,
        typer.Option(help="The suite the trajectories ran against (default: the one the conversion builds)."),
    ] = None,
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
    import gc

    from rich.console import Console
    from rich.text import Text

    from app.importers import Options
    from app.store.importer import import_file

    console = Console(stderr=True, soft_wrap=True)
    # what is loaded now is never scanned for cycles again, and the rows (freed by reference counting)
    # are scanned every 20,000 allocations, not 700: as `toollens score` and the import's worker do
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    options = Options(tools=tools, domain=domain, group_by=group_by)
    if format_ == "toollens" and suite is not None and options == Options():
        result = import_file(
            settings_for(db),
            file,
            suite_path=suite,
            run_name=run,
            model=model,
            agent=agent,
            skip_bad=skip_bad,
            finish=not keep_open,
            batch=batch,
        )
    else:
        from app.importers.store import import_converted

        result = import_converted(
            settings_for(db),
            file,
            format_,
            options,
            suite_path=suite,
            run_name=run,
            model=model,
            agent=agent,
            skip_bad=skip_bad,
            finish=not keep_open,
            batch=batch,
            on_note=lambda note: console.print(Text(f"note: {note}", style="yellow")),
        )
    for line, message in result.skipped[:50]:
        console.print(Text(f"skipped {file}:{line}: {message}", style="yellow"))
    if len(result.skipped) > 50:
        console.print(Text(f"… and {len(result.skipped) - 50} more skipped lines", style="yellow"))
    console.print(
        Text(
            f"run {result.run_id} ({run}): stored {result.trajectories} trajectories, "
            f"{result.calls} calls; skipped {len(result.skipped)} lines"
        )
    )
    # the process ends next: its objects are not scanned for cycles once more on the way out (the
    # interpreter's last collection took a fifth of a small import's wall time); the file, the
    # database and the worker are closed already
    gc.freeze()


def export(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    out: Annotated[Path, typer.Option(help="Output JSONL file ('-' for standard output).")],
    db: DbOption = None,
) -> None:
    """Write a stored run back as ToolLens trajectory records (docs/formats.md)."""
    from rich.console import Console
    from rich.text import Text

    from app.store.importer import export_run

    n = export_run(read_settings(db), run, out)
    if str(out) != "-":
        Console(stderr=True, soft_wrap=True).print(Text(f"wrote {n} records to {out}"))
