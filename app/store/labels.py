"""Outcome labels beside the deterministic classifier: humans' and the LLM
judge's, and how well they agree (rate and Cohen's kappa)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.reports.stats import cohen_kappa
from app.core.score.outcome import OUTCOMES
from app.store.errors import Conflict, NotFound
from app.store.models import CallRow, OutcomeLabel, TrajectoryRow
from app.store.views import AgreementPublic, InfraErrorPublic, LabelPublic, LabelsPublic, RunHealthPublic

SOURCES = ("human", "judge")
MAX_REASON = 2000


class BadLabel(ValueError):
    """A label outside the closed categories, or an unknown source."""


def set_label(
    session: Session, trajectory_id: int, *, source: str, label: str, author: str = "", reason: str = ""
) -> OutcomeLabel:
    """Store the current label of a trajectory for one source (replacing the previous one)."""
    if source not in SOURCES:
        raise BadLabel(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if label not in OUTCOMES:
        raise BadLabel(f"label must be one of {', '.join(OUTCOMES)}, got {label!r}")
    traj = session.get(TrajectoryRow, trajectory_id)
    if traj is None:
        raise NotFound(f"no trajectory {trajectory_id}")
    if traj.outcome is None:
        raise Conflict(f"trajectory {trajectory_id} had no fault injected: it has no outcome to label")
    for attempt in range(2):  # two people labelling at once: the second replaces the first
        try:
            with session.begin_nested():
                session.execute(
                    delete(OutcomeLabel).where(
                        OutcomeLabel.trajectory_id == trajectory_id, OutcomeLabel.source == source
                    )
                )
                row = OutcomeLabel(
                    trajectory_id=trajectory_id,
                    run_id=traj.run_id,
                    source=source,
                    label=label,
                    author=author[:200],
                    reason=reason[:MAX_REASON],
                )
                session.add(row)
                session.flush()
            return row
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def labels_of(session: Session, trajectory_id: int) -> list[OutcomeLabel]:
    return list(
        session.scalars(
            select(OutcomeLabel).where(OutcomeLabel.trajectory_id == trajectory_id).order_by(OutcomeLabel.source)
        )
    )


@dataclass(frozen=True)
class Agreement:
    """Two raters over the trajectories both labelled."""

    a: str
    b: str
    n: int
    agree: int
    kappa: float | None

    @property
    def rate(self) -> float | None:
        return self.agree / self.n if self.n else None

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "n": self.n, "agree": self.agree, "rate": self.rate, "kappa": self.kappa}


def agreements(session: Session, run_id: int) -> list[Agreement]:
    """judge vs human, judge vs deterministic, human vs deterministic, over a run."""
    raters: dict[str, dict[int, str]] = {"human": {}, "judge": {}, "deterministic": {}}
    for tid, source, label in session.execute(
        select(OutcomeLabel.trajectory_id, OutcomeLabel.source, OutcomeLabel.label).where(OutcomeLabel.run_id == run_id)
    ):
        raters[source][tid] = label
    labelled = set(raters["human"]) | set(raters["judge"])
    if labelled:
        for tid, outcome in session.execute(
            select(TrajectoryRow.id, TrajectoryRow.outcome).where(
                TrajectoryRow.run_id == run_id, TrajectoryRow.outcome.is_not(None)
            )
        ):
            if tid in labelled and outcome is not None:
                raters["deterministic"][tid] = outcome
    out = []
    for a, b in (("judge", "human"), ("judge", "deterministic"), ("human", "deterministic")):
        shared = sorted(set(raters[a]) & set(raters[b]))
        pairs = [(raters[a][t], raters[b][t]) for t in shared]
        kappa = cohen_kappa(pairs)
        out.append(
            Agreement(a, b, len(pairs), sum(1 for x, y in pairs if x == y), None if kappa is None else round(kappa, 4))
        )
    return out


JudgeItem = tuple[int, dict[str, Any], list[str] | None]


def to_judge(
    session: Session, run_id: int, *, relabel: bool = False, after_id: int = 0, limit: int = 100
) -> list[JudgeItem]:
    """The next faulted trajectories of a run (those with an outcome), after
    ``after_id``, as (id, record, the case's expected datum); without
    ``relabel`` those the judge labelled already are left out. Read a chunk at
    a time: memory does not grow with the run."""
    from app.store.ingest import get_run_row, suite_for_run

    suite = suite_for_run(session, get_run_row(session, run_id))
    query = (
        select(TrajectoryRow)
        .where(TrajectoryRow.run_id == run_id, TrajectoryRow.outcome.is_not(None), TrajectoryRow.id > after_id)
        .order_by(TrajectoryRow.id)
        .limit(limit)
    )
    if not relabel:
        judged = select(OutcomeLabel.trajectory_id).where(OutcomeLabel.run_id == run_id, OutcomeLabel.source == "judge")
        query = query.where(TrajectoryRow.id.not_in(judged))
    trajs = list(session.scalars(query))
    calls: dict[int, list[CallRow]] = {t.id: [] for t in trajs}
    if trajs:
        for c in session.scalars(
            select(CallRow).where(CallRow.trajectory_id.in_(list(calls))).order_by(CallRow.trajectory_id, CallRow.idx)
        ):
            calls[c.trajectory_id].append(c)
    out: list[JudgeItem] = []
    for t in trajs:
        record = {
            "case_id": t.case_id,
            "question": t.question,
            "answer": t.answer,
            "fault": None if t.fault_kind is None else {"step": t.fault_step, "kind": t.fault_kind},
            "calls": [
                {
                    "name": c.name,
                    "arguments": c.arguments if c.arguments_raw is None else c.arguments_raw,
                    "observation": c.observation,
                    "error": c.error_kind,
                }
                for c in calls[t.id]
            ],
        }
        case = suite.case(t.case_id)
        out.append((t.id, record, None if case is None else case.expected_datum))
    return out


def labels_public(session: Session, trajectory_id: int) -> LabelsPublic:
    traj = session.get(TrajectoryRow, trajectory_id)
    if traj is None:
        raise NotFound(f"no trajectory {trajectory_id}")
    return LabelsPublic(
        trajectory_id=trajectory_id,
        deterministic=traj.outcome,
        labels=[
            LabelPublic(source=x.source, label=x.label, author=x.author, reason=x.reason, created_at=x.created_at)
            for x in labels_of(session, trajectory_id)
        ],
    )


def run_health(session: Session, run_id: int) -> RunHealthPublic:
    from app.store.infra import count_infra_errors, infra_errors
    from app.store.ingest import get_run_row

    get_run_row(session, run_id)
    return RunHealthPublic(
        run_id=run_id,
        agreement=[AgreementPublic(**a.to_dict()) for a in agreements(session, run_id)],
        infra_errors=[
            InfraErrorPublic(
                case_id=e.case_id, trial=e.trial, fault_key=e.fault_key, message=e.message, created_at=e.created_at
            )
            for e in infra_errors(session, run_id)
        ],
        infra_error_count=count_infra_errors(session, run_id),
    )
