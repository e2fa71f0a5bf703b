"""The queries a page makes read an index and sort nothing: their plans (SQLite's ``EXPLAIN QUERY
PLAN``, PostgreSQL's ``EXPLAIN`` after ``ANALYZE``) on the real tau-bench gpt-4o airline run stored
twice (runs 1 and 2, 621 calls each), each run's calls then copied to 16 times as many (19,872 calls:
enough rows for PostgreSQL to prefer an index to reading the table)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, Engine, Select, func, select, text
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.cli import cli as toollens
from app.core.prices import current_prices
from app.core.usage import UsageTally
from app.store import pairs, queries
from app.store.db import make_engine
from app.store.models import CallRow, RunPageKept, TrajectoryRow
from app.store.pairs import examples_query
from tests.resources import DATA, shared_data

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"


def _store(db_url: str) -> Engine:
    for name in ("a", "b"):
        r = CliRunner().invoke(
            toollens,
            ["import", str(TAU), "--format", "tau-bench", "--tools", str(SCHEMAS), "--run", name, "--db", db_url],
        )
        assert r.exit_code == 0, r.output
    return make_engine(db_url)


def _copy(engine: Engine, doublings: int) -> None:
    """Each run's calls copied after it, ``doublings`` times (run 1's copies stored before run 2's)."""
    columns = ", ".join(f'"{c.name}"' for c in CallRow.__table__.columns if c.name != "id")
    with engine.begin() as conn:
        for run_id in (1, 2):
            for _ in range(doublings):
                conn.execute(text(f"INSERT INTO calls ({columns}) SELECT {columns} FROM calls WHERE run_id = {run_id}"))
        if engine.dialect.name == "postgresql":
            conn.execute(text("ANALYZE calls"))


def plan(conn: Connection, stmt: Select[Any]) -> str:
    """The plan of ``stmt`` as the database would run it, one line per step."""
    sql = str(stmt.compile(conn.engine, compile_kwargs={"literal_binds": True}))
    if conn.dialect.name == "sqlite":
        return "\n".join(str(r[-1]) for r in conn.execute(text("EXPLAIN QUERY PLAN " + sql)))
    return "\n".join(str(r[0]) for r in conn.execute(text("EXPLAIN " + sql)))


def assert_indexed(got: str, index: str) -> None:
    assert index in got, got
    assert "TEMP B-TREE" not in got and "Sort" not in got and "Seq Scan" not in got, got


@shared_data(TAU, SCHEMAS)
def test_the_run_pages_examples_walk_the_runs_calls_in_id_order_from_an_index(db_url: str) -> None:
    engine = _store(db_url)
    with engine.connect() as conn:
        # 110 of the run's 621 calls are on the expected tool, valid and without an error: the same as
        # the filter the query used before selection_ok (the tool exists and is the one expected)
        older = (
            select(func.count())
            .select_from(CallRow)
            .where(
                CallRow.run_id == 2,
                CallRow.schema_field.is_(None),
                CallRow.exists.is_(True),
                CallRow.expected_name == CallRow.name,
                CallRow.error_kind.is_(None),
            )
        )
        assert conn.scalar(older) == 110
        assert len(conn.execute(examples_query(2)).all()) == 110
    _copy(engine, 4)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(CallRow)) == 19_872
        for run_id in (1, 2):
            assert_indexed(plan(conn, examples_query(run_id)), "ix_calls_run_order")
        got = conn.execute(examples_query(2, limit=300)).all()
        every = conn.execute(
            select(CallRow.name, CallRow.arguments, CallRow.mismatches)
            .where(
                CallRow.run_id == 2,
                CallRow.selection_ok.is_(True),
                CallRow.schema_field.is_(None),
                CallRow.error_kind.is_(None),
            )
            .order_by(CallRow.id)
        ).all()
        assert len(every) == 110 * 16  # the JSON columns as text: read as the driver reads them, the same values
        read = [(n, *(None if v is None else json.loads(v) for v in (a, m))) for n, a, m in got]
        assert read == [tuple(r) for r in every[:300]] and all(isinstance(a, str) for _, a, _ in got)
    engine.dispose()


