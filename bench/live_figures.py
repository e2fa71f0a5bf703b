"""Figures of a run that is still receiving traces: ``/api/runs/{id}/figures``
asked by 8 clients at once while another process keeps storing batches into
the run, against a real ``toollens serve`` over HTTP.

The run holds ``--trajectories`` trajectories first (the example v1 records
as new trials, each with three model calls that carry tokens and latency),
stored through the API in batches of 1,000. Then a writer process stores a
batch of 20 every 0.2 s while ``--clients`` threads ask for the figures in a
loop for ``--seconds``; the median and p95 of their answers are printed as
JSON, with how many computations the server made (``computed_at`` values seen).

``--code DIR`` serves the app from another source tree (e.g. ``git archive
main | tar -x -C /tmp/main`` for the numbers before a change).

Usage::

    python bench/live_figures.py --db sqlite --trajectories 30000
    python bench/live_figures.py --db postgresql --code /tmp/main
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PG_URL = os.environ.get("TOOLLENS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def records(first_trial: int, n: int) -> list[dict[str, Any]]:
    base = [json.loads(x) for x in (EXAMPLES / "trajectories_v1.jsonl").read_text().splitlines()]
    out = []
    for i in range(n):
        rec = dict(base[i % len(base)])
        rec["trial"] = first_trial + i
        rec["model_calls"] = [
            {"model": "gpt-4o", "input_tokens": 900 + k, "output_tokens": 120, "latency_ms": 400.0 + k}
            for k in range(3)
        ]
        out.append(rec)
    return out


def writer(base: str, run_id: int, first_trial: int, stop: Any) -> None:
    with httpx.Client(base_url=base, timeout=120) as h:
        trial = first_trial
        while not stop.is_set():
            r = h.post(f"/api/runs/{run_id}/trajectories", json={"trajectories": records(trial, 20)})
            assert r.status_code == 200, r.text
            trial += 20
            time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--trajectories", type=int, default=30_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--code", type=Path, default=ROOT)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="live_figures_"))
    schema = None
    if args.db == "sqlite":
        url = f"sqlite:///{tmp / 'live.db'}"
    else:
        schema = f"bench_live_{uuid.uuid4().hex[:8]}"
        with create_engine(PG_URL).begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    port = 20000 + os.getpid() % 20000
    env = {**os.environ, "PYTHONPATH": str(args.code), "TOOLLENS_PURE_PYTHON": "1"}
    log = (tmp / "serve.log").open("w")
    subprocess.run(
        [sys.executable, "-c", "from app.entry import main; main()", "db", "upgrade", "--db", url],
        cwd=args.code,
        env=env,
        check=True,
        capture_output=True,
    )
    server = subprocess.Popen(
        [sys.executable, "-c", "from app.entry import main; main()", "serve", "--db", url, "--port", str(port)],
        cwd=args.code,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/api/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
            time.sleep(0.2)
        from app.core.suites.suite import load_suite_document

        with httpx.Client(base_url=base, timeout=600) as h:
            run = h.post(
                "/api/runs", json={"name": "live", "suite": load_suite_document(EXAMPLES / "suite_v1.yaml")}
            ).json()["id"]
            start = time.monotonic()
            for first in range(0, args.trajectories, 1000):
                r = h.post(
                    f"/api/runs/{run}/trajectories",
                    json={"trajectories": records(first, min(1000, args.trajectories - first))},
                )
                assert r.status_code == 200, r.text
            loaded = time.monotonic() - start
            t0 = time.monotonic()
            quiet = h.get(f"/api/runs/{run}/figures")
            first_figures = time.monotonic() - t0
            assert quiet.status_code == 200
        stop = multiprocessing.Event()
        proc = multiprocessing.Process(target=writer, args=(base, run, args.trajectories, stop))
        proc.start()
        time.sleep(1)
        latencies: list[list[float]] = [[] for _ in range(args.clients)]
        stamps: set[str] = set()
        behind: list[int] = []

        def client(i: int) -> None:
            with httpx.Client(base_url=base, timeout=600) as h:
                end = time.monotonic() + args.seconds
                while time.monotonic() < end:
                    t = time.monotonic()
                    r = h.get(f"/api/runs/{run}/figures")
                    latencies[i].append(time.monotonic() - t)
                    assert r.status_code == 200, r.text
                    body = r.json()
                    if "computed_at" in body:
                        stamps.add(body["computed_at"])
                        behind.append(body["trajectories_behind"])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        proc.join(60)
        flat = sorted(x for xs in latencies for x in xs)
        print(
            json.dumps(
                {
                    "db": args.db,
                    "code": str(args.code),
                    "trajectories": args.trajectories,
                    "clients": args.clients,
                    "load_s": round(loaded, 1),
                    "figures_quiet_s": round(first_figures, 3),
                    "requests": len(flat),
                    "median_s": round(statistics.median(flat), 3),
                    "p95_s": round(flat[int(0.95 * (len(flat) - 1))], 3),
                    "max_s": round(flat[-1], 3),
                    "computations_seen": len(stamps),
                    "median_behind": statistics.median(behind) if behind else None,
                }
            )
        )
    finally:
        server.terminate()
        server.wait(30)
        if schema is not None:
            with create_engine(PG_URL).begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))


if __name__ == "__main__":
    main()
