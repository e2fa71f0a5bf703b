"""``toollens import`` against its ceiling: a plain ``executemany`` of the same rows, same indexes.

Converts the tau-bench airline sample, repeats its records to ``--calls`` (60,000 unless
given; each copy's trials renumbered, as ``score_bench.py --real`` does), and runs
``toollens import`` into a fresh SQLite file as the console script does (a whole process:
its wall and CPU time and peak RSS). Then the ceiling: every row the import stored, read
back table by table, is inserted again into a fresh file made from the same schema (every
table and index as the import's ``CREATE`` statements made them), one ``executemany`` per
table in one transaction, with Python's ``sqlite3`` and nothing else. The ratio of the two
rates (calls per wall second) is how close the import comes to what SQLite itself costs.

The ceiling's time is its ``executemany`` and commit only, in this process; the import's
is a whole process (Python's start, the imports, a new file and its schema, the exit).
``whole process`` is the ceiling timed as the import is: a fresh Python that creates the
file and its schema, reads the rows (written beforehand with ``marshal``, untimed; read in
the timed process, as the import reads its file), inserts them the same way, closes the file
(SQLite copies the WAL into it then, as at the end of an import) and exits. Both ceilings
use the import's page size (16 KiB; SQLite's default is 4 KiB), its ``journal_mode=WAL`` and
``synchronous=NORMAL``; neither checks foreign keys (the import does: ``foreign_keys=ON``).

``--sizes A B`` imports two sizes and prints each one's peak RSS (the importing process's
``VmHWM``, and its scoring worker's): flat memory means the larger file's peak is no higher
than the smaller's (plus noise). ``ru_maxrss`` is not used for the importing process: Linux
gives a process started by ``exec`` the peak of the process that spawned it (this one, which
held the ceiling's rows) as its own starting peak::

    python bench/import_ceiling.py --data DIR
    python bench/import_ceiling.py --data DIR --sizes 30000 120000 --repeat 3
"""

from __future__ import annotations

import argparse
import marshal
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import score_bench

CLI = "import sys; sys.argv[0] = 'toollens'; from app.entry import main; main()"


def run_import(tree: Path, suite: Path, records: Path, db: Path) -> tuple[float, float, float, float]:
    """Wall s, CPU s, peak RSS (MiB) of one ``toollens import`` in a fresh process, and its
    scoring worker's peak RSS (MiB; 0 without a worker)."""
    code = (
        "import resource, sys; sys.argv[0] = 'toollens'\n"
        "from app.entry import main\n"
        "try:\n    main()\nfinally:\n"
        "    hwm = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "    print('maxrss', hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, "import", str(records), "--run", "bench", "--suite", str(suite), "--db", str(db)],
        cwd=tree,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"toollens import: exit {done.returncode}\n{done.stderr}")
    rss, worker = next(line.split()[1:] for line in done.stderr.splitlines() if line.startswith("maxrss "))
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, int(rss) / 1024, int(worker) / 1024


CEILING_PROCESS = """
import marshal, sqlite3, sys
with open(sys.argv[1], "rb") as fh:
    page_size, schema, rows = marshal.load(fh)
dst = sqlite3.connect(sys.argv[2], isolation_level=None)
for pragma in (f"page_size={page_size}", "journal_mode=WAL", "synchronous=NORMAL"):
    dst.execute(f"PRAGMA {pragma}")
dst.execute("BEGIN")
for sql in schema:
    dst.execute(sql)
for table, table_rows in rows:
    marks = ", ".join("?" * len(table_rows[0]))
    dst.executemany(f'INSERT INTO "{table}" VALUES ({marks})', table_rows)
dst.execute("COMMIT")
dst.close()
"""


