"""Two processes feeding one run at the same time, on one SQLite file and on
one PostgreSQL database: both finish and every row is stored once."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from fastapi.testclient import TestClient

from app.core.prices import bundled_prices
from app.core.records import read_jsonl
from app.core.reports.evaluate import score_trajectories
from app.core.score.scoring import Scorer
from app.core.suites.suite import load_suite, load_suite_document
from app.core.usage import UsageTally
from app.settings import Settings
from app.store import ingest
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.web.app import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def writer(url: str, run_id: int, part: int) -> None:
    """Store every other record (by ``part``), two at a time."""
    suite = load_suite(EXAMPLES / "suite_v1.yaml")
    scorer = Scorer(suite)
    mine = [t for i, t in enumerate(read_jsonl(EXAMPLES / "trajectories_v1.jsonl")) if i % 2 == part]
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    for start in range(0, len(mine), 2):
        with session_scope(sessions, write=True) as s:
            run = ingest.get_run_row(s, run_id)
            ingest.add_trajectories(s, run=run, scorer=scorer, trajectories=mine[start : start + 2])
    engine.dispose()


def test_two_processes_write_one_run(db_url: str) -> None:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        suite = load_suite_document(EXAMPLES / "suite_v1.yaml")
        run_id = client.post("/api/runs", json={"name": "shared", "suite": suite}).json()["id"]
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=writer, args=(db_url, run_id, part)) for part in (0, 1)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        assert [p.exitcode for p in procs] == [0, 0]
        stored = client.get(f"/api/runs/{run_id}/figures", params={"cases_limit": 500}).json()
        stored.pop("cases_total")
        usage = UsageTally()  # as `toollens score --json` builds it
        expected = score_trajectories(
            load_suite(EXAMPLES / "suite_v1.yaml"), read_jsonl(EXAMPLES / "trajectories_v1.jsonl"), usage=usage
        ).to_json()
        expected["usage"] = usage.to_json(bundled_prices())
        # every row once: the counters and the per-case rows match a single scoring of the file
        assert stored["trajectories"] == 36
        assert {k: v for k, v in stored.items() if k != "cases"} == {k: v for k, v in expected.items() if k != "cases"}
        assert sorted((c["case_id"], c["trial"]) for c in stored["cases"]) == sorted(
            (c["case_id"], c["trial"]) for c in expected["cases"]
        )
