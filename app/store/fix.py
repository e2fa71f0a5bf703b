"""What ``toollens fix`` reads from a stored run: its suite, its confusion
cells, its failed trajectories with their calls, and a valid value sent per
argument; then the proposals (``app.core.advise.fix``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.advise.fix import CallFact, Proposal, TrajectoryFact, propose
from app.core.reports.stats import mcnemar_exact
from app.core.score.families import Failure
from app.core.suites.suite import Suite
from app.store.compare import compare_runs
from app.store.errors import NeedsBackfill
from app.store.ingest import find_run, get_run_row, suite_document, suite_for_run
from app.store.models import CallRow, Run, TrajectoryRow, TrajectoryTag
from app.store.pairs import run_cells, run_examples
from app.store.queries import run_report, uncaused
from app.store.views import ComparisonPublic

MAX_FAILED = 2000  # failed trajectories read (the first, in storage order): a run page computes them too
MAX_MESSAGE = 2000  # characters of an error message read (a proposal quotes it)
FLOW_TRAJECTORIES = 500  # trajectories read for what flows from one tool's observation into another's call


@dataclass
class RunFix:
    """A run, its suite document and what it calls for."""

    run: Run
    suite: Suite
    document: dict[str, Any]
    proposals: list[Proposal]
    failed: int  # failed trajectories read


def trajectory_key(case_id: str, trial: int, fault_key: str) -> str:
    return f"{case_id}#{trial}" + (f"@{fault_key}" if fault_key else "")


def _flows(session: Session, run_id: int, limit: int = FLOW_TRAJECTORIES) -> dict[tuple[str, str], set[str]]:
    """(A, B) -> the arguments a call to B took from an earlier successful
    observation of A: same key, same value (``id`` 8812 from ``buscar_cliente``
    sent to ``ver_saldo``), over the run's first trajectories."""
    ids = list(
        session.scalars(
            select(TrajectoryRow.id).where(TrajectoryRow.run_id == run_id).order_by(TrajectoryRow.id).limit(limit)
        )
    )
    out: dict[tuple[str, str], set[str]] = {}
    for start in range(0, len(ids), 500):
        seen: dict[int, list[tuple[str, dict[str, Any]]]] = {}
        for tid, name, arguments, observation, error in session.execute(
            select(CallRow.trajectory_id, CallRow.name, CallRow.arguments, CallRow.observation, CallRow.error_kind)
            .where(CallRow.trajectory_id.in_(ids[start : start + 500]))
            .order_by(CallRow.trajectory_id, CallRow.idx)
        ):
            earlier = seen.setdefault(tid, [])
            if isinstance(arguments, Mapping):
                for source, given in earlier:
                    for key, value in arguments.items():
                        if source != name and key in given and given[key] == value and value not in (None, ""):
                            out.setdefault((source, name), set()).add(str(key))
            if error is None and observation and observation.lstrip().startswith("{") and len(observation) < 100_000:
                try:
                    value = json.loads(observation)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    earlier.append((name, value))
    return out


