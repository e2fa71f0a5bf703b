"""``toollens import --format F``: a converted source streamed into the
store's import (same checks, same bad-line rules, nothing half-stored)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.core.errors import SuiteError
from app.core.suites.suite import load_suite_document
from app.importers import Options, convert, get_format
from app.settings import Settings
from app.store.importer import ImportResult, import_file


def import_converted(
    settings: Settings,
    path: Path,
    fmt: str,
    options: Options,
    *,
    run_name: str,
    suite_path: Path | None = None,
    model: str = "",
    agent: str = "",
    skip_bad: bool = False,
    finish: bool = True,
    batch: int = 500,
    on_note: Callable[[str], None] = lambda _note: None,
) -> ImportResult:
    """Convert ``path`` (read with ``options``) and import its records into
    ``run_name``. The suite is ``suite_path`` when given (records scored
    against its cases), else the one the conversion builds (reference-free
    unless the source has references, as tau-bench's actions)."""
    if not get_format(fmt).runs:
        raise SuiteError(
            f"a {fmt} file holds questions, no runs: `toollens convert --from {fmt}` makes its suites", path=str(path)
        )
    conversion = convert(fmt, path, options)
    told = len(conversion.notes)
    for note in conversion.notes:
        on_note(note)
    document = load_suite_document(suite_path) if suite_path is not None else conversion.suite
    result = import_file(
        settings,
        path,
        run_name=run_name,
        model=model,
        agent=agent,
        skip_bad=skip_bad,
        finish=finish,
        batch=batch,
        suite_document=document,
        records=conversion.records,
    )
    for note in conversion.notes[told:]:  # what reading the records found (repeated trials)
        on_note(note)
    return result
