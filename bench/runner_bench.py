"""Runner throughput: 400 case runs of an OpenAI-compatible agent against a
fake endpoint that takes 50 ms per model call (two calls per case run: one
tool call, then the answer), at concurrency 1, 8 and 32, stored in SQLite.

The ideal wall time is model calls x 50 ms / concurrency; the target is
within 1.2x of it. The fake endpoint runs in its own process.

    .venv/bin/python bench/runner_bench.py [--cases 400] [--delay 0.05] [--levels 1,8,32]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import hostref  # noqa: E402

from app.core.suite import load_suite_document  # noqa: E402
from app.runner.session import RunRequest, run_agent  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store.db import upgrade  # noqa: E402
from tests.servers import free_port  # noqa: E402

MODEL_CALLS_PER_CASE = 2


def suite_document(cases: int) -> dict:
    document = load_suite_document(ROOT / "examples" / "suite_v1.yaml")
    template = next(c for c in document["cases"] if c["id"] == "saldo-001")
    document["cases"] = [{**template, "id": f"c{i:04d}", "question": f"{template['question']} (#{i})"}
                         for i in range(cases)]
    document["name"] = f"bench-{cases}"
    return document


def wait_up(url: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
        except urllib.error.HTTPError:
            return  # it answers (404 on GET /)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("fake endpoint did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--levels", default="1,8,32")
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.fake_llm", str(port), str(args.delay)], cwd=ROOT)
    try:
        wait_up(f"http://127.0.0.1:{port}/")
        document = suite_document(args.cases)
        print(f"{args.cases} case runs x {MODEL_CALLS_PER_CASE} model calls, {args.delay * 1000:.0f} ms per call")
        print("wall: from the first case run started to the last one stored; total: the whole run_agent call")
        print(hostref.line())
        head = ("concurrency", "ideal s", "wall s", "ratio", "case/s", "total s")
        print(f"{head[0]:>11} {head[1]:>8} {head[2]:>8} {head[3]:>6} {head[4]:>7} {head[5]:>8}  target <= 1.2x")
        for level in (int(x) for x in args.levels.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                settings = Settings(database_url=f"sqlite:///{tmp}/bench.db")
                upgrade(settings.database_url)  # the database exists before the run, as it does for users
                request = RunRequest(agent="openai", model="fake", base_url=f"http://127.0.0.1:{port}/v1",
                                     suite_document=document, run_name=f"c{level}", concurrency=level)
                started = time.perf_counter()
                out = run_agent(settings, request)
                total = time.perf_counter() - started
            assert out.summary.stored == args.cases and out.finished, out
            wall = out.summary.elapsed
            ideal = args.cases * MODEL_CALLS_PER_CASE * args.delay / level
            ratio = wall / ideal
            print(f"{level:>11} {ideal:>8.2f} {wall:>8.2f} {ratio:>6.2f} {args.cases / wall:>7.1f} {total:>8.2f}  "
                  f"{'met' if ratio <= 1.2 else 'NOT met'}")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
