"""The OTLP receiver's staging tables: export requests acknowledged and not
stored yet (``OtlpBatch``, one row per request, its body as it came), and
which of their traces are stored already (``OtlpBatchDone``).

A batch is staged on receipt. A trace is marked done in the transaction that
stores its trajectory, and a batch is deleted (with its marks) in the one
that stores its last trace; a restart reads back the batches left and skips
their traces marked done. One row per request, rather than one per span,
keeps staging to a single insert of bytes the request already had.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.store.models import OtlpBatch, OtlpBatchDone


def stage(session: Session, run_id: int, form: str, body: bytes, lease_id: int) -> int:
    """Stage an export request's body for a run, under the receiving server's lease (in the
    caller's transaction); returns its id."""
    return int(
        session.scalars(
            insert(OtlpBatch).values(run_id=run_id, format=form, body=body, lease_id=lease_id).returning(OtlpBatch.id)
        ).one()
    )


def finish(session: Session, done: Mapping[int, set[str]], emptied: Iterable[int]) -> None:
    """Mark traces of batches done (batch id -> trace ids), and delete the
    batches whose traces are all done now, with their marks (in the caller's
    transaction: the one that stores those traces, or gives up on them)."""
    wanted = {b: traces for b, traces in done.items() if traces}
    if wanted:  # a batch gone with its run (deleted meanwhile) takes no marks
        present = set(session.scalars(select(OtlpBatch.id).where(OtlpBatch.id.in_(list(wanted)))))
        marks = [{"batch_id": b, "trace_id": t} for b, traces in wanted.items() if b in present for t in traces]
        if marks:
            session.execute(_insert_once(session), marks)
    gone = sorted(set(emptied))
    for i in range(0, len(gone), 500):
        chunk = gone[i : i + 500]
        session.execute(
            delete(OtlpBatchDone).where(OtlpBatchDone.batch_id.in_(chunk)),
            execution_options={"synchronize_session": False},
        )
        session.execute(
            delete(OtlpBatch).where(OtlpBatch.id.in_(chunk)), execution_options={"synchronize_session": False}
        )


def _insert_once(session: Session) -> Any:
    """INSERT into ``otlp_batch_done`` that leaves a mark already there as it is."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(OtlpBatchDone).on_conflict_do_nothing()
    return sqlite.insert(OtlpBatchDone).on_conflict_do_nothing()


def staged(session: Session, ids: list[int]) -> Iterator[tuple[int, int, str, bytes, set[str]]]:
    """These staged batches: (id, run id, format, body, its traces done), in arrival order."""
    for i in range(0, len(ids), 500):
        chunk = sorted(ids)[i : i + 500]
        done: dict[int, set[str]] = {}
        for batch_id, trace_id in session.execute(
            select(OtlpBatchDone.batch_id, OtlpBatchDone.trace_id).where(OtlpBatchDone.batch_id.in_(chunk))
        ):
            done.setdefault(int(batch_id), set()).add(str(trace_id))
        rows = session.execute(
            select(OtlpBatch.id, OtlpBatch.run_id, OtlpBatch.format, OtlpBatch.body)
            .where(OtlpBatch.id.in_(chunk))
            .order_by(OtlpBatch.id)
        )
        for b, run_id, form, body in rows:
            yield int(b), int(run_id), str(form), bytes(body), done.get(int(b), set())