def ceiling_process(source: Path, work: Path, target: Path) -> tuple[float, float]:
    """Wall and CPU seconds of a fresh Python process that makes ``target`` with ``source``'s
    schema and page size and inserts its rows as ``ceiling`` does, in one transaction (the
    rows are read from a ``marshal`` file written beforehand: its writing is not timed, its
    reading is)."""
    src = sqlite3.connect(source)
    page_size = src.execute("PRAGMA page_size").fetchone()[0]
    schema = src.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    tables = [name for kind, name, _ in schema if kind == "table"]
    rows = [(t, src.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables]
    src.close()
    data = work / "ceiling-rows.marshal"
    with data.open("wb") as fh:
        marshal.dump(
            (page_size, [sql for kind, _, sql in schema if kind in ("table", "index")], [r for r in rows if r[1]]), fh
        )
    del rows
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CEILING_PROCESS, str(data), str(target)], check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    data.unlink()
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def ceiling(source: Path, target: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds of inserting every row of ``source`` into a fresh copy of its
    schema (tables, then indexes as they were), one executemany per table; the rows inserted."""
    src = sqlite3.connect(source)
    schema = src.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    tables = [name for kind, name, _ in schema if kind == "table"]
    rows = {t: src.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}
    page_size = src.execute("PRAGMA page_size").fetchone()[0]
    src.close()
    dst = sqlite3.connect(target, isolation_level=None)
    for pragma in (f"page_size={page_size}", "journal_mode=WAL", "synchronous=NORMAL"):  # the import's pages
        dst.execute(f"PRAGMA {pragma}")
    for kind, _, sql in schema:  # tables and indexes first, so that every insert maintains them
        if kind in ("table", "index"):
            dst.execute(sql)
    cpu0, start = time.process_time(), time.perf_counter()
    dst.execute("BEGIN")
    for t in tables:
        if rows[t]:
            marks = ", ".join("?" * len(rows[t][0]))
            dst.executemany(f'INSERT INTO "{t}" VALUES ({marks})', rows[t])
    dst.execute("COMMIT")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    dst.close()
    return wall, cpu, sum(len(r) for r in rows.values())


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, required=True, help="the folder holding the tau-bench sample")
    parser.add_argument("--sizes", type=int, nargs="+", default=[score_bench.REAL_CALLS], metavar="CALLS")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, help="also import with this checkout (interleaved)")
    args = parser.parse_args(argv)
    trees = [Path(__file__).resolve().parents[1], *([args.against.resolve()] if args.against else [])]
    with tempfile.TemporaryDirectory(prefix="toollens-ceiling-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [
                sys.executable,
                "-c",
                CLI,
                "convert",
                "--from",
                "tau-bench",
                str(args.data / score_bench.REAL_SAMPLE),
                "--tools",
                str(args.data / score_bench.REAL_TOOLS),
                "--out",
                str(work),
            ],
            check=True,
            capture_output=True,
            cwd=trees[0],
            env={**os.environ, "PYTHONPATH": str(trees[0])},
        )
        print(
            f"python {sys.version.split()[0]}; {score_bench._revision()}; SQLite {sqlite3.sqlite_version}; "
            f"medians of {args.repeat}, interleaved"
        )
        for size in args.sizes:
            records = work / f"records-{size}.jsonl"
            calls = score_bench._replicate(work / "trajectories.jsonl", records, size)
            imports: dict[int, list[tuple[float, float, float, float]]] = {}
            ceilings: list[tuple[float, float]] = []
            wholes: list[tuple[float, float]] = []
            stored = 0
            for r in range(args.repeat):
                for i, tree in enumerate(trees):
                    db = work / f"import-{i}-{r}.db"
                    imports.setdefault(i, []).append(run_import(tree, work / "suite.yaml", records, db))
                    if i == 0:
                        wall, cpu, stored = ceiling(db, work / f"ceiling-{r}.db")
                        ceilings.append((wall, cpu))
                        wholes.append(ceiling_process(db, work, work / f"whole-{r}.db"))
                    for old in work.glob(f"*-{r}.db*"):
                        old.unlink()
            c_wall = median([w for w, _ in ceilings])
            p_wall = median([w for w, _ in wholes])
            print(f"{calls:,} calls ({records.stat().st_size / 2**20:.1f} MiB), {stored:,} rows stored")
            print(
                f"  ceiling, executemany of the same rows:   {c_wall:6.2f} s wall "
                f"{median([c for _, c in ceilings]):6.2f} s CPU {calls / c_wall:9,.0f} calls/s"
            )
            print(
                f"  the same, a whole process (new file):    {p_wall:6.2f} s wall "
                f"{median([c for _, c in wholes]):6.2f} s CPU {calls / p_wall:9,.0f} calls/s"
            )
            for i, tree in enumerate(trees):
                wall = median([w for w, _, _, _ in imports[i]])
                cpu = median([c for _, c, _, _ in imports[i]])
                rss = max(m for _, _, m, _ in imports[i])
                worker = max(m for _, _, _, m in imports[i])
                print(
                    f"  toollens import ({tree.name}): {wall:6.2f} s wall {cpu:6.2f} s CPU "
                    f"{calls / wall:9,.0f} calls/s  {c_wall / wall:5.0%} of the ceiling "
                    f"({p_wall / wall:4.0%} of the whole process)  peak RSS {rss:.0f} MiB, worker {worker:.0f} MiB"
                )
            records.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
