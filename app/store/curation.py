"""Suite versions and curated cases: a stored trajectory added to a suite as
a case makes the suite's next version (its content hash, its parent)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from app.core.advise import curate
from app.core.errors import SuiteError
from app.core.records import Trajectory, parse_record
from app.core.score.families import FAMILY_FAILURE, Failure
from app.core.suites.suite import Suite, parse_suite
from app.store import suites
from app.store.ingest import digest, ensure_toolset_version, find_run, get_run_row, get_suite_row, suite_for_run
from app.store.models import Run, SuiteRow, TrajectoryRow
from app.store.queries import MAX_PAGE, StoredTrajectory, list_trajectories, load_trajectory, trajectory_record
from app.store.views import SuitePublic

MAX_SUITES = 500


def stored_trajectory(
    session: Session, trajectory_id: int, loaded: StoredTrajectory | None = None
) -> tuple[TrajectoryRow, Trajectory]:
    """A stored trajectory as the core reads it (``loaded``: its row and calls, when the caller has them)."""
    got = loaded if loaded is not None and loaded.row.id == trajectory_id else load_trajectory(session, trajectory_id)
    return got.row, parse_record(trajectory_record(got.row, got.calls))


def suite_public(row: SuiteRow, runs: int = 0) -> SuitePublic:
    return SuitePublic(
        id=row.id,
        name=row.name,
        version=row.version,
        hash=row.hash,
        parent_id=row.parent_id,
        cases=suites.case_count(row),
        runs=runs,
        created_at=row.created_at,
    )


def list_suites(session: Session, *, limit: int = MAX_SUITES, offset: int = 0) -> tuple[list[SuitePublic], int]:
    """A page of the suite versions, the newest of each name first, and how many there are."""
    total = session.scalar(select(func.count()).select_from(SuiteRow)) or 0
    rows = list(
        session.scalars(
            select(SuiteRow)
            .options(defer(SuiteRow.parts), defer(SuiteRow.legacy_document))
            .order_by(SuiteRow.name, SuiteRow.version.desc(), SuiteRow.id)
            .limit(limit)
            .offset(offset)
        )
    )
    ids = [r.id for r in rows]
    runs = (
        dict(
            session.execute(
                select(Run.suite_id, func.count()).where(Run.suite_id.in_(ids)).group_by(Run.suite_id)
            ).all()
        )
        if ids
        else {}
    )
    return [suite_public(r, runs.get(r.id, 0)) for r in rows], total


def newest_suites(session: Session, *, always: str | None = None) -> list[SuitePublic]:
    """The newest version of each suite name (the first ``MAX_SUITES`` names,
    and ``always``'s even past them): what the "Add to a suite" form offers."""
    return [suite_public(r) for r in suites.newest_of_each(session, limit=MAX_SUITES, always=always)]


def add_case(
    session: Session, *, suite_id: int, trajectory_id: int, edits: curate.Edits, new_suite: str | None = None
) -> tuple[SuiteRow, dict[str, Any]]:
    """Add the trajectory as a case to the suite of version ``suite_id`` (or,
    with ``new_suite``, to a new suite of that name with the same toolset):
    the name's next version holds the newest version's cases and this one,
    so cases added at once by several writers chain. Every check runs before
    anything is written: a refused case stores nothing."""
    target = get_suite_row(session, suite_id)
    t, traj = stored_trajectory(session, trajectory_id)
    run = get_run_row(session, t.run_id)
    edits = replace(edits, source={"run": run.name, "trajectory": t.id, "case_id": t.case_id, "trial": t.trial})
    if new_suite is not None and session.scalar(select(SuiteRow.id).where(SuiteRow.name == new_suite)) is not None:
        raise SuiteError(f"a suite named {new_suite!r} exists already: add the case to it", field="new_suite")
    made: list[dict[str, Any]] = []

    def build(newest: SuiteRow | None) -> tuple[dict[str, Any], str, int | None]:
        base = dict(suites.suite_document(session, newest or target))
        if new_suite is not None and newest is None:
            base = {"name": new_suite, **{k: v for k, v in base.items() if k not in ("cases", "name")}, "cases": []}
        toolset = parse_suite(base, path="suite").toolset
        case = curate.case_document(traj, toolset, edits, source=suite_for_run(session, run).toolset)
        document = curate.add_cases(base, [case])
        made[:] = [case]
        return document, digest(document), newest.id if newest is not None else None

    if new_suite is None:
        row = suites.store_version(session, target.name, build, toolset_version_id=lambda: target.toolset_version_id)
    else:  # the toolset version as any new suite registers it (under the toolset's name, or the suite's)
        head = {**suites.split(suites.suite_document(session, target))[0], "name": new_suite, "cases": []}
        toolset = parse_suite(head, path="suite").toolset
        row = suites.store_version(
            session,
            new_suite,
            build,
            toolset_version_id=lambda: (
                ensure_toolset_version(
                    session, name=toolset.name or new_suite, suite=Suite(name=new_suite, toolset=toolset, cases=[])
                ).id
            ),
        )
    session.flush()
    return row, made[0]


# Failure names (as in a case's ``failures``); the figures' family names that mean them are FAMILY_FAILURE.
FAILURES = tuple(Failure)
WHERE_KEYS = ("failure", "outcome", "tool", "case")


def select_trajectories(
    session: Session, run_ref: str, where: dict[str, str], limit: int
) -> tuple[Run, list[tuple[TrajectoryRow, Trajectory]]]:
    """The run's trajectories that pass every filter (``failure``, ``outcome``,
    ``tool`` called, ``case`` id), the first ``limit`` in storage order."""
    unknown = sorted(set(where) - set(WHERE_KEYS))
    if unknown:
        raise SuiteError(f"no filter {unknown[0]!r} (filters: {', '.join(WHERE_KEYS)})", field="--where")
    failure = where.get("failure")
    if failure is not None:
        failure = str(FAMILY_FAILURE.get(failure, failure))  # a plain str, as stored
        if failure not in FAILURES:
            raise SuiteError(
                f"no failure {where['failure']!r} (failures: {', '.join(FAILURES)}, or a family "
                f"of the figures: {', '.join(FAMILY_FAILURE)})",
                field="--where failure",
            )
    run = find_run(session, run_ref)
    out: list[tuple[TrajectoryRow, Trajectory]] = []
    offset = 0
    while len(out) < limit:
        page = list_trajectories(
            session,
            run.id,
            failure=failure,
            outcome=where.get("outcome"),
            called=where.get("tool"),
            case_id=where.get("case"),
            limit=min(MAX_PAGE, limit - len(out)),
            offset=offset,
        )
        out.extend(stored_trajectory(session, t.id) for t in page.data)
        offset += len(page.data)
        if not page.data or offset >= page.count:
            break
    return run, out
