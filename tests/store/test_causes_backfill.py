"""A run stored before ToolLens kept first divergences (no cause counters, no
cause tags, no ``detail.divergence``) gets its causes on its first read, over
real HTTP on both databases, equal to those of a freshly stored copy (the real
tau-bench gpt-4o airline run: 100 trajectories, 69 failed); kept, so later
reads count nothing again; and two first reads at once count each failed
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
from app.store.models import RunCounter, TrajectoryRow, TrajectoryTag
from app.web.app import create_app
from tests.resources import DATA, shared_data
from tests.servers import serve_in_thread

TAU = DATA / "tau_bench_gpt-4o_airline_tasks00-24.json"
SCHEMAS = DATA / "tau_bench_tool_schemas_airline_retail.json"
OLD, FRESH = 1, 2
runner = CliRunner()


def _import(db_url: str, name: str) -> None:
    r = runner.invoke(toollens, ["import", str(TAU), "--format", "tau-bench", "--tools", str(SCHEMAS), "--run", name,
                                 "--batch", "30", "--db", db_url])
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
        counted = s.scalar(select(func.sum(RunCounter.value)).where(RunCounter.run_id == run_id,
                                                                    RunCounter.kind == "cause"))
        tags = s.scalar(select(func.count()).select_from(TrajectoryTag).where(TrajectoryTag.run_id == run_id,
                                                                              TrajectoryTag.kind == "cause"))
        diverged = sum(1 for d in s.scalars(select(TrajectoryRow.detail).where(TrajectoryRow.run_id == run_id))
                       if "divergence" in d)
    engine.dispose()
    return int(counted or 0), int(tags or 0), diverged


def _causes(base: str, run_id: int) -> list[dict[str, Any]]:
    return list(httpx.get(f"{base}/api/runs/{run_id}/figures", params={"cases_limit": 1}).json()["causes"])


@shared_data(TAU, SCHEMAS)
def test_an_old_run_gets_the_causes_of_a_fresh_copy_on_its_first_read(db_url: str) -> None:
    _import(db_url, "old")
    _import(db_url, "fresh")
    _make_old(db_url, OLD)
    assert _stored(db_url, OLD) == (0, 0, 0) and _stored(db_url, FRESH) == (69, 69, 69)
    with serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base:
        page = httpx.get(f"{base}/runs/{OLD}", headers={"accept": "text/html"}).text  # the first read: the page
        assert "15</b> failed trajectories: update_reservation_flights never called with the expected values" in page
        assert "No cause counted" not in page
        fresh = _causes(base, FRESH)
        assert sum(c["count"] for c in fresh) == 69
        assert _causes(base, OLD) == fresh  # every cause, count, text and filter key
        for c in fresh[:3]:  # each link lists exactly its trajectories, and their page names the divergence
            listed = httpx.get(f"{base}/api/runs/{OLD}/trajectories", params={**c["filter"], "limit": 500}).json()
            assert listed["count"] == c["count"]
            one = httpx.get(f"{base}/api/trajectories/{listed['data'][0]['id']}").json()
            assert one["detail"]["divergence"]["key"] == c["filter"]["cause"]
    assert _stored(db_url, OLD) == (69, 69, 69)
    with serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as base:  # a new process
        assert _causes(base, OLD) == fresh
        httpx.get(f"{base}/runs/{OLD}", headers={"accept": "text/html"})
    assert _stored(db_url, OLD) == (69, 69, 69)  # kept: nothing counted again


@shared_data(TAU, SCHEMAS)
def test_two_first_reads_at_once_count_each_failed_trajectory_once(db_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _import(db_url, "old")
    _make_old(db_url, OLD)
    monkeypatch.setattr(backfill, "CHUNK", 7)  # ten chunks each: the two readers interleave
    engine = make_engine(db_url)
    factory = make_sessionmaker(engine)
    start = threading.Barrier(2)
    got: list[int] = []

    def read() -> None:
        with session_scope(factory) as s:
            start.wait()
            got.append(sum(queries.run_report(s, OLD).causes.values()))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for r in readers:
        r.join(60)
    engine.dispose()
    assert got == [69, 69]
    assert _stored(db_url, OLD) == (69, 69, 69)
    # and two servers (two figures caches) asked at once over HTTP, after the run is made old again
    _make_old(db_url, OLD)
    with serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as a, \
            serve_in_thread(create_app(Settings(database_url=db_url, auto_migrate=False))) as b:
        answers: list[list[dict[str, Any]]] = []
        both = [threading.Thread(target=lambda u=u: answers.append(_causes(u, OLD))) for u in (a, b)]
        for t in both:
            t.start()
        for t in both:
            t.join(60)
    assert len(answers) == 2 and answers[0] == answers[1] and sum(c["count"] for c in answers[0]) == 69
    assert _stored(db_url, OLD) == (69, 69, 69)


@shared_data(TAU, SCHEMAS)
def test_a_trajectory_stored_as_failed_keeps_its_verdict_when_rescoring_finds_nothing(db_url: str) -> None:
    _import(db_url, "old")
    _make_old(db_url, OLD)
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine), write=True) as s:  # as if an older rule had failed a passed one
        t = s.scalars(select(TrajectoryRow).where(TrajectoryRow.run_id == OLD, TrajectoryRow.passed)
                      .order_by(TrajectoryRow.id).limit(1)).one()
        t.passed = False
        counter = s.scalars(select(RunCounter).where(RunCounter.run_id == OLD, RunCounter.kind == "passes",
                                                     RunCounter.a == t.case_id)).one()
        counter.value -= 1
    with session_scope(make_sessionmaker(engine)) as s:
        causes = queries.run_causes(s, OLD)
    engine.dispose()
    assert sum(c["count"] for c in causes) == 70
    kept = [(c["count"], c["text"]) for c in causes if c["filter"] == {"cause": "unexplained::"}]
    assert kept == [(1, "failed with no divergence from the case found")]
    assert _stored(db_url, OLD) == (70, 70, 70)


def test_fix_on_an_old_run_explains_what_it_explains_on_a_fresh_one(db_url: str) -> None:
    """`toollens fix` reads each failed trajectory's cause tag: an old run gets them first."""
    from app.runner.session import RunRequest, run_agent
    from app.store.fix import run_fix

    examples = Path(__file__).resolve().parents[2] / "examples"
    assert run_agent(Settings(database_url=db_url), RunRequest(agent="simulated", suite_path=examples / "suite_v1.yaml",
                                                                sweep=True, run_name="v1", seed=5)).finished
    engine = make_engine(db_url)
    with session_scope(make_sessionmaker(engine)) as s:
        fresh = [(p.tool, p.where, p.explains) for p in run_fix(s, "v1").proposals]
    _make_old(db_url, 1)
    assert _stored(db_url, 1)[0] == 0
    with session_scope(make_sessionmaker(engine)) as s:
        old = [(p.tool, p.where, p.explains) for p in run_fix(s, "v1").proposals]
    engine.dispose()
    assert fresh[0][2] > 0 and old == fresh
