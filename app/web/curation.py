"""Curation: suite versions, and a trajectory added to a suite as a case,
from the API or the trajectory page's "Add to a suite" form."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import RedirectResponse, Response

from app.core import curate
from app.core.errors import SuiteError
from app.store import curation, ingest, labels, suites
from app.store.db import session_scope
from app.store.errors import NotFound
from app.store.views import CaseAdded, SuitePublic
from app.web import contexts, curate_page
from app.web.api import ERRORS, MAX_ID, Offset, ReadSession, TrajectoryId, Writer, WriteSession
from app.web.limits import OffLoopJSON, same_origin
from app.web.pages import render
from app.web.schemas import CaseCreate

router = APIRouter(responses=ERRORS, route_class=OffLoopJSON)

SuiteId = Annotated[int, Path(ge=1, le=MAX_ID, description="suite version id")]
SuitesLimit = Annotated[int, Query(ge=1, le=curation.MAX_SUITES)]


def _edits(body: CaseCreate) -> curate.Edits:
    datum = body.expected_datum
    return curate.Edits(
        case_id=body.case_id,
        calls={c.index: curate.CallEdit(keep=c.keep, tolerance=c.tolerance, arguments=c.arguments)
               for c in body.calls},
        expected_datum=None if datum in (None, "", []) else [datum] if isinstance(datum, str) else list(datum),
        expected_state=body.expected_state)


@router.get("/api/suites")
def list_suites(session: ReadSession, response: Response, limit: SuitesLimit = curation.MAX_SUITES,
                offset: Offset = 0) -> list[SuitePublic]:
    """Suite versions by name, the newest of each name first, with their content
    hash: a page of ``limit`` from ``offset``; ``X-Total-Count`` says how many
    there are and ``Link: <…>; rel="next"`` points at the next page."""
    page, total = curation.list_suites(session, limit=limit, offset=offset)
    response.headers["X-Total-Count"] = str(total)
    if offset + len(page) < total:
        response.headers["Link"] = f'</api/suites?limit={limit}&offset={offset + len(page)}>; rel="next"'
    return page


@router.get("/api/suites/{suite_id}")
def get_suite(suite_id: SuiteId, session: ReadSession) -> dict[str, Any]:
    """A suite version and its self-contained document."""
    row = ingest.get_suite_row(session, suite_id)
    return {**curation.suite_public(row).model_dump(mode="json"), "document": suites.suite_document(session, row)}


@router.post("/api/suites/{suite_id}/cases", status_code=201, dependencies=[Writer])
def add_case(suite_id: SuiteId, body: CaseCreate, session: WriteSession) -> CaseAdded:
    """Add a stored trajectory as a case: the suite's next version. A case the
    toolset's schemas reject is 422 naming the field, and nothing is stored."""
    row, case = curation.add_case(session, suite_id=suite_id, trajectory_id=body.trajectory_id,
                                  edits=_edits(body), new_suite=body.new_suite)
    return CaseAdded(suite=curation.suite_public(row), case=case)


@router.post("/trajectories/{trajectory_id}/curate", include_in_schema=False, response_model=None)
async def curate_submit(trajectory_id: TrajectoryId, request: Request) -> Response:
    """The form (URL-encoded, same-origin only, as the label form): the case
    is added and the page says where, or the page comes back with the field at fault."""
    if not same_origin(request):
        raise HTTPException(403, "cases are taken from this site's own form only")
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise HTTPException(415, "expected an application/x-www-form-urlencoded form")
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
    token = request.app.state.settings.api_token
    with session_scope(request.app.state.sessions, write=True) as session:
        page = curate_page.curate_form(session, trajectory_id)
        try:
            row, edits = curate_page.submit(session, page, trajectory_id, form, token)
            added = row.id
        except (SuiteError, NotFound) as exc:
            session.rollback()
            page.values, page.error = form, getattr(exc, "detail", str(exc))
            page.error_field = getattr(exc, "field", "") or "suite"
            response = render(request, "trajectory.html", page=contexts.trajectory_page(session, trajectory_id),
                              labels=labels.labels_public(session, trajectory_id), label_error="",
                              token_required=token is not None, curate=page, added=None)
            response.status_code = 422
            return response
    return RedirectResponse(f"/trajectories/{trajectory_id}?added={added}&case={quote(edits.case_id)}#curate",
                            status_code=303)
