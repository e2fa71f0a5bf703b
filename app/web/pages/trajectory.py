"""The trajectory page: why it failed in words, the timeline, the answer and
its outcome's evidence, the outcome labels, and the "Add to a suite" form;
with the two forms it posts (a label, a case). The forms' routes read the
body on the event loop and do their database work in the threadpool."""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from app.core.errors import SuiteError
from app.core.reports.profiles import COOPERATIVE
from app.core.score.detail import Evidence, TrajectoryDetail
from app.store import labels, queries
from app.store.db import session_scope
from app.store.errors import NotFound
from app.store.views import LabelsPublic, RunPublic, TrajectoryPublic
from app.web.deps import OptionalId, ReadSession, TrajectoryId, api_token, page_form, render
from app.web.labels import LabelCreate
from app.web.pages.curate import Added, CurateForm, added_note, curate_form, submit
from app.web.pages.timeline import TimelineRow, TurnGroup, timeline, turn_groups
from app.web.why import Segment, why

router = APIRouter()


@dataclass(frozen=True)
class ClaimView:
    """A sentence of the answer that claims the result of a call that never succeeded."""

    call: int  # counted from 1
    tool: str
    sentence: str
    message: int | None = None  # the message it was said in, counted from 1


@dataclass(frozen=True)
class EvidenceView:
    """The outcome's evidence as the page lists it: calls counted from 1, grounded values
    sorted as ``|dictsort`` sorts them."""

    evidence: Evidence
    failed_call: int | None = None  # counted from 1
    claimed: ClaimView | None = None
    grounded: list[tuple[str, str]] = field(default_factory=list)  # (value, how)

    @classmethod
    def of(cls, e: Evidence) -> EvidenceView:
        c = e.claimed
        return cls(
            e,
            failed_call=e.failed_call + 1 if isinstance(e.failed_call, int) else None,
            claimed=None
            if c is None
            else ClaimView((c.call if isinstance(c.call, int) else 0) + 1, c.tool, c.sentence, c.message),
            grounded=sorted((e.grounded_values or {}).items(), key=lambda kv: kv[0].lower()),
        )


BLAME_WORDS = {"agent": "the agent", "user": "the simulated user", "task": "the task"}


@dataclass
class TrajectoryPage:
    t: TrajectoryPublic
    detail: TrajectoryDetail  # what scoring found, typed (app/core/score/detail.py)
    run: RunPublic
    rows: list[TimelineRow]
    evidence: EvidenceView
    labels: LabelsPublic  # the classifier's, the judge's and people's
    curate: CurateForm  # the "Add to a suite" form
    token_required: bool  # the forms ask for the API token
    label_error: str = ""  # why the last label was not saved: "token", "label" or ""
    added: Added | None = None  # the case the form just added
    previous_failing: int | None = None
    next_failing: int | None = None
    groups: list[TurnGroup] | None = None  # a conversation's rows by user turn
    why: list[list[Segment]] = field(default_factory=list)  # the first divergence and the outcome, in words
    user_profile: str = ""  # the simulated user's profile, when not the cooperative one
    notes: list[str] = field(default_factory=list)  # the case's, from the suite: what the source checks
    backfill_command: str = ""  # a failed trajectory of a run stored before causes were kept: what finds its cause

    @property
    def blame_words(self) -> str:
        """Who failed the conversation, as the page says it ("the simulated user")."""
        who = self.detail.blame.blame if self.detail.blame is not None else ""
        return BLAME_WORDS.get(who, who)

    @property
    def state_declared(self) -> bool:
        """The case declares an expected final state (the scorer then
        records the state it got, or why it has none)."""
        return self.detail.final_state is not None or bool(self.detail.state_mismatches)


