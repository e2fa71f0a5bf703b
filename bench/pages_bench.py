"""Page benchmark: server time of the run, trajectory and compare pages on
large runs (two runs of N calls each, default 10^6), p50/p95 over 100
requests, in-process through the app factory, on SQLite (or PostgreSQL:
``--db postgresql``). The run page is also timed as the first view after a
batch lands (its figures cache emptied before each request: what every view
of a run being written costs).

Usage::

    python bench/pages_bench.py                 # two runs of 10^6 calls
    python bench/pages_bench.py --calls 100000 --db postgresql
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_bench import latencies, pg_db, sqlite_db, write_inputs

from app.settings import Settings
from app.store.importer import import_file
from app.web.app import create_app
from app.web.state import FiguresCache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        suite, traj, calls = write_inputs(folder, args.calls)
        with sqlite_db(folder) if args.db == "sqlite" else pg_db() as url:
            settings = Settings(database_url=url, auto_migrate=False)
            for name in ("a", "b"):
                import_file(settings, traj, suite_path=suite, run_name=name)
            with TestClient(create_app(settings)) as client:
                got = client.get("/api/runs/1/trajectories", params={"limit": 1})
                assert got.status_code == 200, got.text[:300]
                n = got.json()["count"]
                print(f"== two runs of {calls:,} calls ({n:,} trajectories) each, {args.db}")

                def cold() -> None:
                    client.app.state.figures = FiguresCache()  # type: ignore[attr-defined]
                    assert client.get("/runs/1", headers={"accept": "text/html"}).status_code == 200

                p50, p95 = latencies(cold, max(args.requests // 5, 5))
                print(f"{'run page, first view after a batch':<45} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
                tid = client.get("/api/runs/1/trajectories", params={"failure": "schema", "limit": 1}).json()
                tid = tid["data"][0]["id"]
                pages = {
                    "run page /runs/1": "/runs/1",
                    "run page, cell filter": "/runs/1?expected=ver_saldo&called=buscar_cliente",
                    f"trajectory page /trajectories/{tid}": f"/trajectories/{tid}",
                    "compare page /compare?a=1&b=2": "/compare?a=1&b=2",
                }
                t0 = time.perf_counter()
                client.get("/compare?a=1&b=2", headers={"accept": "text/html"})
                print(f"{'compare page, first request (cold cache)':<45} {1000 * (time.perf_counter() - t0):7.1f} ms")
                for label, path in pages.items():
                    def get(path: str = path) -> None:
                        r = client.get(path, headers={"accept": "text/html"})
                        assert r.status_code == 200, r.text[:300]

                    p50, p95 = latencies(get, args.requests)
                    print(f"{label:<45} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  (target p95 < 100)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
