"""A run stored before ToolLens kept first divergences (no cause counters, no
cause tags, no ``detail.divergence``): its pages say it needs ``toollens db
backfill`` and write nothing (reads never write), over real HTTP on both
databases; the command gives it the causes of a freshly stored copy (the real
tau-bench gpt-4o airline run: 100 trajectories, 69 failed), kept, so a second
run of it counts nothing again; and two backfills at once count each failed
trajectory once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, func, select
from typer.testing import CliRunner

from app.cli import cli as toollens
from app.settings import Settings
from app.store import backfill, queries
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.store.errors import NeedsBackfill
from app.store.models import RunCounter, TrajectoryRow, TrajectoryTag
from app.web.app import create_app
from tests.resources import DATA, shared_data
from tests.servers import serve_in_thread

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
OLD, FRESH = 1, 2
runner = CliRunner()


def _import(db_url: str, name: str) -> None:
    r = runner.invoke(
        toollens,
        [
            "import",
            str(TAU),
            "--format",
            "tau-bench",
            "--tools",
            str(SCHEMAS),
            "--run",
            name,
            "--batch",
            "30",
            "--db",
            db_url,
        ],
    )
    assert r.exit_code == 0, r.output


def _make_old(db_url: str, run_id: int) -> None:
    """What a run stored before causes were kept holds: none of them."""
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine), write=True) as s:
        s.execute(delete(RunCounter).where(RunCounter.run_id == run_id, RunCounter.kind == "cause"))
        s.execute(delete(TrajectoryTag).where(TrajectoryTag.run_id == run_id, TrajectoryTag.kind == "cause"))
        for t in s.scalars(select(TrajectoryRow).where(TrajectoryRow.run_id == run_id)):
            t.detail = {k: v for k, v in t.detail.items() if k != "divergence"}
    engine.dispose()


def _stored(db_url: str, run_id: int) -> tuple[int, int, int]:
    """The run's cause counters summed, its cause tags, its trajectories with a divergence."""
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine)) as s:
        counted = s.scalar(
            select(func.sum(RunCounter.value)).where(RunCounter.run_id == run_id, RunCounter.kind == "cause")
        )
        tags = s.scalar(
            select(func.count())
            .select_from(TrajectoryTag)
            .where(TrajectoryTag.run_id == run_id, TrajectoryTag.kind == "cause")
        )
        diverged = sum(
            1
            for d in s.scalars(select(TrajectoryRow.detail).where(TrajectoryRow.run_id == run_id))
            if "divergence" in d
        )
    engine.dispose()
    return int(counted or 0), int(tags or 0), diverged


def _causes(base: str, run_id: int) -> list[dict[str, Any]]:
    return list(httpx.get(f"{base}/api/runs/{run_id}/figures", params={"cases_limit": 1}).json()["causes"])


def _backfill(db_url: str, *args: str) -> str:
    r = runner.invoke(toollens, ["db", "backfill", *args, "--db", db_url])
    assert r.exit_code == 0, r.output
    return r.output


@shared_data(TAU, SCHEMAS)
def test_an_old_run_says_it_needs_the_backfill_which_gives_it_the_causes_of_a_fresh_copy(db_url: str) -> None:
    _import(db_url, "old")
    _import(db_url, "fresh")
    _make_old(db_url, OLD)
    assert _stored(db_url, OLD) == (0, 0, 0) and _stored(db_url, FRESH) == (69, 69, 69)
    with serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base:
        page = httpx.get(f"{base}/runs/{OLD}", headers={"accept": "text/html"}).text  # a read: it counts nothing
        assert "<b>69</b> failed trajectories have no cause counted" in page
        assert "<code>toollens db backfill --run old</code>" in page
        figures = httpx.get(f"{base}/api/runs/{OLD}/figures", params={"cases_limit": 1}).json()
        assert figures["causes"] == [] and figures["causes_missing"] == 69
        assert "causes_missing" not in httpx.get(f"{base}/api/runs/{FRESH}/figures").json()
        fresh = _causes(base, FRESH)
        assert sum(c["count"] for c in fresh) == 69
    shown = runner.invoke(toollens, ["show", "old", "--db", db_url])
    assert shown.exit_code == 0 and "toollens db backfill" in " ".join(shown.output.split()), shown.output
    assert "69 failed trajectories have no cause" in " ".join(shown.output.split())
    gated = runner.invoke(toollens, ["gate", "--baseline", "fresh", "--candidate", "old", "--db", db_url])
    assert (
        "69 failed trajectories of the candidate (old) have no cause: the run was stored before ToolLens kept "
        "causes; `toollens db backfill` counts them" in " ".join(gated.output.split())
    ), gated.output
    assert _stored(db_url, OLD) == (0, 0, 0)
    assert "run 1 (old): 69 causes counted" in _backfill(db_url, "--run", "old")
    assert _stored(db_url, OLD) == (69, 69, 69)
    with serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base:  # a new process
        assert _causes(base, OLD) == fresh  # every cause, count, text and filter key
        page = httpx.get(f"{base}/runs/{OLD}", headers={"accept": "text/html"}).text
        assert "15</b> failed trajectories: update_reservation_flights never called with the expected values" in page
        assert "no cause counted" not in page and "No cause counted" not in page
        for c in fresh[:3]:  # each link lists exactly its trajectories, and their page names the divergence
            listed = httpx.get(f"{base}/api/runs/{OLD}/trajectories", params={**c["filter"], "limit": 500}).json()
            assert listed["count"] == c["count"]
            one = httpx.get(f"{base}/api/trajectories/{listed['data'][0]['id']}").json()
            assert one["detail"]["divergence"]["key"] == c["filter"]["cause"]
    assert "0 of 2 runs backfilled" in _backfill(db_url)
    assert "no cause" not in runner.invoke(toollens, ["show", "old", "--db", db_url]).output
    assert (
        "no cause"
        not in runner.invoke(toollens, ["gate", "--baseline", "fresh", "--candidate", "old", "--db", db_url]).output
    )
    assert _stored(db_url, OLD) == (69, 69, 69)  # kept: nothing counted again


