"""One call from trajectories to a report: the engine of ``toollens score``."""

from __future__ import annotations

from collections.abc import Iterable

from app.core.records import Trajectory
from app.core.report import Report
from app.core.scoring import Scorer
from app.core.suite import Suite


def score_trajectories(suite: Suite, trajectories: Iterable[Trajectory], *, keep_cases: bool = True) -> Report:
    """Score a stream of trajectories against a suite; the stream is consumed
    once and nothing but the counters (and the per-case list) is kept."""
    scorer = Scorer(suite)
    report = Report(keep_cases=keep_cases)
    for traj in trajectories:
        report.add(scorer.score(traj))
    return report
