"""Store benchmark: import throughput and read latency, SQLite and PostgreSQL.

For each size (default 10^5 and 10^6 calls, about six per trajectory) it
writes seeded synthetic trajectories (``score_bench``'s generator: every
failure family present), then measures:

* ``toollens import`` throughput (scoring included) into a fresh SQLite file
  and into a fresh PostgreSQL schema, in scored calls per second;
* ``POST /api/runs/{id}/trajectories`` throughput in batches of 500
  trajectories, in-process through the app factory (client-side JSON encoding
  included, so the figure is conservative);
* server-side read latency (p50/p95 over 200 requests, in-process) of a run's
  figures, its confusion matrix and a filtered page of trajectories, on the
  largest run.

Usage::

    python bench/store_bench.py                     # 10^5 and 10^6 calls
    python bench/store_bench.py --sizes 20000 --no-pg
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hostref
from score_bench import Generator, build_plans, build_suite_doc

from app.core.suites.suite import parse_suite
from app.settings import Settings
from app.store.db import upgrade
from app.store.importer import import_file
from app.web.app import create_app

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SEED = 7


def write_inputs(folder: Path, calls: int) -> tuple[Path, Path, int]:
    plans = build_plans(SEED)
    doc = build_suite_doc(plans)
    suite_path = folder / "suite.json"
    suite_path.write_text(json.dumps(doc, ensure_ascii=False))
    traj = folder / f"t{calls}.jsonl"
    with traj.open("w", encoding="utf-8") as out:
        stats = Generator(parse_suite(doc), plans, SEED).write(out, calls)
    return suite_path, traj, stats.calls


@contextmanager
def sqlite_db(folder: Path) -> Iterator[str]:
    url = f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}"
    upgrade(url)
    yield url


@contextmanager
def pg_db() -> Iterator[str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    try:
        upgrade(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@dataclass
class Rate:
    """Calls per wall second, and per CPU second of this process and of its
    children (the import's scoring worker), which a busy machine disturbs less."""

    calls: int
    wall: float
    cpu: float
    child_cpu: float = 0.0

    def __str__(self) -> str:
        child = f", worker {self.child_cpu:.2f}s" if self.child_cpu else ""
        return (
            f"{self.calls / self.wall:>10,.0f} calls/s  (wall {self.wall:.2f}s; cpu {self.cpu:.2f}s = "
            f"{self.calls / self.cpu:,.0f} calls per cpu second{child})"
        )

    def as_server(self) -> str:
        """For a server measured from outside: ``cpu`` is the server's, ``child_cpu`` the client's."""
        return (
            f"{self.calls / self.wall:>10,.0f} calls/s  (wall {self.wall:.2f}s; server cpu {self.cpu:.2f}s = "
            f"{self.calls / self.cpu:,.0f} calls per cpu second, client {self.child_cpu:.2f}s)"
        )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def best(runs: Sequence[Rate]) -> Rate:
    return min(runs, key=lambda r: r.wall)


def bench_import(url: str, suite: Path, traj: Path, calls: int) -> Rate:
    start, cpu, child = time.perf_counter(), time.process_time(), _children_cpu()
    result = import_file(Settings(database_url=url, auto_migrate=False), traj, suite_path=suite, run_name="bench")
    elapsed, cpu, child = time.perf_counter() - start, time.process_time() - cpu, _children_cpu() - child
    assert result.calls == calls, (result.calls, calls)
    return Rate(calls, elapsed, cpu, child)


def bench_api(url: str, suite: Path, traj: Path, calls: int, batch: int = 500) -> Rate:
    doc = json.loads(suite.read_text())
    with TestClient(create_app(Settings(database_url=url, auto_migrate=False))) as client:
        run = client.post("/api/runs", json={"name": "api", "suite": doc}).json()["id"]
        records = [json.loads(line) for line in traj.open(encoding="utf-8")]
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(records), batch):
            r = client.post(f"/api/runs/{run}/trajectories", json={"trajectories": records[i : i + batch]})
            assert r.status_code == 200, r.text
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    return Rate(calls, elapsed, cpu)


