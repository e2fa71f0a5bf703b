"""Dump the blame of every failed conversation of the real τ² and tau-bench files, to compare two trees.

A speed-up of ``app/core/score/blame.py`` must leave every verdict as it was. For each file it
converts it (``toollens convert``), writes ``toollens score --json`` to ``OUT/NAME.json``
and every trajectory's whole blame (each finding, each note) to ``OUT/NAME.blame.json``,
with the tree this Python imports; then ``diff -r`` two such folders::

    PYTHONPATH=/path/to/before python bench/blame_dump.py --data DIR --out before
    PYTHONPATH=. python bench/blame_dump.py --data DIR --out after
    diff -r before after && echo identical
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_verdicts import REAL as EVERY_REAL_FILE  # bench/ is not a package

# the files with conversations a blame reads (real_verdicts.REAL names every real file)
REAL = {name: EVERY_REAL_FILE[name] for name in ("tau-bench-airline", "tau2-telecom", "tau2-airline", "tau2-retail")}


def dump(data: Path, out: Path) -> None:
    from app.commands.score import load_suites
    from app.core.records import read_jsonl
    from app.core.score.scoring import Scorer

    out.mkdir(parents=True, exist_ok=True)
    toollens = [sys.executable, "-m", "app.cli"]
    for name, (kind, source, options) in REAL.items():
        with tempfile.TemporaryDirectory() as tmp:
            opts = [str(data / o[5:]) if o.startswith("DATA/") else o for o in options]
            subprocess.run(
                [*toollens, "convert", "--from", kind, str(data / source), *opts, "--out", tmp],
                check=True,
                capture_output=True,
            )
            suite, trajectories = Path(tmp) / "suite.yaml", Path(tmp) / "trajectories.jsonl"
            done = subprocess.run(
                [*toollens, "score", str(suite), str(trajectories), "--json"], capture_output=True, text=True
            )
            (out / f"{name}.json").write_text(done.stdout, encoding="utf-8")
            suites, _ = load_suites(suite, trajectories, lenient=False)
            scorer = Scorer(suites[0])
            blames = [[t.case_id, t.trial, scorer.score(t).blame] for t in read_jsonl(trajectories)]
            (out / f"{name}.blame.json").write_text(
                json.dumps(blames, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            failed = sum(1 for b in blames if b[2] is not None)
            print(f"{name}: {len(blames)} trajectories, {failed} blamed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, required=True, help="the folder of the real files")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dump(args.data, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
