"""Blame from the store: a run's failures by who caused them, its pass rate
with and without the conversations blamed on the simulated user or the task,
the cases every stored run of the suite fails, and the share of a change's
flipped failures blamed on the simulator (docs/blame.md).

A failed conversation's blame is kept in its trajectory's ``detail`` (what the
scorer found, app/core/score/blame.py) and as a ``blame`` tag row (the run page's
filter); a case that every stored run of its suite fails, by at least two
models, counts as the task's (``every_model_fails``) wherever its stored
blame says agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import Session

from app.core.reports.report import PROFILE_MARK
from app.core.score.blame import AGENT, BLAMES, TASK, USER, simulator_note
from app.store.models import Run, SuiteRow, TrajectoryRow, TrajectoryTag

MAX_CASES = 200  # cases listed as failed by every model
MIN_MODELS = 2  # distinct models (or agents) before "every model fails" means anything


class BlameFigures(BaseModel):
    """A run's failed conversations by blame, and its pass rate with and without
    the user- and task-blamed ones."""

    by_blame: dict[str, int] = Field(default_factory=dict)  # agent/user/task -> failed conversations
    blamed: int = 0  # failed conversations with a blame
    scored: int = 0
    passed: int = 0
    pass_rate: float | None = None  # passed / scored
    pass_rate_agent_only: float | None = None  # passed / (scored - user- and task-blamed failures)
    every_model_fails: list[str] = Field(default_factory=list)  # case ids no stored run of the suite passes
    runs_compared: int = 0  # runs of the suite that decided every_model_fails
    models_compared: int = 0
    # a run with simulated-user profiles: scored and passed count its cooperative conversations (its
    # headline), and so does this: of them, the failed ones blamed on the user or the task, which
    # pass_rate_agent_only leaves out (by_blame counts every conversation). Absent without profiles.
    headline_blamed_elsewhere: int | None = Field(default=None, exclude_if=lambda v: v is None)


def every_model_fails(session: Session, run_id: int) -> tuple[list[str], int, int]:
    """The cases of this run's suite that no stored run passes, when runs of at
    least ``MIN_MODELS`` models (or agents) hold them: (case ids, runs, models)."""
    suite = session.scalar(select(SuiteRow.name).join(Run, Run.suite_id == SuiteRow.id).where(Run.id == run_id))
    if suite is None:
        return [], 0, 0
    runs = session.execute(
        select(Run.id, Run.model, Run.agent).join(SuiteRow, Run.suite_id == SuiteRow.id).where(SuiteRow.name == suite)
    ).all()
    models = {m or a for _, m, a in runs if m or a}  # a run that names no model counts as none
    if len(runs) < 2 or len(models) < MIN_MODELS:
        return [], len(runs), len(models)
    ids = [r[0] for r in runs]
    failed_here = (
        select(TrajectoryRow.case_id).where(TrajectoryRow.run_id == run_id, TrajectoryRow.passed.is_(False)).distinct()
    )
    # the models (or agents) of the runs that hold the case itself: two runs of one model are not "every model"
    model = func.coalesce(func.nullif(Run.model, ""), func.nullif(Run.agent, ""))
    rows = session.execute(
        select(TrajectoryRow.case_id)
        .join(Run, Run.id == TrajectoryRow.run_id)
        .where(TrajectoryRow.run_id.in_(ids), TrajectoryRow.case_id.in_(failed_here))
        .group_by(TrajectoryRow.case_id)
        .having(
            func.sum(TrajectoryRow.passed.cast(TrajectoryRow.n_calls.type)) == 0,
            func.count(func.distinct(model)) >= MIN_MODELS,
        )
        .order_by(TrajectoryRow.case_id)
        .limit(MAX_CASES)
    ).all()
    return [c for (c,) in rows], len(runs), len(models)


def blame_figures(
    session: Session, run_id: int, *, scored: int, passed: int, cooperative: bool = False
) -> BlameFigures:
    """The run's failures by blame (stored tags, with every-model-fails cases
    moved from agent to task) and both pass rates; ``cooperative`` (a run with
    simulated-user profiles, whose ``scored`` and ``passed`` count its cooperative
    conversations): the pass rate without the user- and task-blamed ones counts those
    among its cooperative conversations."""
    counts = dict(
        session.execute(
            select(TrajectoryTag.value, func.count())
            .where(TrajectoryTag.run_id == run_id, TrajectoryTag.kind == "blame")
            .group_by(TrajectoryTag.value)
        ).all()
    )
    by = {b: int(counts.get(b, 0)) for b in BLAMES}
    if not any(by.values()):  # no failed conversation (most tool-use runs): nothing to look up across runs
        return BlameFigures(
            by_blame=by,
            scored=scored,
            passed=passed,
            pass_rate=passed / scored if scored else None,
            pass_rate_agent_only=passed / scored if scored else None,
            headline_blamed_elsewhere=0 if cooperative else None,
        )
    cases, n_runs, n_models = every_model_fails(session, run_id)
    if cases:
        moved = (
            session.scalar(
                select(func.count()).select_from(
                    _tagged(run_id, AGENT)
                    .where(
                        TrajectoryTag.trajectory_id.in_(
                            select(TrajectoryRow.id).where(
                                TrajectoryRow.run_id == run_id, TrajectoryRow.case_id.in_(cases)
                            )
                        )
                    )
                    .subquery()
                )
            )
            or 0
        )
        by[AGENT] -= moved
        by[TASK] += moved
    headline = _cooperative_elsewhere(session, run_id, cases) if cooperative else None
    not_agent = by[USER] + by[TASK] if headline is None else headline
    honest = scored - not_agent
    return BlameFigures(
        by_blame=by,
        blamed=sum(by.values()),
        scored=scored,
        passed=passed,
        pass_rate=passed / scored if scored else None,
        pass_rate_agent_only=passed / honest if honest > 0 else None,
        every_model_fails=cases,
        runs_compared=n_runs,
        models_compared=n_models,
        headline_blamed_elsewhere=headline,
    )


def _cooperative_elsewhere(session: Session, run_id: int, cases: Sequence[str]) -> int:
    """The run's failed conversations blamed on the simulated user or the task (an every-model-fails
    case's agent-blamed ones too), of those under no non-cooperative profile."""
    blamed = or_(
        TrajectoryTag.value.in_((USER, TASK)), and_(TrajectoryTag.value == AGENT, TrajectoryRow.case_id.in_(cases))
    )
    return int(
        session.scalar(
            select(func.count())
            .select_from(TrajectoryTag)
            .join(TrajectoryRow, TrajectoryRow.id == TrajectoryTag.trajectory_id)
            .where(
                TrajectoryTag.run_id == run_id,
                TrajectoryTag.kind == "blame",
                TrajectoryRow.fault_key.not_like(f"%{PROFILE_MARK}%"),
                blamed,
            )
        )
        or 0
    )