@shared_data(TAU, SCHEMAS)
def test_the_usage_of_trajectories_without_model_requests_is_counted_by_the_database(db_url: str) -> None:
    """The first view after a batch counts the trajectories without model requests by how they ended
    in one GROUP BY over the run's rows (from ``ix_traj_run_order`` on SQLite): the same usage figures
    as adding them one by one."""
    engine = _store(db_url)
    with Session(engine) as s:
        held = s.execute(
            select(
                TrajectoryRow.id,
                TrajectoryRow.passed,
                TrajectoryRow.failures,
                TrajectoryRow.outcome,
                TrajectoryRow.model_calls,
            )
            .where(TrajectoryRow.run_id == 2)
            .order_by(TrajectoryRow.id)
        ).all()
        assert len(held) == 100 and all(m is None for *_, m in held)
        one_by_one = UsageTally()
        for _, passed, failures, outcome, _ in held:
            one_by_one.add(None, (), passed=passed, failures=failures, outcome=outcome)
        latency = s.execute(
            select(CallRow.name, CallRow.latency_ms).where(CallRow.run_id == 2, CallRow.latency_ms.is_not(None))
        ).all()
        one_by_one.add_tool_latency(latency)
        got = queries.usage_so_far(s, 2)
        prices = current_prices()
        assert got.last_id == held[-1][0] and got.tally.trajectories == 100
        assert got.tally.to_json(prices) == one_by_one.to_json(prices)
        assert got.tally.to_json(prices)["by_result"]["failed"]["trajectories"] == 69
        with engine.connect() as conn:
            groups = conn.execute(queries.usage_groups_query(2)).all()
            assert sum(n for *_, n, _ in groups) == 100 and len(groups) == 15
            got_plan = plan(conn, queries.usage_groups_query(2))
    if engine.dialect.name == "sqlite":
        assert "ix_traj_run_order" in got_plan and "SCAN" not in got_plan, got_plan
    else:
        assert "Aggregate" in got_plan, got_plan
    engine.dispose()


@shared_data(TAU, SCHEMAS)
def test_the_first_view_reads_how_a_run_ended_from_its_counters_and_usage_from_partial_indexes(db_url: str) -> None:
    """A whole run's usage groups come from its counters (with its last id, in one statement), equal to
    the GROUP BY over its rows; its calls' latencies and its trajectories' model requests come from
    partial indexes that hold only the rows that have them (none here: nothing is read)."""
    engine = _store(db_url)
    _copy(engine, 4)
    with engine.connect() as conn:
        last, total, groups = queries._ended(conn, 2) or (0, 0, None)
        by_rows = UsageTally()
        for passed, failures, outcome, n, _ in conn.execute(queries.usage_groups_query(2)):
            by_rows.add_alike(int(n), passed=passed, failures=json.loads(failures) or (), outcome=outcome)
        top = conn.scalar(select(func.max(TrajectoryRow.id)).where(TrajectoryRow.run_id == 2))
        assert (last, total) == (top, 100) and groups == by_rows.all_groups
        assert groups["failed"] == 69 and len(groups) == 9, groups
        plans = {
            "ix_calls_run_latency": plan(conn, queries.latency_query(2)),
            "ix_traj_run_model_calls": plan(conn, queries.model_calls_query(2, upto=last)),
            "ix_traj_run_order": plan(conn, queries.last_id_query(1)),
        }
        # a conversation the simulated user broke is outside the counters: then the rows are counted
        conn.execute(
            text(
                "INSERT INTO run_counters (run_id, kind, a, b, c, value) VALUES (2, 'count', 'user_errors', '', '', 1)"
            )
        )
        assert queries._ended(conn, 2) is None
        conn.rollback()
    for index, got in plans.items():
        assert index in got, got
        assert "SCAN" not in got and "Seq Scan" not in got and "Sort" not in got and "TEMP B-TREE" not in got, got
    engine.dispose()


