"""A run's figures by simulated-user profile, read from its counters, and the
cooperation gap of one run or two (app/core/reports/profiles.py; docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.core.reports.profiles import BY_NAME, COOPERATIVE, CooperationGap, cooperation_gap
from app.core.reports.report import PROFILE_MARK, Report
from app.core.run.runner import sweep_plans
from app.store.ingest import suite_for_run
from app.store.models import Run, RunCounter, TrajectoryRow


def profile_figures(session: Session, run_id: int) -> dict[str, dict[str, Any]]:
    """``profiles`` of the run's figures (``score --json``), from its counters alone."""
    rows = session.execute(
        select(RunCounter.kind, RunCounter.a, RunCounter.b, RunCounter.c, RunCounter.value).where(
            RunCounter.run_id == run_id,
            or_(
                RunCounter.kind.in_(("profile_trials", "profile_passes")),
                (RunCounter.kind == "count") & RunCounter.a.like("profile.%"),
            ),
        )
    ).all()
    return Report.from_counters((k, a, b, c, int(v)) for k, a, b, c, v in rows).profiles_json() if rows else {}


def paired_flips(session: Session, run_id: int) -> dict[str, list[int]]:
    """Per profile, its conversations set against the cooperative trial each mirrors (the same
    case, agent seed and faults: app/runner/work.py): ``[passed only under the cooperative user,
    passed only under the profile]``. A conversation's mirror is the one its record names
    (``user_mirror_trial``) or, stored before that key, the one the config of a run made by
    ``toollens run --user-profile`` numbers."""
    run = session.get(Run, run_id)
    if run is None:
        return {}
    config = run.config or {}
    rows = session.execute(
        select(
            TrajectoryRow.case_id,
            TrajectoryRow.trial,
            TrajectoryRow.fault_key,
            TrajectoryRow.passed,
            TrajectoryRow.detail["user_mirror_trial"].as_integer(),
        ).where(TrajectoryRow.run_id == run_id)
    ).all()
    named = {key.partition(PROFILE_MARK)[2] for _, _, key, _, at in rows if at is not None}
    if not named and not config.get("user_profiles"):
        return {}
    unnamed = any(at is None and PROFILE_MARK in key for _, _, key, _, at in rows)
    numbered = _config_mirror(session, run) if unnamed and config.get("user_profiles") else None
    cooperative = {(c, t): bool(ok) for c, t, key, ok, _ in rows if PROFILE_MARK not in key}
    out: dict[str, list[int]] = {}
    for case_id, trial, key, ok, stored in rows:
        name = key.partition(PROFILE_MARK)[2]
        at = stored if stored is not None or not name or numbered is None else numbered(case_id, name, trial)
        mirror = None if at is None or not name else cooperative.get((case_id, at))
        if mirror is None or mirror == bool(ok):
            continue
        out.setdefault(name, [0, 0])[0 if mirror else 1] += 1
    for name in [*(config.get("user_profiles") or ()), *sorted(named)]:
        if name != COOPERATIVE:
            out.setdefault(name, [0, 0])
    return out


def _config_mirror(session: Session, run: Run) -> Callable[[str, str, int], int | None]:
    """For runs stored before ``user_mirror_trial``: the cooperative trial a profile's trial
    mirrors, from the run's config (trials, sweep, the profile's place: app/runner/work.py)."""
    config = run.config or {}
    trials, sweep, kind = int(config.get("trials") or 1), bool(config.get("sweep")), str(config.get("sweep_kind"))
    suite = suite_for_run(session, run)

    def mirror(case_id: str, name: str, trial: int) -> int | None:
        profile, case = BY_NAME.get(name), suite.case(case_id)
        if profile is None or case is None:
            return None
        at = trial - trials - (len(sweep_plans(case, kind)) if sweep else 0) - (profile.index - 1) * trials
        return at if 0 <= at < trials else None

    return mirror


def run_gap(session: Session, run_id: int, profiles: dict[str, dict[str, Any]] | None = None) -> CooperationGap | None:
    """The run's cooperation gap (None without cooperative conversations), with the paired
    flips of each profile against the cooperative trial it mirrors; ``profiles``: the run's
    figures by profile when the caller has them (else read from its counters)."""
    figures = (
        {name: dict(row) for name, row in profiles.items()}
        if profiles is not None
        else profile_figures(session, run_id)
    )
    if not figures:  # no conversation under a profile: nothing to pair (and the run's rows are not read)
        return None
    for name, pair in paired_flips(session, run_id).items():
        if name in figures:
            figures[name]["paired"] = pair
    return cooperation_gap(figures)


def compare_gaps(a: CooperationGap | None, b: CooperationGap | None) -> dict[str, Any] | None:
    """Two runs' pass^k profile by profile at the k both reach, B − A, and whether B's
    change under the cooperative user holds under the others (``cooperation`` of compare)."""
    if a is None and b is None:
        return None
    ra = {r.profile: r for r in a.rows} if a is not None else {}
    rb = {r.profile: r for r in b.rows} if b is not None else {}
    k = min(g.k for g in (a, b) if g is not None)
    rows: list[dict[str, Any]] = []
    for name in [*ra, *(n for n in rb if n not in ra)]:
        x, y = ra.get(name), rb.get(name)
        va, vb = (x.at(k) if x else None), (y.at(k) if y else None)
        rows.append(
            {
                "profile": name,
                "a": va,
                "b": vb,
                "delta": None if va is None or vb is None else vb - va,
                "a_gap": x.gap_k if x else None,
                "b_gap": y.gap_k if y else None,
                "a_conversations": x.conversations if x else 0,
                "b_conversations": y.conversations if y else 0,
            }
        )
    deltas = [r["delta"] for r in rows if r["delta"] is not None]
    coop = next((r["delta"] for r in rows if r["profile"] == "cooperative"), None)
    others = [r["delta"] for r in rows if r["profile"] != "cooperative" and r["delta"] is not None]
    return {
        "k": k,
        "profiles": rows,
        "a": None if a is None else a.to_dict(),
        "b": None if b is None else b.to_dict(),
        "same_profiles": set(ra) == set(rb),
        "delta_cooperative": coop,
        "delta_band": [min(others), max(others)] if others else None,
        "b_ahead": sum(1 for d in deltas if d > 1e-12),
        "b_behind": sum(1 for d in deltas if d < -1e-12),
        "compared": len(deltas),
    }
