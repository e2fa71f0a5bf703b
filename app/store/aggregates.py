"""What comparing a run needs beyond its counters, computed once when the run is finished
(and its pairing with the run before it: ``app.store.pairing``).

A comparison's usage deltas read every trajectory's model requests and every call's
latency of both runs. A finished run keeps, in ``run_aggregates``, what that read gives
before prices (``usage.unpriced``); the comparison prices it at read time (``usage.priced``).
It is used while the run holds the trajectories it was computed on; else (a run finished
before migration 0014 and not backfilled, a run still receiving, a finished run that later
received spans a live server had accepted) the same figures are read from the run
(``read_unpriced``: the requests' stored lists alone, the tool latencies' percentiles at their
ranks in an index), priced the same way, and nothing is written.

What its page shows that is costly to compute from the counters (``keep_page``, table
``run_page_kept``) is kept too: the report's pass^k (one value per k up to the most trials of a
case: 9,035 at 10^6 calls) and the rewrites of its confused pairs (``app.store.pairs``). A page
reads them while the run holds the trajectories they were computed on, and computes them as
before otherwise (a run finished by an older ToolLens: ``toollens db backfill`` keeps them).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, Text, cast, func, select, type_coerce
from sqlalchemy.orm import Session

from app.core.prices import PriceTable
from app.core.records import loads
from app.core.usage import UsageTally, priced, rank, unpriced, unpriced_requests
from app.store.ingest import get_run_row
from app.store.models import CallRow, Run, RunAggregate, RunPageKept, TrajectoryRow, utcnow
from app.store.pairing import keep_with_previous
from app.store.queries import kept_pass_hat_k, last_id_query, run_report, run_trajectory_count, usage_so_far
from app.store.upsert import upsert_row


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
    keep_page(session, run_id)


def keep_usage(session: Session, run_id: int) -> None:
    """Compute the run's usage before prices and keep it (in the caller's transaction)."""
    tally = usage_so_far(session, run_id).tally
    usage = {"trajectories": tally.trajectories, "usage": unpriced(tally)}
    upsert_row(session, RunAggregate, {"run_id": run_id}, usage)  # two keepers at once: both succeed


def keep_page(session: Session, run_id: int) -> None:
    """Compute what the run's page keeps (its report's pass^k, its pairs' rewrites) and keep it (in
    the caller's transaction)."""
    from app.core.advise.fix import PAIR_EDITS_VERSION  # (its words: imported when a run finishes, not at start)
    from app.store.pairs import compute_pair_edits

    report = run_report(session, run_id)
    values = {
        "trajectories": report.trajectories,
        "version": PAIR_EDITS_VERSION,
        "pass_hat_k": kept_pass_hat_k(report.rounded_pass_hat_k()),
        "pair_edits": compute_pair_edits(session, get_run_row(session, run_id)),
    }
    upsert_row(session, RunPageKept, {"run_id": run_id}, values)


def page_kept(session: Session, run_id: int, trajectories: int) -> bool:
    """Whether the run keeps its page's figures, computed on ``trajectories`` by this wording."""
    from app.core.advise.fix import PAIR_EDITS_VERSION
    from app.store.pairs import kept_query

    row = session.execute(kept_query(run_id)).one_or_none()
    return row is not None and int(row[0]) == trajectories and int(row[1]) == PAIR_EDITS_VERSION


def kept(session: Session, run_id: int, trajectories: int) -> dict[str, Any] | None:
    """The run's aggregates when they were computed on ``trajectories`` trajectories, else None."""
    row = session.execute(
        select(RunAggregate.trajectories, RunAggregate.usage).where(RunAggregate.run_id == run_id)
    ).one_or_none()
    return dict(row[1]) if row is not None and int(row[0]) == trajectories else None


