"""``toollens import`` and ``toollens export``: files in and out of the store.

Import reads the file twice: a first pass checks every line (a file with bad
lines stores nothing unless told to skip them), the second streams it in
bounded batches. Memory does not grow with the file. The whole file (with the
run it creates) is one transaction: nothing of it is visible until all of it
is stored, and an import that fails or is killed leaves nothing behind (the
database rolls it back), so importing the file again just works. On SQLite
other writers wait for it meanwhile (up to the busy timeout).
A new run from a file large enough for the scoring worker (app.store.scoring_worker)
is checked by that worker while it is stored, instead of first: a file with
bad lines then stores nothing either, and what ends up stored is the same.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.core.errors import InvalidTrajectory
from app.core.records import Trajectory, parse_line
from app.core.score.scoring import Scorer
from app.core.suites.suite import load_suite_document, parse_suite
from app.settings import Settings
from app.store import aggregates, ingest, queries
from app.store.db import check_schema, make_engine, make_sessionmaker, session_scope
from app.store.errors import Conflict
from app.store.models import Run
from app.store.scoring_worker import ScoringPipeline, checked_lines, pipeline_pays


@dataclass
class ImportResult:
    run_id: int
    trajectories: int = 0
    calls: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)


def open_store(settings: Settings) -> Engine:
    engine = make_engine(settings.database_url)
    check_schema(
        engine, settings.database_url, auto_migrate=settings.auto_migrate and settings.database_url.startswith("sqlite")
    )
    return engine


def _check_lines(path: Path, stored: set[tuple[str, int, str]]) -> tuple[list[tuple[int, str]], int]:
    bad: list[tuple[int, str]] = []
    good = 0
    for number, traj, why in checked_lines(path, stored):
        if traj is None:
            bad.append((number, why))
        else:
            good += 1
    return bad, good


def _refusal(path: Path, bad: list[tuple[int, str]]) -> InvalidTrajectory:
    shown = "; ".join(f"line {n}: {m}" for n, m in bad[:10])
    more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
    return InvalidTrajectory(
        f"{len(bad)} bad lines, nothing stored (--skip-bad stores the rest): {shown}{more}", source=str(path)
    )


Records = Callable[[], Iterable[tuple[int, Trajectory | InvalidTrajectory]]]
"""A converted source (app.importers): each call a fresh pass of (line, record or why not)."""


def _check_records(records: Records, stored: set[tuple[str, int, str]]) -> tuple[list[tuple[int, str]], set[int]]:
    """``_check_lines`` for a converted source; bad records by position (one
    source line may hold several records, e.g. an OTLP export request)."""
    bad: list[tuple[int, str]] = []
    skip: set[int] = set()
    seen: dict[tuple[str, int, str], int] = {}
    for position, (number, traj) in enumerate(records()):
        if isinstance(traj, InvalidTrajectory):
            bad.append((number, f"{traj.field}: {traj.detail}" if traj.field else traj.detail))
        elif (key := (traj.case_id, traj.trial, ingest.fault_key(traj))) in stored:
            bad.append((number, f"case {traj.case_id!r} trial {traj.trial} is stored already in this run"))
        elif key in seen:
            bad.append((number, f"same case, trial and fault as line {seen[key]}"))
        else:
            seen[key] = number
            continue
        skip.add(position)
    return bad, skip


def import_file(
    settings: Settings,
    path: Path,
    *,
    suite_path: Path | None = None,
    run_name: str,
    model: str = "",
    agent: str = "",
    skip_bad: bool = False,
    finish: bool = True,
    batch: int = 500,
    suite_document: dict[str, Any] | None = None,
    records: Records | None = None,
) -> ImportResult:
    """Import a JSONL file into a run (created, or appended to while open).

    Every line is checked against the file and against what the run holds
    already; a file with bad lines stores nothing unless ``skip_bad``. The
    check comes first, except for a new run from a file worth the scoring
    worker: the worker checks while the batches are stored, and bad lines
    roll the import back. The run (if created) and every batch are one
    transaction: all of the file is stored, or nothing.

    A converted source (``toollens import --format``, app.importers) gives
    ``suite_document`` and ``records`` (read twice, like a file) instead."""
    if not (path.is_file() or (records is not None and path.exists())):  # a converter may read a folder
        raise InvalidTrajectory("file not found", source=str(path))
    if suite_document is None:
        if suite_path is None:
            raise InvalidTrajectory("no suite given", source=str(path))
        document = load_suite_document(suite_path)
    else:
        document = suite_document
        parse_suite(document, path=str(path))  # the converter's suite, checked before anything is stored
    engine = open_store(settings)
    sessions = make_sessionmaker(engine)
    scoring: ScoringPipeline | None = None
    try:
        with session_scope(sessions) as session:
            existing = session.scalar(select(Run).where(Run.name == run_name))
            if existing is not None and existing.status == "finished":
                raise Conflict(f"run {run_name!r} is finished: it takes no new trajectories")
            stored = ingest.stored_keys(session, existing.id) if existing is not None else set()
        # A new run from a file worth a second process is checked while it is stored: the worker
        # refuses the same lines a check pass would, and a file with bad lines rolls the import back
        # (unless --skip-bad). Appending to a run, or a converted source, is checked first.
        pipelined = records is None and pipeline_pays(path)
        checked_later = pipelined and existing is None
        if pipelined:  # scoring starts while the lines are checked
            scoring = ScoringPipeline(
                path, document, str(suite_path or path), stored, batch, stop_at_bad=checked_later and not skip_bad
            )
        bad: list[tuple[int, str]] = []
        skip: set[int] | None = None
        if not checked_later:
            try:
                if records is None:
                    bad, _good = _check_lines(path, stored)
                else:
                    bad, skip = _check_records(records, stored)
            except UnicodeDecodeError as exc:
                raise InvalidTrajectory(f"not UTF-8 text ({exc.reason})", source=str(path)) from None
            if bad and not skip_bad:
                raise _refusal(path, bad)
            if records is None:
                skip = {n for n, _ in bad}
        with session_scope(sessions, write=True) as session:  # the whole file: all of it or nothing
            suite_row = ingest.ensure_suite(session, document)
            run = session.scalar(select(Run).where(Run.name == run_name))
            if run is None:
                run = ingest.create_run(
                    session, name=run_name, suite_row=suite_row, agent=agent, model=model, config={"source": path.name}
                )
            elif checked_later:
                raise Conflict(
                    f"run {run_name!r} was created by another writer during this import: import again to append to it"
                )
            elif run.status == "finished":
                raise Conflict(f"run {run_name!r} is finished: it takes no new trajectories")
            elif run.suite_id != suite_row.id:
                raise Conflict(f"run {run_name!r} was scored against another suite")
            session.flush()
            result = ImportResult(run_id=run.id, skipped=bad)
            scorer = Scorer(parse_suite(document, path=str(suite_path or path)))
            _stream(path, skip, batch, session, run.id, scorer, result, records, scoring)
            if checked_later and scoring is not None:
                result.skipped = scoring.refused
                if scoring.refused and not skip_bad:
                    raise _refusal(path, scoring.refused)
            if finish:
                aggregates.finish_run(session, run.id)
        return result
    finally:
        if scoring is not None:
            scoring.close()
        engine.dispose()


def _stream(
    path: Path,
    skip: set[int] | None,
    batch: int,
    s: Session,
    run_id: int,
    scorer: Scorer,
    result: ImportResult,
    records: Records | None = None,
    scoring: ScoringPipeline | None = None,
) -> None:
    """Store the file batch by batch, in the caller's transaction; ``skip`` holds the lines
    (positions, for a converted source) a check pass refused, None when none ran (the worker checks)."""
    pending: list[Trajectory] = []
    lines: list[int] = []
    run_row = ingest.get_run_row(s, run_id)

    def flush() -> None:
        try:
            result.calls += ingest.add_trajectories(s, run=run_row, scorer=scorer, trajectories=pending)
        except Conflict as exc:
            raise Conflict(f"{path}: lines {lines[0]}-{lines[-1]}: {exc}") from None
        result.trajectories += len(pending)
        pending.clear()
        lines.clear()

    if scoring is not None:  # scored by the worker process: store batch after batch
        for numbers, scored in scoring.batches(skip):
            try:
                result.calls += ingest.add_trajectories(s, run=run_row, scorer=scorer, trajectories=(), scored=scored)
            except Conflict as exc:
                raise Conflict(f"{path}: lines {numbers[0]}-{numbers[-1]}: {exc}") from None
            result.trajectories += len(numbers)
        return
    skip = skip or set()
    if records is not None:  # skip holds positions here
        for position, (number, traj) in enumerate(records()):
            if position in skip:
                continue
            if isinstance(traj, InvalidTrajectory):  # the source changed since it was checked
                raise traj
            pending.append(traj)
            lines.append(number)
            if len(pending) >= batch:
                flush()
    else:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, start=1):
                if number in skip or not line.strip():
                    continue
                pending.append(parse_line(line, index=number, source=str(path)))
                lines.append(number)
                if len(pending) >= batch:
                    flush()
    if pending:
        flush()


def export_run(settings: Settings, run_ref: str, out: Path) -> int:
    engine = open_store(settings)
    sessions = make_sessionmaker(engine)
    n = 0
    try:
        with session_scope(sessions) as session:
            run = ingest.find_run(session, run_ref)
            fh = sys.stdout if str(out) == "-" else out.open("w", encoding="utf-8")
            try:
                for rec in queries.export_records(session, run.id):
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    n += 1
            finally:
                if fh is not sys.stdout:
                    fh.close()
    finally:
        engine.dispose()
    return n
