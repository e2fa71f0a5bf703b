"""What every route shares: database sessions, the request's run, the API token, the bounded
ids and page sizes, the URL-encoded forms of the pages, and rendering."""

from __future__ import annotations

import gzip
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

from fastapi import Depends, Header, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.store import queries
from app.store.db import session_scope
from app.store.ingest import get_run_row
from app.store.models import Run
from app.web.limits import same_origin


def read_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.sessions) as session:
        yield session


def write_session(request: Request) -> Iterator[Session]:
    with session_scope(request.app.state.sessions, write=True) as session:
        yield session


def api_token(request: Request) -> str | None:
    """``TOOLLENS_API_TOKEN``: None when writes need no token."""
    token: str | None = request.app.state.settings.api_token
    return token


def require_token(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
    """Writes need ``Authorization: Bearer <TOOLLENS_API_TOKEN>`` when it is set."""
    token = api_token(request)
    if token is None:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(401, "a bearer token is required for writes", headers={"WWW-Authenticate": "Bearer"})


ReadSession = Annotated[Session, Depends(read_session)]
# committed before the answer is sent (FastAPI ends a ``yield`` dependency after the response by default:
# a client told 201 would not find its run yet, and a commit that failed would have answered 201)
WriteSession = Annotated[Session, Depends(write_session, scope="function")]
Writer = Depends(require_token)
Limit = Annotated[int, Query(ge=1, le=queries.MAX_PAGE)]
BlameFilter = Annotated[Literal["agent", "user", "task"] | None, Query(description="who failed the conversation")]
Offset = Annotated[int, Query(ge=0, le=10**9)]
SimulatorShare = Annotated[
    float | None,
    Query(ge=0, le=1, description="the largest share of the flipped failures blamed on the simulated user (0.10)"),
]
MAX_ID = 2**31 - 1
RunId = Annotated[int, Path(ge=1, le=MAX_ID, description="run id")]
TrajectoryId = Annotated[int, Path(ge=1, le=MAX_ID, description="trajectory id")]
RunRef = Annotated[int, Query(ge=1, le=MAX_ID, description="run id")]
Id = Annotated[int, Query(ge=1, le=MAX_ID)]
OptionalId = Annotated[int | None, Query(ge=1, le=MAX_ID)]


@dataclass
class RequestRun:
    """The request's run (``/runs/{run_id}``), read once, on first use in the route (a bad
    parameter is a 422 before an unknown run's 404), and held by the request's session: what the
    route then asks of it by id reads no row again. A route reads ``row`` (the run alone) or
    ``with_suite`` (the run with its suite and toolset version, for its public figures), not both."""

    session: Session
    id: int
    _row: Run | None = None

    @property
    def row(self) -> Run:
        """The run (one statement; NotFound, a 404, for an unknown one)."""
        if self._row is None:
            self._row = get_run_row(self.session, self.id)
        return self._row

    @property
    def with_suite(self) -> Run:
        """The run read with its suite and toolset version (one statement, ``queries.resolve_run``)."""
        if self._row is None:
            self._row = queries.resolve_run(self.session, self.id)
        return self._row


async def request_run(run_id: RunId, session: ReadSession) -> RequestRun:
    """The dependency: the request's run, on the request's read session (FastAPI gives a
    request one ``read_session``, shared by the route and this). It reads nothing, so it runs on
    the event loop: no trip through the thread pool (the route reads, in its thread)."""
    return RequestRun(session, run_id)


ResolvedRun = Annotated[RequestRun, Depends(request_run)]


async def page_form(request: Request, what: str) -> dict[str, str]:
    """A page's form (URL-encoded; the body size is bounded by the app), each
    field's first value. Only a same-origin form is taken: another site cannot
    post it for a visitor (``what`` names what the form sends, in the 403)."""
    if not same_origin(request):
        raise HTTPException(403, f"{what} are taken from this site's own form only")
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise HTTPException(415, "expected an application/x-www-form-urlencoded form")
    return {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """The page, gzip-compressed when the browser accepts it (a run page's
    HTML is ~5-10x smaller so)."""
    response: HTMLResponse = request.app.state.templates.TemplateResponse(
        request, template, context, status_code=status_code
    )
    if len(response.body) > 1024 and "gzip" in request.headers.get("accept-encoding", ""):
        response.body = gzip.compress(response.body, 6)
        response.headers["Content-Encoding"] = "gzip"
        response.headers["Content-Length"] = str(len(response.body))
    response.headers["Vary"] = "Accept-Encoding"
    return response
