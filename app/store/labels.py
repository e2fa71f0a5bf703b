"""Outcome labels beside the deterministic classifier: humans' and the LLM
judge's, and how well they agree (rate and Cohen's kappa)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.core.outcome import OUTCOMES
from app.core.stats import cohen_kappa
from app.store.errors import NotFound
from app.store.models import OutcomeLabel, TrajectoryRow
from app.store.views import AgreementPublic, InfraErrorPublic, LabelPublic, LabelsPublic, RunHealthPublic

SOURCES = ("human", "judge")
MAX_REASON = 2000


class BadLabel(ValueError):
    """A label outside the closed categories, or an unknown source."""


def set_label(session: Session, trajectory_id: int, *, source: str, label: str, author: str = "",
              reason: str = "") -> OutcomeLabel:
    """Store the current label of a trajectory for one source (replacing the previous one)."""
    if source not in SOURCES:
        raise BadLabel(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if label not in OUTCOMES:
        raise BadLabel(f"label must be one of {', '.join(OUTCOMES)}, got {label!r}")
    traj = session.get(TrajectoryRow, trajectory_id)
    if traj is None:
        raise NotFound(f"no trajectory {trajectory_id}")
    session.execute(delete(OutcomeLabel).where(OutcomeLabel.trajectory_id == trajectory_id,
                                               OutcomeLabel.source == source))
    row = OutcomeLabel(trajectory_id=trajectory_id, run_id=traj.run_id, source=source, label=label,
                       author=author[:200], reason=reason[:MAX_REASON])
    session.add(row)
    session.flush()
    return row


def labels_of(session: Session, trajectory_id: int) -> list[OutcomeLabel]:
    return list(session.scalars(select(OutcomeLabel).where(OutcomeLabel.trajectory_id == trajectory_id)
                                .order_by(OutcomeLabel.source)))


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
            select(TrajectoryRow.id, TrajectoryRow.outcome).where(TrajectoryRow.run_id == run_id,
                                                                  TrajectoryRow.outcome.is_not(None))
        ):
            if tid in labelled and outcome is not None:
                raters["deterministic"][tid] = outcome
    out = []
    for a, b in (("judge", "human"), ("judge", "deterministic"), ("human", "deterministic")):
        shared = sorted(set(raters[a]) & set(raters[b]))
        pairs = [(raters[a][t], raters[b][t]) for t in shared]
        kappa = cohen_kappa(pairs)
        out.append(Agreement(a, b, len(pairs), sum(1 for x, y in pairs if x == y),
                             None if kappa is None else round(kappa, 4)))
    return out


def to_judge(session: Session, run_id: int, *, relabel: bool = False) -> list[tuple[int, dict[str, Any],
                                                                                    list[str] | None]]:
    """The run's faulted trajectories (those with an outcome) as records, with
    each case's expected datum; without ``relabel`` those judged already are left out."""
    from app.store.ingest import get_run_row, suite_for_run
    from app.store.queries import export_records

    run = get_run_row(session, run_id)
    suite = suite_for_run(session, run)
    judged = set() if relabel else set(session.scalars(
        select(OutcomeLabel.trajectory_id).where(OutcomeLabel.run_id == run_id, OutcomeLabel.source == "judge")))
    ids = list(session.scalars(select(TrajectoryRow.id).where(TrajectoryRow.run_id == run_id)
                               .order_by(TrajectoryRow.id)))
    outcomes = dict(session.execute(select(TrajectoryRow.id, TrajectoryRow.outcome)
                                    .where(TrajectoryRow.run_id == run_id)).all())
    out = []
    for tid, record in zip(ids, export_records(session, run_id), strict=True):
        if outcomes.get(tid) is None or tid in judged:
            continue
        case = suite.case(record["case_id"])
        out.append((tid, record, None if case is None else case.expected_datum))
    return out


def labels_public(session: Session, trajectory_id: int) -> LabelsPublic:
    traj = session.get(TrajectoryRow, trajectory_id)
    if traj is None:
        raise NotFound(f"no trajectory {trajectory_id}")
    return LabelsPublic(trajectory_id=trajectory_id, deterministic=traj.outcome,
                        labels=[LabelPublic(source=x.source, label=x.label, author=x.author, reason=x.reason,
                                            created_at=x.created_at) for x in labels_of(session, trajectory_id)])


def run_health(session: Session, run_id: int) -> RunHealthPublic:
    from app.store.infra import infra_errors
    from app.store.ingest import get_run_row

    get_run_row(session, run_id)
    return RunHealthPublic(
        run_id=run_id,
        agreement=[AgreementPublic(**a.to_dict()) for a in agreements(session, run_id)],
        infra_errors=[InfraErrorPublic(case_id=e.case_id, trial=e.trial, fault_key=e.fault_key, message=e.message,
                                       created_at=e.created_at) for e in infra_errors(session, run_id)],
    )