@shared_data(TAU, SCHEMAS)
def test_a_run_without_kept_aggregates_reads_its_tool_latency_percentiles_at_their_rank(db_url: str) -> None:
    """The comparison of a run without kept aggregates (``aggregates.read_unpriced``) reads its tool
    latencies' p50 and p95 walking ``ix_calls_run_latency_order`` to their rank (no sort of the run's
    calls), their count from ``ix_calls_run_latency`` and its requests from ``ix_traj_run_model_calls``:
    the same figures as the tally's."""
    from app.core.usage import unpriced
    from app.store import aggregates

    engine = _store(db_url)
    _copy(engine, 4)
    with engine.begin() as conn:  # latencies with ties: 89 values over 9,936 calls
        conn.execute(text("UPDATE calls SET latency_ms = (id % 89) * 1.25 WHERE run_id = 2 AND id % 7 > 0"))
    visible = True
    if engine.dialect.name == "postgresql":  # as autovacuum leaves a table: its visibility map set
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE calls"))
            pages = conn.execute(
                text("SELECT relpages, relallvisible FROM pg_class WHERE oid = 'calls'::regclass")
            ).one()
            # another session's open snapshot (a test beside this one, a bench) keeps the vacuum from
            # setting it: PostgreSQL then costs a deep walk of the index above a sort of the run's calls
            visible = pages[1] >= pages[0]
    with Session(engine) as s:
        conn = s.connection()
        last = conn.scalar(queries.last_id_query(2))
        assert last is not None
        plans = {
            "ix_calls_run_latency_order": plan(conn, aggregates.latency_at_query(2, last, 4000)),
            "ix_calls_run_latency": plan(  # or the other: either holds what is counted
                conn, aggregates.timed_query(2, last, select(func.count()).select_from(CallRow))
            ).replace("ix_calls_run_latency_order", "ix_calls_run_latency"),
            "ix_traj_run_model_calls": plan(conn, aggregates.requests_query(s, 2, last)),
        }
        read = aggregates.read_unpriced(s, 2)
        assert read == unpriced(queries.usage_so_far(s, 2).tally)
        assert read["tool_latency_ms"] == {"p50": 55.0, "p95": 105.0}, read
    if not visible:  # the figures only (above)
        plans = {k: v for k, v in plans.items() if not k.startswith("ix_calls")}
    for index, got in plans.items():
        assert index in got, got
        assert "SCAN" not in got and "Seq Scan" not in got and "Sort" not in got and "TEMP B-TREE" not in got, got
    engine.dispose()


@shared_data(TAU, SCHEMAS)
def test_the_first_view_reads_what_a_finished_run_kept_by_its_primary_key(db_url: str) -> None:
    """A finished run's pass^k and pair rewrites (``run_page_kept``, one row a run) are read by the
    run's id from the primary key. PostgreSQL reads a table of a few rows whole whatever its indexes:
    its plan is read with sequential scans off (what it does once the table holds many runs)."""
    engine = _store(db_url)  # imported: finished, so kept
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(RunPageKept)) == 2
        if conn.dialect.name == "postgresql":
            conn.execute(text("SET enable_seqscan = off"))
        plans = [plan(conn, q) for q in (queries.kept_pass_hat_ks_query([2]), queries.kept_pass_hat_ks_query([1, 2]))]
        plans.append(plan(conn, pairs.kept_query(2)))
    for got in plans:
        if engine.dialect.name == "sqlite":
            assert "SEARCH run_page_kept USING INTEGER PRIMARY KEY (rowid=?)" in got, got  # IN: one per id
        else:
            assert "Index Scan using run_page_kept_pkey" in got or "Index Scan on run_page_kept_pkey" in got, got
        assert "SCAN" not in got and "Seq Scan" not in got and "Sort" not in got, got
    engine.dispose()
