"""What the CI gate reads from the store: the two runs' stored figures and
the cases that regressed (from the comparison), never recomputed."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.prices import PriceTable
from app.core.reports.cooperation import compare_gap
from app.core.reports.gate import CaseRef, GateConfig, GateResult, RunFigures, evaluate_gate, recovery_families
from app.core.score.families import FAMILIES
from app.core.score.scoring import ERROR_SOURCES
from app.store.compare import compare_runs
from app.store.errors import NotFound
from app.store.ingest import find_run
from app.store.models import TrajectoryRow
from app.store.queries import get_run, list_trajectories, run_causes, run_report, run_usage, uncaused
from app.store.views import RunPublic

MAX_CASES = 200


def _figures(
    ref: str,
    run: RunPublic,
    usage: dict[str, Any] | None = None,
    f4: dict[str, tuple[int, int]] | None = None,
    by_source: dict[str, tuple[int, int]] | None = None,
    causes: list[dict[str, Any]] | None = None,
) -> RunFigures:
    u = usage or {}
    cost = u.get("cost_usd")
    return RunFigures(
        ref=ref,
        name=run.name,
        id=run.id,
        toolset=run.toolset,
        toolset_version=run.toolset_version,
        toolset_label=run.toolset_label,
        suite=run.suite,
        trajectories=run.trajectories,
        families={**{f: (r.num, r.den) for f, r in run.families.items()}, **(f4 or {})},
        recovery_by_source=by_source or {},
        dependency_violations=run.dependency_violations,
        dependency_checks=run.dependency_checks,
        usage={
            "cost_usd": None if cost is None or not run.trajectories else cost / run.trajectories,
            "model_latency_p95": (u.get("model_latency_ms") or {}).get("p95"),
            "tool_latency_p95": (u.get("tool_latency_ms") or {}).get("p95"),
        },
        causes=[(c["count"], c["text"]) for c in causes or ()],
    )


def run_gate(
    session: Session, baseline_ref: str, candidate_ref: str, config: GateConfig, *, prices: PriceTable | None = None
) -> GateResult:
    """Gate ``candidate_ref`` against ``baseline_ref`` (ids or names).
    Raises NotFound for an unknown run or one without trajectories."""
    base_row, cand_row = find_run(session, baseline_ref), find_run(session, candidate_ref)
    base, cand = get_run(session, base_row.id), get_run(session, cand_row.id)
    for ref, run in ((baseline_ref, base), (candidate_ref, cand)):
        if run.trajectories == 0:
            raise NotFound(f"run {ref!r} has no trajectories: nothing to gate on")
    comparison = compare_runs(session, base.id, cand.id, limit=MAX_CASES)
    regressed = [f for f in comparison.flipped if f.a_passed and not f.b_passed]
    failures: dict[int, list[str]] = (
        dict(
            session.execute(
                select(TrajectoryRow.id, TrajectoryRow.failures).where(
                    TrajectoryRow.id.in_([f.b_trajectory for f in regressed])
                )
            ).all()
        )
        if regressed
        else {}
    )
    regressed_cases = [
        CaseRef(
            case_id=f.case_id,
            trial=f.trial,
            fault=f.fault,
            failures=tuple(failures.get(f.b_trajectory) or ()),
            trajectory_id=f.b_trajectory,
        )
        for f in regressed
    ]
    blocking: dict[int, CaseRef] = {}
    for family in FAMILIES:
        if not family.blocking or family.shows is None:
            continue
        page = list_trajectories(session, cand.id, failure=family.shows.value, limit=MAX_CASES)
        for t in page.data:  # a family counted per faulted trajectory reads only the chosen error sources
            if not family.per_call and (t.fault or {}).get("source", "tool") not in config.recovery_sources:
                continue
            blocking[t.id] = CaseRef(
                case_id=t.case_id,
                trial=t.trial,
                fault="" if not t.fault else f"{t.fault.get('step')}:{t.fault.get('kind')}",
                failures=tuple(t.failures),
                trajectory_id=t.id,
            )
    usage = {run.id: run_usage(session, run.id, prices) for run in (base, cand)} if config.usage else {}
    reports = {run.id: run_report(session, run.id) for run in (base, cand)}
    sources = {rid: report.by_source() for rid, report in reports.items()}
    f4: dict[int, dict[str, tuple[int, int]]] = {}
    if set(config.recovery_sources) != set(ERROR_SOURCES):  # F4 over the chosen error sources only
        f4 = {rid: recovery_families(by, config.recovery_sources) for rid, by in sources.items()}
    split = {
        rid: {s: (v["recovery"]["num"], v["recovery"]["den"]) for s, v in by.items()} for rid, by in sources.items()
    }
    result = evaluate_gate(
        _figures(baseline_ref, base, usage.get(base.id), f4.get(base.id), split[base.id]),
        _figures(
            candidate_ref, cand, usage.get(cand.id), f4.get(cand.id), split[cand.id], run_causes(session, cand.id)
        ),
        config,
        regressed_cases=regressed_cases,
        blocking_cases=sorted(blocking.values(), key=lambda c: c.trajectory_id or 0),
        regressed_count=comparison.mcnemar.passed_only_a if comparison.mcnemar else len(regressed),
        shared_cases=comparison.shared_cases,
        simulator=(
            comparison.flipped_blamed_on_user,
            len(comparison.flipped) if comparison.simulator_checked is None else comparison.simulator_checked,
        ),
    )
    for role, run in (("baseline", base), ("candidate", cand)):  # a run stored before causes were kept
        missing = uncaused(reports[run.id])
        if missing:
            result.notes.append(
                f"{missing} failed trajectories of the {role} ({run.name}) have no cause: the run was "
                "stored before ToolLens kept causes; `toollens db backfill` counts them"
            )
    # like with like: the headline of a run with cooperative and other conversations is the cooperative user's
    if base.cooperative_only or cand.cooperative_only:
        result.notes.append(
            "simulated-user profiles ran: the cases that regressed and the shared case trials count the "
            "cooperative user's conversations, the families every conversation; the other profiles are "
            "compared in the cooperation gap"
        )
    gap = compare_gap(comparison.cooperation)
    if gap is not None:  # whether the change holds for every simulated user (docs/runner.md#the-cooperation-gap)
        result.notes.append(f"cooperation gap (A baseline, B candidate): {gap.sentence}")
    return result


__all__ = ["NotFound", "run_gate"]
