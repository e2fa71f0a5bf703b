"""Writing to the store: suites, toolset versions, runs and trajectory batches.

A batch is scored with the core and stored in one transaction: its
trajectories, their calls, the filter index rows, and the run's counters,
which are added to atomically (``INSERT … ON CONFLICT DO UPDATE``) so that
several writers can feed one run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Select, delete, func, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.bounded import BoundedCache
from app.core.records import Trajectory
from app.core.suites.suite import Suite, parse_suite
from app.store import suites
from app.store.bulk import allocate_ids, insert_rows
from app.store.errors import Conflict, NotFound, Unstorable
from app.store.models import (
    CallRow,
    InfraError,
    OutcomeLabel,
    Run,
    RunAggregate,
    RunCounter,
    RunPairing,
    SuiteRow,
    ToolsetVersion,
    TrajectoryRow,
    TrajectoryTag,
)
from app.store.rows import CALL_COLUMNS, TAG_COLUMNS, TRAJECTORY_COLUMNS, ScoredBatch, TrajectoryScorer, score_batch
from app.store.rows import fault_key as fault_key  # the store's key of a trajectory, used across the store


def digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _get_or_add(session: Session, query: Select[Any], make: Callable[[], Any]) -> Any:
    """The row the query finds, or a new one from ``make()``; when another
    writer adds the same row meanwhile (unique constraint), theirs."""
    found = session.scalar(query)
    if found is not None:
        return found
    row = make()
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:  # another writer stored it first
        found = session.scalar(query)
        assert found is not None
        return found
    return row


def ensure_toolset_version(session: Session, *, name: str, suite: Suite) -> ToolsetVersion:
    """The stored version of this toolset's content, created on first sight."""
    version = suite.toolset.version
    query = select(ToolsetVersion).where(ToolsetVersion.toolset == name, ToolsetVersion.hash == version)
    row: ToolsetVersion = _get_or_add(
        session,
        query,
        lambda: ToolsetVersion(
            toolset=name, hash=version, label=suite.toolset.label, tools=[t.document() for t in suite.toolset]
        ),
    )
    return row


def ensure_suite(session: Session, document: dict[str, Any], *, parent_id: int | None = None) -> SuiteRow:
    """Store a self-contained suite document (idempotent by content): new
    content of a name is its next version."""
    suite = parse_suite(document, path="suite")  # no base: a path toolset is refused, never read
    content = digest(document)
    return suites.store_version(
        session,
        suite.name,
        lambda _newest: (document, content, parent_id),
        toolset_version_id=lambda: (
            ensure_toolset_version(session, name=suite.toolset.name or suite.name, suite=suite).id
        ),
    )


def create_run(
    session: Session,
    *,
    name: str,
    suite_row: SuiteRow,
    agent: str = "",
    model: str = "",
    config: dict[str, Any] | None = None,
) -> Run:
    if session.scalar(select(Run.id).where(Run.name == name)) is not None:
        raise Conflict(f"a run named {name!r} exists already")
    run = Run(
        name=name,
        agent=agent,
        model=model,
        suite_id=suite_row.id,
        toolset_version_id=suite_row.toolset_version_id,
        config=config or {},
        status="running",
    )
    session.add(run)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict(f"a run named {name!r} exists already") from None
    return run


_Row = TypeVar("_Row", Run, SuiteRow, ToolsetVersion, TrajectoryRow)


