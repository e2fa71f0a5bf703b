"""``toollens db backfill``: what a run stored by an older ToolLens lacks, computed from its
stored trajectories and kept. Pages and read commands never compute it: they read what is
stored, and say when a run needs this command.

Causes. A run's counters say how many of its trajectories failed (``trials`` less
``passes``; the simulated user's faults count in neither) and how many of those have a cause
(``cause``): a run stored since ToolLens kept first divergences has one for each. When some
lack it, its failed trajectories without a ``cause`` tag are scored again against the run's
suite, a chunk per transaction, each taking the run's lock first (SQLite's write lock, a row
lock on PostgreSQL) and picking only those still untagged: two backfills at once count each
trajectory once, and a chunk is tagged, counted and given its ``divergence`` together or not
at all.

Comparison aggregates (``app.store.aggregates``, ``app.store.pairing``). A run finished
before they were kept has none: a comparison then reads its trajectories (seconds per
100,000 of them, every time it is not in the server's cache). The backfill keeps its usage
before prices and its pairing with the run of its suite finished just before it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import exists, false, select
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ToolLensError
from app.core.records import parse_record
from app.core.score.detail import stored_detail
from app.core.score.divergence import Divergence
from app.core.score.scoring import Scorer
from app.store import aggregates, pairing
from app.store.bulk import insert_rows
from app.store.db import session_scope
from app.store.ingest import _upsert_counters, find_run, get_run_row, suite_for_run
from app.store.models import CallRow, Run, RunCounter, RunPairing, TrajectoryRow, TrajectoryTag
from app.store.queries import run_report, trajectory_record, uncaused
from app.store.rows import TAG_COLUMNS

CHUNK = 500  # failed trajectories rescored per transaction

Causes = Counter[tuple[str, str, str]]


def backfill_causes(sessions: sessionmaker[Session], run_id: int) -> Causes:
    """Give the run's failed trajectories without a cause theirs (tag, counter and
    ``detail.divergence``), in transactions of their own; the run's causes after."""
    scorer: Scorer | None = None
    last = 0
    while True:
        with session_scope(sessions, write=True) as s:
            s.execute(select(Run.id).where(Run.id == run_id).with_for_update(key_share=True))
            untagged = ~exists().where(TrajectoryTag.trajectory_id == TrajectoryRow.id, TrajectoryTag.kind == "cause")
            rows = list(
                s.scalars(
                    select(TrajectoryRow)
                    .where(
                        TrajectoryRow.run_id == run_id,
                        TrajectoryRow.passed == false(),
                        TrajectoryRow.id > last,
                        untagged,
                    )
                    .order_by(TrajectoryRow.id)
                    .limit(CHUNK)
                )
            )
            if not rows:
                return Counter(
                    {
                        (a, b, c): int(v)
                        for a, b, c, v in s.execute(
                            select(RunCounter.a, RunCounter.b, RunCounter.c, RunCounter.value).where(
                                RunCounter.run_id == run_id, RunCounter.kind == "cause"
                            )
                        )
                    }
                )
            scorer = scorer or Scorer(suite_for_run(s, get_run_row(s, run_id)))
            _tag(s, scorer, run_id, rows)
            last = rows[-1].id


def _tag(s: Session, scorer: Scorer, run_id: int, rows: list[TrajectoryRow]) -> None:
    calls: dict[int, list[CallRow]] = {t.id: [] for t in rows}
    for c in s.scalars(
        select(CallRow).where(CallRow.trajectory_id.in_(list(calls))).order_by(CallRow.trajectory_id, CallRow.idx)
    ):
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
        t.detail = stored_detail(t.detail).with_divergence(d).to_dict()
    s.flush()
    insert_rows(s, "trajectory_tags", TAG_COLUMNS, tags)
    _upsert_counters(s, run_id, [(*k, v) for k, v in counts.items()])


@dataclass(frozen=True)
class Backfilled:
    """What ``toollens db backfill`` did to one run."""

    run_id: int
    name: str
    causes: int  # failed trajectories given a cause
    aggregates: bool  # its comparison aggregates or its page's figures computed and kept (``aggregates.backfill``)
    paired_with: int | None  # the run its pairing was kept with


def backfill_run(sessions: sessionmaker[Session], run_id: int) -> Backfilled:
    """Backfill one run: its causes, then (a finished run) its comparison aggregates, its page's
    kept figures and its pairing with the run of its suite finished before it, when it has none."""
    with session_scope(sessions) as s:
        run = get_run_row(s, run_id)
        name, finished, missing = run.name, run.status == "finished", uncaused(run_report(s, run_id))
    if missing:
        backfill_causes(sessions, run_id)
    kept, paired = False, None
    if finished:
        with session_scope(sessions, write=True) as s:
            kept, paired = backfill_kept(s, run_id)
    return Backfilled(run_id, name, missing, kept, paired)


def backfill_kept(s: Session, run_id: int) -> tuple[bool, int | None]:
    """A finished run's comparison aggregates and page figures kept when not current, and its pairing
    with the run of its suite finished before it when it has none (in the caller's transaction): whether
    it computed aggregates, and the run it was paired with. Two processes at once both succeed (each
    write is an insert-or-replace: ``app.store.upsert``), though neither sees the other's rows first."""
    kept, paired = aggregates.backfill(s, run_id), None
    if s.scalar(select(RunPairing.a_id).where(RunPairing.a_id == run_id).limit(1)) is None:
        paired = pairing.keep_with_previous(s, run_id, before=True)
    return kept, paired


def backfill(sessions: sessionmaker[Session], run_ref: str | None = None) -> list[Backfilled]:
    """Backfill one run (id or name) or every run, oldest first; each run in transactions of its own."""
    with session_scope(sessions) as s:
        ids = [find_run(s, run_ref).id] if run_ref is not None else list(s.scalars(select(Run.id).order_by(Run.id)))
    return [backfill_run(sessions, rid) for rid in ids]
