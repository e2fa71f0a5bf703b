"""``toollens curate``: a run's chosen trajectories written as cases of a
suite file, for review in a pull request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from app.commands.common import DbOption, fail, store_session


def register(cli: typer.Typer) -> None:
    cli.command()(curate)


def _where(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise fail(f"--where {item!r}: give KEY=VALUE, e.g. failure=selection")
        if key.strip() in out:
            raise fail(f"--where {key.strip()} is given twice")
        out[key.strip()] = value.strip()
    return out


def curate(
    run: Annotated[str, typer.Argument(help="The run, by name or id.")],
    into: Annotated[
        Path,
        typer.Option(
            "--into", help="Suite file to add the cases to (YAML or JSON); a new one takes the run's toolset."
        ),
    ],
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="KEY=VALUE, repeatable: failure=NAME (selection, arguments, schema, hallucinated_tool, "
            "dependency, forbidden_call, state, recovery_hallucinated, recovery_confused, "
            "step_not_done, or a family of the figures), outcome=NAME, tool=NAME (called), case=ID.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000, help="At most this many cases.")] = 50,
    records: Annotated[
        Path | None,
        typer.Option(
            "--records",
            help="Also write the new cases' source trajectories here (JSON Lines), each under its new "
            "case id: `toollens score` of the suite and this file checks the cases.",
        ),
    ] = None,
    follow_symlinks: Annotated[
        bool,
        typer.Option(
            "--follow-symlinks",
            help="When --into is a symbolic link, write to the existing file it points at (refused otherwise).",
        ),
    ] = False,
    db: DbOption = None,
) -> None:
    """Write a run's trajectories as suite cases that reproduce them: their calls
    as expected calls, their observations as mocks (docs/formats.md#curated-cases).

    Cases already in the file (same id) are left as they are, and every byte of
    it stays: the new cases are inserted after its last case; the file is
    replaced whole at once, never left half-written. Exit 0: written (or nothing
    new); 2: bad input (a filter, a file the cases do not fit)."""
    from app.core.advise import curate as core
    from app.core.errors import ToolLensError
    from app.core.suites import suitefile
    from app.core.suites.suite import parse_suite, read_document
    from app.store import curation, ingest

    filters = _where(where or [])
    try:  # the file first: a link or a shape refused before the store is read
        dest = suitefile.target(into, follow_symlinks=follow_symlinks)
        old = None
        if dest.exists():
            document: dict[str, Any] = suitefile.check_shape(read_document(dest), into)
            old = dest.read_bytes()
    except ToolLensError as exc:
        raise fail(_one_line(str(exc), into)) from None
    except OSError as exc:
        raise fail(f"{into}: {exc.strerror}") from None
    with store_session(db) as session:
        found, picked = curation.select_trajectories(session, run, filters, limit)
        run_doc = ingest.suite_document(session, found.suite_id)
    try:
        if old is None:
            document = {
                "name": into.stem,
                "toolset": run_doc["toolset"],
                **{k: run_doc[k] for k in ("dependencies", "give_up_phrases", "success_phrases") if k in run_doc},
                "cases": [],
            }
        toolset = parse_suite(document, path=str(into), base=dest.parent).toolset
        ran_with = parse_suite(run_doc, path=f"suite of run {found.name}").toolset
        have = {str(c.get("id")) for c in document.get("cases") or [] if isinstance(c, dict)}
        cases = []
        sources = []
        for row, traj in picked:
            case_id = f"{row.case_id}-{row.id}"
            if case_id in have:
                continue
            source = {"run": found.name, "trajectory": row.id, "case_id": row.case_id, "trial": row.trial}
            cases.append(core.case_document(traj, toolset, core.Edits(case_id=case_id, source=source), source=ran_with))
            sources.append(json.dumps({**traj.to_dict(), "case_id": case_id, "trial": 0}, ensure_ascii=False))
        new = core.add_cases(document, cases, base=dest.parent)
        suitefile.write_cases(dest, old, new, cases)
        if records is not None:
            records.write_text("".join(f"{line}\n" for line in sources), encoding="utf-8")
    except ToolLensError as exc:
        raise fail(_one_line(str(exc), into)) from None
    except OSError as exc:
        raise fail(f"{into}: {exc.strerror}") from None
    skipped = len(picked) - len(cases)
    Console(stderr=True, soft_wrap=True).print(
        Text(
            f"{len(cases)} cases from run {found.name} into {into}"
            + (f" ({skipped} in the file already)" if skipped else "")
            + f": {len(new['cases'])} cases in all"
            + (f"; their sources in {records}" if records is not None else "")
        )
    )


def _one_line(message: str, into: Path) -> str:
    message = " ".join(message.split())
    return message if message.startswith(str(into)) else f"{into}: {message}"
