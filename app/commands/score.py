"""``toollens score``, run straight from argv: the command a CI job calls on every push.

Loading typer (with pydantic) and the command tree cost more than scoring a small file, so
the console script (``app.entry``) hands the plain forms of ``score`` to ``run_argv``, which
imports neither typer nor pydantic, nor rich until it prints a table or an error. Anything
else (``--help``, a mistake, an unusual spelling) returns None and goes to the typer command
in ``app.cli``, which stays the definition of the command, its help and its error messages.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from app.commands.terminal_text import print_error, print_mistakes, print_warnings

if TYPE_CHECKING:
    from app.core.records import Trajectory
    from app.core.suites.suite import Suite

# option -> (parameter, the value it takes: None, "int" or "path"); tests/cli/test_cli_startup.py checks it
# against the typer command
OPTIONS = {
    "--json": ("as_json", None),
    "--top": ("top", "int"),
    "--fail-on-blocking": ("fail_on_blocking", None),
    "--prices": ("prices", "path"),
    "--lenient": ("lenient", None),
}


def parse(argv: list[str]) -> dict[str, object] | None:
    """The arguments after ``score`` as the typer command reads them, or None when they are
    anything but one or two paths and the options above, each at most once, ``--top`` in digits
    and ``--prices`` a path."""
    given: dict[str, object] = {}
    paths: list[Path] = []
    args = iter(argv)
    for arg in args:
        if not arg.startswith("-") and arg:
            paths.append(Path(arg))
            continue
        option, eq, value = arg.partition("=")
        name, kind = OPTIONS.get(option, ("", None))
        if not name or name in given or (eq and kind is None):
            return None
        if kind is None:
            given[name] = True
            continue
        value = value if eq else next(args, "")
        if kind == "int":
            if not (value.isascii() and value.isdigit()):
                return None
            given[name] = int(value)
        elif value and not value.startswith("-"):
            given[name] = Path(value)
        else:
            return None
    if len(paths) not in (1, 2):
        return None
    return {"suite": paths[0], "trajectories": paths[1] if len(paths) == 2 else None, **given}


def run_argv(argv: list[str]) -> int | None:
    """Run ``toollens score`` from the arguments after ``score``: its exit status, or None when
    the typer command should read them (see ``parse``)."""
    parsed = parse(argv)
    if parsed is None or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None
    try:
        return run(**parsed)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        return 130  # as typer does
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the reader left: exit quietly
        return 1


def run(
    suite: Path,
    trajectories: Path | None,
    *,
    as_json: bool = False,
    top: int = 10,
    fail_on_blocking: bool = False,
    prices: Path | None = None,
    lenient: bool = False,
) -> int:
    """Score, print the report, and return the exit status: 0 scored; 1 a blocking family above
    zero (with ``fail_on_blocking``); 2 bad input: a mistake in the suite, or records of cases the
    suite lacks (with ``lenient`` both are warnings, and those records are left out).

    ``suite`` may be a folder ``toollens convert`` wrote: every suite in it (``suite.yaml``,
    ``suite-2.yaml``…) is scored, each record against the suite that holds its case, with the
    folder's ``trajectories.jsonl`` unless ``trajectories`` is given, into one report."""
    from app.core.errors import ToolLensError
    from app.core.prices import load_prices
    from app.core.records import read_jsonl
    from app.core.reports.evaluate import score_across
    from app.core.score.families import FAMILIES
    from app.core.suites.suite_check import SuiteProblems
    from app.core.usage import UsageTally

    usage = UsageTally()
    try:
        suites, trajectories = load_suites(suite, trajectories, lenient=lenient)
        # the suites are never scanned for cycles again, and the records (freed by reference counting)
        # are scanned every 20,000 allocations, not 700: as the import's worker does (app/store/gc_tuning.py)
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        table = load_prices(prices)
        if not trajectories.is_file():
            raise ToolLensError(f"{trajectories}: file not found")
        by_id: dict[str, object] = {}
        for loaded_suite in suites:
            by_id.update(loaded_suite.by_id)
        known = KnownCases(by_id, read_jsonl(trajectories), reference_free=not by_id)
        report = score_across(suites, known, usage=usage, per_suite=known.per_suite)
    except SuiteProblems as exc:
        return print_mistakes(exc, "nothing was scored")
    except ToolLensError as exc:
        print_error(str(exc))
        return 2
    if known.unknown:
        matched_none = len(known.unknown) and sum(known.unknown.values()) == known.total
        print_error(
            known.describe(trajectories, lenient=lenient and not matched_none),
            label="warning: " if lenient and not matched_none else "error: ",
        )
        if not lenient or matched_none:
            return 2
    data = report.to_json()
    data["usage"] = usage.to_json(table)
    if len(suites) > 1:  # added: the suites of a folder, each with its cases and the trajectories scored on it
        data["suites"] = [
            {
                "file": Path(s.path).name,
                "name": s.name,
                "cases": len(s.cases),
                "trajectories": known.per_suite.get(i, 0),
            }
            for i, s in enumerate(suites)
        ]
    if as_json:
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        from app.commands.report_view import render_report, report_console

        first = suites[0]
        name = first.name if len(suites) == 1 else f"{suite.name}: {len(suites)} suites"
        version = first.toolset.version if len({s.toolset.version for s in suites}) == 1 else ""
        render_report(report_console(), data, suite_name=name, toolset_version=version, top=top)
    blocking = [
        f"{f.name} {data[f.key]['num']}/{data[f.key]['den']}" for f in FAMILIES if f.blocking and data[f.key]["num"] > 0
    ]
    if fail_on_blocking and blocking:
        print_error(", ".join(blocking) + " (must be zero)", label="blocking: ")
        return 1
    return 0


