"""The stand-in and lint on seeded suites no one tuned on (issue 44, items 2, 3 and 5).

For each seed, tests/generated_suites.py builds a Spanish or English toolset of 5-30 tools from the
phrasing pools of tests/phrasing_pools/ and one case per tool; the simulated agent runs it
(confusion=0.9, other rates as default) with the same seed and trials three ways: as generated, with a
person's delimitation on the three most confused pairs (on the tool called by mistake, naming the
expected one), and with one sentence pasted on every tool. It also asks lint whether the most
confused pair is flagged (lookalike_pair or similar_pair) before any run.

    .venv/bin/python bench/generated_bench.py --seeds 1000:1200 [--trials 4]

Seeds 0-99 are where the rules were looked at and tuned; docs/fix.md reports seeds 1000-1199.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.core.advise.lint import lint_toolset
from app.core.suites.suite import parse_suite
from tests.generated_suites import cells, delimited, generate, most_confused, pasted


def seeds(spec: str) -> range:
    start, _, end = spec.partition(":")
    return range(int(start), int(end))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1000:1200", help="START:END (end excluded)")
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    started = time.monotonic()
    lowered = same = flagged = total = 0
    falls: list[float] = []
    drift: list[int] = []
    for seed in seeds(args.seeds):
        suite = generate(seed)
        base = cells(suite.document, trials=args.trials)
        before = sum(base.values())
        after = sum(cells(delimited(suite, most_confused(base)), trials=args.trials).values())
        glued = cells(pasted(suite), trials=args.trials)
        top = most_confused(base, 1)
        found = {
            frozenset(f.tools)
            for f in lint_toolset(parse_suite(suite.document).toolset)
            if f.rule in ("lookalike_pair", "similar_pair")
        }
        hit = not top or frozenset(top[0]) in found
        total += 1
        lowered += after < before
        same += glued == base
        flagged += hit
        falls.append((before - after) / before if before else 0.0)
        drift.append(sum(glued.values()) - before)
        print(
            f"seed {seed} {suite.language} {len(suite.tools):>2} tools: confusions {before:>3}, "
            f"delimited {after:>3}, pasted {sum(glued.values()):>3}, "
            f"top pair {'flagged' if hit else 'NOT flagged'}",
            flush=True,
        )
    q = statistics.quantiles(falls, n=4) if len(falls) > 1 else falls * 3
    print(f"\n{total} suites ({args.seeds}, {args.trials} trials, confusion=0.9), {time.monotonic() - started:.0f} s")
    print(
        f"targeted delimitation lowers confusions in {lowered}/{total}; fall: quartiles "
        f"{q[0]:.0%} / {q[1]:.0%} / {q[2]:.0%}"
    )
    print(
        f"pasted sentence: the same calls, trial by trial, in {same}/{total}; confusions moved by "
        f"{min(drift)}..{max(drift)}"
    )
    print(f"lint flags the most confused pair before any run in {flagged}/{total}")


if __name__ == "__main__":
    main()
