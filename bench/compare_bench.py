"""Compare benchmark: the first ``/compare`` view of two large runs (its caches empty), on SQLite
or PostgreSQL, with the pairing kept when the runs were finished and without it (any other pair of
runs), and with neither that nor the usage kept (a run finished before migration 0014).

The data is ``scale_reads``' (two seed runs ``a`` and ``b`` scored and stored by ``toollens
import``, different seeds, then copied inside the database as new trials until each holds
``--calls`` calls), in a SQLite file (``--file``) or a schema of the test database
(``--pg-schema``); either is made once and measured again when it exists. After copying, the runs
are finished again (``aggregates.keep``: what ``toollens import`` would have kept).

Each measure is the first request of the page (or of ``/api/compare``) with the app's caches emptied,
on an app that has served one comparison already (run ``a`` with itself: what a server pays once,
the page's template and assets), the median of ``--repeat`` rounds (a new app each); ``--dump DIR``
writes each page's HTML and JSON (to diff two versions of the code: run this script with
``PYTHONPATH`` set to the other checkout).

Usage::

    python bench/compare_bench.py --file /tmp/cmp.db --calls 2126000 --seed-calls 106300   # 384k trajectories a run
    python bench/compare_bench.py --pg-schema cmp384k --calls 2126000 --seed-calls 106300
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, delete, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostref
from scale_reads import _columns, seed_runs
from store_bench import PG_URL

from app.settings import Settings
from app.store import aggregates
from app.store.db import make_engine, make_sessionmaker, session_scope, upgrade
from app.store.models import CallRow, RunAggregate, RunPairing, TrajectoryRow
from app.web.app import create_app
from app.web.state import ComparisonCache, FiguresCache

os.environ.setdefault("TOOLLENS_ALLOWED_HOSTS", "localhost,127.0.0.1,::1,testserver")  # TestClient's host
HTML = {"accept": "text/html"}


def replicate(engine: Engine, copies: int, trials: int) -> None:
    """``scale_reads.replicate`` on either database: every stored trajectory (with its calls and
    tags) copied ``copies - 1`` times as new trials, the counters multiplied."""
    pg = engine.dialect.name == "postgresql"
    with engine.connect() as conn:
        s = int(conn.scalar(text("SELECT max(id) FROM trajectories")) or 0)
        c = int(conn.scalar(text("SELECT max(id) FROM calls")) or 0)
    start = time.perf_counter()
    for k in range(1, copies):
        tcols, tsel = _columns(TrajectoryRow.__table__, {"id": f"id + {k * s}", "trial": f"trial + {k * trials}"})
        ccols, csel = _columns(CallRow.__table__, {"id": f"id + {k * c}", "trajectory_id": f"trajectory_id + {k * s}"})
        with engine.begin() as conn:
            conn.execute(text(f"INSERT INTO trajectories ({tcols}) SELECT {tsel} FROM trajectories WHERE id <= {s}"))
            conn.execute(
                text(
                    "INSERT INTO trajectory_tags (trajectory_id, kind, value, run_id) "
                    f"SELECT trajectory_id + {k * s}, kind, value, run_id FROM trajectory_tags "
                    f"WHERE trajectory_id <= {s}"
                )
            )
            conn.execute(text(f"INSERT INTO calls ({ccols}) SELECT {csel} FROM calls WHERE id <= {c}"))
        print(f"  copy {k + 1}/{copies}  ({time.perf_counter() - start:.0f} s)", flush=True)
    with engine.begin() as conn:
        conn.execute(text("UPDATE run_counters SET value = value * :n"), {"n": copies})
        if pg:
            for table in ("trajectories", "calls"):
                conn.execute(
                    text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
                )
    if pg:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE trajectories, trajectory_tags, calls, run_counters"))


def build(url: str, calls: int, seed_calls: int, cases: int, *, usage: bool = False) -> None:
    """Runs a and b of about ``calls`` calls each in ``url`` (migrated, empty), finished again;
    ``usage``: with model requests and call latencies (``scale_reads.add_usage``)."""
    t0 = time.perf_counter()
    trials = seed_runs(url, seed_calls, cases, usage=usage)
    engine = create_engine(url)
    with engine.connect() as conn:
        seeded = int(conn.scalar(text("SELECT count(*) FROM calls WHERE run_id = 1")) or 0)
    replicate(engine, max(1, math.ceil(calls / seeded)), trials)
    sessions = make_sessionmaker(make_engine(url))
    with session_scope(sessions, write=True) as s:
        aggregates.keep_usage(s, 1)
        aggregates.keep(s, 2)
    engine.dispose()
    print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)


def first(client: TestClient, path: str, dump: Path | None, name: str) -> float:
    """Milliseconds of the first request of ``path`` with the app's caches emptied."""
    client.app.state.comparisons = ComparisonCache()  # type: ignore[attr-defined]
    client.app.state.figures = FiguresCache()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    r = client.get(path, headers=HTML if not path.startswith("/api") else {})
    ms = 1000 * (time.perf_counter() - t0)
    assert r.status_code == 200, r.text[:300]
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / name).write_bytes(r.content)
    return ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2_126_000, help="calls in run a (and b)")
    parser.add_argument("--seed-calls", type=int, default=106_300, help="calls scored and stored per seed run")
    parser.add_argument("--cases", type=int, default=200)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--file", type=Path, help="a SQLite file: measured again if it exists, else made and kept")
    where.add_argument("--pg-schema", help="a PostgreSQL schema: measured again if it exists, else made and kept")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (the median is printed)")
    parser.add_argument("--dump", type=Path, help="write each page's body into this folder")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument(
        "--usage",
        action="store_true",
        help="when making the data: records with model requests and call latencies (what the usage figures read)",
    )
    parser.add_argument(
        "--unkept",
        action="store_true",
        help="also measure with nothing kept (the usage read from every trajectory: slow)",
    )
    args = parser.parse_args(argv)
    print(hostref.line())
    if args.file is not None:
        url, made = f"sqlite:///{args.file.resolve()}", not args.file.exists()
    else:
        url = f"{PG_URL}?options=-csearch_path%3D{args.pg_schema}"
        admin = create_engine(PG_URL)
        with admin.begin() as conn:
            made = (
                conn.execute(
                    text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :s"), {"s": args.pg_schema}
                ).first()
                is None
            )
            if made:
                conn.execute(text(f'CREATE SCHEMA "{args.pg_schema}"'))
        admin.dispose()
    if made:
        upgrade(url)
        build(url, args.calls, args.seed_calls, args.cases, usage=args.usage)
    if args.build_only:
        return 0
    engine = create_engine(url)
    with engine.connect() as conn:
        n = [
            int(x)
            for x in conn.scalars(
                text("SELECT value FROM run_counters WHERE kind = 'count' AND a = 'trajectories' ORDER BY run_id")
            )
        ]
    print(f"== runs a and b ({n} trajectories), {url.split(':')[0]}, load {os.getloadavg()[0]:.1f}", flush=True)
    # the stored rows, put back after each round measured without them
    with engine.connect() as conn:
        pairings = [dict(r._mapping) for r in conn.execute(select(RunPairing.__table__))]
        usage = [dict(r._mapping) for r in conn.execute(select(RunAggregate.__table__))]

    def restore() -> None:
        with engine.begin() as conn:
            conn.execute(delete(RunPairing))
            conn.execute(delete(RunAggregate))
            if pairings:
                conn.execute(insert(RunPairing.__table__), pairings)
            if usage:
                conn.execute(insert(RunAggregate.__table__), usage)

    def drop(*tables: Any) -> None:
        with engine.begin() as conn:
            for t in tables:
                conn.execute(delete(t))

    cases: list[tuple[str, tuple[Any, ...]]] = [("kept", ()), ("no pairing", (RunPairing,))]
    if args.unkept:
        cases.append(("nothing kept", (RunPairing, RunAggregate)))
    times: dict[str, list[float]] = {}
    try:
        for _ in range(args.repeat):
            with TestClient(create_app(Settings(database_url=url, auto_migrate=False))) as client:
                # what a server pays once, whatever it compares (the page's template, its assets): run a with itself
                assert client.get("/compare?a=1&b=1", headers=HTML).status_code == 200
                for label, gone in cases:
                    restore()
                    drop(*gone)
                    for kind, path in (("page", "/compare?a=1&b=2"), ("api", "/api/compare?a=1&b=2")):
                        name = f"{label.replace(' ', '_')}.{kind}.{'html' if kind == 'page' else 'json'}"
                        times.setdefault(f"{label}, {kind}", []).append(first(client, path, args.dump, name))
    finally:
        restore()
        engine.dispose()
    for label, ts in times.items():
        print(f"{label:<28} median {statistics.median(ts):8.0f} ms  ({', '.join(f'{t:.0f}' for t in ts)})")
    if args.dump is not None:
        (args.dump / "times.json").write_text(json.dumps(times, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