def _tagged(run_id: int, blame: str) -> Select[Any]:
    return select(TrajectoryTag.trajectory_id).where(
        TrajectoryTag.run_id == run_id, TrajectoryTag.kind == "blame", TrajectoryTag.value == blame
    )


def blamed_ids(session: Session, run_id: int, blame: str) -> Select[Any]:
    """The ids of the run's failed conversations blamed on ``blame`` (the run
    page's filter), every-model-fails cases counted as the task's."""
    cases = every_model_fails(session, run_id)[0] if blame in (AGENT, TASK) else []
    if not cases:
        return _tagged(run_id, blame)
    on_cases = TrajectoryRow.case_id.in_(cases)
    agent = TrajectoryRow.id.in_(_tagged(run_id, AGENT))
    q = select(TrajectoryRow.id).where(TrajectoryRow.run_id == run_id)
    if blame == AGENT:
        return q.where(agent, ~on_cases)
    return q.where(or_(TrajectoryRow.id.in_(_tagged(run_id, TASK)), and_(agent, on_cases)))


def blame_of_ids(session: Session, ids: Iterable[int]) -> dict[int, str]:
    """The stored blame of each trajectory id that has one."""
    wanted = list(ids)
    if not wanted:
        return {}
    return {
        tid: value
        for tid, value in session.execute(
            select(TrajectoryTag.trajectory_id, TrajectoryTag.value).where(
                TrajectoryTag.trajectory_id.in_(wanted), TrajectoryTag.kind == "blame"
            )
        )
    }


def flipped_simulator_note(session: Session, failing: Sequence[int], share: float) -> tuple[int, int, str | None]:
    """Of the failing trajectories of the cases a change flipped (the
    candidate's for a regression, the baseline's for a fix), how many are
    blamed on the simulated user, and the note when they exceed ``share``."""
    blamed = blame_of_ids(session, failing)
    n_user = sum(1 for t in failing if blamed.get(t) == USER)
    return n_user, len(failing), simulator_note(n_user, len(failing), share)


__all__ = ["BlameFigures", "blame_figures", "blamed_ids", "every_model_fails", "flipped_simulator_note"]
