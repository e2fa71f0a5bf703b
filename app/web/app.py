"""The app factory: nothing is built at import time; the engine, the session
factory and the scorer cache live on ``app.state``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.templating import Jinja2Templates

from app import __version__
from app.otlp.receiver import close_receiver, open_receiver
from app.settings import Settings, load_settings
from app.store.db import check_schema, make_engine, make_sessionmaker
from app.web.api import router as api_router
from app.web.assets import router as assets_router
from app.web.curation import router as curation_router
from app.web.errors import install_error_handlers
from app.web.labels import router as labels_router
from app.web.limits import Intake, allowed_hosts
from app.web.otlp import router as otlp_router
from app.web.pages import router as pages_router
from app.web.state import ComparisonCache, FiguresCache, ScorerCache
from app.web.templating import TEMPLATES, install_filters, page_globals


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for these settings (read from the environment if None).

    The database schema is checked here: an empty SQLite file is migrated on
    first start; an older or newer schema is refused with a clear message."""
    settings = settings or load_settings()
    engine = make_engine(settings.database_url)
    check_schema(
        engine, settings.database_url, auto_migrate=settings.auto_migrate and settings.database_url.startswith("sqlite")
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        open_receiver(app.state, warm=settings.otlp_warm_start)  # spans staged, not stored by a previous process
        yield
        close_receiver(app.state)  # store the spans still buffered
        engine.dispose()

    app = FastAPI(
        title="ToolLens",
        version=__version__,
        lifespan=lifespan,
        description="Five separate tool-use failures, measured against mocked tools.",
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessions = make_sessionmaker(engine)
    app.state.scorers = ScorerCache()
    app.state.comparisons = ComparisonCache()
    app.state.figures = FiguresCache()
    app.add_middleware(
        Intake,
        max_bytes=settings.max_body_bytes,
        token=settings.api_token,
        hosts=allowed_hosts(settings.allowed_hosts, settings.listen_host),
    )
    templates = Jinja2Templates(directory=str(TEMPLATES), context_processors=[page_globals])
    install_filters(templates.env)
    app.state.templates = templates
    install_error_handlers(app)
    app.include_router(api_router)
    app.include_router(pages_router)
    app.include_router(labels_router)
    app.include_router(curation_router)
    app.include_router(otlp_router)
    app.include_router(assets_router)
    return app
