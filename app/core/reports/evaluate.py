"""One call from trajectories to a report: the engine of ``toollens score``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.core.records import Trajectory
from app.core.reports.report import Report
from app.core.score.scoring import Scorer
from app.core.suites.suite import Suite
from app.core.usage import UsageTally


def score_trajectories(
    suite: Suite, trajectories: Iterable[Trajectory], *, keep_cases: bool = True, usage: UsageTally | None = None
) -> Report:
    """Score a stream of trajectories against a suite; the stream is consumed
    once and nothing but the counters (and the per-case list) is kept, and,
    into ``usage`` when given, each trajectory's model requests and tool latencies."""
    return score_across([suite], trajectories, keep_cases=keep_cases, usage=usage)


def score_across(
    suites: Sequence[Suite],
    trajectories: Iterable[Trajectory],
    *,
    keep_cases: bool = True,
    usage: UsageTally | None = None,
    per_suite: dict[int, int] | None = None,
) -> Report:
    """The same over several suites (a folder ``convert`` wrote): each trajectory is scored
    against the suite that holds its case (the first suite when none does), into one report;
    ``per_suite``, when given, counts the trajectories scored on each suite (by index)."""
    scorers = [Scorer(s) for s in suites]
    owner: dict[str, int] = {}
    for i, s in enumerate(suites):
        for cid in s.by_id:
            owner.setdefault(cid, i)
    counts = per_suite
    report = Report(keep_cases=keep_cases)
    for traj in trajectories:
        i = owner.get(traj.case_id, 0)
        if counts is not None:
            counts[i] = counts.get(i, 0) + 1
        ts = scorers[i].score(traj)
        report.add(ts)
        if usage is not None:
            usage.add(
                traj.model_calls,
                [(c.name, c.latency_ms) for c in traj.calls if c.latency_ms is not None],
                passed=ts.passed,
                failures=ts.failures,
                outcome=None if ts.outcome is None else ts.outcome.outcome,
            )
    return report
