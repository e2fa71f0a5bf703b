"""One call from trajectories to a report: the engine of ``toollens score``."""

from __future__ import annotations

from collections.abc import Iterable

from app.core.records import Trajectory
from app.core.report import Report
from app.core.scoring import Scorer
from app.core.suite import Suite
from app.core.usage import UsageTally


def score_trajectories(suite: Suite, trajectories: Iterable[Trajectory], *, keep_cases: bool = True,
                       usage: UsageTally | None = None) -> Report:
    """Score a stream of trajectories against a suite; the stream is consumed
    once and nothing but the counters (and the per-case list) is kept, and,
    into ``usage`` when given, each trajectory's model requests and tool latencies."""
    scorer = Scorer(suite)
    report = Report(keep_cases=keep_cases)
    for traj in trajectories:
        ts = scorer.score(traj)
        report.add(ts)
        if usage is not None:
            usage.add(traj.model_calls, [(c.name, c.latency_ms) for c in traj.calls if c.latency_ms is not None],
                      passed=ts.passed, failures=ts.failures,
                      outcome=None if ts.outcome is None else ts.outcome.outcome)
    return report
