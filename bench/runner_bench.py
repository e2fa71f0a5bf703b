"""Runner throughput: 400 case runs of an OpenAI-compatible agent against a
fake endpoint that takes 50 ms per model call (two calls per case run: one
tool call, then the answer), at concurrency 1, 8 and 32, stored in SQLite.

The ideal wall time is model calls x 50 ms / concurrency; the target is
within 1.2x of it, judged on the median of ``--repeat`` runs. The fake
endpoint runs in its own processes. Each level also measures the floor: a
bare aiohttp client making the same two requests per case at the same
concurrency, with no SDK, no tools and no store.

    .venv/bin/python bench/runner_bench.py [--cases 400] [--delay 0.05] [--levels 1,8,32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
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

from app.core.suites.suite import load_suite_document, parse_suite  # noqa: E402
from app.runner.session import RunRequest, run_agent  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.store.db import upgrade  # noqa: E402
from tests.servers import free_port  # noqa: E402

MODEL_CALLS_PER_CASE = 2


def suite_document(cases: int) -> dict:
    document = load_suite_document(ROOT / "examples" / "suite_v1.yaml")
    template = next(c for c in document["cases"] if c["id"] == "saldo-001")
    document["cases"] = [
        {**template, "id": f"c{i:04d}", "question": f"{template['question']} (#{i})"} for i in range(cases)
    ]
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


async def _floor_run(url: str, tools: list[dict], cases: int, level: int) -> float:
    """Wall seconds for a bare aiohttp client to make each case's two requests, ``level`` cases in flight."""
    import aiohttp
    import orjson

    headers = {"content-type": "application/json", "authorization": "Bearer not-needed"}
    pending = iter(range(cases))
    async with aiohttp.ClientSession() as session:

        async def post(body: dict) -> dict:
            async with session.post(f"{url}/chat/completions", data=orjson.dumps(body), headers=headers) as r:
                r.raise_for_status()
                return orjson.loads(await r.read())

        async def work() -> None:
            for i in pending:
                messages: list[dict] = [{"role": "user", "content": f"case {i}"}]
                answer = await post({"model": "fake", "messages": messages, "tools": tools})
                message = answer["choices"][0]["message"]
                messages += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "{}"}]
                await post({"model": "fake", "messages": messages, "tools": tools})

        started = time.perf_counter()
        await asyncio.gather(*(work() for _ in range(level)))
        return time.perf_counter() - started


def floor_ratio(url: str, document: dict, cases: int, level: int, ideal: float) -> float:
    tools = parse_suite(document, path="bench").toolset.openai_tools()
    return asyncio.run(_floor_run(url, tools, cases, level)) / ideal


def runner_once(url: str, document: dict, level: int) -> tuple[float, float]:
    """(wall, total) of one ``run_agent`` into a fresh SQLite file; every case must be stored."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/bench.db")
        upgrade(settings.database_url)  # the database exists before the run, as it does for users
        request = RunRequest(
            agent="openai", model="fake", base_url=url, suite_document=document, run_name=f"c{level}", concurrency=level
        )
        started = time.perf_counter()
        out = run_agent(settings, request)
        total = time.perf_counter() - started
    assert out.summary.stored == len(document["cases"]) and out.finished, out
    return out.summary.elapsed, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--levels", default="1,8,32")
    parser.add_argument("--repeat", type=int, default=3, help="runs per level; the median is judged (default 3)")
    parser.add_argument(
        "--endpoint-workers", type=int, default=2, help="processes serving the fake endpoint (default 2)"
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the bare-client floor")
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_llm", str(port), str(args.delay), str(args.endpoint_workers)], cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_up(f"http://127.0.0.1:{port}/")
        document = suite_document(args.cases)
        print(
            f"{args.cases} case runs x {MODEL_CALLS_PER_CASE} model calls, {args.delay * 1000:.0f} ms per call, "
            f"endpoint in {args.endpoint_workers} process(es), median of {args.repeat} runs per level"
        )
        print("wall: from the first case run started to the last one stored; total: the whole run_agent call;")
        print("floor: a bare aiohttp client making the same requests (no SDK, no tools, no store)")
        print(hostref.line())
        head = ("concurrency", "ideal s", "wall s", "ratio", "range", "case/s", "total s", "floor")
        print(
            f"{head[0]:>11} {head[1]:>8} {head[2]:>8} {head[3]:>6} {head[4]:>11} {head[5]:>7} {head[6]:>8} "
            f"{head[7]:>6}  target <= 1.2x"
        )
        for level in (int(x) for x in args.levels.split(",")):
            ideal = args.cases * MODEL_CALLS_PER_CASE * args.delay / level
            floor = "" if args.no_floor else f"{floor_ratio(url, document, args.cases, level, ideal):.2f}"
            runs = sorted((runner_once(url, document, level) for _ in range(args.repeat)), key=lambda r: r[0])
            wall, total = runs[len(runs) // 2]  # the median run (the upper one of an even count)
            ratios = [r[0] / ideal for r in runs]
            ratio = wall / ideal
            spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
            print(
                f"{level:>11} {ideal:>8.2f} {wall:>8.2f} {ratio:>6.2f} {spread:>11} {args.cases / wall:>7.1f} "
                f"{total:>8.2f} {floor:>6}  {'met' if ratio <= 1.2 else 'NOT met'}"
            )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
