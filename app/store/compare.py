"""Comparing two runs, and two trajectories of one case, from the store."""

from __future__ import annotations

import difflib
from collections import Counter
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.prices import current_prices
from app.core.reports.report import PROFILE_MARK
from app.core.reports.stats import mcnemar_exact, newcombe_interval, wilson_interval
from app.core.score.blame import DEFAULT_SIMULATOR_SHARE, simulator_note
from app.core.score.families import BY_KEY, RATIO_KEYS
from app.core.score.scoring import EXTRA, MISSING
from app.core.textdiff import word_diff
from app.core.usage import comparable, usage_deltas
from app.store.aggregates import compare_usage
from app.store.blame import flipped_simulator_note
from app.store.errors import NotFound
from app.store.ingest import get_run_row
from app.store.models import Run, RunCounter, ToolsetVersion
from app.store.pairing import paired
from app.store.profiles import compare_gaps, run_gap
from app.store.queries import get_run, get_trajectory, turn_figures
from app.store.views import (
    CallPublic,
    ComparisonPublic,
    ConfusionDelta,
    DescriptionChange,
    FamilyDelta,
    FlippedCase,
    McNemarPublic,
    RatioPublic,
    RunPublic,
    ToolFigures,
    TrajectoryPairPublic,
    TurnDelta,
    UsageDelta,
)


def _confusion(session: Session, run_id: int) -> Counter[tuple[str, str]]:
    rows = session.execute(
        select(RunCounter.a, RunCounter.b, RunCounter.value).where(
            RunCounter.run_id == run_id, RunCounter.kind == "confusion"
        )
    )
    return Counter({(a, b): int(v) for a, b, v in rows})


def per_tool(cells: Counter[tuple[str, str]]) -> dict[str, tuple[RatioPublic, RatioPublic]]:
    """Per tool: (calls to T aligned to an expected T / calls to T, and calls
    on an expected T that were T / calls aligned to an expected T), from the
    confusion cells."""
    tools = {e for e, _ in cells if e != EXTRA} | {c for _, c in cells if c != MISSING}
    out = {}
    for t in sorted(tools):
        col = sum(n for (e, c), n in cells.items() if c == t)
        row = sum(n for (e, c), n in cells.items() if e == t)
        hit = cells.get((t, t), 0)
        out[t] = (RatioPublic(num=hit, den=col), RatioPublic(num=hit, den=row))
    return out


def _ci(r: RatioPublic) -> list[float] | None:
    ci = wilson_interval(r.num, r.den)
    return None if ci is None else [ci[0], ci[1]]


def with_simulator_share(c: ComparisonPublic, share: float | None) -> ComparisonPublic:
    """``c`` with its simulator note decided at ``share`` instead of the default (None: as it is)."""
    if share is None:
        return c
    note = simulator_note(c.flipped_blamed_on_user, c.simulator_checked or 0, share)
    return c.model_copy(update={"simulator_note": note})


