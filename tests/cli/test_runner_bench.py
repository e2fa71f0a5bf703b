"""``bench/runner_bench.py`` still runs: the fake endpoint in two worker processes, the
bare-client floor and the runner, at a tiny size (its figures are not judged here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_runner_benchmark_runs_end_to_end() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "bench/runner_bench.py",
            "--cases",
            "6",
            "--levels",
            "1,3",
            "--repeat",
            "2",
            "--delay",
            "0.01",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "endpoint in 2 process(es), median of 2 runs per level" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if re.match(r"\s+[13]\s+\d", line)]
    assert [row[0] for row in rows] == ["1", "3"]
    for row in rows:  # concurrency, ideal, wall, ratio, range, case/s, total, floor, verdict
        ideal, wall, ratio, floor = float(row[1]), float(row[2]), float(row[3]), float(row[7])
        assert abs(ratio - wall / ideal) <= 0.005 / ideal + 0.005  # both printed to two decimals
        low, high = (float(x) for x in row[4].split("-"))
        assert low <= ratio <= high and floor > 0.9 and row[8] in ("met", "NOT")
