"""The rewrites a run page shows beside each confused pair of tools (``toollens fix``'s description
edits of that pair, ``app.core.advise.fix.pair_edits``), from the run's confusion counters and a
valid value sent per argument (its first 1,000 good calls).

A finished run keeps them (``app.store.aggregates.keep_page``, table ``run_page_kept``): a page
reads them while the run holds the trajectories they were computed on and their wording is this
code's (``PAIR_EDITS_VERSION``). Otherwise a page computes them, and a caller may share what it
computed on the same inputs (``run_pair_edits``'s ``memo``): the edits depend on the run's toolset,
WHICH pairs are confused (not how often) and the examples, so a batch of a live run that changes
none of them computes nothing again."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from sqlalchemy import Select, Text, cast, select
from sqlalchemy.orm import Session

from app.core.advise.fix import PAIR_EDITS_VERSION, PairEdit, Proposal, pair_edits, pair_proposals
from app.core.records import loads
from app.core.suites.suite import Suite
from app.store.ingest import get_run_row, suite_for_run
from app.store.models import CallRow, Run, RunCounter, RunPageKept

PairEdits = list[tuple[str, str, list[PairEdit]]]  # per confused pair (a < b): its edits (``pair_edits``)


def run_cells(session: Session, run_id: int) -> dict[tuple[str, str], int]:
    """The run's confusion cells, (expected, called) -> calls, from its counters."""
    cells: dict[tuple[str, str], int] = {}
    for a, b, value in session.execute(
        select(RunCounter.a, RunCounter.b, RunCounter.value).where(
            RunCounter.run_id == run_id, RunCounter.kind == "confusion"
        )
    ):
        cells[(a, b)] = cells.get((a, b), 0) + int(value)
    return cells


def examples_query(run_id: int, limit: int = 1000) -> Select[str, str, str]:
    """The run's first ``limit`` calls, in id order, on the expected tool (``selection_ok``: the tool
    exists and is the one expected) that passed validation and raised no error: walked in
    ``ix_calls_run_order`` and stopped at the limit, with no sort of the run's calls (a test reads the
    plans). The run is a range of one, and the order ``(run_id, id)``: PostgreSQL, which sees
    ``run_id = x`` as a constant, would walk the primary key instead and filter out the calls of every
    run stored before this one; and ``selection_ok`` lets it count the calls that qualify. The JSON
    columns come as the database's text (read by the core's fast reader, not the driver's)."""
    return (
        select(CallRow.name, cast(CallRow.arguments, Text), cast(CallRow.mismatches, Text))
        .where(
            CallRow.run_id >= run_id,
            CallRow.run_id <= run_id,
            CallRow.selection_ok.is_(True),
            CallRow.schema_field.is_(None),
            CallRow.error_kind.is_(None),
        )
        .order_by(CallRow.run_id, CallRow.id)
        .limit(limit)
    )


def run_examples(session: Session, run_id: int, suite: Suite, limit: int = 1000) -> dict[tuple[str, str], Any]:
    """A value per (tool, argument) that a call on the right tool sent and that
    passed validation and matched; the suite's expected arguments fill the rest."""
    out: dict[tuple[str, str], Any] = {}
    for name, arguments_text, mismatches_text in session.execute(examples_query(run_id, limit)):
        arguments = None if arguments_text is None else loads(arguments_text)
        if not isinstance(arguments, Mapping):
            continue
        mismatches = None if mismatches_text is None else loads(mismatches_text)
        wrong = {str(m.get("field")) for m in mismatches or [] if isinstance(m, Mapping)}
        for key, value in arguments.items():
            if key not in wrong and value not in (None, "", [], {}):
                out.setdefault((name, str(key)), value)
    for case in suite.cases:
        for call in case.expected_calls or []:
            for key, value in call.arguments.items():
                if value not in (None, "", [], {}):
                    out.setdefault((call.name, str(key)), value)
    return out


def run_pair_proposals(session: Session, run_id: int) -> tuple[str, list[Proposal]]:
    """The run's name and the description edits of each of its confused pairs,
    from its confusion counters (what its page shows; no trajectory is read)."""
    run = get_run_row(session, run_id)
    suite = suite_for_run(session, run)
    return run.name, pair_proposals(
        suite.toolset, run_cells(session, run_id), examples=run_examples(session, run_id, suite)
    )


def compute_pair_edits(
    session: Session, run: Run, memo: Callable[[Hashable, Callable[[], PairEdits]], PairEdits] | None = None
) -> PairEdits:
    """The run's pair edits from its counters and calls (what ``run_pair_proposals`` gives, as
    ``pair_edits``). With ``memo`` (a cache of the caller's: key, compute), the edits of the same
    toolset, confused pairs and examples are computed once."""
    suite = suite_for_run(session, run)
    cells = run_cells(session, run.id)
    examples = run_examples(session, run.id, suite)

    def compute() -> PairEdits:
        return pair_edits(pair_proposals(suite.toolset, cells, examples=examples))

    if memo is None:
        return compute()
    confused = tuple(sorted(k for k, n in cells.items() if n and k[0] != k[1]))  # which, not how often
    shown = tuple(sorted((k, json.dumps(v, sort_keys=True, default=str)) for k, v in examples.items()))
    return memo(("pair_edits", run.suite_id, confused, shown), compute)


def kept_query(run_id: int) -> Select[tuple[int, int, list[Any]]]:
    """The pair edits a finished run kept, with what they are valid for (the primary key)."""
    return select(RunPageKept.trajectories, RunPageKept.version, RunPageKept.pair_edits).where(
        RunPageKept.run_id == run_id
    )


def kept_pair_edits(session: Session, run_id: int, trajectories: int) -> PairEdits | None:
    """The pair edits the run kept when it finished, if they were computed on ``trajectories``
    trajectories by this wording; else None (compute them: ``compute_pair_edits``)."""
    row = session.execute(kept_query(run_id)).one_or_none()
    if row is None or int(row[0]) != trajectories or int(row[1]) != PAIR_EDITS_VERSION:
        return None
    return [
        (
            str(a),
            str(b),
            [(str(tool), str(pattern), [(str(op), str(t)) for op, t in diff]) for tool, pattern, diff in by],
        )
        for a, b, by in row[2]
    ]
