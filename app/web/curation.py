"""Curation: suite versions, and a trajectory added to a suite as a case
(the trajectory page's "Add to a suite" form is app/web/pages/trajectory.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from app.core.advise import curate
from app.store import curation, ingest, suites
from app.store.views import CaseAdded, SuitePublic
from app.web.api import ERRORS
from app.web.deps import MAX_ID, Offset, ReadSession, Writer, WriteSession
from app.web.limits import OffLoopJSON
from app.web.schemas import CaseCreate

router = APIRouter(responses=ERRORS, route_class=OffLoopJSON)

SuiteId = Annotated[int, Path(ge=1, le=MAX_ID, description="suite version id")]
SuitesLimit = Annotated[int, Query(ge=1, le=curation.MAX_SUITES)]


def _edits(body: CaseCreate) -> curate.Edits:
    datum = body.expected_datum
    return curate.Edits(
        case_id=body.case_id,
        calls={c.index: curate.CallEdit(keep=c.keep, tolerance=c.tolerance, arguments=c.arguments) for c in body.calls},
        expected_datum=None if datum in (None, "", []) else [datum] if isinstance(datum, str) else list(datum),
        expected_state=body.expected_state,
    )


@router.get("/api/suites")
def list_suites(
    session: ReadSession, response: Response, limit: SuitesLimit = curation.MAX_SUITES, offset: Offset = 0
) -> list[SuitePublic]:
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
    row, case = curation.add_case(
        session, suite_id=suite_id, trajectory_id=body.trajectory_id, edits=_edits(body), new_suite=body.new_suite
    )
    return CaseAdded(suite=curation.suite_public(row), case=case)
