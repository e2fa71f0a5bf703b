"""Outcome labels: humans label a trajectory's outcome from the API (or its
page's form, app/web/pages/trajectory.py); the run's agreement (human, judge,
deterministic classifier) and its infrastructure errors are read here."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field, field_validator

from app.core.records import clean_text
from app.store import labels
from app.store.views import LabelPublic, LabelsPublic, RunHealthPublic
from app.web.api import ERRORS
from app.web.deps import ReadSession, ResolvedRun, TrajectoryId, Writer, WriteSession
from app.web.limits import OffLoopJSON

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
    row = labels.set_label(
        session, trajectory_id, source="human", label=body.label, author=body.author, reason=body.reason
    )
    return LabelPublic(
        source=row.source, label=row.label, author=row.author, reason=row.reason, created_at=row.created_at
    )


@router.get("/api/runs/{run_id}/health")
def run_health(run: ResolvedRun, session: ReadSession) -> RunHealthPublic:
    """Agreement of the outcome raters (rate, Cohen's kappa) and infrastructure errors."""
    return labels.run_health(session, run.row.id)