def compare_runs(
    session: Session, a_id: int, b_id: int, *, limit: int = 200, runs: tuple[RunPublic, RunPublic] | None = None
) -> ComparisonPublic:
    """Deltas per family with 95% Wilson intervals, exact McNemar on the cases
    both runs share, per-tool selection, the confusion difference, the cases
    that flipped and, across toolset versions, the descriptions that changed
    (``runs``: the two runs as read already in this transaction)."""
    a, b = runs if runs is not None else (get_run(session, a_id), get_run(session, b_id))
    prices = current_prices()
    families = []
    for f in RATIO_KEYS:
        ra, rb = a.families[f], b.families[f]
        delta = None if not ra.den or not rb.den else rb.num / rb.den - ra.num / ra.den
        interval = newcombe_interval(ra.num, ra.den, rb.num, rb.den)
        reads = "n/a"
        if interval is not None and delta is not None:
            if interval[0] <= 0 <= interval[1]:
                reads = "within noise"
            else:
                reads = "better" if (delta > 0) == BY_KEY[f].higher_is_better else "worse"
        families.append(
            FamilyDelta(
                family=f,
                a=ra,
                b=rb,
                delta=delta,
                a_ci=_ci(ra),
                b_ci=_ci(rb),
                delta_ci=None if interval is None else [interval[0], interval[1]],
                reads_as=reads,
            )
        )
    # like with like: a run with cooperative and other conversations pairs its cooperative ones, as its pass rate
    pairing = paired(
        session, a_id, b_id, a.trajectories, b.trajectories, limit, cooperative=a.cooperative_only or b.cooperative_only
    )
    shared, only_a, only_b = pairing.shared, pairing.only_a, pairing.only_b
    flipped = [
        FlippedCase(case_id=cid, trial=trial, fault=fk, a_trajectory=ida, b_trajectory=idb, a_passed=pa, b_passed=pb)
        for cid, trial, fk, ida, idb, pa, pb in pairing.flipped
    ]
    ca, cb = _confusion(session, a_id), _confusion(session, b_id)
    diff = [
        ConfusionDelta(
            expected=e, called=c, a=ca.get((e, c), 0), b=cb.get((e, c), 0), delta=cb.get((e, c), 0) - ca.get((e, c), 0)
        )
        for e, c in sorted(set(ca) | set(cb))
    ]
    pa, pb = per_tool(ca), per_tool(cb)
    zero = RatioPublic(num=0, den=0)
    tools = [
        ToolFigures(
            tool=t,
            a_precision=pa.get(t, (zero, zero))[0],
            a_recall=pa.get(t, (zero, zero))[1],
            b_precision=pb.get(t, (zero, zero))[0],
            b_recall=pb.get(t, (zero, zero))[1],
        )
        for t in sorted(set(pa) | set(pb))
    ]
    changes: list[DescriptionChange] = []
    if a.toolset_version != b.toolset_version:
        va = session.get(ToolsetVersion, get_run_row(session, a_id).toolset_version_id)
        vb = session.get(ToolsetVersion, get_run_row(session, b_id).toolset_version_id)
        assert va is not None and vb is not None
        changes = description_changes(va.tools, vb.tools)
        for change in changes:  # each changed description beside the cells of its tool that moved
            change.cells = [
                d
                for d in diff
                if d.delta
                and d.expected not in (d.called, EXTRA)
                and d.called != MISSING
                and change.name in (d.expected, d.called)
            ]
    # the failing side of each flipped case: blamed on the simulated user, the difference may be the simulator's;
    # a conversation under a non-cooperative user profile misbehaves on purpose: its flips are the
    # cooperation gap's to show (below), not a sign that the simulator is off
    checked = [f.b_trajectory if f.a_passed else f.a_trajectory for f in flipped if PROFILE_MARK not in f.fault]
    n_user, _, note = flipped_simulator_note(session, checked, DEFAULT_SIMULATOR_SHARE)
    return ComparisonPublic(
        simulator_note=note,
        flipped_blamed_on_user=n_user,
        simulator_checked=len(checked),
        cooperation=compare_gaps(run_gap(session, a_id), run_gap(session, b_id)),
        a=a,
        b=b,
        families=families,
        shared_cases=shared,
        flipped=flipped,
        flipped_count=only_a + only_b,
        mcnemar=McNemarPublic(passed_only_a=only_a, passed_only_b=only_b, p_value=mcnemar_exact(only_a, only_b)),
        confusion_diff=diff,
        tools=tools,
        description_changes=changes,
        turns=_turns(session, a_id, b_id),
        usage=[
            UsageDelta(**d)
            for d in usage_deltas(
                comparable(compare_usage(session, a.id, a.trajectories, prices), a.trajectories),
                comparable(compare_usage(session, b.id, b.trajectories, prices), b.trajectories),
            )
        ],
    )


