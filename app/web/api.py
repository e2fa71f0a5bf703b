"""The JSON API under ``/api``: thin routes over the store's functions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse

from app import __version__
from app.core.errors import InvalidTrajectory
from app.core.records import parse_record
from app.core.suites.suite_check import validate_suite_document
from app.store import aggregates, ingest, queries
from app.store import compare as comparing
from app.store import lint as linting
from app.store.blame import BlameFigures, blame_figures
from app.store.db import session_scope
from app.store.lint import LintPublic, RunLintPublic, VersionsDiffPublic
from app.store.views import (
    ComparisonPublic,
    ConfusionPublic,
    FiguresPublic,
    IngestResult,
    RunPublic,
    RunsPublic,
    ToolsetDiffPublic,
    ToolsetPublic,
    TrajectoriesPublic,
    TrajectoryPairPublic,
    TrajectoryPublic,
)
from app.web.deps import (
    BlameFilter,
    Id,
    Limit,
    Offset,
    ReadSession,
    ResolvedRun,
    RunId,
    RunRef,
    SimulatorShare,
    TrajectoryId,
    Writer,
    WriteSession,
)
from app.web.limits import OffLoopJSON
from app.web.schemas import ErrorBody, RunCreate, TrajectoryBatch

ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 404, 409, 413, 415, 422)}

router = APIRouter(prefix="/api", responses=ERRORS, route_class=OffLoopJSON)


@router.get("/health")
async def health() -> dict[str, str]:
    """On the event loop itself (no worker thread to wait for): it answers while the threads are busy."""
    return {"status": "ok", "version": __version__}


@router.post("/runs", status_code=201, dependencies=[Writer])
def create_run(body: RunCreate, session: WriteSession) -> RunPublic:
    if (body.suite is None) == (body.suite_id is None):
        raise HTTPException(422, "give exactly one of 'suite' (inline) or 'suite_id'")
    if body.suite is not None:
        validate_suite_document(body.suite, lenient=body.lenient)
        suite_row = ingest.ensure_suite(session, body.suite)
    else:
        suite_row = ingest.get_suite_row(session, body.suite_id or 0)
    run = ingest.create_run(
        session, name=body.name, suite_row=suite_row, agent=body.agent, model=body.model, config=body.config
    )
    session.flush()
    return queries.get_run(session, run.id)


@router.get("/runs")
def list_runs(
    session: ReadSession,
    suite: str | None = None,
    model: str | None = None,
    toolset_version: str | None = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> RunsPublic:
    return queries.list_runs(
        session, suite=suite, model=model, toolset_version=toolset_version, limit=limit, offset=offset
    )


@router.get("/runs/{run_id}")
def get_run(run: ResolvedRun, session: ReadSession) -> RunPublic:
    return queries.run_public(session, run.with_suite)


@router.post("/runs/{run_id}/trajectories", dependencies=[Writer])
def add_trajectories(run_id: RunId, body: TrajectoryBatch, request: Request, session: WriteSession) -> IngestResult:
    """Score a batch of trajectory records (docs/formats.md) and store it whole, or not at all."""
    run = ingest.get_run_row(session, run_id)
    records = [parse_record(rec, index=i) for i, rec in enumerate(body.trajectories)]
    scorer = request.app.state.scorers.for_run(session, run)
    cases = scorer.suite.by_id
    for i, rec in enumerate(records):
        if cases and rec.case_id not in cases:  # it would be scored against nothing and count as passed
            raise InvalidTrajectory(f"no case {rec.case_id[:100]!r} in the run's suite", index=i, field="case_id")
    n_calls = ingest.add_trajectories(session, run=run, scorer=scorer, trajectories=records)
    total = queries.run_trajectory_count(session, run_id)  # the counter alone, not the run with its suite
    return IngestResult(run_id=run_id, stored=len(records), calls=n_calls, trajectories_total=total)


@router.post("/runs/{run_id}/finish", dependencies=[Writer])
def finish_run(run_id: RunId, session: WriteSession) -> RunPublic:
    aggregates.finish_run(session, run_id)
    session.flush()
    return queries.get_run(session, run_id)


@router.get("/runs/{run_id}/figures")
def figures(
    run: ResolvedRun, request: Request, session: ReadSession, cases_limit: Limit = 100, cases_offset: Offset = 0
) -> FiguresPublic:
    """The run's figures in the shape of ``toollens score --json``."""
    return FiguresPublic.model_validate(
        request.app.state.figures.figures(session, run.row.id, cases_limit=cases_limit, cases_offset=cases_offset)
    )


