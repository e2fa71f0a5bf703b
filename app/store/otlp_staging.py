"""The OTLP receiver's staging table: spans acknowledged and not yet stored
as trajectories (``OtlpSpan``). Staged on receipt, deleted in the transaction
that stores their trajectory, read back after a restart."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.store.bulk import allocate_ids, insert_rows
from app.store.models import OtlpSpan

COLUMNS = ("id", "run_id", "span")


def stage(session: Session, run_id: int, spans: Sequence[str]) -> list[int]:
    """Store spans (as JSON text) for a run; returns their ids. The caller's
    session is a write session (SQLite's write lock held for the ids)."""
    ids = allocate_ids(session, "otlp_spans", len(spans))
    insert_rows(session, "otlp_spans", COLUMNS, [(i, run_id, s) for i, s in zip(ids, spans, strict=True)])
    return ids


def _ranges(ids: Sequence[int]) -> Iterator[tuple[int, int]]:
    """Sorted ids as inclusive ranges of consecutive ids (spans staged by one
    request are consecutive: a few statements delete thousands)."""
    ordered = sorted(ids)
    if not ordered:
        return
    start = prev = ordered[0]
    for i in ordered[1:]:
        if i != prev + 1:
            yield start, prev
            start = i
        prev = i
    yield start, prev


def unstage(session: Session, ids: Sequence[int]) -> None:
    """Delete staged spans by id (in the caller's transaction)."""
    for lo, hi in _ranges(ids):
        session.execute(delete(OtlpSpan).where(OtlpSpan.id.between(lo, hi)),
                        execution_options={"synchronize_session": False})  # no ORM objects of it are loaded


def staged(session: Session) -> Iterator[tuple[int, int, str]]:
    """Every staged span: (id, run id, span JSON), in arrival order."""
    rows = session.execute(select(OtlpSpan.id, OtlpSpan.run_id, OtlpSpan.span).order_by(OtlpSpan.id))
    for i, run_id, span in rows:
        yield int(i), int(run_id), str(span)
