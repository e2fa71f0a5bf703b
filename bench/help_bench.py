"""``toollens COMMAND --help`` for every command and group: whole processes, medians.

Every command of the typer app (hidden ones left out) is asked for its help as the console
script runs it (``argv[0]`` = ``toollens``, 80 columns), ``--repeat`` times (5 unless
given), interleaved; it prints the median wall and CPU time of each and the slowest, and
exits 1 when a median passes ``--limit`` milliseconds of wall time (100 unless given)::

    python bench/help_bench.py
    python bench/help_bench.py --against /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

CLI = "import sys; sys.argv[0] = 'toollens'; from app.entry import main; main()"


def measure(tree: Path, words: list[str] | None) -> tuple[float, float]:
    """Wall and CPU seconds of one ``toollens WORDS --help`` run from ``tree`` (None: ``python -c pass``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    argv = ["-c", "pass"] if words is None else ["-c", CLI, *words, "--help"]
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=tree,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "80"},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"toollens {' '.join(words or [])} --help: exit {done.returncode}\n{done.stderr.decode()}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--limit", type=float, default=100.0, help="milliseconds of wall time (median)")
    parser.add_argument("--against", type=Path, help="also time this checkout (interleaved)")
    args = parser.parse_args(argv)
    from app.commands.help_text import commands

    trees = [Path(__file__).resolve().parents[1], *([args.against.resolve()] if args.against else [])]
    paths = commands()
    times: dict[tuple[int, str], list[tuple[float, float]]] = {}
    floor: list[tuple[float, float]] = []
    for _ in range(args.repeat):
        floor.append(measure(trees[0], None))
        for words in paths:
            for i, tree in enumerate(trees):
                times.setdefault((i, " ".join(words)), []).append(measure(tree, words))
    print(
        f"toollens COMMAND --help, medians of {args.repeat} (ms, wall / CPU)"
        + (f"; columns: {', '.join(str(t) for t in trees)}" if len(trees) > 1 else "")
    )
    slow = []
    for words in paths:
        name = " ".join(words)
        cells = []
        for i in range(len(trees)):
            wall, cpu = median([w for w, _ in times[(i, name)]]), median([c for _, c in times[(i, name)]])
            cells.append(f"{wall * 1000:6.0f} / {cpu * 1000:4.0f}")
            if i == 0 and wall * 1000 > args.limit:
                slow.append(name or "(root)")
        print(f"  toollens {name + ' ' if name else ''}--help".ljust(44) + "   ".join(cells))
    print(
        "  python -c pass (the floor)".ljust(44)
        + f"{median([w for w, _ in floor]) * 1000:6.0f} / {median([c for _, c in floor]) * 1000:4.0f}"
    )
    worst = max(paths, key=lambda w: median([x for x, _ in times[(0, " ".join(w))]]))
    print(
        f"slowest: toollens {' '.join(worst)} --help, "
        f"{median([x for x, _ in times[(0, ' '.join(worst))]]) * 1000:.0f} ms"
    )
    if slow:
        print(f"over {args.limit:.0f} ms: {', '.join(slow)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
