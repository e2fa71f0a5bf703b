"""HTML pages: thin routes that build a typed context and render it."""

from __future__ import annotations

import gzip
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from app.store import labels, queries
from app.web import contexts, curate_page
from app.web.api import MAX_ID, Limit, Offset, ReadSession, RunId, TrajectoryId

router = APIRouter(include_in_schema=False)


Id = Annotated[int, Query(ge=1, le=MAX_ID)]
OptionalId = Annotated[int | None, Query(ge=1, le=MAX_ID)]


def render(request: Request, template: str, **context: Any) -> HTMLResponse:
    """The page, gzip-compressed when the browser accepts it (a run page's
    HTML is ~5-10x smaller so)."""
    response: HTMLResponse = request.app.state.templates.TemplateResponse(request, template, context)
    if len(response.body) > 1024 and "gzip" in request.headers.get("accept-encoding", ""):
        response.body = gzip.compress(response.body, 6)
        response.headers["Content-Encoding"] = "gzip"
        response.headers["Content-Length"] = str(len(response.body))
    response.headers["Vary"] = "Accept-Encoding"
    return response


@router.get("/", response_class=HTMLResponse)
def runs(request: Request, session: ReadSession, suite: str | None = None, model: str | None = None,
         toolset_version: str | None = None, limit: Limit = 50, offset: Offset = 0) -> HTMLResponse:
    page = contexts.runs_page(session, suite=suite or None, model=model or None,
                              toolset_version=toolset_version or None, limit=limit, offset=offset)
    return render(request, "runs.html", page=page)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run(request: Request, run_id: RunId, session: ReadSession, failure: str = "", expected: str = "",
        called: str = "", fault_kind: str = "", outcome: str = "", passed: str = "", cause: str = "",
        limit: Limit = 50, offset: Offset = 0) -> HTMLResponse:
    filters = {k: v for k, v in {"failure": failure, "expected": expected, "called": called,
                                 "fault_kind": fault_kind, "outcome": outcome, "passed": passed,
                                 "cause": cause}.items() if v}
    page = contexts.run_page(session, run_id, filters=filters, limit=limit, offset=offset,
                             cache=request.app.state.figures)
    return render(request, "run.html", page=page, health=labels.run_health(session, run_id))


@router.get("/trajectories/{trajectory_id}", response_class=HTMLResponse)
def trajectory(request: Request, trajectory_id: TrajectoryId, session: ReadSession,
               label_error: str = "", added: OptionalId = None, case: str = "") -> HTMLResponse:
    return render(request, "trajectory.html", page=contexts.trajectory_page(session, trajectory_id),
                  labels=labels.labels_public(session, trajectory_id), label_error=label_error[:20],
                  token_required=request.app.state.settings.api_token is not None,
                  curate=curate_page.curate_form(session, trajectory_id),
                  added=curate_page.added_note(session, added, case))


@router.get("/compare", response_class=HTMLResponse)
def compare(request: Request, session: ReadSession, a: OptionalId = None, b: OptionalId = None) -> HTMLResponse:
    if a is None or b is None:  # the header's Compare link: pick two runs
        return render(request, "compare_pick.html", runs=queries.list_runs(session, limit=500), a=a, b=b)
    page = contexts.compare_page(session, a, b, request.app.state.comparisons)
    return render(request, "compare.html", page=page)


@router.get("/compare/trajectories", response_class=HTMLResponse)
def compare_trajectories(request: Request, a: Id, b: Id, session: ReadSession) -> HTMLResponse:
    return render(request, "pair.html", pair=contexts.pair_page(session, a, b))


@router.get("/toolsets", response_class=HTMLResponse)
def toolsets(request: Request, session: ReadSession) -> HTMLResponse:
    return render(request, "toolsets.html", toolsets=queries.list_toolsets(session))


@router.get("/toolsets/{name:path}", response_class=HTMLResponse)
def toolset(request: Request, name: str, session: ReadSession, a: str | None = None,
            b: str | None = None) -> HTMLResponse:
    return render(request, "toolset.html", page=contexts.toolset_page(session, name, a or None, b or None))

