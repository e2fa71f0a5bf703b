"""Dump ``toollens score --json`` of every real file of the shared data, to compare two trees.

A speed-up must leave every verdict as it was: convert each real file once (``--work``
keeps the converted folders), score each with the tree this Python imports, and write the
JSON reports to ``OUT/NAME.json``; then ``diff -r`` two such folders::

    PYTHONPATH=/path/to/before python bench/real_verdicts.py --data DIR --work W --out before
    PYTHONPATH=. python bench/real_verdicts.py --data DIR --work W --out after
    diff -r before after && echo identical

The tau-bench sample is also scored repeated to about 60,000 calls (as ``score_bench.py
--real`` scores it), so that memos filled by earlier trajectories are exercised too.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import score_bench

# name -> (source relative to the data folder, convert options; DATA/... names another shared file)
REAL: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "tau-bench-airline": (
        "tau-bench",
        "tau_bench_gpt-4o_airline_tasks00-24.json",
        ("--tools", "DATA/tau_bench_tool_schemas_airline_retail.json"),
    ),
    "tau-bench-inferred": ("tau-bench", "tau_bench_gpt-4o_airline_tasks00-24.json", ()),
    "bfcl-simple": ("bfcl", "bfcl/BFCL_v4_simple_python.json", ()),
    "bfcl-parallel-multiple": ("bfcl", "bfcl/BFCL_v4_parallel_multiple.json", ()),
    "bfcl-irrelevance": ("bfcl", "bfcl/BFCL_v4_irrelevance.json", ()),
    "bfcl-multi-turn": ("bfcl", "bfcl/BFCL_v4_multi_turn_base.json", ()),
    **{
        f"bfcl-results-{c}": (
            "bfcl",
            f"bfcl/results/AIREV-Agent-0.8B/BFCL_v4_{c}_result.json",
            ("--questions", "DATA/bfcl"),
        )
        for c in ("simple_python", "parallel_multiple", "irrelevance", "multi_turn_base")
    },
    "toolbench": ("toolbench", "toolbench", ()),
    "tau2-telecom": ("tau2", "tau2/gpt-4o_telecom_pr17.json", ()),
    "tau2-airline": ("tau2", "tau2/claude-sonnet-4-6_airline_ironforge.json", ()),
    "tau2-retail": ("tau2", "tau2/toolorchestra_retail_gpt-4.1-mini.json", ()),
    "tau2-retail-schemas": (
        "tau2",
        "tau2/toolorchestra_retail_gpt-4.1-mini.json",
        ("--tools", "DATA/tau_bench_tool_schemas_airline_retail.json"),
    ),
    "inspect-json": ("inspect", "inspect/inspect_ai_browser_gpt-4o-mini.json", ()),
    "inspect-eval": ("inspect", "inspect/inspect-action_oxdna_claude-opus-4-1.eval", ()),
}
TOOLLENS = [sys.executable, "-m", "app.entry"]  # what the console script runs


def convert(data: Path, work: Path) -> list[str]:
    """Each real file converted into ``work/NAME`` (kept when already there): the names converted."""
    names = []
    for name, (fmt, relative, options) in REAL.items():
        out = work / name
        if not (data / relative).exists():
            print(f"skipped {name}: no {relative}", file=sys.stderr)
            continue
        if not (out / "trajectories.jsonl").exists():
            given = [str(data / o[5:]) if o.startswith("DATA/") else o for o in options]
            subprocess.run(
                [*TOOLLENS, "convert", "--from", fmt, str(data / relative), "--out", str(out), *given],
                check=True,
                capture_output=True,
            )
        names.append(name)
    big = work / "tau-bench-airline-60k"
    if (work / "tau-bench-airline").is_dir() and not (big / "trajectories.jsonl").exists():
        big.mkdir(exist_ok=True)
        (big / "suite.yaml").write_text(
            (work / "tau-bench-airline" / "suite.yaml").read_text(encoding="utf-8"), encoding="utf-8"
        )
        score_bench._replicate(
            work / "tau-bench-airline" / "trajectories.jsonl", big / "trajectories.jsonl", score_bench.REAL_CALLS
        )
    if big.is_dir():
        names.append(big.name)
    return names


def details(folder: Path, out: Path) -> None:
    """Every trajectory's ``to_dict()`` (its calls and summary, what an import stores), one JSON line each."""
    import hashlib
    import json

    from app.commands.score import KnownCases, load_suites
    from app.core.records import read_jsonl
    from app.core.score.scoring import Scorer

    suites, records = load_suites(folder, None, lenient=True)
    scorers = [Scorer(s) for s in suites]
    owner = {cid: i for i, s in reversed(list(enumerate(suites))) for cid in s.by_id}
    by_id = {cid: case for s in suites for cid, case in s.by_id.items()}
    digest = hashlib.sha256()
    for traj in KnownCases(by_id, read_jsonl(records), reference_free=not by_id):
        ts = scorers[owner.get(traj.case_id, 0)].score(traj)
        digest.update(json.dumps(ts.to_dict(), ensure_ascii=False, sort_keys=True, default=str).encode() + b"\n")
    out.write_text(digest.hexdigest() + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, required=True, help="the shared data folder")
    parser.add_argument("--work", type=Path, required=True, help="where the converted folders are kept")
    parser.add_argument("--out", type=Path, required=True, help="where NAME.json reports are written")
    parser.add_argument(
        "--details",
        action="store_true",
        help="also NAME.details: each trajectory's scored detail (what the store keeps), in-process",
    )
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in convert(args.data, args.work):
        done = subprocess.run([*TOOLLENS, "score", str(args.work / name), "--json"], capture_output=True)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr.decode(errors='replace')}")
        (args.out / f"{name}.json").write_bytes(done.stdout)
        print(f"{name}: {len(done.stdout):,} bytes")
        if args.details:
            details(args.work / name, args.out / f"{name}.details")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
