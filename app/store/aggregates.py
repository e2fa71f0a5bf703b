"""What comparing a run needs beyond its counters, computed once when the run is finished
(and its pairing with the run before it: ``app.store.pairing``).

A comparison's usage deltas read every trajectory's model requests and every call's
latency of both runs (``queries.run_usage``): seconds per 100,000 trajectories, paid by
the first view. A finished run keeps, in ``run_aggregates``, what that read gives before
prices (``usage.unpriced``); the comparison prices it at read time (``usage.priced``). It
is used while the run holds the trajectories it was computed on (a finished run that
later receives spans a live server had accepted is read the slow way again).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.prices import PriceTable
from app.core.usage import priced, unpriced
from app.store.ingest import get_run_row
from app.store.models import Run, RunAggregate, utcnow
from app.store.pairing import keep_with_previous
from app.store.queries import run_trajectory_count, run_usage, usage_so_far


def finish_run(session: Session, run_id: int) -> Run:
    """The run marked finished, and what comparing it needs computed and kept (``keep``)."""
    run = get_run_row(session, run_id)
    if run.status != "finished":
        run.status = "finished"
        run.finished_at = utcnow()
        keep(session, run_id)
    return run


def keep(session: Session, run_id: int) -> None:
    """Compute the run's aggregates and its pairing with the run of its suite finished before it
    (``pairing``), and keep them (in the caller's transaction)."""
    keep_usage(session, run_id)
    keep_with_previous(session, run_id)


def keep_usage(session: Session, run_id: int) -> None:
    """Compute the run's usage before prices and keep it (in the caller's transaction)."""
    tally = usage_so_far(session, run_id).tally
    row = session.get(RunAggregate, run_id)
    if row is None:
        session.add(RunAggregate(run_id=run_id, trajectories=tally.trajectories, usage=unpriced(tally)))
    else:
        row.trajectories, row.usage = tally.trajectories, unpriced(tally)


def kept(session: Session, run_id: int, trajectories: int) -> dict[str, Any] | None:
    """The run's aggregates when they were computed on ``trajectories`` trajectories, else None."""
    row = session.execute(
        select(RunAggregate.trajectories, RunAggregate.usage).where(RunAggregate.run_id == run_id)
    ).one_or_none()
    return dict(row[1]) if row is not None and int(row[0]) == trajectories else None


def compare_usage(session: Session, run_id: int, trajectories: int, prices: PriceTable) -> dict[str, Any]:
    """The usage figures a comparison reads (``usage.comparable``), priced now: from the kept
    aggregates when they are current, else read from the run's trajectories and calls."""
    held = kept(session, run_id, trajectories)
    if held is not None:
        return priced(held, prices)
    return run_usage(session, run_id, prices)


def backfill(session: Session, run_id: int) -> bool:
    """Keep the aggregates of a finished run that has none current (a run finished before they
    were kept); returns whether it computed them."""
    if kept(session, run_id, run_trajectory_count(session, run_id)) is not None:
        return False
    keep_usage(session, run_id)
    return True
