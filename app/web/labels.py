"""Outcome labels: humans label a trajectory's outcome from its page or the
API; the run's agreement (human, judge, deterministic classifier) and its
infrastructure errors are read here."""

from __future__ import annotations

import secrets
from typing import Annotated, Literal
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, Field, field_validator

from app.core.records import clean_text
from app.store import labels
from app.store.db import session_scope
from app.store.views import LabelPublic, LabelsPublic, RunHealthPublic
from app.web.api import ERRORS, ReadSession, RunId, TrajectoryId, Writer, WriteSession
from app.web.limits import OffLoopJSON, same_origin

router = APIRouter(responses=ERRORS, route_class=OffLoopJSON)

Outcome = Literal["recovered", "gave_up", "hallucinated", "confused"]


class LabelCreate(BaseModel):
    """A human's label for a trajectory's outcome (replaces their previous one)."""

    label: Outcome
    author: Annotated[str, Field(max_length=200)] = ""
    reason: Annotated[str, Field(max_length=labels.MAX_REASON)] = ""

    @field_validator("author", "reason")
    @classmethod
    def _stored_text(cls, text: str) -> str:
        return clean_text(text)


@router.get("/api/trajectories/{trajectory_id}/labels")
def get_labels(trajectory_id: TrajectoryId, session: ReadSession) -> LabelsPublic:
    return labels.labels_public(session, trajectory_id)


@router.post("/api/trajectories/{trajectory_id}/labels", status_code=201, dependencies=[Writer])
def post_label(trajectory_id: TrajectoryId, body: LabelCreate, session: WriteSession) -> LabelPublic:
    row = labels.set_label(session, trajectory_id, source="human", label=body.label, author=body.author,
                           reason=body.reason)
    return LabelPublic(source=row.source, label=row.label, author=row.author, reason=row.reason,
                       created_at=row.created_at)


@router.get("/api/runs/{run_id}/health")
def run_health(run_id: RunId, session: ReadSession) -> RunHealthPublic:
    """Agreement of the outcome raters (rate, Cohen's kappa) and infrastructure errors."""
    return labels.run_health(session, run_id)


@router.post("/trajectories/{trajectory_id}/label", include_in_schema=False)
async def label_form(trajectory_id: TrajectoryId, request: Request) -> RedirectResponse:
    """The trajectory page's form (URL-encoded; the body size is bounded by the app).
    Only a same-origin form is taken: another site cannot rewrite the labels
    that calibrate the judge."""
    if not same_origin(request):
        raise HTTPException(403, "labels are taken from this site's own form only")
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise HTTPException(415, "expected an application/x-www-form-urlencoded form")
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
    token = request.app.state.settings.api_token
    back = f"/trajectories/{trajectory_id}"
    if token is not None and not secrets.compare_digest(form.get("token", "").encode(), token.encode()):
        return RedirectResponse(f"{back}?label_error=token#labels", status_code=303)
    try:
        body = LabelCreate(label=form.get("label", ""), author=form.get("author", "")[:200],  # type: ignore[arg-type]
                           reason=form.get("reason", "")[: labels.MAX_REASON])
    except ValueError:
        return RedirectResponse(f"{back}?label_error=label#labels", status_code=303)
    with session_scope(request.app.state.sessions, write=True) as session:
        labels.set_label(session, trajectory_id, source="human", label=body.label, author=body.author,
                         reason=body.reason)
    return RedirectResponse(f"{back}#labels", status_code=303)
