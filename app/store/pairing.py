"""Two runs' trajectories paired by (case, trial, fault): how many pairs, which flipped.

A comparison's McNemar test and its list of flipped cases join the two runs' trajectories
(twice: the counts, then the first flips): seconds at hundreds of thousands of trajectories.
When a run is finished, its pairing with the run of the same suite finished before it (the
comparison a new run is made for) is kept in ``run_pairings``, both ways; a comparison reads
it while both runs hold the trajectories it was computed on, and joins them otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.store.models import Run, RunPairing, TrajectoryRow
from app.store.queries import run_trajectory_count

FLIPS = 200  # flipped pairs kept (what the compare page and API list)


@dataclass
class Pairing:
    """``flipped``: the first pairs that differ in A's id order, as
    (case_id, trial, fault_key, a_id, b_id, a_passed, b_passed)."""

    shared: int
    only_a: int
    only_b: int
    flipped: list[tuple[str, int, str, int, int, bool, bool]]


def joined(session: Session, a_id: int, b_id: int, limit: int = FLIPS) -> Pairing:
    """The pairing read from both runs' trajectories (the compare index's join)."""
    ta, tb = TrajectoryRow.__table__.alias("ta"), TrajectoryRow.__table__.alias("tb")
    on = (ta.c.case_id == tb.c.case_id) & (ta.c.trial == tb.c.trial) & (ta.c.fault_key == tb.c.fault_key)
    counts = session.execute(
        select(func.count(), func.sum((ta.c.passed & ~tb.c.passed).cast(TrajectoryRow.n_calls.type)),
               func.sum((~ta.c.passed & tb.c.passed).cast(TrajectoryRow.n_calls.type)))
        .select_from(ta).join(tb, on).where(ta.c.run_id == a_id, tb.c.run_id == b_id)
    ).one()
    shared, only_a, only_b = int(counts[0] or 0), int(counts[1] or 0), int(counts[2] or 0)
    flips = (select(ta.c.case_id, ta.c.trial, ta.c.fault_key, ta.c.id, tb.c.id, ta.c.passed, tb.c.passed)
             .join(tb, on).where(ta.c.run_id == a_id, tb.c.run_id == b_id, ta.c.passed != tb.c.passed)
             .order_by(ta.c.id).limit(limit))
    flipped = ([(str(c), int(t), str(f), int(i), int(j), bool(p), bool(q))
                for c, t, f, i, j, p, q in session.execute(flips)] if only_a + only_b else [])
    return Pairing(shared, only_a, only_b, flipped)


def paired(session: Session, a_id: int, b_id: int, a_count: int, b_count: int, limit: int = FLIPS) -> Pairing:
    """The runs' pairing: kept, when computed on runs of these sizes (and ``limit`` flips fit), else joined."""
    row = session.get(RunPairing, (a_id, b_id))
    if (row is not None and (row.a_trajectories, row.b_trajectories) == (a_count, b_count)
            and (limit <= FLIPS or row.only_a + row.only_b <= FLIPS)):
        flipped: list[Any] = row.flipped[:limit]
        return Pairing(row.shared, row.only_a, row.only_b, [tuple(f) for f in flipped])
    return joined(session, a_id, b_id, limit)


def keep_with_previous(session: Session, run_id: int, *, before: bool = False) -> int | None:
    """Keep the pairing of a run being finished with the run of its suite finished last before it,
    both ways (in the caller's transaction); returns that run's id (None: there is none). ``before``:
    only runs finished before this one's ``finished_at`` (a run finished long ago, backfilled)."""
    run = session.get(Run, run_id)
    if run is None:
        return None
    q = select(Run.id).where(Run.suite_id == run.suite_id, Run.id != run_id, Run.status == "finished")
    if before and run.finished_at is not None:
        q = q.where((Run.finished_at < run.finished_at) | ((Run.finished_at == run.finished_at) & (Run.id < run_id)))
    previous = session.scalar(q.order_by(Run.finished_at.desc(), Run.id.desc()).limit(1))
    if previous is None:
        return None
    counts = {rid: run_trajectory_count(session, rid) for rid in (previous, run_id)}
    for a, b in ((previous, run_id), (run_id, previous)):
        p = joined(session, a, b)
        row = session.get(RunPairing, (a, b)) or RunPairing(a_id=a, b_id=b)
        row.a_trajectories, row.b_trajectories = counts[a], counts[b]
        row.shared, row.only_a, row.only_b, row.flipped = p.shared, p.only_a, p.only_b, [list(f) for f in p.flipped]
        session.add(row)
    return previous
