"""Converting and scoring a BFCL result file: wall time, median of N runs.

    .venv/bin/python bench/bfcl_results_bench.py [--category multi_turn_base] [--repeat 3]

Reads a model's BFCL result file and the category's questions (the team's
shared data, or ``TOOLLENS_TEST_DATA``: ``bfcl/results/AIREV-Agent-0.8B/``
and ``bfcl/``). Each run is two
fresh processes, as a person would type them: ``toollens convert --from bfcl
RESULT --questions DIR --out OUT`` (BFCL's verdict included: for multi-turn,
both call lists executed on bfcl-eval's classes when it is installed), then
the scoring of every suite written with its trajectories (``score`` of each
``suite*.yaml`` against the records of its cases, leniently, as imported
suites are). Prints each run's seconds and the median of the total.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / os.environ.get("TOOLLENS_TEST_DATA", "../shared/data")).resolve() / "bfcl"  # as tests/resources.py
PYTHON = sys.executable

CLI = "import sys; sys.argv[0] = 'toollens'; from app.entry import main; main()"
SCORE = """
import sys
from pathlib import Path
from app.core.reports.evaluate import score_trajectories
from app.core.records import read_jsonl
from app.core.suites.suite_check import validate_suite_file
out = Path(sys.argv[1])
records = list(read_jsonl(out / "trajectories.jsonl"))
scored = 0
for path in sorted(out.glob("suite*.yaml")):
    suite, _ = validate_suite_file(path, lenient=True)
    mine = [r for r in records if r.case_id in suite.by_id]
    score_trajectories(suite, mine).to_json()
    scored += len(mine)
print(scored)
"""


def run_once(result: Path, questions: Path, out: Path) -> tuple[float, float, str]:
    start = time.perf_counter()
    subprocess.run(
        [PYTHON, "-c", CLI, "convert", "--from", "bfcl", str(result), "--questions", str(questions), "--out", str(out)],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    converted = time.perf_counter()
    scored = subprocess.run([PYTHON, "-c", SCORE, str(out)], check=True, cwd=ROOT, capture_output=True, text=True)
    done = time.perf_counter()
    return converted - start, done - converted, scored.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--category", default="multi_turn_base")
    parser.add_argument("--model", default="AIREV-Agent-0.8B")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    result = DATA / "results" / args.model / f"BFCL_v4_{args.category}_result.json"
    if not result.is_file():
        sys.exit(f"{result}: not found (the shared BFCL data)")
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            convert_s, score_s, scored = run_once(result, DATA, Path(tmp) / f"out{i}")
            totals.append(convert_s + score_s)
            print(
                f"run {i + 1}: convert {convert_s:.2f} s, score {score_s:.2f} s ({scored} trajectories), "
                f"total {convert_s + score_s:.2f} s"
            )
    print(f"{args.category}: median total {statistics.median(totals):.2f} s over {args.repeat} runs")


if __name__ == "__main__":
    main()
