"""Figures of a run that is still receiving traces: 8 clients asking at once
while another process stores batches share one computation at a time, the
figures are computed again at most once per interval (and say how far behind
they are), and the usage tallied incrementally equals a full computation."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import multiprocessing
import threading
import time
from typing import Any

import httpx
import pytest

from app.core.suites.suite import load_suite_document
from app.settings import Settings
from app.store import queries
from app.store.db import make_engine, make_sessionmaker, session_scope
from app.web.app import create_app
from tests.factories import EXAMPLES
from tests.servers import serve_in_thread

CLIENTS = 8


def records(first_trial: int, n: int) -> list[dict[str, Any]]:
    base = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
    return [
        {
            **base[i % len(base)],
            "trial": first_trial + i,
            "model_calls": [
                {"model": "gpt-4o", "input_tokens": 1000 + i, "output_tokens": 100, "latency_ms": 300.0 + i}
            ],
        }
        for i in range(n)
    ]


def _writer(base: str, run_id: int, first: int, stop: Any, stored: Any) -> None:
    with httpx.Client(base_url=base, timeout=60) as h:
        trial = first
        while not stop.is_set():
            r = h.post(f"/api/runs/{run_id}/trajectories", json={"trajectories": records(trial, 10)})
            assert r.status_code == 200, r.text
            trial += 10
            stored.value = trial
            time.sleep(0.05)


def test_eight_clients_on_a_receiving_run_share_a_computation_per_interval(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, float]] = []  # (start, end) of every computation
    running = [0, 0]  # now, most at once
    guard = threading.Lock()
    real = queries.run_summary

    def counted(*args: Any, **kwargs: Any) -> Any:
        with guard:
            running[0] += 1
            running[1] = max(running)
        start = time.monotonic()
        try:
            return real(*args, **kwargs)
        finally:
            with guard:
                running[0] -= 1
                calls.append((start, time.monotonic()))

    monkeypatch.setattr(queries, "run_summary", counted)
    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    app.state.figures.interval = 1.0
    with serve_in_thread(app) as base, httpx.Client(base_url=base, timeout=60) as h:
        run = h.post("/api/runs", json={"name": "live", "suite": load_suite_document(EXAMPLES / "suite_v1.yaml")})
        rid = run.json()["id"]
        for first in range(0, 2000, 500):
            assert h.post(f"/api/runs/{rid}/trajectories", json={"trajectories": records(first, 500)}).is_success
        stop, stored = multiprocessing.Event(), multiprocessing.Value("i", 2000)
        writer = multiprocessing.Process(target=_writer, args=(base, rid, 2000, stop, stored))
        writer.start()
        answers: list[dict[str, Any]] = []
        pages: list[str] = []
        try:
            time.sleep(0.5)
            calls.clear()

            def client(i: int) -> None:
                with httpx.Client(base_url=base, timeout=60) as c:
                    end = time.monotonic() + 4
                    while time.monotonic() < end:
                        r = c.get(f"/api/runs/{rid}/figures")
                        assert r.status_code == 200, r.text
                        answers.append(r.json())
                        if i == 0:
                            pages.append(c.get(f"/runs/{rid}").text)

            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            stop.set()
            writer.join(30)
        assert stored.value >= 2020, stored.value  # the run kept receiving meanwhile
        # one computation at a time, each served to many requests, never two within the interval
        assert running[1] == 1, running
        assert len(answers) >= 5 * len(calls), (len(answers), len(calls))
        stamps = sorted({(a["computed_at"], a["recompute_interval_s"]) for a in answers if "computed_at" in a})
        assert stamps and all(a["trajectories_behind"] > 0 for a in answers if "computed_at" in a)
        # the next computation no sooner than the wait the one before said (at most the interval)
        seen = sorted((dt.datetime.fromisoformat(at).timestamp(), wait) for at, wait in stamps)
        assert all(0 < wait <= 1.0 for _, wait in seen)
        for (at, wait), (after, _) in itertools.pairwise(seen):
            assert after - at >= wait - 0.002, seen
        assert any("trajectories stored since, computed again at most every" in p for p in pages)
        # the run at rest: the figures are current again (no stamp), and the usage tallied
        # incrementally is the usage of every stored trajectory
        for _ in range(5):  # once the interval has passed since the last batch
            time.sleep(1.1)
            final = h.get(f"/api/runs/{rid}/figures").json()
            if "computed_at" not in final:
                break
        assert "computed_at" not in final and final["trajectories"] == stored.value, final.get("computed_at")
        engine = make_engine(db_url)
        with session_scope(make_sessionmaker(engine)) as session:
            full = queries.run_usage(session, rid)
        engine.dispose()
        assert final["usage"] == full
        assert final["usage"]["input_tokens"] == sum(1000 + i for i in range(500)) * 4 + sum(
            sum(1000 + i for i in range(10)) for _ in range((stored.value - 2000) // 10)
        )
