"""``toollens serve``: the dashboard, the API and the OTLP receiver (uvicorn)."""

from __future__ import annotations

from typing import Annotated

import typer

from app.commands.common import DbOption, new_database, settings_for
from app.store.gc_tuning import cap_malloc_arenas, collect_cycles_rarely


def register(cli: typer.Typer) -> None:
    cli.command("serve")(serve)


def serve(
    host: Annotated[
        str, typer.Option(help="Interface to listen on; answered as a Host name too (others: TOOLLENS_ALLOWED_HOSTS).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    db: DbOption = None,
    root_path: Annotated[
        str,
        typer.Option(
            help="Path prefix a reverse proxy serves the app under, e.g. /toollens "
            "(the proxy strips it; links keep it)."
        ),
    ] = "",
) -> None:
    """Start the web app (uvicorn)."""
    import uvicorn

    from app.web.app import create_app

    cap_malloc_arenas()  # before any thread: the request threads share the heap (docs/otlp-receiver.md)
    settings = settings_for(db)
    new_database(settings.database_url)
    if "otlp_warm_start" not in settings.model_fields_set:  # a server: ready for a burst of spans from the start
        settings.otlp_warm_start = True
    settings.listen_host = host
    app = create_app(settings)
    collect_cycles_rarely()
    uvicorn.run(app, host=host, port=port, root_path=root_path.rstrip("/"))
