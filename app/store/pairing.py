"""Two runs' trajectories paired by (case, trial, fault): how many pairs, which flipped.

A comparison's McNemar test and its list of flipped cases join the two runs' trajectories
(twice: the counts, then the first flips), any two runs, on the compare index
``(run_id, case_id, trial, fault_key, passed, id)`` alone (no trajectory row read): 0.5-0.8 s at
384,000 trajectories a run on SQLite or PostgreSQL (docs/scale.md). When a run is finished, its
pairing with the run of the same suite finished before it (the comparison a new run is made for)
is also kept in ``run_pairings``, both ways; a comparison reads it while both runs hold the
trajectories it was computed on, and joins them otherwise (the same figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause, select, text
from sqlalchemy.orm import Session

from app.core.reports.report import PROFILE_MARK
from app.store.models import Run, RunPairing
from app.store.queries import run_trajectory_count
from app.store.upsert import upsert_row

FLIPS = 200  # flipped pairs kept (what the compare page and API list)


@dataclass
class Pairing:
    """``flipped``: the first pairs that differ in A's id order, as
    (case_id, trial, fault_key, a_id, b_id, a_passed, b_passed)."""

    shared: int
    only_a: int
    only_b: int
    flipped: list[tuple[str, int, str, int, int, bool, bool]]


# B's trajectory of each of A's, by (case, trial, fault): SQLite looks it up in the unique key's index, then
# reads B's row for ``passed`` (a page of the table per trajectory: 4.7 s at 384,000 trajectories a run);
# the compare index (migration 0008) holds ``passed`` too (0.8 s). PostgreSQL picks it itself.
_COMPARE_INDEX = "ix_traj_run_key_passed"
_KEY = "ta.case_id = tb.case_id AND ta.trial = tb.trial AND ta.fault_key = tb.fault_key"
# a run with simulated-user profiles: only its cooperative conversations pair (its headline's), the others'
# fault keys end with PROFILE_MARK and the profile (app/store/rows.py): they are the cooperation gap's
_COOPERATIVE = " AND ta.fault_key NOT LIKE :mark"
_COUNTS = (
    "SELECT count(*), sum(CASE WHEN ta.passed AND NOT tb.passed THEN 1 ELSE 0 END), "
    "sum(CASE WHEN tb.passed AND NOT ta.passed THEN 1 ELSE 0 END) FROM {ta} JOIN {tb} ON {key} "
    "WHERE ta.run_id = :a AND tb.run_id = :b"
)
_FLIPS = (
    "SELECT ta.case_id, ta.trial, ta.fault_key, ta.id, tb.id, ta.passed, tb.passed FROM {ta} JOIN {tb} ON {key} "
    "WHERE ta.run_id = :a AND tb.run_id = :b AND ta.passed <> tb.passed ORDER BY ta.id LIMIT :n"
)
WALK = 20  # flips at least this many times the limit: walk A in id order (and stop early), else pair every trajectory


def _statement(sql: str, session: Session, *, a_by_key: bool, cooperative: bool = False) -> TextClause:
    """``sql`` with its tables named for this database: on SQLite, B (and A when ``a_by_key``) read from the
    compare index; ``cooperative``: the pairs of conversations under a non-cooperative profile left out."""
    hint = f" INDEXED BY {_COMPARE_INDEX}" if session.get_bind().dialect.name == "sqlite" else ""
    return text(
        sql.format(
            ta="trajectories AS ta" + (hint if a_by_key else ""),
            tb="trajectories AS tb" + hint,
            key=_KEY + (_COOPERATIVE if cooperative else ""),
        )
    )


def joined(session: Session, a_id: int, b_id: int, limit: int = FLIPS, *, cooperative: bool = False) -> Pairing:
    """The pairing read from both runs' trajectories: the counts from the compare index alone, then the
    first flips, found walking A in id order when they are many (the walk stops at ``limit``), else among
    every pair. ``cooperative`` (a run with simulated-user profiles): the pairs of its cooperative
    conversations only, as its headline counts them (docs/metrics.md)."""
    args: dict[str, Any] = {"a": a_id, "b": b_id, **({"mark": f"%{PROFILE_MARK}%"} if cooperative else {})}
    counts = session.execute(_statement(_COUNTS, session, a_by_key=True, cooperative=cooperative), args).one()
    shared, only_a, only_b = int(counts[0] or 0), int(counts[1] or 0), int(counts[2] or 0)
    flipped: list[tuple[str, int, str, int, int, bool, bool]] = []
    if only_a + only_b and limit > 0:
        walk = only_a + only_b >= WALK * limit
        rows = session.execute(
            _statement(_FLIPS, session, a_by_key=not walk, cooperative=cooperative), {**args, "n": limit}
        )
        flipped = [(str(c), int(t), str(f), int(i), int(j), bool(p), bool(q)) for c, t, f, i, j, p, q in rows]
    return Pairing(shared, only_a, only_b, flipped)


def paired(
    session: Session, a_id: int, b_id: int, a_count: int, b_count: int, limit: int = FLIPS, *, cooperative: bool = False
) -> Pairing:
    """The runs' pairing: kept, when computed on runs of these sizes (and ``limit`` flips fit), else joined.
    ``cooperative`` (either run has simulated-user profiles): joined on the cooperative conversations
    alone (a kept pairing counts every conversation)."""
    if cooperative:
        return joined(session, a_id, b_id, limit, cooperative=True)
    row = session.get(RunPairing, (a_id, b_id))
    if (
        row is not None
        and (row.a_trajectories, row.b_trajectories) == (a_count, b_count)
        and (limit <= FLIPS or row.only_a + row.only_b <= FLIPS)
    ):
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
        # one insert-or-replace (not a read then an insert): two processes keeping this pairing at once
        # (two backfills of a run whose aggregates are current: nothing locked before) both succeed
        upsert_row(
            session,
            RunPairing,
            {"a_id": a, "b_id": b},
            {
                "a_trajectories": counts[a],
                "b_trajectories": counts[b],
                "shared": p.shared,
                "only_a": p.only_a,
                "only_b": p.only_b,
                "flipped": [list(f) for f in p.flipped],
            },
        )
    return previous
