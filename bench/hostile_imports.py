"""Peak memory of `toollens import` on the hostile Inspect logs of issue 46,
at the issue's sizes (docs/importers.md#bounds-on-what-a-log-builds states
the figures): an attachment of 1 MiB referenced 600 times; one 250 MiB member
of ``{},{},…`` and one of 20-digit integers; 100,000 samples as ``.json`` and
as ``.eval``. The files are built in a temporary folder (never in the
repository); each import runs in a fresh process, its peak is ``ru_maxrss``.

    .venv/bin/python bench/hostile_imports.py [--samples 100000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.hostile_inspect import attachment_bomb, many_samples, peak_import, values_bomb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = {
            "attachment referenced 600 times": attachment_bomb(folder / "refs.eval"),
            "250 MiB of {},{},…": values_bomb(folder / "objects.eval"),
            "250 MiB of 20-digit integers": values_bomb(folder / "integers.eval", item=b"12345678901234567890,"),
            f"{args.samples} samples .json": many_samples(folder / "many.json", args.samples),
            f"{args.samples} samples .eval": many_samples(folder / "many.eval", args.samples),
        }
        print(f"{'file':36} {'bytes':>12} {'base MB':>8} {'peak MB':>8} {'seconds':>8}  exit / last line")
        for i, (name, path) in enumerate(files.items()):
            started = time.perf_counter()
            base, peak, code, err = peak_import(
                ["import", str(path), "--format", "inspect", "--run", "r", "--db", str(folder / f"{i}.db")]
            )
            last = err.strip().splitlines()[-1][:100] if err.strip() else ""
            print(
                f"{name:36} {path.stat().st_size:>12} {base:>8.0f} {peak:>8.0f} "
                f"{time.perf_counter() - started:>8.1f}  {code} {last}"
            )


if __name__ == "__main__":
    main()