def compare_usage(session: Session, run_id: int, trajectories: int, prices: PriceTable) -> dict[str, Any]:
    """The usage figures a comparison reads (``usage.comparable``), priced now: from the kept
    aggregates when they are current, else what they would hold read from the run (``read_unpriced``),
    priced the same way: the same figures, kept or not."""
    held = kept(session, run_id, trajectories)
    return priced(held if held is not None else read_unpriced(session, run_id), prices)


def read_unpriced(session: Session, run_id: int) -> dict[str, Any]:
    """What ``keep_usage`` keeps of the run (``usage.unpriced``), read without a tally and without
    writing: its trajectories' model requests (their stored lists alone, in id order from
    ``ix_traj_run_model_calls``: ``usage.unpriced_requests``) and its tool latencies' p50 and p95 read
    at their ranks from ``ix_calls_run_latency_order`` (the count from ``ix_calls_run_latency``), both up
    to the run's last trajectory as this statement reads it (``queries.usage_so_far``'s snapshot)."""
    conn = session.connection()
    upto = conn.scalar(last_id_query(run_id))
    if upto is None:
        return unpriced(UsageTally())
    # in batches (a server-side cursor on PostgreSQL): the run's requests are not all held at once
    stored = conn.execute(requests_query(session, run_id, upto), execution_options={"yield_per": 2000}).scalars()
    figures = unpriced_requests(loads(raw) if isinstance(raw, str | bytes) else raw for raw in stored)
    n = int(conn.scalar(timed_query(run_id, upto, select(func.count()).select_from(CallRow))) or 0)
    tool: dict[str, float | None] = {"p50": None, "p95": None}
    for key, p in (("p50", 50), ("p95", 95)):
        if n:
            value = conn.scalar(latency_at_query(run_id, upto, rank(n, p)))
            tool[key] = None if value is None else float(value)
    return {
        "total_tokens": figures["total_tokens"],
        "trajectories_with_usage": figures["trajectories_with_usage"],
        "model_latency_ms": figures["model_latency_ms"],
        "tool_latency_ms": tool,
        "spent": figures["spent"],
    }


def requests_query(session: Session, run_id: int, upto: int) -> Select[Any]:
    """The run's stored requests up to trajectory ``upto``, in id order from ``ix_traj_run_model_calls``
    (which holds only the trajectories that have some)."""
    return (
        select(_model_calls_text(session))
        .where(TrajectoryRow.run_id == run_id, TrajectoryRow.model_calls.is_not(None), TrajectoryRow.id <= upto)
        .order_by(TrajectoryRow.id)
    )


def timed_query(run_id: int, upto: int, q: Select[Any]) -> Select[Any]:
    """``q`` over the run's calls that have a latency, of its trajectories up to ``upto``."""
    return q.where(CallRow.run_id == run_id, CallRow.latency_ms.is_not(None), CallRow.trajectory_id <= upto)


def latency_at_query(run_id: int, upto: int, at: int) -> Select[Any]:
    """The run's tool latency of rank ``at`` (1-based, ascending): walked to in
    ``ix_calls_run_latency_order``, nothing sorted (a test reads the plans)."""
    return timed_query(run_id, upto, select(CallRow.latency_ms)).order_by(CallRow.latency_ms).limit(1).offset(at - 1)


def _model_calls_text(session: Session) -> ColumnElement[Any]:
    """The stored requests as the database's JSON text (PostgreSQL's ``jsonb`` printed, read by the
    core's fast reader rather than the driver's)."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(TrajectoryRow.model_calls, Text)
    return type_coerce(TrajectoryRow.model_calls, Text)


def backfill(session: Session, run_id: int) -> bool:
    """Keep the aggregates and the page's figures of a finished run that has none current (a run
    finished before they were kept, or its rewrites worded by another version); returns whether
    it computed some."""
    n = run_trajectory_count(session, run_id)
    usage, page = kept(session, run_id, n) is None, not page_kept(session, run_id, n)
    if usage:
        keep_usage(session, run_id)
    if page:
        keep_page(session, run_id)
    return usage or page
