"""``bench/pages_bench.py`` still runs, and its check fails on a page slower than twice its
recorded median: two runs of 2,000 calls, times recorded beforehand by hand (one page at
0.001 ms, which no page meets; the others at a minute)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "run page, first view after a batch",
    "run page, first view, nothing kept",
    "runs list /",
    "run page /runs/1",
    "run page, cell filter",
    "trajectory page",
    "compare page /compare?a=1&b=2",
    "figures API /api/runs/1/figures",
]


def test_the_page_benchmark_fails_on_a_page_twice_as_slow_as_recorded(tmp_path: Path) -> None:
    times = tmp_path / "times.json"
    recorded = {page: {"p50": 60_000.0, "p95": 60_000.0} for page in PAGES} | {"trajectory page": {"p50": 0.001}}
    times.write_text(json.dumps({"sqlite 2000": {"pages": recorded}}))
    out = subprocess.run(
        [
            sys.executable,
            "bench/pages_bench.py",
            "--calls",
            "2000",
            "--requests",
            "3",
            "--check",
            "--times",
            str(times),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    slower = [line for line in out.stdout.splitlines() if line.startswith("SLOWER: ")]
    assert len(slower) == 1 and slower[0].startswith("SLOWER: trajectory page: median "), out.stdout
    assert slower[0].endswith("more than twice the recorded 0.0 ms")
    assert all(page in out.stdout for page in PAGES)
