"""Causes for runs stored before ToolLens kept each failed trajectory's first
divergence: computed from the stored trajectories on the first read, then kept.

A run's counters say how many of its trajectories failed (``trials`` less
``passes``; the simulated user's faults count in neither) and how many of
those have a cause (``cause``): a run stored since has one for each. When some
lack it, its failed trajectories without a ``cause`` tag are scored again
against the run's suite, a chunk per transaction, each taking the run's lock
first (SQLite's write lock, a row lock on PostgreSQL) and picking only those
still untagged: two readers backfilling at once count each trajectory once,
and a chunk is tagged, counted and given its ``divergence`` together or not
at all.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import Engine, exists, false, select
from sqlalchemy.orm import Session

from app.core.divergence import Divergence
from app.core.errors import ToolLensError
from app.core.records import parse_record
from app.core.report import Report
from app.core.scoring import Scorer
from app.store.bulk import insert_rows
from app.store.db import make_sessionmaker, session_scope
from app.store.ingest import _upsert_counters, get_run_row, suite_for_run
from app.store.models import CallRow, Run, RunCounter, TrajectoryRow, TrajectoryTag
from app.store.queries import trajectory_record
from app.store.rows import TAG_COLUMNS

CHUNK = 500  # failed trajectories rescored per transaction

Causes = Counter[tuple[str, str, str]]


def causes_missing(report: Report) -> bool:
    """Whether some failed trajectory of the run the report counts has no cause."""
    failed = sum(n - passed for n, passed in report.trials.values())
    return sum(report.causes.values()) < failed


def backfill_causes(session: Session, run_id: int) -> Causes:
    """Give the run's failed trajectories without a cause theirs (tag, counter
    and ``detail.divergence``), in transactions of their own; the run's causes after.
    ``session`` is the caller's, a read session: what it reads next sees them."""
    bind = session.get_bind()
    factory = make_sessionmaker(bind if isinstance(bind, Engine) else bind.engine)
    scorer: Scorer | None = None
    last = 0
    while True:
        with session_scope(factory, write=True) as s:
            s.execute(select(Run.id).where(Run.id == run_id).with_for_update(key_share=True))
            untagged = ~exists().where(TrajectoryTag.trajectory_id == TrajectoryRow.id, TrajectoryTag.kind == "cause")
            rows = list(s.scalars(select(TrajectoryRow).where(
                TrajectoryRow.run_id == run_id, TrajectoryRow.passed == false(), TrajectoryRow.id > last, untagged)
                .order_by(TrajectoryRow.id).limit(CHUNK)))
            if not rows:
                causes = Counter({(a, b, c): int(v) for a, b, c, v in s.execute(
                    select(RunCounter.a, RunCounter.b, RunCounter.c, RunCounter.value)
                    .where(RunCounter.run_id == run_id, RunCounter.kind == "cause"))})
                break
            scorer = scorer or Scorer(suite_for_run(s, get_run_row(s, run_id)))
            _tag(s, scorer, run_id, rows)
            last = rows[-1].id
    if session.get_bind().dialect.name == "sqlite":
        # The caller's transaction only read (a write one would hold the lock taken above): end
        # its snapshot, so that what it reads next (the cause tags) includes what was just stored.
        session.commit()
    return causes


def _tag(s: Session, scorer: Scorer, run_id: int, rows: list[TrajectoryRow]) -> None:
    calls: dict[int, list[CallRow]] = {t.id: [] for t in rows}
    for c in s.scalars(select(CallRow).where(CallRow.trajectory_id.in_(list(calls)))
                       .order_by(CallRow.trajectory_id, CallRow.idx)):
        calls[c.trajectory_id].append(c)
    tags: list[tuple[int, int, str, str]] = []
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for t in rows:
        try:
            ts = scorer.score(parse_record(trajectory_record(t, calls[t.id])))
        except ToolLensError:  # a record today's rules refuse: it failed, with no divergence found
            ts = None
        if ts is not None and ts.user_error:
            continue  # the simulated user's fault: never a cause
        # failed when stored: that verdict stands, even where today's rules would find nothing
        d = (ts.divergence if ts is not None else None) or Divergence("unexplained")
        tags.append((t.id, run_id, "cause", d.key))
        counts[("cause", *d.cause)] += 1
        t.detail = {**(t.detail or {}), "divergence": d.to_dict()}
    s.flush()
    insert_rows(s, "trajectory_tags", TAG_COLUMNS, tags)
    _upsert_counters(s, run_id, [(*k, v) for k, v in counts.items()])
