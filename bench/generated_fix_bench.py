"""`toollens fix RUN --out` on seeded suites no one tuned on (issue 44, item 3).

For each seed, tests/generated_suites.py builds a suite (see bench/generated_bench.py); the simulated
agent runs it into a temporary SQLite store (confusion=0.9, the given trials and seed), `fix` reads the
run, the proposals that explain a failed trajectory are written into a candidate suite as `--out` does,
and the candidate is run with the same agent, trials and seed. Prints the failed trajectories before ->
after for each suite, then how many fell and the distribution of the fall.

    .venv/bin/python bench/generated_fix_bench.py --seeds 1000:1050 [--trials 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.generated_suites import fix_out, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1000:1050", help="START:END (end excluded)")
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    start, _, end = args.seeds.partition(":")
    started = time.monotonic()
    falls: list[float] = []
    lowered = 0
    for seed in range(int(start), int(end)):
        suite = generate(seed)
        with tempfile.TemporaryDirectory() as folder:
            before, after, chosen = fix_out(suite.document, Path(folder), trials=args.trials)
        lowered += after < before
        falls.append((before - after) / before if before else 0.0)
        print(
            f"seed {seed} {suite.language} {len(suite.tools):>2} tools: failed {before:>3} -> {after:>3} "
            f"({len(chosen)} proposals written)",
            flush=True,
        )
    q = statistics.quantiles(falls, n=4) if len(falls) > 1 else falls * 3
    print(
        f"\n{len(falls)} suites ({args.seeds}, {args.trials} trials, confusion=0.9), {time.monotonic() - started:.0f} s"
    )
    print(
        f"fix --out lowers failed trajectories in {lowered}/{len(falls)}; fall: quartiles "
        f"{q[0]:.0%} / median {q[1]:.0%} / {q[2]:.0%}"
    )


if __name__ == "__main__":
    main()
