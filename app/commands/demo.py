"""``toollens demo``: the main job. Example runs of the simulated agent over
the example suite (toolset v1 and v2, each with the recovery sweep, and
repeated trials with random faults) and over multi-turn conversations with
the rule-based user (cooperative, then under every profile: the cooperation
gap), stored in the database every command reads (its own runs replaced, no
other), then the dashboard."""

from __future__ import annotations

import shlex
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import environment_error, fail, is_default_database, settings_for, shown_path, sqlite_path

if TYPE_CHECKING:
    from app.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

FAULTS = "p:0.1,kinds:http_503|timeout|http_429|not_found,seed:11"
# the profiled run's agent: its call errors off and few confusions, so that what moves is the simulated user
CAREFUL = "confusion=0.1,hallucinated_tool=0,schema_error=0,wrong_value=0,order=0,skip=0"

# (run name, suite file, trials, fault plan, recovery sweep, simulated-user profiles, simulated agent's rates)
DEMO_RUNS: tuple[tuple[str, str, int, str | None, bool, tuple[str, ...], str], ...] = (
    ("banca-v1-simulado", "suite_v1.yaml", 1, None, True, (), ""),
    ("banca-v2-simulado", "suite_v2.yaml", 1, None, True, (), ""),
    ("banca-v1-simulado-x5", "suite_v1.yaml", 5, FAULTS, False, (), ""),
    ("banca-v2-simulado-x5", "suite_v2.yaml", 5, FAULTS, False, (), ""),
    # conversations: the rule-based user gives the RUT only when asked and confirms the credit note
    ("banca-v2-conversaciones", "conversaciones_v2.yaml", 3, None, True, (), ""),
    # the same conversations under every simulated-user profile, 8 trials each: the cooperation gap
    # (the run page's section; tests/cli/test_demo.py pins its figures)
    ("banca-v2-perfiles", "conversaciones_v2.yaml", 8, None, False, ("all",), CAREFUL),
)
SHOWN_RUN = "banca-v1-simulado-x5"  # the run the closing message and the README show


def register(cli: typer.Typer) -> None:
    cli.command("demo")(demo)


def demo(
    db: Annotated[
        str | None,
        typer.Option(
            help="Database to record into, a path or a URL (default: the one every "
            "command reads: TOOLLENS_DATABASE_URL or ./toollens.db). The "
            "demo's own runs in it are recorded again; no other run is "
            "touched."
        ),
    ] = None,
    examples: Annotated[
        Path,
        typer.Option(
            help="Folder with the example suites.",  # no path of this install:
            show_default="the bundled examples",
        ),
    ] = EXAMPLES,  # help is kept
    # seed 5 tells the seed's story in both pairs of runs: v2 cuts confusions and schema errors; invented data
    # after an error stays above zero in the five-trial pair (tests/cli/test_demo.py pins it)
    seed: Annotated[int, typer.Option(help="Seed of the simulated agent.")] = 5,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    serve: Annotated[bool, typer.Option("--serve/--no-serve", help="Start the dashboard afterwards.")] = True,
) -> None:
    """Record example runs of the SIMULATED agent into the database every command reads, and serve the dashboard."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError
    from app.core.reports.profiles import parse_profiles
    from app.runner.session import RunRequest, run_agent

    settings = settings_for(db)
    console = Console(stderr=True, soft_wrap=True)
    missing = [name for _, name, *_ in DEMO_RUNS if not (examples / name).is_file()]
    if missing:
        raise fail(f"example suites not found in {examples}: {', '.join(missing)} (give --examples DIR)")
    listener = _listen(host, port) if serve else None  # a taken port is said now, not after the runs
    console.print(Text("Recording example runs of the simulated agent (not a model: seeded, for the demo)…"))
    try:
        _forget_demo_runs(settings)
        for name, suite, trials, faults, sweep, profiles, rates in DEMO_RUNS:
            out = run_agent(
                settings,
                RunRequest(
                    agent="simulated",
                    suite_path=examples / suite,
                    trials=trials,
                    faults=faults,
                    sweep=sweep,
                    run_name=name,
                    seed=seed,
                    concurrency=8,
                    sim_rates=rates,
                    user_profiles=parse_profiles(profiles),
                ),
            )
            s = out.summary
            console.print(Text(f"  {name}: {s.stored} case runs, {s.stored - s.failed} passed"))
    except (ToolLensError, SQLAlchemyError, OSError) as exc:
        if listener is not None:
            listener.close()
        raise (fail(str(exc)) if isinstance(exc, ToolLensError) else environment_error(exc)) from None
    from app import buildinfo

    console.print(
        Text(
            f"{buildinfo.describe()}"
            + (
                ""
                if buildinfo.compiled_modules()
                else " (`make fast` compiles it with mypyc: a few minutes once, then faster scoring)"
            )
        )
    )
    for line in where_stored(settings.database_url):
        console.print(Text(line, style="bold"))
    if listener is None:
        return
    console.print(
        Text(f"ToolLens dashboard with the example runs: http://{host}:{port}  (Ctrl-C stops it)", style="bold")
    )
    import uvicorn

    from app.web.app import create_app

    settings.listen_host = host  # a Host the server answers (docs/security.md)
    uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning")).run(sockets=[listener])


def _forget_demo_runs(settings: Settings) -> None:
    """Remove the runs a previous demo recorded (by their names; nothing else) before recording them again."""
    from app.store.db import make_sessionmaker, session_scope
    from app.store.importer import open_store
    from app.store.ingest import delete_runs_named

    engine = open_store(settings)
    try:
        with session_scope(make_sessionmaker(engine), write=True) as session:
            delete_runs_named(session, [name for name, *_ in DEMO_RUNS])
    finally:
        engine.dispose()


def where_stored(url: str) -> list[str]:
    """The closing lines: where the runs are, and the commands that show them (``--db`` only off the default)."""
    from app.store.db import database_label

    path = sqlite_path(url)
    if is_default_database(url):
        option, where = "", f"{database_label(url)}, the database every command reads without --db"
    else:
        named = shown_path(path) if path is not None else database_label(url)
        option, where = f" --db {shlex.quote(named)}", database_label(url)
    return [
        f"Example runs stored in {where}.",
        f"  `toollens serve{option}` shows them; `toollens show {SHOWN_RUN}{option}` prints one here.",
    ]


def _listen(host: str, port: int) -> socket.socket:
    """The dashboard's socket, bound before anything is recorded: a port in use is
    reported at once, with the option that picks another."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise fail(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): pick a free port with "
            f"`toollens demo --port 8080` (or `make demo PORT=8080`)"
        ) from None
    return listener
