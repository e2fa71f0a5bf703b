"""Start-up of the ``toollens`` command: median wall and CPU seconds of whole processes.

    .venv/bin/python bench/startup_bench.py                    # 11 runs of each command
    .venv/bin/python bench/startup_bench.py --runs 15 --against /tmp/base

``--against DIR`` also times the checkout in DIR (``git archive main app pyproject.toml examples | tar -x -C DIR``),
interleaved run by run with this tree's, so both see the same load; the last column is this tree / DIR.
``toollens`` is run as its console script runs it: the entry point its ``pyproject.toml`` names.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCORE = ["score", "examples/suite_v2.yaml", "examples/trajectories_v2.jsonl"]
COMMANDS: dict[str, list[str] | str] = {  # label: toollens arguments, or a Python statement
    "toollens --help": ["--help"],
    "toollens score --help": ["score", "--help"],
    "toollens import --help": ["import", "--help"],
    "toollens db upgrade --help": ["db", "upgrade", "--help"],
    "toollens score (examples v2)": SCORE,
    "toollens score --json": [*SCORE, "--json"],
    "python -c 'import app.cli'": "import app.cli",
    "python -c pass (the floor)": "pass",
}


def command(args: list[str] | str, tree: Path) -> list[str]:
    if isinstance(args, str):
        return [sys.executable, "-c", args]
    entry = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]["toollens"]
    module, _, function = entry.partition(":")
    script = f"import sys; sys.argv[0] = 'toollens'; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", script, *args]


def run_once(argv: list[str], pythonpath: str | None) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one process (``pythonpath``: another checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc files
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    start = time.perf_counter()
    # run in the tree measured: ``python -c`` puts the working directory first on sys.path, before PYTHONPATH
    proc = subprocess.Popen(argv, cwd=pythonpath or ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} exited {status}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--against", type=Path, help="another checkout (its app/ and pyproject.toml) to compare")
    args = parser.parse_args()
    trees: list[str | None] = [None] + ([str(args.against.resolve())] if args.against else [])
    print(
        f"median of {args.runs} runs, load {os.getloadavg()[0]:.1f}; wall s / CPU s"
        + ("  (this tree | other | ratio)" if args.against else "")
    )
    for label, cli_args in COMMANDS.items():
        argvs = {tree: command(cli_args, Path(tree) if tree else ROOT) for tree in trees}
        times: dict[str | None, list[tuple[float, float]]] = {tree: [] for tree in trees}
        for tree in trees:
            run_once(argvs[tree], tree)  # writes the .pyc files, warms the file cache
        for _ in range(args.runs):
            for tree in trees:
                times[tree].append(run_once(argvs[tree], tree))
        medians = [
            (statistics.median(w for w, _ in times[t]), statistics.median(c for _, c in times[t])) for t in trees
        ]
        cells = "  |  ".join(f"{w:.3f} / {c:.3f}" for w, c in medians)
        ratio = (
            f"  |  {medians[0][0] / medians[1][0]:.2f} / {medians[0][1] / medians[1][1]:.2f}"
            if len(medians) > 1
            else ""
        )
        print(f"{label:32} {cells}{ratio}")


if __name__ == "__main__":
    main()