def run_stamps(session: Session, *run_ids: int) -> tuple[Any, ...]:
    """What a cached comparison of these runs is kept under, in one statement and without computing
    their figures: per run, its id, its birth (an id used again after a delete is another run), its
    name, status and finish, and its trajectory count (its counter: a batch stored into it adds to
    it). NotFound for an unknown run."""
    count = (
        select(func.coalesce(func.sum(RunCounter.value), 0))
        .where(RunCounter.run_id == Run.id, RunCounter.kind == "count", RunCounter.a == "trajectories")
        .scalar_subquery()
    )
    rows = {
        int(r[0]): (int(r[0]), r[1], r[2], r[3], r[4], int(r[5]))
        for r in session.execute(
            select(Run.id, Run.created_at, Run.name, Run.status, Run.finished_at, count).where(Run.id.in_(set(run_ids)))
        )
    }
    for rid in run_ids:
        if rid not in rows:
            raise NotFound(f"no run {rid}")
    return tuple(rows[rid] for rid in run_ids)


def _turns(session: Session, a_id: int, b_id: int) -> list[TurnDelta]:
    """Both runs' figures turn by turn (empty when neither holds conversations)."""
    ta = {t.turn: t for t in turn_figures(session, a_id)}
    tb = {t.turn: t for t in turn_figures(session, b_id)}
    return [TurnDelta(turn=n, a=ta.get(n), b=tb.get(n)) for n in sorted(set(ta) | set(tb))]


def description_changes(a_tools: list[dict[str, object]], b_tools: list[dict[str, object]]) -> list[DescriptionChange]:
    """Tools whose description or schema differ between two versions, with a
    word-level diff of the description."""
    ta = {str(t["name"]): t for t in a_tools}
    tb = {str(t["name"]): t for t in b_tools}
    out = []
    for name in sorted(set(ta) | set(tb)):
        x, y = ta.get(name), tb.get(name)
        da = "" if x is None else str(x.get("description", ""))
        db = "" if y is None else str(y.get("description", ""))
        schema_changed = x is not None and y is not None and x.get("parameters") != y.get("parameters")
        if x is not None and y is not None and da == db and not schema_changed:
            continue
        change = "added" if x is None else "removed" if y is None else "changed"
        out.append(
            DescriptionChange(
                name=name,
                change=change,
                description_a=da,
                description_b=db,
                parameters_changed=schema_changed,
                segments=[{"op": s.op, "text": s.text} for s in word_diff(da, db)],
            )
        )
    return out


def compare_trajectories(session: Session, a_id: int, b_id: int) -> TrajectoryPairPublic:
    """Two trajectories side by side, call by call (by index), with what
    changed in name, arguments, observation and error."""
    a, b = get_trajectory(session, a_id), get_trajectory(session, b_id)
    pairs: list[tuple[CallPublic | None, CallPublic | None]] = []

    def token(c: CallPublic) -> str:  # a failed attempt and its successful retry should not pair up
        return c.name + (" !" if c.error or c.schema_error or not c.exists else "")

    matcher = difflib.SequenceMatcher(a=[token(c) for c in a.calls], b=[token(c) for c in b.calls], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pairs.extend(zip(a.calls[i1:i2], b.calls[j1:j2], strict=True))
            continue
        left, right = a.calls[i1:i2], b.calls[j1:j2]
        for k in range(max(len(left), len(right))):  # a replaced stretch pairs up in order
            pairs.append((left[k] if k < len(left) else None, right[k] if k < len(right) else None))
    rows = []
    for n, (ca, cb) in enumerate(pairs):
        changed = [
            attr
            for attr in ("name", "arguments", "observation", "error")
            if (getattr(ca, attr) if ca else None) != (getattr(cb, attr) if cb else None)
        ]
        rows.append({"index": n, "a": ca, "b": cb, "changed": changed})
    return TrajectoryPairPublic(a=a, b=b, rows=rows, answer_changed=a.answer != b.answer)