def bench_api_http(url: str, suite: Path, traj: Path, calls: int, batch: int = 500) -> Rate:
    """The same batches over real HTTP to ``toollens serve`` in its own process, as a
    deployment runs; the client sends bodies it encoded before the clock starts."""
    port = _free_port()
    env = {**os.environ, "TOOLLENS_DATABASE_URL": url}
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=120) as client:
            for _ in range(200):
                try:
                    client.get("/api/health")
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            document = json.loads(suite.read_text())
            run = client.post("/api/runs", json={"name": "api-http", "suite": document}).json()["id"]
            lines = traj.read_text(encoding="utf-8").splitlines()
            bodies = [
                b'{"trajectories":[' + ",".join(lines[i : i + batch]).encode() + b"]}"
                for i in range(0, len(lines), batch)
            ]
            headers = {"content-type": "application/json"}
            server_cpu = _process_cpu(server.pid)
            start, cpu = time.perf_counter(), time.process_time()
            for body in bodies:
                r = client.post(f"/api/runs/{run}/trajectories", content=body, headers=headers)
                assert r.status_code == 200, r.text
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            server_cpu = _process_cpu(server.pid) - server_cpu
    finally:
        server.terminate()
        server.wait(timeout=10)
    return Rate(calls, elapsed, server_cpu, cpu)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of another process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_database(
    name: str,
    database: Callable[[], Any],
    suite: Path,
    traj: Path,
    calls: int,
    repeat: int,
    with_reads: bool,
    import_target: str = "",
    read_target: str = "",
) -> None:
    """Import ``repeat`` times into fresh databases, print the best; then, on
    the last one, the read latencies."""
    runs, reads = [], {}
    for i in range(repeat):
        with database() as url:
            runs.append(bench_import(url, suite, traj, calls))
            if with_reads and i == repeat - 1:
                reads = bench_reads(url)
    print(f"import  {name} {best(runs)}{import_target}")
    for what, (p50, p95) in reads.items():
        print(f"read    {name} {what:<30} p50 {p50:6.1f} ms  p95 {p95:6.1f} ms{read_target}")


def latencies(fn: Callable[[], Any], n: int = 200) -> tuple[float, float]:
    fn()  # warm
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * len(times)) - 1]


def bench_reads(url: str) -> dict[str, tuple[float, float]]:
    with TestClient(create_app(Settings(database_url=url, auto_migrate=False))) as client:
        run = client.get("/api/runs", params={"limit": 1}).json()["data"][0]["id"]

        def get(path: str, **params: Any) -> Callable[[], Any]:
            def call() -> Any:
                r = client.get(path, params=params)
                assert r.status_code == 200, r.text
                return r

            return call

        return {
            "figures": latencies(get(f"/api/runs/{run}/figures")),
            "confusion": latencies(get(f"/api/runs/{run}/confusion")),
            "trajectories?failure=schema": latencies(get(f"/api/runs/{run}/trajectories", failure="schema")),
            "trajectories?expected&called": latencies(
                get(f"/api/runs/{run}/trajectories", expected="buscar_pedido", called="buscar_producto")
            ),
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--no-api", action="store_true", help="skip the API throughput")
    parser.add_argument("--repeat", type=int, default=1, help="throughput runs per measurement; the best is shown")
    parser.add_argument("--no-reads", action="store_true", help="skip the read latencies")
    args = parser.parse_args(argv)
    print(f"best of {args.repeat} run(s) by wall time; cpu = this process (the worker's cpu shown apart)")
    print(hostref.line())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for size in args.sizes:
            suite, traj, calls = write_inputs(folder, size)
            print(f"== {calls:,} calls ({traj.stat().st_size / 2**20:.0f} MiB of JSONL)")
            with_reads = size == max(args.sizes) and not args.no_reads
            bench_database(
                "sqlite    ",
                lambda: sqlite_db(folder),
                suite,
                traj,
                calls,
                args.repeat,
                with_reads,
                import_target="  (target 50,000)",
                read_target="  (target p95 < 50)",
            )
            if not args.no_pg:
                bench_database("postgresql", pg_db, suite, traj, calls, args.repeat, with_reads)
            if not args.no_api and size == min(args.sizes):
                runs = []
                for _ in range(args.repeat):
                    with sqlite_db(folder) as url:
                        runs.append(bench_api(url, suite, traj, calls))
                print(f"api     sqlite     {best(runs)}  (in-process TestClient, encoding included; batches of 500)")
                runs = []
                for _ in range(args.repeat):
                    with sqlite_db(folder) as url:
                        runs.append(bench_api_http(url, suite, traj, calls))
                print(f"api     sqlite     {best(runs).as_server()}  (HTTP to `toollens serve`; target 20,000)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