@shared_data(TAU, SCHEMAS)
def test_two_backfills_at_once_count_each_failed_trajectory_once(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _import(db_url, "old")
    _make_old(db_url, OLD)
    monkeypatch.setattr(backfill, "CHUNK", 7)  # ten chunks each: the two backfills interleave
    engine = make_engine(db_url)
    factory = make_sessionmaker(engine)
    start = threading.Barrier(2)
    got: list[int] = []

    def run() -> None:
        start.wait()
        got.append(sum(backfill.backfill_causes(factory, OLD).values()))

    both = [threading.Thread(target=run) for _ in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join(60)
    engine.dispose()
    assert got == [69, 69]
    assert _stored(db_url, OLD) == (69, 69, 69)


@shared_data(TAU, SCHEMAS)
def test_a_trajectory_stored_as_failed_keeps_its_verdict_when_rescoring_finds_nothing(db_url: str) -> None:
    _import(db_url, "old")
    _make_old(db_url, OLD)
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine), write=True) as s:  # as if an older rule had failed a passed one
        t = s.scalars(
            select(TrajectoryRow)
            .where(TrajectoryRow.run_id == OLD, TrajectoryRow.passed)
            .order_by(TrajectoryRow.id)
            .limit(1)
        ).one()
        t.passed = False
        counter = s.scalars(
            select(RunCounter).where(RunCounter.run_id == OLD, RunCounter.kind == "passes", RunCounter.a == t.case_id)
        ).one()
        counter.value -= 1
    backfill.backfill_causes(make_sessionmaker(engine), OLD)
    with session_scope(make_sessionmaker(engine)) as s:
        causes = queries.run_causes(s, OLD)
    engine.dispose()
    assert sum(c["count"] for c in causes) == 70
    kept = [(c["count"], c["text"]) for c in causes if c["filter"] == {"cause": "unexplained::"}]
    assert kept == [(1, "failed with no divergence from the case found")]
    assert _stored(db_url, OLD) == (70, 70, 70)


def test_fix_on_an_old_run_asks_for_the_backfill_then_explains_what_it_explains_on_a_fresh_one(db_url: str) -> None:
    """`toollens fix` reads each failed trajectory's cause tag: on an old run it says to backfill first."""
    from app.runner.session import RunRequest, run_agent
    from app.store.fix import run_fix

    examples = Path(__file__).resolve().parents[2] / "examples"
    assert run_agent(
        Settings(database_url=db_url),
        RunRequest(agent="simulated", suite_path=examples / "suite_v1.yaml", sweep=True, run_name="v1", seed=5),
    ).finished
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine)) as s:
        fresh = [(p.tool, p.where, p.explains) for p in run_fix(s, "v1").proposals]
    _make_old(db_url, 1)
    assert _stored(db_url, 1)[0] == 0
    with session_scope(make_sessionmaker(engine)) as s, pytest.raises(NeedsBackfill) as refused:
        run_fix(s, "v1")
    assert "run `toollens db backfill --run v1` first" in str(refused.value)
    assert _stored(db_url, 1)[0] == 0  # nothing written by the refused read
    _backfill(db_url, "--run", "1")
    with session_scope(make_sessionmaker(engine)) as s:
        old = [(p.tool, p.where, p.explains) for p in run_fix(s, "v1").proposals]
    engine.dispose()
    assert fresh[0][2] > 0 and old == fresh
