"""Reads at scale: the run pages, the trajectory timeline, the compare page and
``/api/runs/{id}/figures`` on a PostgreSQL run of 10^7 calls, timed against a
real ``toollens serve`` over HTTP (p50/p95 over N requests each).

The data: two seed runs (``a`` and ``b``, the same cases, different seeds) are
scored and stored by ``toollens import`` (``score_bench``'s generator: every
failure family, injected faults of every kind and outcome), then copied inside
PostgreSQL until run ``a`` holds ``--calls`` calls: copy k renumbers the trials
(trial + k x the seed's trial count), so every copy is a new trial of the same
cases, and the run's counters are multiplied by the number of copies, exactly
what storing the copies batch by batch would have added up. Run ``b`` gets
the same number of copies. Everything lives in a schema of its own, dropped at
the end unless ``--keep``; ``--schema`` measures a kept one again.

Usage::

    python bench/scale_reads.py                          # 10^7 calls per run
    python bench/scale_reads.py --calls 1000000 --requests 20
    python bench/scale_reads.py --calls 10000000 --keep  # prints the schema to reuse
    python bench/scale_reads.py --schema bench_scale_ab12cd   # measure a kept schema again
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostref
from score_bench import Generator, build_plans, build_suite_doc
from store_bench import PG_URL, _free_port, _process_cpu

from app.core.suites.suite import parse_suite
from app.settings import Settings
from app.store.db import upgrade
from app.store.importer import import_file
from app.store.models import CallRow, TrajectoryRow

SEEDS = {"a": 7, "b": 8}


def schema_url(base: str, schema: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


# what an agent's records carry besides its calls (``usage``): the model of each request, its price known or not
USAGE_MODELS = ("gpt-4o", "gpt-4o", "gpt-4o", "claude-3-5-sonnet", "gpt-4o-mini", "my-llama")


def add_usage(record: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``record`` with a request to the model before each of its calls and one for its answer
    (``model_calls``: tokens split, cached, unsplit or missing, a latency or none) and each call's
    ``latency_ms``: every branch the usage figures take."""
    requests = []
    for _ in range(len(record["calls"]) + 1):
        request: dict[str, Any] = {"model": rng.choice(USAGE_MODELS)}
        roll = rng.random()
        if roll < 0.9:  # split, some of the prompt read from a cache
            request["input_tokens"] = rng.randint(200, 6000)
            request["output_tokens"] = rng.randint(5, 400)
            if rng.random() < 0.5:
                request["cached_tokens"] = rng.randint(0, request["input_tokens"])
        elif roll < 0.95:  # a count without the split (never priced)
            request["total_tokens"] = rng.randint(100, 5000)
        if rng.random() < 0.97:
            request["latency_ms"] = round(rng.uniform(80.0, 4000.0), 1)
        requests.append(request)
    for call in record["calls"]:
        if rng.random() < 0.98:
            call["latency_ms"] = round(rng.uniform(1.0, 900.0), 2)
    return {**record, "model_calls": requests}


def seed_runs(url: str, seed_calls: int, cases: int, *, usage: bool = False) -> int:
    """Store runs ``a`` and ``b`` of about ``seed_calls`` calls each; the seed's trial count.
    ``usage``: their records carry model requests and call latencies (``add_usage``)."""
    plans = build_plans(7, cases)
    doc = build_suite_doc(plans)
    settings = Settings(database_url=url, auto_migrate=False)
    trials = 0
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "suite.json"
        suite.write_text(json.dumps(doc, ensure_ascii=False))
        for name, seed in SEEDS.items():
            path = Path(tmp) / f"{name}.jsonl"
            with path.open("w", encoding="utf-8") as out:
                stats = Generator(parse_suite(doc), plans, seed).write(out, seed_calls)
            if usage:
                rng = random.Random(seed)
                lines = path.read_text(encoding="utf-8").splitlines()
                path.write_text(
                    "".join(json.dumps(add_usage(json.loads(x), rng), ensure_ascii=False) + "\n" for x in lines),
                    encoding="utf-8",
                )
            trials = max(trials, math.ceil(stats.trajectories / len(plans)))
            import_file(settings, path, suite_path=suite, run_name=name)
    return trials