def trajectory_page(
    session: Session,
    trajectory_id: int,
    *,
    token_required: bool,
    label_error: str = "",
    curate: CurateForm | None = None,
    added: Added | None = None,
) -> TrajectoryPage:
    """The trajectory page's context: the trajectory and its calls loaded once, its run resolved once."""
    stored = queries.load_trajectory(session, trajectory_id)
    run = queries.resolve_run(session, stored.row.run_id)
    t = queries.trajectory_public(session, stored)
    before, after = queries.failing_neighbours(session, t.run_id, t.id)
    d = stored.detail
    rows = timeline(t, d)
    backfill = ""
    if (
        not t.passed
        and d.divergence is None
        and not d.user_error
        and queries.uncaused(queries.run_report(session, run.id))
    ):
        backfill = f"toollens db backfill --run {shlex.quote(run.name)}"
    return TrajectoryPage(
        t=t,
        detail=d,
        run=queries.run_public(session, run),
        rows=rows,
        evidence=EvidenceView.of(d.outcome_evidence or Evidence()),
        labels=labels.labels_public(session, trajectory_id),
        curate=curate if curate is not None else curate_form(session, trajectory_id, stored),
        token_required=token_required,
        label_error=label_error,
        added=added,
        previous_failing=before,
        next_failing=after,
        groups=turn_groups(t, d, rows),
        why=why(t, d),
        notes=queries.case_notes(session, run, t.case_id),
        backfill_command=backfill,
        user_profile=d.user_profile if isinstance(d.user_profile, str) and d.user_profile != COOPERATIVE else "",
    )


def show(
    request: Request, session: Session, trajectory_id: int, *, status_code: int = 200, **extra: Any
) -> HTMLResponse:
    """The page (``extra``: what the last form left to say)."""
    page = trajectory_page(session, trajectory_id, token_required=api_token(request) is not None, **extra)
    return render(request, "trajectory.html", status_code, page=page)


@router.get("/trajectories/{trajectory_id}", response_class=HTMLResponse)
def trajectory(
    request: Request,
    trajectory_id: TrajectoryId,
    session: ReadSession,
    label_error: str = "",
    added: OptionalId = None,
    case: str = "",
) -> HTMLResponse:
    return show(request, session, trajectory_id, label_error=label_error[:20], added=added_note(session, added, case))


@router.post("/trajectories/{trajectory_id}/label")
async def label_form(trajectory_id: TrajectoryId, request: Request) -> RedirectResponse:
    """The labels form: another site cannot rewrite the labels that calibrate the judge."""
    form = await page_form(request, "labels")
    token = api_token(request)
    back = f"/trajectories/{trajectory_id}"
    if token is not None and not secrets.compare_digest(form.get("token", "").encode(), token.encode()):
        return RedirectResponse(f"{back}?label_error=token#labels", status_code=303)
    try:
        body = LabelCreate(
            label=form.get("label", ""),  # type: ignore[arg-type]
            author=form.get("author", "")[:200],
            reason=form.get("reason", "")[: labels.MAX_REASON],
        )
    except ValueError:
        return RedirectResponse(f"{back}?label_error=label#labels", status_code=303)
    await run_in_threadpool(_store_label, request.app.state.sessions, trajectory_id, body)
    return RedirectResponse(f"{back}#labels", status_code=303)


def _store_label(sessions: sessionmaker[Session], trajectory_id: int, body: LabelCreate) -> None:
    with session_scope(sessions, write=True) as session:
        labels.set_label(
            session, trajectory_id, source="human", label=body.label, author=body.author, reason=body.reason
        )


@router.post("/trajectories/{trajectory_id}/curate", response_model=None)
async def curate_form_submit(trajectory_id: TrajectoryId, request: Request) -> Response:
    """The "Add to a suite" form: the case is added and the page says where,
    or the page comes back with the field at fault."""
    form = await page_form(request, "cases")
    return await run_in_threadpool(_add_case, request, trajectory_id, form)


def _add_case(request: Request, trajectory_id: int, form: dict[str, str]) -> Response:
    with session_scope(request.app.state.sessions, write=True) as session:
        page = curate_form(session, trajectory_id)
        try:
            row, edits = submit(session, page, trajectory_id, form, api_token(request))
        except (SuiteError, NotFound) as exc:
            session.rollback()
            page.values, page.error = form, getattr(exc, "detail", str(exc))
            page.error_field = getattr(exc, "field", "") or "suite"
            return show(request, session, trajectory_id, status_code=422, curate=page)
    return RedirectResponse(
        f"/trajectories/{trajectory_id}?added={row.id}&case={quote(edits.case_id)}#curate", status_code=303
    )