def get_run_row(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    return hold(session, run)


def hold(session: Session, row: _Row) -> _Row:
    """``row`` kept for the session's life: its identity map holds objects weakly, so the run page's
    helpers, each asking for the run (or its suite) by id, read the row again (8 reads of one run, a
    round trip each on PostgreSQL); the same for a page's trajectory. The attributes still expire as
    the session says."""
    held: dict[tuple[type, int], Any] = session.info.setdefault("held", {})
    held[(type(row), row.id)] = row
    return row


def find_run(session: Session, ref: str) -> Run:
    """A run by id or by name."""
    run = session.get(Run, int(ref)) if ref.isdigit() else None
    if run is None:
        run = session.scalar(select(Run).where(Run.name == ref))
    if run is None:
        raise NotFound(f"no run {ref!r}")
    return run


def get_suite_row(session: Session, suite_id: int) -> SuiteRow:
    row = session.get(SuiteRow, suite_id)
    if row is None:
        raise NotFound(f"no suite {suite_id}")
    return hold(session, row)


def suite_document(session: Session, suite_id: int) -> dict[str, Any]:
    """A stored suite version's whole self-contained document."""
    return suites.suite_document(session, get_suite_row(session, suite_id))


# by (name, content digest): the same content, the same Suite
_PARSED: BoundedCache[tuple[str, str], Suite] = BoundedCache(64)


def suite_for_run(session: Session, run: Run) -> Suite:
    """The run's suite, parsed once per content (parsing checks every schema)."""
    row = session.get(SuiteRow, run.suite_id)
    assert row is not None
    hold(session, row)
    key = (row.name, row.hash)
    suite = _PARSED.get(key)
    if suite is None:
        suite = parse_suite(suites.suite_document(session, row), path=f"suite {row.name}")
        _PARSED.put(key, suite)
    return suite


def stored_keys(session: Session, run_id: int) -> set[tuple[str, int, str]]:
    """The (case, trial, fault) keys a run holds."""
    rows = session.execute(
        select(TrajectoryRow.case_id, TrajectoryRow.trial, TrajectoryRow.fault_key).where(
            TrajectoryRow.run_id == run_id
        )
    )
    return {(c, t, f) for c, t, f in rows}


def delete_run(session: Session, run_id: int) -> None:
    """Remove a run and everything stored under it."""
    session.execute(delete(CallRow).where(CallRow.run_id == run_id))
    session.execute(delete(TrajectoryTag).where(TrajectoryTag.run_id == run_id))
    session.execute(delete(OutcomeLabel).where(OutcomeLabel.run_id == run_id))
    session.execute(delete(InfraError).where(InfraError.run_id == run_id))
    session.execute(delete(TrajectoryRow).where(TrajectoryRow.run_id == run_id))
    session.execute(delete(RunCounter).where(RunCounter.run_id == run_id))
    session.execute(delete(RunAggregate).where(RunAggregate.run_id == run_id))
    session.execute(delete(RunPairing).where((RunPairing.a_id == run_id) | (RunPairing.b_id == run_id)))
    session.execute(delete(Run).where(Run.id == run_id))


def delete_runs_named(session: Session, names: Iterable[str]) -> list[str]:
    """Remove the runs of exactly these names (no other run), and say which there were."""
    found = session.execute(select(Run.id, Run.name).where(Run.name.in_(list(names)))).all()
    for run_id, _ in found:
        delete_run(session, run_id)
    return [name for _, name in found]


def count_trajectories(session: Session, run_id: int) -> int:
    return int(
        session.scalar(select(func.count()).select_from(TrajectoryRow).where(TrajectoryRow.run_id == run_id)) or 0
    )


MAX_COUNTER = 2**63 - 1  # a BIGINT on both databases


def _check_usage_sums(session: Session, run_id: int, values: list[dict[str, Any]]) -> None:
    """Refuse a batch that would take a run's token sums past what the store holds (422, naming them)."""
    usage = {(r["a"], r["b"]): int(r["value"]) for r in values if r["kind"] == "usage"}
    if not usage:
        return
    stored = {
        (a, b): int(v)
        for a, b, v in session.execute(
            select(RunCounter.a, RunCounter.b, RunCounter.value).where(
                RunCounter.run_id == run_id, RunCounter.kind == "usage"
            )
        ).all()
    }
    for (model, key), value in usage.items():
        if value + stored.get((model, key), 0) > MAX_COUNTER:
            raise Unstorable(
                f"the run's {key} of model {model!r} would add up past {MAX_COUNTER}: the batch "
                "is refused, nothing of it stored"
            )


def _upsert_counters(session: Session, run_id: int, rows: Iterable[tuple[str, str, str, str, int]]) -> None:
    values = sorted(
        ({"run_id": run_id, "kind": k, "a": a, "b": b, "c": c, "value": v} for k, a, b, c, v in rows if v),
        key=lambda r: (r["kind"], r["a"], r["b"], r["c"]),  # one lock order for every writer
    )
    if not values:
        return
    _check_usage_sums(session, run_id, values)
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":  # the statement below, without SQLAlchemy's per-row parameter work
        session.connection().exec_driver_sql(
            "INSERT INTO run_counters (run_id, kind, a, b, c, value) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, kind, a, b, c) DO UPDATE SET value = (run_counters.value + excluded.value)",
            [(r["run_id"], r["kind"], r["a"], r["b"], r["c"], r["value"]) for r in values],
        )
        return
    ins = postgresql.insert(RunCounter) if dialect == "postgresql" else sqlite.insert(RunCounter)
    stmt = ins.on_conflict_do_update(
        index_elements=["run_id", "kind", "a", "b", "c"],
        set_={"value": RunCounter.value + ins.excluded.value},
    )
    session.execute(stmt, values)


def _first_stored(session: Session, run_id: int, keys: Sequence[tuple[str, int, str]]) -> Any:
    """The first of these (case, trial, fault) keys that the run holds already, or None."""
    conn = session.connection()
    if conn.dialect.name == "sqlite":
        # One unique-index probe per key. The IN (VALUES …) form below makes SQLite
        # scan all of the run's trajectories for every batch (quadratic in the
        # run); the order is the index order that scan had, so the same key is named.
        values = ", ".join(["(?, ?, ?)"] * len(keys))
        return conn.exec_driver_sql(
            f"SELECT t.case_id, t.trial, t.fault_key FROM (VALUES {values}) AS k JOIN trajectories AS t "
            "ON t.run_id = ? AND t.case_id = k.column1 AND t.trial = k.column2 AND t.fault_key = k.column3 "
            "ORDER BY t.case_id, t.trial, t.fault_key LIMIT 1",
            (*itertools.chain.from_iterable(keys), run_id),
        ).first()
    # One probe of the unique index per key (LATERAL … LIMIT 1): a row-value IN list, or a
    # join the planner may turn into a hash join, scans all of the run's trajectories for every
    # batch while the table has no statistics yet (quadratic in the run: minutes at 10^6 calls).
    return conn.execute(
        text(
            "SELECT k.case_id, k.trial, k.fault_key FROM unnest(CAST(:cases AS text[]), CAST(:trials AS int[]), "
            "CAST(:faults AS text[])) AS k(case_id, trial, fault_key) CROSS JOIN LATERAL (SELECT 1 FROM trajectories "
            "AS t WHERE t.run_id = :run AND t.case_id = k.case_id AND t.trial = k.trial AND t.fault_key = k.fault_key "
            "LIMIT 1) AS hit ORDER BY k.case_id, k.trial, k.fault_key LIMIT 1"
        ),
        {"cases": [k[0] for k in keys], "trials": [k[1] for k in keys], "faults": [k[2] for k in keys], "run": run_id},
    ).first()


def add_trajectories(
    session: Session,
    *,
    run: Run,
    scorer: TrajectoryScorer,
    trajectories: Sequence[Trajectory],
    scored: ScoredBatch | None = None,
) -> int:
    """Score and store a batch in the caller's transaction; returns the number
    of calls stored. Raises Conflict for a finished run or a trajectory stored
    already (same case, trial and fault), naming the record index. ``scored``:
    the batch scored already (``score_batch``), in place of ``trajectories``."""
    if run.status == "finished":
        raise Conflict(f"run {run.id} is finished: it takes no new trajectories")
    keys = scored.keys if scored is not None else [(t.case_id, t.trial, fault_key(t)) for t in trajectories]
    seen: dict[tuple[str, int, str], int] = {}
    for i, key in enumerate(keys):
        if key in seen:
            raise Conflict(f"records {seen[key]} and {i} are the same trajectory (case {key[0]!r}, trial {key[1]})")
        seen[key] = i
    for chunk_start in range(0, len(keys), 500):
        chunk = keys[chunk_start : chunk_start + 500]
        stored = _first_stored(session, run.id, chunk)
        if stored is not None:
            key = (stored[0], stored[1], stored[2])
            raise Conflict(f"record {seen[key]}: case {key[0]!r} trial {key[1]} is stored already in run {run.id}")
    if not keys:
        return 0
    batch = scored if scored is not None else score_batch(scorer, trajectories)
    return _store_batch(session, run.id, batch)


def _store_batch(session: Session, run_id: int, batch: ScoredBatch) -> int:
    """Give a scored batch its ids and insert it; returns the number of calls."""
    traj_ids = allocate_ids(session, "trajectories", len(batch.trajectories))
    call_ids = allocate_ids(session, "calls", len(batch.calls))
    try:
        insert_rows(
            session, "trajectories", TRAJECTORY_COLUMNS, batch.trajectories, shift={"id": traj_ids, "run_id": run_id}
        )
    except IntegrityError:
        raise Conflict("a trajectory of this batch was stored meanwhile by another writer") from None
    insert_rows(
        session, "calls", CALL_COLUMNS, batch.calls, shift={"id": call_ids, "trajectory_id": traj_ids, "run_id": run_id}
    )
    insert_rows(
        session, "trajectory_tags", TAG_COLUMNS, batch.tags, shift={"trajectory_id": traj_ids, "run_id": run_id}
    )
    _upsert_counters(session, run_id, batch.counters)
    return len(batch.calls)