SUITE_FILE = re.compile(r"suite(?:-(\d+))?\.(?:yaml|yml|json)")


def load_suites(path: Path, trajectories: Path | None, *, lenient: bool) -> tuple[list[Suite], Path]:
    """The suites to score and the trajectories file: one suite file, or every suite of a folder
    ``convert`` wrote (in its order: ``suite.yaml``, ``suite-2.yaml``…), each checked; the
    mistakes of all of them are raised together. A case id in two suites is refused."""
    from app.core.errors import ToolLensError
    from app.core.suites.suite_check import Problem, SuiteProblems, validate_suite_file

    if not path.is_dir():
        if trajectories is None:
            raise ToolLensError(f"{path}: give the trajectories file too, or a folder `toollens convert` wrote")
        loaded, warnings = validate_suite_file(path, lenient=lenient)
        print_warnings(warnings)
        return [loaded], trajectories
    found = sorted(
        ((int(m.group(1) or 1), p) for p in path.iterdir() if (m := SUITE_FILE.fullmatch(p.name)) and p.is_file()),
        key=lambda x: x[0],
    )
    if not found:
        raise ToolLensError(
            f"{path}: no suite.yaml in this folder (a folder `toollens convert` wrote holds "
            "suite.yaml and trajectories.jsonl)"
        )
    suites: list[Suite] = []
    problems: list[Problem] = []
    owner: dict[str, str] = {}
    for _, file in found:
        try:
            loaded, warnings = validate_suite_file(file, lenient=lenient)
        except SuiteProblems as exc:
            problems.extend(exc.problems)
            continue
        print_warnings(warnings)
        for cid in loaded.by_id:
            if cid in owner:
                raise ToolLensError(
                    f"{path}: case {cid!r} is in both {owner[cid]} and {file.name}: a record of it "
                    "could be scored against either"
                )
            owner[cid] = file.name
        suites.append(loaded)
    if problems:
        raise SuiteProblems(problems)
    return suites, trajectories if trajectories is not None else path / "trajectories.jsonl"


class KnownCases:
    """The records whose case the suite has; the others are counted by case id and left out of
    every figure (a record scored without its case would pass on nothing). A suite without
    cases (``convert`` writes one for traces, which have no reference) is ``reference_free``:
    every record is scored on what needs no reference."""

    def __init__(self, cases: Mapping[str, object], records: Iterable[Trajectory], *, reference_free: bool = False):
        self.cases = cases
        self.records = records
        self.reference_free = reference_free
        self.unknown: dict[str, int] = {}
        self.total = 0
        self.per_suite: dict[int, int] = {}  # trajectories scored on each suite (score_across fills it)

    def __iter__(self) -> Iterator[Trajectory]:
        for record in self.records:
            self.total += 1
            if self.reference_free or record.case_id in self.cases:
                yield record
            else:
                self.unknown[record.case_id] = self.unknown.get(record.case_id, 0) + 1

    def describe(self, source: Path, *, lenient: bool) -> str:
        count = sum(self.unknown.values())
        names = ", ".join(repr(c) for c in list(self.unknown)[:10])
        more = f" and {len(self.unknown) - 10} more" if len(self.unknown) > 10 else ""
        head = f"{source}: {count} of {self.total} records are of cases the suite lacks ({names}{more})"
        if count == self.total:
            return f"{head}: nothing to score (is it the right suite?)"
        return f"{head}: " + (
            "left out of every figure" if lenient else "nothing was scored (--lenient scores the rest)"
        )
