"""``toollens mcp-serve``: a case's mocked tools as an MCP server that records a run."""

from __future__ import annotations

import datetime as dt
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, environment_error, fail, settings_for, store_session


class _Stopped(Exception):
    """SIGTERM arrived: stop serving, then store what is pending."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def mcp_serve(
    suite: Annotated[Path, typer.Argument(help="Suite file (YAML or JSON).")],
    case: Annotated[str, typer.Option("--case", help="The case whose tools and mocks are served.")],
    faults: Annotated[
        str | None,
        typer.Option("--faults", help="Fault plan, e.g. 'index:1=http_503,tool:ver_saldo=timeout,p:0.1,seed:7,clear'."),
    ] = None,
    transport: Annotated[str, typer.Option("--transport", help="stdio or http (streamable HTTP).")] = "stdio",
    host: Annotated[str, typer.Option(help="HTTP interface.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="HTTP port.")] = 8765,
    run: Annotated[str | None, typer.Option("--run", help="Run name (created, or appended to while open).")] = None,
    agent: Annotated[str, typer.Option(help="Agent label.")] = "",
    model: Annotated[str, typer.Option(help="Model label.")] = "",
    keep_open: Annotated[bool, typer.Option("--keep-open", help="Leave the run open at shutdown.")] = False,
    db: DbOption = None,
) -> None:
    """Serve a case's mocked tools as an MCP server that records every call.

    Same names, descriptions and schemas as the suite, with the fault plan; each session is stored as a
    trajectory of the run. Nothing but MCP is written to standard output."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError
    from app.core.run.router import FaultPlan
    from app.core.suites.suite import load_suite_document, parse_suite
    from app.store.db import make_sessionmaker, session_scope
    from app.store.importer import open_store
    from app.store.live import open_live_run

    if transport not in ("stdio", "http"):
        raise fail(f"--transport must be stdio or http, not {transport!r}")
    console = Console(stderr=True, soft_wrap=True)
    listener = _bind(host, port) if transport == "http" else None  # a port taken: the run is not touched
    try:
        document = load_suite_document(suite)
        parsed = parse_suite(document, path=str(suite))
        chosen = parsed.case(case)
        if chosen is None:
            raise fail(f"{suite}: no case {case!r}")
        plan = FaultPlan.parse(faults) if faults else None
        name = run or f"mcp-{parsed.name}-{case}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}"
        settings = settings_for(db)
        engine = open_store(settings)
        sessions = make_sessionmaker(engine)
        with session_scope(sessions, write=True) as s:
            row = open_live_run(
                s,
                name=name,
                document=document,
                agent=agent,
                model=model,
                config={"source": "mcp-serve", "case": case, "faults": faults or "", "transport": transport},
            )
            run_id = row.id
        from app.mcp.serve import CaseRecorder, http_app, serve_stdio

        recorder = CaseRecorder(sessions, run_id, parsed, chosen, plan)
        recorder.register()
    except ToolLensError as exc:
        if listener is not None:
            listener.close()
        raise fail(str(exc)) from None
    except (SQLAlchemyError, OSError) as exc:
        if listener is not None:
            listener.close()
        raise environment_error(exc) from None
    import anyio

    leftover = recorder.recover()
    where = f"http://{host}:{port}/mcp" if transport == "http" else "stdio"
    console.print(
        Text(
            f"run {run_id} ({name}): serving case {case} ({len(parsed.toolset)} tools) on {where}"
            + (f"; stored {leftover} trajectories left pending by a stopped server" if leftover else "")
        )
    )
    previous = signal.signal(signal.SIGTERM, _stop)  # SIGTERM ends serving like Ctrl-C: pending calls get stored
    try:
        if transport == "stdio":
            anyio.run(serve_stdio, recorder)
        else:
            import uvicorn

            assert listener is not None
            app = http_app(
                recorder,
                host=host,
                token=settings.api_token,
                allowed=settings.allowed_hosts,
                max_bytes=settings.mcp_max_body_bytes,
            )
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
            server.run(sockets=[listener])
    except (_Stopped, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            _shut_down(console, recorder, sessions, run_id, name, keep_open)
        finally:
            engine.dispose()


def _shut_down(console: Console, recorder: Any, sessions: Any, run_id: int, name: str, keep_open: bool) -> None:
    """Store this server's pending trajectories and finish the run if it was
    the last server; a failure is reported in one line, never a traceback."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.errors import ToolLensError

    try:
        stored = recorder.end_all()
        unstored = recorder.flush_errors
        # the last server to stop finishes the run (not with trajectories it could not store)
        finish = recorder.stop(finish=not keep_open and not unstored)
    except ToolLensError as exc:
        raise fail(f"run {run_id} ({name}): pending trajectories not stored at shutdown: {exc}") from None
    except SQLAlchemyError as exc:
        raise environment_error(exc) from None
    console.print(
        Text(
            f"run {run_id} ({name}): stored {stored} more trajectories at shutdown"
            + ("; run finished" if finish else "; run left open")
        )
    )
    if unstored:
        raise fail(
            f"run {run_id} ({name}): {len(unstored)} pending trajectories could not be stored and stay "
            f"pending (first: {unstored[0]})"
        )


def _bind(host: str, port: int) -> Any:
    """The listening socket, bound before anything else happens."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def finish(
    run: Annotated[str, typer.Argument(help="Run id or name.")],
    db: DbOption = None,
) -> None:
    """Finish an open run for good: it takes no more trajectories (mcp-serve does not open it again).

    Trajectories stopped servers left pending are stored first. Refused while an mcp-serve server still
    records into the run."""
    from app.core.score.scoring import Scorer
    from app.mcp.serve import server_gone
    from app.store.aggregates import finish_run
    from app.store.ingest import find_run, suite_for_run
    from app.store.live import FINISHED_BY, flush_pending, servers

    with store_session(db, write=True, create=False) as session:
        row = find_run(session, run)
        running = [sid for sid, ident in servers(session, row.id).items() if not server_gone(ident)]
        if running:
            raise fail(
                f"run {row.id} ({row.name}): {len(running)} mcp-serve servers still record into it: stop them first"
            )
        stored = flush_pending(session, row.id, Scorer(suite_for_run(session, row)))
        finish_run(session, row.id)
        row.config = {**(row.config or {}), FINISHED_BY: "toollens finish"}
        name, rid = row.name, row.id
    Console(stderr=True, soft_wrap=True).print(
        Text(f"run {rid} ({name}): finished" + (f"; stored {stored} trajectories left pending" if stored else ""))
    )


def register(cli: typer.Typer) -> None:
    cli.command("mcp-serve")(mcp_serve)
    cli.command("finish")(finish)
