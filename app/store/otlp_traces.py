"""The traces the OTLP receiver stored, per run: their span ids and trials (``otlp_traces``).

The receiver stores a trace in a transaction that also checks and writes its row here, so
that spans sent again are recognised by the database, whatever the receiver remembers: a
request retried after a restart, or a trace another server stored meanwhile. The receiver
says what it believes is stored (how many trials); when the database holds something else,
nothing is written and ``Resent`` tells it what is stored, for it to decide again.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from app.store.models import OtlpTrace

Stored = tuple[set[str], int]  # a trace's stored span ids, and how many trials of it are stored


class Resent(Exception):
    """Traces stored (or stored again) other than the receiver believed: trace id -> what is stored."""

    def __init__(self, stored: dict[str, Stored]):
        super().__init__(f"{len(stored)} traces were stored meanwhile")
        self.stored = stored


def stored(session: Session, run_id: int, trace_ids: Sequence[str], *, lock: bool = False) -> dict[str, Stored]:
    """What the run holds of these traces (PostgreSQL: rows locked with ``lock``)."""
    found: dict[str, Stored] = {}
    ids = sorted(set(trace_ids))
    for i in range(0, len(ids), 500):
        query = select(OtlpTrace.trace_id, OtlpTrace.span_ids, OtlpTrace.flushes).where(
            OtlpTrace.run_id == run_id, OtlpTrace.trace_id.in_(ids[i : i + 500])
        )
        for trace_id, span_ids, flushes in session.execute(query.with_for_update() if lock else query):
            found[str(trace_id)] = (set(span_ids or ()), int(flushes))
    return found


def record(session: Session, run_id: int, traces: Sequence[tuple[str, list[str], int]]) -> None:
    """In the transaction storing them: traces (id, the span ids stored now, the trials the
    receiver believes stored before) written down; ``Resent`` (nothing written) when the
    database holds other trials of any of them."""
    held = stored(session, run_id, [t for t, _, _ in traces], lock=True)
    stale = {t: held.get(t, (set(), 0)) for t, _, flushes in traces if held.get(t, (set(), 0))[1] != flushes}
    if stale:
        raise Resent(stale)
    new = [
        {"run_id": run_id, "trace_id": t, "span_ids": sorted(set(spans)), "flushes": 1}
        for t, spans, flushes in traces
        if not flushes
    ]
    if new:
        session.execute(insert(OtlpTrace), new)
    for t, spans, flushes in traces:
        if flushes:
            session.execute(
                update(OtlpTrace)
                .where(OtlpTrace.run_id == run_id, OtlpTrace.trace_id == t)
                .values(span_ids=sorted(held[t][0] | set(spans)), flushes=flushes + 1)
            )