def _columns(table: Any, shifted: dict[str, str]) -> tuple[str, str]:
    names = [c.name for c in table.columns]
    return ", ".join(f'"{n}"' for n in names), ", ".join(shifted.get(n, f'"{n}"') for n in names)


def replicate(engine: Engine, copies: int, trials: int) -> None:
    """Copy every stored trajectory (with its calls and tags) ``copies - 1`` times as new trials."""
    with engine.connect() as conn:
        s = int(conn.scalar(text("SELECT max(id) FROM trajectories")) or 0)
        c = int(conn.scalar(text("SELECT max(id) FROM calls")) or 0)
    start = time.perf_counter()
    for k in range(1, copies):  # integers of ours, written into the statements (bound, psycopg makes them int2)
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
        if k % 10 == 0 or k == copies - 1:
            print(f"  copy {k + 1}/{copies}  ({time.perf_counter() - start:.0f} s)", flush=True)
    with engine.begin() as conn:
        conn.execute(text("UPDATE run_counters SET value = value * :n"), {"n": copies})
        for table in ("trajectories", "calls"):
            conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE trajectories, trajectory_tags, calls, run_counters"))


@contextmanager
def server(url: str) -> Iterator[tuple[httpx.Client, int]]:
    """``toollens serve`` in its own process."""
    port = _free_port()
    env = {**os.environ, "TOOLLENS_DATABASE_URL": url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            for _ in range(400):
                try:
                    client.get("/api/health")
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            yield client, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def pages(client: httpx.Client) -> dict[str, str]:
    """Every page measured: the run page and each of its filters, deep pages, the
    API's trajectory list by case, a timeline, the compare page, the figures."""
    runs = {r["name"]: r for r in client.get("/api/runs").json()["data"]}
    a, b = runs["a"]["id"], runs["b"]["id"]
    n = runs["a"]["trajectories"]
    cells = client.get(f"/api/runs/{a}/confusion").json()["cells"]
    wrong = next(
        x
        for x in cells
        if x["expected"] != x["called"]
        and not x["hallucinated"]
        and x["called"] != "(missing)"
        and x["expected"] != "(extra)"
    )
    missing = next(x for x in cells if x["called"] == "(missing)")
    tid = client.get(f"/api/runs/{a}/trajectories", params={"failure": "schema", "limit": 1}).json()["data"][0]["id"]
    case = client.get(f"/api/runs/{a}/trajectories", params={"limit": 1}).json()["data"][0]["case_id"]
    r = f"/runs/{a}"
    return {
        "run page": r,
        "run page, failure=schema": f"{r}?failure=schema",
        "run page, failure=recovery_hallucinated": f"{r}?failure=recovery_hallucinated",
        f"run page, cell {wrong['expected']}>{wrong['called']}": f"{r}?expected={wrong['expected']}"
        f"&called={wrong['called']}",
        f"run page, called=(missing) of {missing['expected']}": f"{r}?expected={missing['expected']}&called=(missing)",
        "run page, called=cancelar_pedido": f"{r}?called=cancelar_pedido",
        "run page, fault_kind=timeout": f"{r}?fault_kind=timeout",
        "run page, outcome=hallucinated": f"{r}?outcome=hallucinated",
        "run page, passed=false": f"{r}?passed=false",
        "run page, passed=true": f"{r}?passed=true",
        "run page, fault_kind+outcome": f"{r}?fault_kind=http_503&outcome=recovered",
        "run page, last page": f"{r}?offset={max(n - 50, 0)}",
        "run page, failure=schema, deep page": f"{r}?failure=schema&offset={n // 20}",
        "run page, passed=false, deep page": f"{r}?passed=false&offset={n // 10}",
        "api trajectories, case_id": f"/api/runs/{a}/trajectories?case_id={case}",
        "api trajectories, last page": f"/api/runs/{a}/trajectories?offset={max(n - 50, 0)}",
        "trajectory timeline": f"/trajectories/{tid}",
        "compare page a/b": f"/compare?a={a}&b={b}",
        "api figures": f"/api/runs/{a}/figures",
        "api figures, deep cases page": f"/api/runs/{a}/figures?cases_offset={n // 2}",
    }


def measure(client: httpx.Client, path: str, n: int, budget: float) -> tuple[float, float, float, int]:
    """The first request (cold: nothing cached in the server) and p50/p95 of the next ``n``
    (fewer once ``budget`` seconds are spent, at least 5)."""
    headers = {"accept": "text/html", "accept-encoding": "gzip"}

    def get() -> float:
        t0 = time.perf_counter()
        r = client.get(path, headers=headers)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        return (time.perf_counter() - t0) * 1000

    first = get()
    times: list[float] = []
    spent = time.perf_counter()
    while len(times) < n and (len(times) < 5 or time.perf_counter() - spent < budget):
        times.append(get())
    times.sort()
    p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
    return first, statistics.median(times), p95, len(times)


def run_bench(url: str, args: argparse.Namespace) -> None:
    with server(url) as (client, pid):
        paths = pages(client)
        print(f"{'page':<52} {'first':>8} {'p50':>8} {'p95':>8}   n  (ms)")
        for label, path in paths.items():
            cpu = _process_cpu(pid)
            first, p50, p95, n = measure(client, path, args.requests, args.budget)
            cpu = _process_cpu(pid) - cpu
            mark = "" if p95 < 1000 else "  > 1 s"
            print(
                f"{label[:52]:<52} {first:8.0f} {p50:8.0f} {p95:8.0f} {n:3d}  server cpu {cpu:5.1f}s{mark}", flush=True
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000_000, help="calls in run a (and b)")
    parser.add_argument("--seed-calls", type=int, default=100_000, help="calls scored and stored per seed run")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per page before stopping early")
    parser.add_argument("--url", default=PG_URL, help="a PostgreSQL database (a schema is made in it)")
    parser.add_argument("--schema", help="measure this kept schema again (no generation)")
    parser.add_argument("--keep", action="store_true", help="keep the schema (its name is printed)")
    args = parser.parse_args(argv)
    print(hostref.line())
    admin = create_engine(args.url)
    schema = args.schema or f"bench_scale_{uuid.uuid4().hex[:8]}"
    url = schema_url(args.url, schema)
    keep = args.keep or bool(args.schema)
    try:
        if not args.schema:
            with admin.begin() as conn:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            upgrade(url)
            t0 = time.perf_counter()
            trials = seed_runs(url, args.seed_calls, args.cases)
            print(f"seed runs a and b stored in {time.perf_counter() - t0:.0f} s", flush=True)
            engine = create_engine(url)
            with engine.connect() as conn:
                seeded = int(
                    conn.scalar(text("SELECT count(*) FROM calls c JOIN runs r ON r.id = c.run_id WHERE r.name = 'a'"))
                    or 0
                )
            copies = max(1, math.ceil(args.calls / seeded))
            t0 = time.perf_counter()
            replicate(engine, copies, trials)
            engine.dispose()
            print(
                f"copied to {copies} x {seeded:,} calls per run in {time.perf_counter() - t0:.0f} s (schema {schema})",
                flush=True,
            )
        with create_engine(url).connect() as conn:
            sizes = conn.execute(
                text(
                    "SELECT r.name, (SELECT value FROM run_counters WHERE run_id = r.id AND kind = 'count' "
                    "AND a = 'trajectories'), (SELECT count(*) FROM calls WHERE run_id = r.id) "
                    "FROM runs r ORDER BY r.id"
                )
            ).all()
            size = conn.scalar(
                text(
                    "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s "
                    "AND c.relkind = 'r'"
                ),
                {"s": schema},
            )
        for name, trajs, calls in sizes:
            print(f"run {name}: {int(trajs):,} trajectories, {int(calls):,} calls")
        print(f"schema {schema}: {size} on disk")
        run_bench(url, args)
    finally:
        if keep:
            print(
                f'kept schema {schema}: --schema {schema} measures it again; DROP SCHEMA "{schema}" CASCADE removes it'
            )
        else:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