@router.get("/runs/{run_id}/confusion")
def confusion(run: ResolvedRun, session: ReadSession) -> ConfusionPublic:
    return queries.confusion(session, run.row.id)


@router.get("/runs/{run_id}/lint")
def run_lint(run: ResolvedRun, session: ReadSession) -> RunLintPublic:
    """The run's lint findings beside the confusion cells (both directions) and schema errors they explain."""
    return linting.run_lint(session, run.row.id)


@router.get(
    "/runs/{run_id}/trajectories.jsonl",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}}},
)
def export_jsonl(run_id: RunId, request: Request) -> StreamingResponse:
    """The run back as trajectory records (docs/formats.md), streamed."""
    with session_scope(request.app.state.sessions) as session:
        ingest.get_run_row(session, run_id)  # an unknown run: 404 before the stream starts

    def lines() -> Iterator[bytes]:
        with session_scope(request.app.state.sessions) as s:
            for rec in queries.export_records(s, run_id, checked=True):
                yield (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8")

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.get("/runs/{run_id}/trajectories")
def list_trajectories(
    run: ResolvedRun,
    session: ReadSession,
    failure: str | None = None,
    expected: str | None = None,
    called: str | None = None,
    fault_kind: str | None = None,
    outcome: str | None = None,
    passed: bool | None = None,
    case_id: str | None = None,
    cause: str | None = None,
    blame: BlameFilter = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> TrajectoriesPublic:
    return queries.list_trajectories(
        session,
        run.row.id,
        failure=failure,
        expected=expected,
        called=called,
        fault_kind=fault_kind,
        outcome=outcome,
        passed=passed,
        case_id=case_id,
        cause=cause,
        blame=blame,
        limit=limit,
        offset=offset,
    )


@router.get("/runs/{run_id}/blame")
def run_blame(run: ResolvedRun, session: ReadSession) -> BlameFigures:
    """The run's failed conversations by blame (agent, simulated user, task) and its pass rate with and
    without the user- and task-blamed ones (docs/blame.md)."""
    public = queries.run_public(session, run.with_suite)
    return blame_figures(
        session, public.id, scored=public.scored, passed=public.passed, cooperative=public.cooperative_only
    )


@router.get("/trajectories/{trajectory_id}")
def get_trajectory(trajectory_id: TrajectoryId, session: ReadSession) -> TrajectoryPublic:
    return queries.get_trajectory(session, trajectory_id)


@router.get("/compare")
def compare_runs(
    a: RunRef, b: RunRef, request: Request, session: ReadSession, simulator_share: SimulatorShare = None
) -> ComparisonPublic:
    """Metric deltas (b minus a) with 95% Wilson intervals, exact McNemar on
    shared cases, per-tool selection, the confusion difference, the cases that
    flipped (the first 200) and the descriptions that changed."""
    return comparing.with_simulator_share(request.app.state.comparisons.get(session, a, b), simulator_share)


@router.get("/compare/trajectories")
def compare_trajectories(a: Id, b: Id, session: ReadSession) -> TrajectoryPairPublic:
    """Two trajectories of one case side by side, call by call."""
    return comparing.compare_trajectories(session, a, b)


@router.get("/toolsets")
def list_toolsets(session: ReadSession) -> list[ToolsetPublic]:
    return queries.list_toolsets(session)


@router.get("/toolsets/{name:path}/diff")
def diff_toolset(name: str, a: str, b: str, session: ReadSession) -> ToolsetDiffPublic:
    """Per tool: added, removed, changed (description, schema) or the same."""
    return queries.diff_toolset(session, name, a, b)


@router.get("/toolsets/{name:path}/versions")
def diff_versions(name: str, a: str, b: str, session: ReadSession) -> VersionsDiffPublic:
    """Per tool across two versions: description word diff, schema changes, lint findings and the
    selection figures of the runs that used each version (the toolset page's JSON twin)."""
    return linting.diff_versions(session, name, a, b)


@router.get("/toolsets/{name:path}/lint")
def lint_version(name: str, version: str, session: ReadSession) -> LintPublic:
    """The description linter on a stored version (hash or label)."""
    return linting.version_lint(session, name, version)


@router.get("/toolsets/{name:path}")
def get_toolset(name: str, session: ReadSession) -> ToolsetPublic:
    return queries.get_toolset(session, name)