def _failed(session: Session, run_id: int) -> list[TrajectoryFact]:
    """The run's failed trajectories (the first ``MAX_FAILED``) with their calls. The JSON columns
    are decoded only where a proposal reads them: the arguments of a call that failed validation,
    the mismatches of a trajectory that failed on its arguments."""
    trajectories = session.execute(
        select(
            TrajectoryRow.id,
            TrajectoryRow.case_id,
            TrajectoryRow.trial,
            TrajectoryRow.fault_key,
            TrajectoryRow.question,
            TrajectoryRow.failures,
        )
        .where(TrajectoryRow.run_id == run_id, TrajectoryRow.passed.is_(False))
        .order_by(TrajectoryRow.id)
        .limit(MAX_FAILED)
    ).all()
    ids = [t[0] for t in trajectories]
    wrong_values = [t[0] for t in trajectories if Failure.ARGUMENTS in (t[5] or [])]
    rows: dict[int, list[list[Any]]] = {}
    json_of: dict[tuple[int, int], tuple[Any, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        for tid, idx, *rest in session.execute(
            select(
                CallRow.trajectory_id,
                CallRow.idx,
                CallRow.name,
                CallRow.exists,
                CallRow.expected_name,
                CallRow.schema_field,
                CallRow.schema_message,
                CallRow.dependency_before,
                CallRow.error_kind,
                func.substr(CallRow.error_message, 1, MAX_MESSAGE),
                CallRow.reaction,
                CallRow.reaction_ok,
            )
            .where(CallRow.trajectory_id.in_(chunk))
            .order_by(CallRow.trajectory_id, CallRow.idx)
        ):
            rows.setdefault(tid, []).append([idx, *rest])
        for tid, idx, arguments in session.execute(
            select(CallRow.trajectory_id, CallRow.idx, CallRow.arguments).where(
                CallRow.trajectory_id.in_(chunk), CallRow.schema_field.is_not(None)
            )
        ):
            json_of[(tid, idx)] = (arguments, None)
    for start in range(0, len(wrong_values), 500):
        for tid, idx, arguments, mismatches in session.execute(
            select(CallRow.trajectory_id, CallRow.idx, CallRow.arguments, CallRow.mismatches).where(
                CallRow.trajectory_id.in_(wrong_values[start : start + 500])
            )
        ):
            json_of[(tid, idx)] = (arguments, mismatches)
    causes: dict[int, tuple[str, str, str]] = {}
    for start in range(0, len(ids), 500):  # what sank each one, where the run's scoring tagged it
        for tid, key in session.execute(
            select(TrajectoryTag.trajectory_id, TrajectoryTag.value).where(
                TrajectoryTag.trajectory_id.in_(ids[start : start + 500]), TrajectoryTag.kind == "cause"
            )
        ):
            parts = [unquote(x) for x in str(key).split(":")]
            if len(parts) == 3:
                causes[tid] = (parts[0], parts[1], parts[2])
    calls: dict[int, list[CallFact]] = {}
    for tid, found in rows.items():
        for idx, name, exists, expected, field, message, before, kind, error, reaction, ok in found:
            arguments, mismatches = json_of.get((tid, idx), (None, None))
            calls.setdefault(tid, []).append(
                CallFact(
                    name=name,
                    arguments=arguments,
                    exists=exists,
                    expected=expected,
                    schema_field=field,
                    schema_message=message,
                    mismatches=tuple(m for m in mismatches or [] if isinstance(m, Mapping)),
                    dependency_before=before,
                    error_kind=kind,
                    error_message=error,
                    reaction=reaction,
                    reaction_ok=ok,
                )
            )
    return [
        TrajectoryFact(
            key=trajectory_key(case_id, trial, fault_key),
            case_id=case_id,
            question=question or "",
            passed=False,
            failures=tuple(str(f) for f in failures or []),
            calls=tuple(calls.get(i, [])),
            cause=causes.get(i),
        )
        for i, case_id, trial, fault_key, question, failures in trajectories
    ]


def run_fix(session: Session, ref: str | int) -> RunFix:
    """The proposals a stored run (id or name) calls for."""
    run = get_run_row(session, ref) if isinstance(ref, int) else find_run(session, ref)
    missing = uncaused(run_report(session, run.id))  # its cause tags are read: a run stored before they were
    if missing:  # kept has none, and `toollens db backfill` gives them (a read never does)
        raise NeedsBackfill(run.name, missing)
    suite = suite_for_run(session, run)
    document = suite_document(session, run.suite_id)
    failed = _failed(session, run.id)
    system = (run.config or {}).get("system") or ""
    proposals = propose(
        suite.toolset,
        failed,
        cells=run_cells(session, run.id),
        examples=run_examples(session, run.id, suite),
        flows=_flows(session, run.id),
        system_prompt=str(system),
    )
    return RunFix(run=run, suite=suite, document=document, proposals=proposals, failed=len(failed))


@dataclass
class GroupFigures:
    """One group of cases in both runs: trajectories passed, the discordant
    pairs on the trajectories both hold (exact McNemar), confusion calls."""

    cases: int
    a_passed: int
    a_total: int
    b_passed: int
    b_total: int
    only_a: int  # passed only in A, of the shared trajectories
    only_b: int
    p_value: float
    a_confusions: int
    b_confusions: int


@dataclass
class FixAB:
    comparison: ComparisonPublic
    confusions: tuple[int, int]  # calls to another tool of the toolset than the expected one, A and B
    drove: GroupFigures  # the cases whose failures drove the proposals
    rest: GroupFigures


def _group_rows(session: Session, run_id: int) -> tuple[dict[tuple[str, int, str], bool], Counter[str]]:
    passed = {
        (c, t, f): bool(p)
        for c, t, f, p in session.execute(
            select(TrajectoryRow.case_id, TrajectoryRow.trial, TrajectoryRow.fault_key, TrajectoryRow.passed).where(
                TrajectoryRow.run_id == run_id
            )
        )
    }
    confused: Counter[str] = Counter()
    for case_id, n in session.execute(
        select(TrajectoryRow.case_id, func.count())
        .join(CallRow, CallRow.trajectory_id == TrajectoryRow.id)
        .where(
            TrajectoryRow.run_id == run_id,
            CallRow.expected_name.is_not(None),
            CallRow.exists.is_(True),
            CallRow.expected_name != CallRow.name,
        )
        .group_by(TrajectoryRow.case_id)
    ):
        confused[case_id] += int(n)
    return passed, confused


def _group(
    a: dict[tuple[str, int, str], bool],
    b: dict[tuple[str, int, str], bool],
    ca: Counter[str],
    cb: Counter[str],
    cases: set[str],
) -> GroupFigures:
    ka, kb = [k for k in a if k[0] in cases], [k for k in b if k[0] in cases]
    shared = set(ka) & set(kb)
    only_a = sum(1 for k in shared if a[k] and not b[k])
    only_b = sum(1 for k in shared if b[k] and not a[k])
    return GroupFigures(
        cases=len(cases),
        a_passed=sum(a[k] for k in ka),
        a_total=len(ka),
        b_passed=sum(b[k] for k in kb),
        b_total=len(kb),
        only_a=only_a,
        only_b=only_b,
        p_value=mcnemar_exact(only_a, only_b),
        a_confusions=sum(ca[c] for c in cases),
        b_confusions=sum(cb[c] for c in cases),
    )


def fix_ab(session: Session, a_id: int, b_id: int, drove: set[str], tools: set[str]) -> FixAB:
    """The original run against the candidate's: the comparison (families with
    95% intervals, McNemar, confusion cells), the confusion calls between the
    toolset's tools, and the figures of the cases that drove the proposals
    apart from the rest's."""
    comparison = compare_runs(session, a_id, b_id)
    total = [0, 0]
    for d in comparison.confusion_diff:
        if d.expected != d.called and d.expected in tools and d.called in tools:
            total[0] += d.a
            total[1] += d.b
    a, ca = _group_rows(session, a_id)
    b, cb = _group_rows(session, b_id)
    every = {k[0] for k in a} | {k[0] for k in b}
    return FixAB(
        comparison=comparison,
        confusions=(total[0], total[1]),
        drove=_group(a, b, ca, cb, every & drove),
        rest=_group(a, b, ca, cb, every - drove),
    )
