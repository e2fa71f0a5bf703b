"""Page benchmark: server time of every dashboard page (runs list, run page,
run page filtered by a confusion cell, trajectory page, compare page, the
figures API) on large runs (two runs of N calls each, default 10^6),
median and p95 over 100 requests, in-process through the app factory (the cycle collector set as
``toollens serve`` sets it: ``collect_cycles_rarely``), on SQLite (or PostgreSQL: ``--db postgresql``).
The run page is also timed as the first view after a batch lands (its figures cache, with what the run page keeps
in it, and the pass^k of the runs' tallies, emptied before each request: what every view of a run
being written costs), then the same without what finishing the run kept for its page (a live run,
or one finished by an older ToolLens).

``--record`` writes the medians, p95s and CPU times (median, least) to ``bench/pages_times.json``
(under the database and the size); ``--check`` compares the least CPU times with the
recorded ones and exits 1 when a page takes more than twice its recorded
time (scaled up on a slower host; or has no recorded time at this size). ``--file PATH`` keeps the
SQLite database it makes at PATH, and measures PATH again when it exists;
``--pg-schema NAME`` does the same with a PostgreSQL schema of the test database
(made and kept, or measured again: a 10^6-call database takes a while to build).

Usage::

    python bench/pages_bench.py                             # two runs of 10^6 calls
    python bench/pages_bench.py --calls 100000 --db postgresql
    python bench/pages_bench.py --calls 100000 --requests 30 --check   # what CI runs (200,000 calls)
    python bench/pages_bench.py --calls 100000 --requests 30 --record  # after a change meant to cost
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, delete, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostref
from store_bench import pg_db, sqlite_db, write_inputs

from app.settings import Settings
from app.store import aggregates, queries
from app.store.db import session_scope, upgrade
from app.store.gc_tuning import collect_cycles_rarely
from app.store.importer import import_file
from app.store.models import RunAggregate, RunPageKept, RunPairing
from app.store.queries import run_trajectory_count
from app.web.app import create_app
from app.web.state import ComparisonCache, FiguresCache

os.environ.setdefault("TOOLLENS_ALLOWED_HOSTS", "localhost,127.0.0.1,::1,testserver")  # TestClient's host
TIMES = Path(__file__).resolve().parent / "pages_times.json"
HTML = {"accept": "text/html"}


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    """Median and p95 in milliseconds of ``n`` calls, after one warm-up call, and the median CPU
    milliseconds of this process (client and server: in-process) per call, which a busy machine
    inflates less than the wall time."""
    fn()
    times, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    times.sort()
    return {
        "p50": statistics.median(times),
        "p95": times[max(0, -(-95 * n // 100) - 1)],
        "cpu_p50": statistics.median(cpu),
        "cpu_min": min(cpu),  # what the check reads: the least a busy minute inflates
    }


def pages(client: TestClient) -> dict[str, str]:
    tid = client.get("/api/runs/1/trajectories", params={"failure": "schema", "limit": 1}).json()["data"][0]["id"]
    return {
        "runs list /": "/",
        "run page /runs/1": "/runs/1",
        "run page, cell filter": "/runs/1?expected=ver_saldo&called=buscar_cliente",
        "trajectory page": f"/trajectories/{tid}",
        "compare page /compare?a=1&b=2": "/compare?a=1&b=2",
        "figures API /api/runs/1/figures": "/api/runs/1/figures",
    }


def measure(client: TestClient, requests: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}

    def cold() -> None:
        client.app.state.figures = FiguresCache()  # type: ignore[attr-defined]
        queries._PASS_HAT_K.clear()  # the run's header's pass^k too: a new tally (or process)
        assert client.get("/runs/1", headers=HTML).status_code == 200

    out["run page, first view after a batch"] = timed(cold, max(requests // 5, 5))
    with unkept(client, 1):  # a run receiving, or finished by an older ToolLens: computed as before
        out["run page, first view, nothing kept"] = timed(cold, max(requests // 5, 5))
    first_compare(client)
    for label, path in pages(client).items():

        def get(path: str = path) -> None:
            r = client.get(path, headers=HTML)
            assert r.status_code == 200, r.text[:300]

        out[label] = timed(get, requests)
    return out


@contextmanager
def unkept(client: TestClient, run_id: int) -> Iterator[None]:
    """The run without what finishing it kept for its page (``run_page_kept``), then with it again."""
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with session_scope(sessions, write=True) as s:
        row = s.get(RunPageKept, run_id)
        held = None if row is None else {c.name: getattr(row, c.name) for c in RunPageKept.__table__.columns}
        s.execute(delete(RunPageKept).where(RunPageKept.run_id == run_id))
    try:
        yield
    finally:
        if held is not None:
            with session_scope(sessions, write=True) as s:
                s.add(RunPageKept(**held))


def first_compare(client: TestClient) -> None:
    """The compare page's first request (its cache empty), with what finishing the runs kept
    (their usage, their pairing) and without it (what every first comparison cost before), and
    what keeping it costs when the runs are finished (a, then b: b is paired with a)."""
    sessions = client.app.state.sessions  # type: ignore[attr-defined]

    def first() -> float:
        client.app.state.comparisons = ComparisonCache()  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        assert client.get("/compare?a=1&b=2", headers=HTML).status_code == 200
        return 1000 * (time.perf_counter() - t0)

    def keep() -> None:
        with session_scope(sessions, write=True) as s:
            aggregates.keep_usage(s, 1)
            aggregates.keep(s, 2)

    with session_scope(sessions) as s:
        made = s.get(RunPairing, (1, 2)) is not None and all(
            aggregates.kept(s, rid, n) is not None
            for rid, n in ((1, run_trajectory_count(s, 1)), (2, run_trajectory_count(s, 2)))
        )
    if not made:  # a file made before they were kept
        keep()
    print(f"{'compare page, first request (cold cache)':<45} {first():7.1f} ms")
    with session_scope(sessions, write=True) as s:
        s.execute(delete(RunAggregate))
        s.execute(delete(RunPairing))
    print(f"{'  the same without what finishing kept':<45} {first():7.1f} ms")
    t0 = time.perf_counter()
    keep()
    print(f"{'  keeping it (finishing a, then b)':<45} {1000 * (time.perf_counter() - t0):7.1f} ms")


def measure_url(url: str, args: argparse.Namespace, build: Path | None) -> dict[str, dict[str, float]]:
    """Store runs a and b in ``url`` (made in the folder ``build``; None: measured as they are),
    then time the pages."""
    settings = Settings(database_url=url, auto_migrate=False)
    if build is not None:
        suite, traj, _ = write_inputs(build, args.calls)
        t0 = time.perf_counter()
        for name in ("a", "b"):
            import_file(settings, traj, suite_path=suite, run_name=name)
        print(f"stored in {time.perf_counter() - t0:.0f} s")
        if url.startswith("postgresql"):  # what autovacuum does a minute after a bulk import (off on some test servers)
            with create_engine(url).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("ANALYZE"))
    app = create_app(settings)
    collect_cycles_rarely()  # as `toollens serve` runs it: a full collection of this process's heap took 140 ms
    with TestClient(app) as client:
        n = client.get("/api/runs/1/trajectories", params={"limit": 1}).json()["count"]
        print(
            f"== runs a and b ({n:,} trajectories each), {url.split(':')[0]}, {args.requests} requests per page, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        return measure(client, args.requests)


def kept_schema(name: str) -> tuple[str, bool]:
    """The URL of a schema of the test database, and whether it was made now (else it holds the runs)."""
    from store_bench import PG_URL

    if not name.isidentifier():
        raise SystemExit(f"--pg-schema {name!r}: letters, digits and _ only")
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        made = (
            conn.execute(text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :s"), {"s": name}).first()
            is None
        )
        if made:
            conn.execute(text(f'CREATE SCHEMA "{name}"'))
    admin.dispose()
    url = f"{PG_URL}?options=-csearch_path%3D{name}"
    if made:
        upgrade(url)
    return url, made


def check(
    got: dict[str, dict[str, float]], recorded: dict[str, dict[str, float]], slower_host: float = 1.0
) -> list[str]:
    """The pages whose least CPU time is more than twice the recorded one (or never recorded).

    CPU time, not wall time, and the least of the requests, not their median: on the shared cores a
    busy minute doubled the wall time of pages that did not change, and their median CPU time too.
    ``slower_host`` (this host's reference over the recorded one, at least 1) widens the bound on a
    slower machine, never narrows it. A time recorded without ``cpu_min`` is read as its median."""
    slow = []
    for label, t in got.items():
        was = recorded.get(label)
        if was is None:
            slow.append(f"{label}: no recorded time (run with --record)")
            continue
        key = "cpu_min" if "cpu_min" in was else "cpu_p50"
        if t[key] > 2 * was[key] * slower_host:
            bound = f"twice the recorded {was[key]:.1f} ms" + (f" × {slower_host:.2f}" if slower_host > 1 else "")
            what = "least" if key == "cpu_min" else "median"
            slow.append(f"{label}: {what} CPU {t[key]:.1f} ms, more than {bound}")
    return slow


def _host_ms(line: str) -> float | None:
    """The reference of a ``hostref.line()`` (``host reference: 118 ms …``)."""
    words = line.split()
    return float(words[2]) if len(words) > 3 and words[:2] == ["host", "reference:"] and words[3] == "ms" else None


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls in each of the two runs")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--file", type=Path, help="a SQLite file: measured again if it exists, else made and kept")
    parser.add_argument("--pg-schema", help="a PostgreSQL schema: measured again if it holds runs, else made and kept")
    parser.add_argument("--times", type=Path, default=TIMES, help="the recorded times (JSON)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--record", action="store_true", help="record these times as the reference")
    what.add_argument("--check", action="store_true", help="exit 1 when a page takes more than twice its time")
    args = parser.parse_args(argv)
    host = hostref.line()
    print(host)
    with tempfile.TemporaryDirectory() as tmp:
        if args.pg_schema is not None:
            url, made = kept_schema(args.pg_schema)
            got = measure_url(url, args, build=Path(tmp) if made else None)
        elif args.file is not None:
            url = f"sqlite:///{args.file.resolve()}"
            made = not args.file.exists()
            if made:
                upgrade(url)
            got = measure_url(url, args, build=Path(tmp) if made else None)
        else:
            with sqlite_db(Path(tmp)) if args.db == "sqlite" else pg_db() as url:
                got = measure_url(url, args, build=Path(tmp))
    for label, t in got.items():
        print(
            f"{label:<45} p50 {t['p50']:7.1f} ms  p95 {t['p95']:7.1f} ms  CPU p50 {t['cpu_p50']:6.1f} ms"
            f"  least {t['cpu_min']:6.1f} ms"
        )
    key = f"{'sqlite' if args.file else 'postgresql' if args.pg_schema else args.db} {args.calls}"
    times = json.loads(args.times.read_text()) if args.times.exists() else {}
    if args.record:
        times[key] = {
            "commit": _commit(),
            "date": dt.date.today().isoformat(),
            "host": host,
            "load": round(os.getloadavg()[0], 1),
            "requests": args.requests,
            "pages": got,
        }
        args.times.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
        print(f"recorded under {key!r} in {args.times}")
    if args.check:
        kept = times.get(key, {})
        now, then = _host_ms(host), _host_ms(kept.get("host", ""))
        slow = check(got, kept.get("pages", {}), max(1.0, now / then) if now and then else 1.0)
        for line in slow:
            print(f"SLOWER: {line}")
        if slow:
            return 1
        print(f"every page within twice its recorded CPU time ({key!r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
