"""Reading from the store: every SQL query the API and the pages need.

Figures come from the run's counters, never from scanning calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from threading import Lock
from typing import Any

from sqlalchemy import Connection, Select, Text, cast, func, select, type_coerce
from sqlalchemy.orm import Session

from app.core.bounded import BoundedCache
from app.core.prices import PriceTable, current_prices
from app.core.records import loads
from app.core.reports.report import Report, cooperative_only, headline_trials, is_profiled, rounded_pass_hat_k
from app.core.score.detail import TrajectoryDetail, stored_detail
from app.core.score.families import RATIO_KEYS
from app.core.score.scoring import EXTRA, MISSING, UNRECORDED_ERROR
from app.core.usage import ModelCall, UsageTally, totals_by_model, trajectory_usage
from app.store.errors import NotFound
from app.store.ingest import get_run_row, hold, suite_for_run
from app.store.models import (
    CallRow,
    Run,
    RunCounter,
    RunPageKept,
    SuiteRow,
    ToolsetVersion,
    TrajectoryRow,
    TrajectoryTag,
)
from app.store.views import (
    CallPublic,
    ConfusionCell,
    ConfusionPublic,
    PassTotals,
    RatioPublic,
    RunPublic,
    RunsPublic,
    ToolChange,
    ToolsetDiffPublic,
    ToolsetPublic,
    ToolsetVersionPublic,
    TrajectoriesPublic,
    TrajectoryPublic,
    TrajectorySummary,
    TurnFigures,
)

MAX_PAGE = 500


def run_report(session: Session, run_id: int) -> Report:
    """The run's report from its counters, as stored: a read, never a write. A run stored before
    causes were kept has failed trajectories without one (``uncaused``): ``toollens db backfill``
    counts them."""
    rows = session.execute(
        select(RunCounter.kind, RunCounter.a, RunCounter.b, RunCounter.c, RunCounter.value).where(
            RunCounter.run_id == run_id
        )
    )
    return Report.from_counters((k, a, b, c, int(v)) for k, a, b, c, v in rows)


def uncaused(report: Report) -> int:
    """How many failed trajectories of the run the report counts have no cause: 0 for a run
    stored since causes were kept (each failed one gets its own as it is stored)."""
    failed = sum(n - passed for n, passed in report.trials.values())
    return max(0, failed - sum(report.causes.values()))


def report_json(report: Report, kept_pass_hat_k: dict[str, float] | None = None) -> dict[str, Any]:
    """The report's figures (``Report.to_json``, with its pass^k as kept when given); a run that
    needs ``toollens db backfill`` adds ``causes_missing``: its failed trajectories without a cause."""
    data = report.to_json(kept_pass_hat_k=kept_pass_hat_k)
    missing = uncaused(report)
    if missing:
        data["causes_missing"] = missing
    return data


def kept_pass_hat_k(values: list[float]) -> dict[str, Any]:
    """pass^k as a finished run keeps it (``run_page_kept.pass_hat_k``): the values for k = 1.. in
    order up to the last that is not 0 (with 9,035 trials a case and a third of them passed, the
    first 15 of 9,035), and how many there are."""
    end = len(values)
    while end and values[end - 1] == 0.0:
        end -= 1
    return {"k": len(values), "values": values[:end]}


def _pass_hat_k_of(kept: dict[str, Any]) -> dict[str, float]:
    """The kept values of pass^k (``kept_pass_hat_k``), as the report states them."""
    values = [float(v) for v in kept["values"]]
    values += [0.0] * (int(kept["k"]) - len(values))
    return dict(zip(map(str, range(1, len(values) + 1)), values, strict=True))


def report_of(session: Session, run_id: int) -> dict[str, Any]:
    """``report_json`` of the run's report from its counters, with its pass^k computed once per tally
    (``_pass_hat_ks``: the run's header states the same), or read as the run kept it."""
    report = run_report(session, run_id)
    tally = tuple(headline_trials(report.trials))
    return report_json(report, _pass_hat_ks(session, {run_id: tally}, {run_id: report.trajectories})[run_id])


def _family_counts(session: Session, run_ids: list[int]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {rid: {} for rid in run_ids}
    if not run_ids:
        return out
    rows = session.execute(
        select(RunCounter.run_id, RunCounter.kind, RunCounter.a, RunCounter.value).where(
            RunCounter.run_id.in_(run_ids), RunCounter.kind.in_(("count", "pair_violated", "pair_checked"))
        )
    )
    for rid, kind, a, value in rows:
        key = a if kind == "count" else "dependency_violations" if kind == "pair_violated" else "dependency_checks"
        out[rid][key] = out[rid].get(key, 0) + int(value)
    return out


def _usage_counts(session: Session, run_ids: list[int]) -> dict[int, dict[str, dict[str, int]]]:
    """Per run, per model: the token sums of its ``usage`` counters."""
    out: dict[int, dict[str, dict[str, int]]] = {rid: {} for rid in run_ids}
    if run_ids:
        rows = session.execute(
            select(RunCounter.run_id, RunCounter.a, RunCounter.b, RunCounter.value).where(
                RunCounter.run_id.in_(run_ids), RunCounter.kind == "usage"
            )
        )
        for rid, model, key, value in rows:
            out[rid].setdefault(model, {})[key] = int(value)
    return out


def _pass_tallies(session: Session, run_ids: list[int]) -> dict[int, dict[tuple[str, str], list[int]]]:
    """Per run, per (case, fault): [trials, passes], summed from the counters the report's pass rate and
    pass^k read (``Report.trials``)."""
    out: dict[int, dict[tuple[str, str], list[int]]] = {rid: {} for rid in run_ids}
    if run_ids:
        rows = session.execute(
            select(RunCounter.run_id, RunCounter.kind, RunCounter.a, RunCounter.b, func.sum(RunCounter.value))
            .where(RunCounter.run_id.in_(run_ids), RunCounter.kind.in_(("trials", "passes")))
            .group_by(RunCounter.run_id, RunCounter.kind, RunCounter.a, RunCounter.b)
        )
        for rid, kind, case_id, fault, value in rows:
            out[rid].setdefault((case_id, fault), [0, 0])[0 if kind == "trials" else 1] += int(value or 0)
    return out


def _tallies(trials: dict[int, dict[tuple[str, str], list[int]]]) -> dict[int, tuple[tuple[int, int], ...]]:
    """Each run's (trials, passes) per case and fault that its headline's pass^k reads (``headline_trials``:
    a profiled run's cooperative conversations)."""
    return {rid: tuple(headline_trials(by)) for rid, by in trials.items()}


def _public(
    run: Run,
    suite: SuiteRow,
    version: ToolsetVersion,
    counts: dict[str, int],
    usage: dict[str, dict[str, int]] | None = None,
    prices: PriceTable | None = None,
    trials: dict[tuple[str, str], list[int]] | None = None,
    pass_hat_k: dict[str, float] | None = None,
) -> RunPublic:
    tokens, cost = totals_by_model(usage or {}, prices or current_prices())
    tally = headline_trials(trials or {})  # a profiled run: its cooperative conversations (docs/metrics.md)
    every = None
    if trials and is_profiled(trials):  # what the headline counted before: every profile's conversations
        pairs = tuple((n, c) for n, c in trials.values())
        every = PassTotals(
            scored=sum(n for n, _ in pairs),
            passed=sum(c for _, c in pairs),
            max_trials=max((n for n, _ in pairs), default=0),
            pass_hat_k=dict(_rounded_pass_hat_k(pairs)),
        )
    return RunPublic(
        id=run.id,
        name=run.name,
        agent=run.agent,
        model=run.model,
        suite=suite.name,
        suite_id=suite.id,
        suite_hash=suite.hash,
        suite_version=suite.version,
        toolset=version.toolset,
        toolset_version=version.hash,
        toolset_label=version.label,
        status=run.status,
        config=run.config,
        created_at=run.created_at,
        finished_at=run.finished_at,
        trajectories=counts.get("trajectories", 0),
        families={f: RatioPublic(num=counts.get(f"{f}.num", 0), den=counts.get(f"{f}.den", 0)) for f in RATIO_KEYS},
        dependency_violations=counts.get("dependency_violations", 0),
        dependency_checks=counts.get("dependency_checks", 0),
        total_tokens=tokens,
        cost_usd=cost,
        scored=sum(n for n, _ in tally),
        passed=sum(c for _, c in tally),
        max_trials=max((n for n, _ in tally), default=0),
        pass_hat_k=pass_hat_k if pass_hat_k is not None else _rounded_pass_hat_k(tuple((n, c) for n, c in tally)),
        all_profiles=every,
        cooperative_only=cooperative_only(trials or {}),
    )


_PASS_HAT_K: BoundedCache[tuple[tuple[int, int], ...], dict[str, float]] = BoundedCache(64)
_PASS_HAT_K_LOCK = Lock()


def _rounded_pass_hat_k(tally: tuple[tuple[int, int], ...], kept: dict[str, float] | None = None) -> dict[str, float]:
    """pass^k as the runs list, the run page, compare and the run's report state it, of a run's
    (trials, passes) per case and fault: the same tally, the same figures (a run of thousands of
    trials per case costs tens of milliseconds to compute, on every page that lists it), kept for the
    64 tallies used last; ``kept``: as the run kept it when it finished (the same tally). A copy."""
    with _PASS_HAT_K_LOCK:
        held = _PASS_HAT_K.get(tally)
    if held is None:
        held = kept if kept is not None else rounded_pass_hat_k(tally)
        with _PASS_HAT_K_LOCK:
            _PASS_HAT_K.put(tally, held)
    return dict(held)


def kept_pass_hat_ks_query(run_ids: list[int]) -> Select[tuple[int, int, dict[str, Any]]]:
    """The pass^k these runs kept, with the trajectory counts it is valid for (the primary key)."""
    return select(RunPageKept.run_id, RunPageKept.trajectories, RunPageKept.pass_hat_k).where(
        RunPageKept.run_id.in_(run_ids)
    )


def _kept_pass_hat_ks(
    session: Session, run_ids: list[int], trajectories: dict[int, int]
) -> dict[int, dict[str, float]]:
    """The pass^k the runs kept when they finished, of those that hold as many trajectories now."""
    out: dict[int, dict[str, float]] = {}
    if run_ids:
        for rid, n, values in session.execute(kept_pass_hat_ks_query(run_ids)):
            if int(n) == trajectories.get(rid):
                out[rid] = _pass_hat_k_of(values)
    return out


def _pass_hat_ks(
    session: Session, tallies: dict[int, tuple[tuple[int, int], ...]], trajectories: dict[int, int]
) -> dict[int, dict[str, float]]:
    """Each run's pass^k from its tally (``_rounded_pass_hat_k``): those not computed lately are read as
    the runs kept them, if current, else computed."""
    with _PASS_HAT_K_LOCK:
        missing = [rid for rid, tally in tallies.items() if tally and _PASS_HAT_K.peek(tally) is None]
    kept = _kept_pass_hat_ks(session, missing, trajectories)
    return {rid: _rounded_pass_hat_k(tally, kept.get(rid)) for rid, tally in tallies.items()}


def _runs_query() -> Select[Run, SuiteRow, ToolsetVersion]:
    return (
        select(Run, SuiteRow, ToolsetVersion)
        .join(SuiteRow, SuiteRow.id == Run.suite_id)
        .join(ToolsetVersion, ToolsetVersion.id == Run.toolset_version_id)
    )


def list_runs(
    session: Session,
    *,
    suite: str | None = None,
    model: str | None = None,
    toolset_version: str | None = None,
    limit: int = 50,
    offset: int = 0,
    prices: PriceTable | None = None,
) -> RunsPublic:
    q = _runs_query()
    if suite:
        q = q.where(SuiteRow.name == suite)
    if model:
        q = q.where(Run.model == model)
    if toolset_version:
        q = q.where((ToolsetVersion.hash == toolset_version) | (ToolsetVersion.label == toolset_version))
    total = session.scalar(select(func.count()).select_from(q.subquery())) or 0
    page = session.execute(q.order_by(Run.created_at.desc(), Run.id.desc()).limit(limit).offset(offset)).all()
    ids = [run.id for run, _, _ in page]
    counts, usage, trials = _family_counts(session, ids), _usage_counts(session, ids), _pass_tallies(session, ids)
    passes = _pass_hat_ks(session, _tallies(trials), {rid: c.get("trajectories", 0) for rid, c in counts.items()})
    return RunsPublic(
        data=[_public(r, s, v, counts[r.id], usage[r.id], prices, trials[r.id], passes[r.id]) for r, s, v in page],
        count=total,
        limit=limit,
        offset=offset,
    )


def resolve_run(session: Session, run_ref: int | str) -> Run:
    """The run (by id, or a string: by id, else by name) read once with its suite and toolset
    version, all three held for the session: what later asks for them by id reads no row again
    (``ingest.get_run_row``, ``suite_for_run``). NotFound for an unknown run."""
    if isinstance(run_ref, str) and not (run_ref.isdigit() and len(run_ref) < 19):
        where = Run.name == run_ref
    else:
        where = Run.id == int(run_ref)
    row = session.execute(_runs_query().where(where).order_by(Run.id).limit(1)).one_or_none()
    if row is None and isinstance(run_ref, str) and run_ref.isdigit():  # a name made of digits
        row = session.execute(_runs_query().where(Run.name == run_ref).order_by(Run.id).limit(1)).one_or_none()
    if row is None:
        raise NotFound(f"no run {run_ref!r}" if isinstance(run_ref, str) else f"no run {run_ref}")
    for held in row:
        hold(session, held)
    return row[0]


def run_public(session: Session, run: Run, *, prices: PriceTable | None = None) -> RunPublic:
    """A resolved run (``resolve_run``) with its figures from its counters."""
    suite, version = session.get(SuiteRow, run.suite_id), session.get(ToolsetVersion, run.toolset_version_id)
    assert suite is not None and version is not None
    counts, trials = _family_counts(session, [run.id])[run.id], _pass_tallies(session, [run.id])
    passes = _pass_hat_ks(session, _tallies(trials), {run.id: counts.get("trajectories", 0)})
    return _public(
        run, suite, version, counts, _usage_counts(session, [run.id])[run.id], prices, trials[run.id], passes[run.id]
    )


def get_run(session: Session, run_ref: int | str, *, prices: PriceTable | None = None) -> RunPublic:
    return run_public(session, resolve_run(session, run_ref), prices=prices)


def _json(value: Any) -> Any:
    return loads(value) if isinstance(value, str) else value


def _model_calls(raw: Any) -> list[ModelCall]:
    """A stored ``model_calls`` column back as ModelCalls (checked on the way in: read as is)."""
    if not isinstance(raw, list):
        return []
    return [
        ModelCall(
            d.get("model"),
            d.get("input_tokens"),
            d.get("output_tokens"),
            d.get("cached_tokens"),
            d.get("total_tokens"),
            d.get("latency_ms"),
        )
        for d in raw
        if isinstance(d, dict)
    ]


def run_usage(session: Session, run_id: int, prices: PriceTable | None = None) -> dict[str, Any]:
    """The run's ``usage`` figures (docs/metrics.md), priced now. Reads the run's
    trajectories' usage columns and its calls' latencies (the figures cache keeps the result)."""
    return usage_so_far(session, run_id).tally.to_json(prices or current_prices())


@dataclass
class UsageSoFar:
    """The usage tally of a run's trajectories up to ``last_id`` (every one of them)."""

    tally: UsageTally
    last_id: int = 0


def usage_so_far(session: Session, run_id: int, before: UsageSoFar | None = None) -> UsageSoFar:
    """The tally of the run's trajectories; given ``before``, only those stored
    after its ``last_id`` are read and added to it, unless some with a lower id
    were stored meanwhile (concurrent writers commit out of order): then every
    trajectory is read again."""
    so_far = before if before is not None else UsageSoFar(UsageTally())
    after = so_far.last_id
    conn = session.connection()  # rows as tuples: a run of 10^6 calls is read without the ORM's per-row work
    # the whole run: how its trajectories ended is in its counters, read with its last id in one statement
    counted = _ended(conn, run_id) if after == 0 else None
    upto = None if counted is None else counted[0]  # what else is read stops at that id: the same snapshot
    latency = conn.execute(latency_query(run_id, after, upto)).all()
    last = after
    if counted is None:
        # a trajectory without model requests only counts in its groups: those are counted by the database
        for passed, failures, outcome, n, top in conn.execute(usage_groups_query(run_id, after)):
            so_far.tally.add_alike(int(n), passed=passed, failures=_json(failures) or (), outcome=outcome)
            last = max(last, int(top))
    for tid, calls, passed, failures, outcome in conn.execute(model_calls_query(run_id, after, upto)):
        so_far.tally.add(_model_calls(_json(calls)), (), passed=passed, failures=_json(failures) or (), outcome=outcome)
        last = max(last, tid)
    if counted is not None:  # every trajectory up to the last id, those with model requests included
        last, so_far.tally.trajectories, so_far.tally.all_groups = counted
    so_far.tally.add_tool_latency(latency)  # a tool's latencies are only counted and sorted: read in any order
    so_far.last_id = last
    if before is not None:
        held = session.scalar(
            select(func.count())
            .select_from(TrajectoryRow)
            .where(TrajectoryRow.run_id == run_id, TrajectoryRow.id <= last)
        )
        if held != so_far.tally.trajectories:
            return usage_so_far(session, run_id)
    return so_far


def model_calls_query(run_id: int, after: int = 0, upto: int | None = None) -> Select[int, str, bool, str, str | None]:
    """The run's trajectories after ``after`` (up to ``upto``) with model requests, in id order: their
    requests and how they ended, the JSON columns as the database hands them (text on SQLite, read by
    the core's fast reader), found in ``ix_traj_run_model_calls``, which holds only them."""
    q = (
        select(
            TrajectoryRow.id,
            type_coerce(TrajectoryRow.model_calls, Text),
            TrajectoryRow.passed,
            type_coerce(TrajectoryRow.failures, Text),
            TrajectoryRow.outcome,
        )
        .where(TrajectoryRow.run_id == run_id, TrajectoryRow.id > after, TrajectoryRow.model_calls.is_not(None))
        .order_by(TrajectoryRow.id)
    )
    return q if upto is None else q.where(TrajectoryRow.id <= upto)


def latency_query(run_id: int, after: int = 0, upto: int | None = None) -> Select[str, float | None]:
    """The tool calls' (name, latency) of the run's trajectories after ``after`` (up to ``upto``), those
    with a latency only: from ``ix_calls_run_latency`` alone, which holds only them (a test reads the plans)."""
    q = select(CallRow.name, CallRow.latency_ms).where(
        CallRow.run_id == run_id, CallRow.trajectory_id > after, CallRow.latency_ms.is_not(None)
    )
    return q if upto is None else q.where(CallRow.trajectory_id <= upto)


def last_id_query(run_id: int) -> Select[int]:
    """The run's last trajectory id, read backwards in ``ix_traj_run_order``: the run written as a range
    of one and ordered by both columns, which only that index gives (``max(id)`` with ``run_id =`` walks
    the primary key back on PostgreSQL, through every later run's rows; a test reads the plans)."""
    return (
        select(TrajectoryRow.id)
        .where(TrajectoryRow.run_id >= run_id, TrajectoryRow.run_id <= run_id)
        .order_by(TrajectoryRow.run_id.desc(), TrajectoryRow.id.desc())
        .limit(1)
    )


def _ended(conn: Connection, run_id: int) -> tuple[int, int, Counter[str]] | None:
    """The run's last trajectory id, its trajectories and how many ended in each usage group (passed,
    failed, ``failure:`` and ``outcome:`` keys, as ``UsageTally.add`` counts them), from its counters
    and read in one statement (one snapshot: the counters of every trajectory up to that id, written with
    them). None when the counters do not count every trajectory: a conversation the simulated user broke
    is outside them (then the database counts the rows, ``usage_groups_query``)."""
    last = last_id_query(run_id).scalar_subquery().label("last")
    kinds = ("trials", "passes", "failure", "outcome")
    rows = conn.execute(
        select(RunCounter.kind, RunCounter.a, RunCounter.b, RunCounter.value, last).where(
            RunCounter.run_id == run_id,
            RunCounter.kind.in_(kinds)
            | ((RunCounter.kind == "count") & RunCounter.a.in_(("trajectories", "user_errors"))),
        )
    ).all()
    sums: Counter[tuple[str, str]] = Counter()
    top = 0
    for kind, a, b, value, top_id in rows:
        top = int(top_id or 0)
        key = (kind, a) if kind in ("count", "failure") else (kind, b) if kind == "outcome" else (kind, "")
        sums[key] += int(value)
    total = sums["count", "trajectories"]
    if not rows or sums["count", "user_errors"] or sums["trials", ""] != total:
        return None
    groups: Counter[str] = Counter({"passed": sums["passes", ""], "failed": total - sums["passes", ""]})
    for (kind, name), n in sums.items():
        if kind in ("failure", "outcome"):
            groups[f"{kind}:{name}"] += n
    return top, total, Counter({k: n for k, n in groups.items() if n > 0})


def usage_groups_query(run_id: int, after: int = 0) -> Select[bool, str, str | None, int, int]:
    """The run's trajectories after ``after`` without model requests, counted by how they ended
    (passed, failures, outcome), with the last id of each group: a GROUP BY the database runs on the
    run's rows in ``ix_traj_run_order`` (a test reads the plans)."""
    failures = cast(TrajectoryRow.failures, Text)
    return (
        select(TrajectoryRow.passed, failures, TrajectoryRow.outcome, func.count(), func.max(TrajectoryRow.id))
        .where(TrajectoryRow.run_id == run_id, TrajectoryRow.id > after, TrajectoryRow.model_calls.is_(None))
        .group_by(TrajectoryRow.passed, failures, TrajectoryRow.outcome)
    )


def run_summary(
    session: Session, run_id: int, prices: PriceTable, *, usage: UsageSoFar | None = None, keep_usage: bool = False
) -> tuple[dict[str, Any], UsageSoFar | None]:
    """The run's figures without their ``cases`` (what the figures cache keeps):
    the report from its counters and the ``usage`` figures. With ``usage`` (an
    earlier tally of this run, which is changed) only the trajectories stored
    since are read; the tally comes back when asked (``keep_usage``) or given."""
    data = report_of(session, run_id)
    data.pop("cases", None)
    so_far = usage_so_far(session, run_id, usage)
    data["usage"] = so_far.tally.to_json(prices)
    return data, so_far if keep_usage or usage is not None else None


def run_trajectory_count(session: Session, run_id: int) -> int:
    """How many trajectories a run holds, from its counter (no scan)."""
    n = session.scalar(
        select(RunCounter.value).where(
            RunCounter.run_id == run_id, RunCounter.kind == "count", RunCounter.a == "trajectories"
        )
    )
    return int(n or 0)


def _counter_sum(session: Session, run_id: int, kind: str, a: str | None = None, b: str | None = None) -> int:
    q = select(func.coalesce(func.sum(RunCounter.value), 0)).where(RunCounter.run_id == run_id, RunCounter.kind == kind)
    if a is not None:
        q = q.where(RunCounter.a == a)
    if b is not None:
        q = q.where(RunCounter.b == b)
    return int(session.scalar(q) or 0)


def counted(
    session: Session, run_id: int, *, failure: str | None = None, outcome: str | None = None, passed: bool | None = None
) -> int | None:
    """How many trajectories no filter or one filter (a failure, an outcome, passed or failed) keeps,
    from the run's counters: every trajectory adds to them what its row holds. None for two filters."""
    given = [x for x in (failure, outcome, passed) if x is not None]
    if len(given) > 1:
        return None
    if not given:
        return run_trajectory_count(session, run_id)
    if failure is not None:
        return _counter_sum(session, run_id, "failure", a=failure)
    if outcome is not None:
        return _counter_sum(session, run_id, "outcome", b=outcome)
    total = run_trajectory_count(session, run_id)
    if _counter_sum(session, run_id, "trials") != total:  # conversations the user broke: outside pass^k's
        return None  # counters, yet a passed or failed row each (counted from the rows instead)
    passes = _counter_sum(session, run_id, "passes")
    return passes if passed else total - passes


def figures(
    session: Session,
    run_id: int,
    *,
    cases_limit: int = 100,
    cases_offset: int = 0,
    summary: dict[str, Any] | None = None,
    prices: PriceTable | None = None,
) -> dict[str, Any]:
    """The run's figures in exactly the shape of ``toollens score --json``;
    ``cases`` holds one page (``cases_total`` says how many there are).
    ``summary`` is the report without its cases (and with its ``usage``), when the caller has it."""
    get_run_row(session, run_id)
    if summary is None:
        summary = {**report_of(session, run_id), "usage": run_usage(session, run_id, prices)}
    data = dict(summary)
    page = _id_page(
        select(TrajectoryRow.id).where(TrajectoryRow.run_id == run_id),
        int(data["trajectories"]),
        cases_limit,
        cases_offset,
    )
    q = select(
        TrajectoryRow.case_id,
        TrajectoryRow.trial,
        TrajectoryRow.passed,
        TrajectoryRow.failures,
        TrajectoryRow.fault_step,
        TrajectoryRow.recovery_kind,
        TrajectoryRow.outcome,
        TrajectoryRow.detail,
    ).where(TrajectoryRow.id.in_(page))
    rows = session.execute(q.order_by(TrajectoryRow.id))
    data["cases"] = [
        _case(cid, trial, passed, failures, outcome, stored_detail(detail, _CASE_READS))
        for cid, trial, passed, failures, _step, _kind, outcome, detail in rows
    ]
    data["cases_total"] = data["trajectories"]
    return data


_CASE_EXTRAS = ("fault_not_reached", "user_error", "agent_error")
_CASE_READS = ("turns", "blame")  # what a case reads of its detail (the rest is shown as stored)
_SUMMARY_READS = ("fault", "blame", "user_profile")  # what a trajectory's summary reads


def _case(
    case_id: str, trial: int, passed: bool, failures: list[str], outcome: str | None, d: TrajectoryDetail
) -> dict[str, Any]:
    """A stored trajectory as ``score --json`` lists it in ``cases``."""
    b = d.blame
    return {
        "case_id": case_id,
        "trial": trial,
        "passed": passed,
        "failures": list(failures),
        "fault": d.json("fault"),
        "outcome": outcome,
        **{k: d.json(k) for k in _CASE_EXTRAS if d.json(k)},
        **(
            {"failures_by_turn": {str(t.turn): list(t.failures) for t in d.turns if t.failures}}
            if isinstance(d.json("turns"), list)
            else {}
        ),
        **(
            {"blame": b.blame, "blame_evidence": b.json("evidence"), "blame_confidence": b.json("confidence")}
            if b is not None and isinstance(b.blame, str) and b.has("blame")
            else {}
        ),
    }


def turn_list(turns: dict[str, dict[str, Any]] | None) -> list[TurnFigures]:
    """``turns`` of the figures as a list, in turn order."""
    return [
        TurnFigures(
            turn=int(k),
            trajectories=v["trajectories"],
            failed=v.get("failed", 0),
            families={f: RatioPublic(**v[f]) for f in RATIO_KEYS},
            failures=v["failures"],
        )
        for k, v in sorted((turns or {}).items(), key=lambda kv: int(kv[0]))
    ]


def run_causes(session: Session, run_id: int) -> list[dict[str, Any]]:
    """``causes`` of the figures (failed trajectories by first divergence), from the run's counters."""
    return run_report(session, run_id).causes_json()


def turn_figures(session: Session, run_id: int) -> list[TurnFigures]:
    """A run's figures per user turn, from its per-turn counters alone (empty: no conversations)."""
    rows = session.execute(
        select(RunCounter.kind, RunCounter.a, RunCounter.b, RunCounter.c, RunCounter.value).where(
            RunCounter.run_id == run_id, RunCounter.kind == "turn"
        )
    )
    report = Report.from_counters((k, a, b, c, int(v)) for k, a, b, c, v in rows)
    return turn_list(report.turns_json())


def confusion(session: Session, run_id: int) -> ConfusionPublic:
    get_run_row(session, run_id)
    rows = session.execute(
        select(RunCounter.a, RunCounter.b, RunCounter.c, RunCounter.value).where(
            RunCounter.run_id == run_id, RunCounter.kind == "confusion"
        )
    ).all()
    cells = [ConfusionCell(expected=a, called=b, count=int(v), hallucinated=c == "1") for a, b, c, v in rows]
    cells.sort(key=lambda c: (-c.count, c.expected, c.called))
    expected = sorted({c.expected for c in cells} - {EXTRA}) + (
        [EXTRA] if any(c.expected == EXTRA for c in cells) else []
    )
    real = sorted({c.called for c in cells if not c.hallucinated} - {MISSING})
    invented = sorted({c.called for c in cells if c.hallucinated})
    called = real + invented + ([MISSING] if any(c.called == MISSING for c in cells) else [])
    return ConfusionPublic(run_id=run_id, expected=expected, called=called, cells=cells)


def _summary(t: TrajectoryRow, d: TrajectoryDetail | None = None) -> TrajectorySummary:
    d = stored_detail(t.detail, _SUMMARY_READS) if d is None else d
    found = d.fault
    fault = (
        None
        if t.fault_kind is None and t.recovery_kind is None
        else {
            "step": t.fault_step if t.fault_kind is not None else None if found is None else found.step,
            "kind": t.fault_kind or t.recovery_kind,
            "injected": t.fault_kind is not None,
            **({"source": found.source} if found is not None and isinstance(found.source, str) else {}),
        }
    )
    blame = d.blame if not t.passed else None
    error = d.json("agent_error")
    return TrajectorySummary(
        id=t.id,
        run_id=t.run_id,
        case_id=t.case_id,
        trial=t.trial,
        fault=fault,
        outcome=t.outcome,
        passed=t.passed,
        failures=list(t.failures),
        n_calls=t.n_calls,
        reward=t.reward,
        total_tokens=t.total_tokens,
        agent_error=error if isinstance(error, dict) else None,
        blame=blame.blame if blame is not None and isinstance(blame.blame, str) and blame.has("blame") else None,
        blame_confidence=blame.confidence if blame is not None and isinstance(blame.confidence, (int, float)) else None,
        user_profile=d.user_profile if isinstance(d.user_profile, str) else None,
    )


def list_trajectories(
    session: Session,
    run_id: int,
    *,
    failure: str | None = None,
    expected: str | None = None,
    called: str | None = None,
    fault_kind: str | None = None,
    outcome: str | None = None,
    passed: bool | None = None,
    case_id: str | None = None,
    cause: str | None = None,
    blame: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> TrajectoriesPublic:
    """A page of a run's trajectories, filtered by failure name, confusion
    cell (``expected`` and/or ``called``), fault kind, outcome, pass/fail,
    cause (the key of a failed trajectory's first divergence), blame (agent,
    user or task: who failed the conversation)."""
    get_run_row(session, run_id)
    failure, expected, called, fault_kind, outcome, case_id, cause = (  # an empty filter is no filter
        x or None for x in (failure, expected, called, fault_kind, outcome, case_id, cause)
    )
    q = select(TrajectoryRow.id).where(TrajectoryRow.run_id == run_id)
    # one filter answered from an index alone: count and page without scanning the run's trajectories
    index_only: list[Select[int]] = []
    if failure:
        tagged = select(TrajectoryTag.trajectory_id).where(
            TrajectoryTag.run_id == run_id, TrajectoryTag.kind == "failure", TrajectoryTag.value == failure
        )
        q = q.where(TrajectoryRow.id.in_(tagged))
        index_only.append(tagged)
    if cause:
        caused = select(TrajectoryTag.trajectory_id).where(
            TrajectoryTag.run_id == run_id, TrajectoryTag.kind == "cause", TrajectoryTag.value == cause
        )
        q = q.where(TrajectoryRow.id.in_(caused))
        index_only.append(caused)
    if blame:  # who failed it (app/store/blame.py)
        from app.store.blame import blamed_ids

        q = q.where(TrajectoryRow.id.in_(blamed_ids(session, run_id, blame)))
    if called == MISSING:
        missing = select(TrajectoryTag.trajectory_id).where(
            TrajectoryTag.run_id == run_id, TrajectoryTag.kind == "missing"
        )
        if expected:
            missing = missing.where(TrajectoryTag.value == expected)
        q = q.where(TrajectoryRow.id.in_(missing))
        index_only.append(missing)
    elif expected or called:
        cell = select(CallRow.trajectory_id).where(CallRow.run_id == run_id)
        if expected == EXTRA:
            cell = cell.where(CallRow.expected_name.is_(None))
        elif expected:
            cell = cell.where(CallRow.expected_name == expected)
        if called:
            cell = cell.where(CallRow.name == called)
        q = q.where(TrajectoryRow.id.in_(cell))
        index_only.append(cell)
    if fault_kind:
        q = q.where(TrajectoryRow.recovery_kind == fault_kind)
    if outcome:
        q = q.where(TrajectoryRow.outcome == outcome)
    if passed is not None:
        q = q.where(TrajectoryRow.passed == passed)
    if case_id:
        q = q.where(TrajectoryRow.case_id == case_id)
    total = None
    if all(x is None for x in (expected, called, fault_kind, case_id, cause, blame or None)):
        total = counted(session, run_id, failure=failure, outcome=outcome, passed=passed)
    if len(index_only) == 1 and all(x is None for x in (fault_kind, outcome, passed, case_id, blame or None)):
        q = index_only[0].distinct()
    if total is None:
        total = session.scalar(select(func.count()).select_from(q.subquery())) or 0
    rows = session.scalars(
        select(TrajectoryRow).where(TrajectoryRow.id.in_(_id_page(q, total, limit, offset))).order_by(TrajectoryRow.id)
    ).all()
    return TrajectoriesPublic(data=[_summary(t) for t in rows], count=total, limit=limit, offset=offset)


def _id_page(ids: Select[Any], total: int, limit: int, offset: int) -> Select[Any]:
    """One page of a query of trajectory ids, in id order: only the ids are skipped over
    (an index alone), and a page past the middle is read from the end, so the last page
    of a run of millions costs what its first does."""
    sub = ids.subquery()
    col = sub.c[0]
    if offset > total // 2 and offset < total:
        n = min(limit, total - offset)
        return select(col).order_by(col.desc()).limit(n).offset(total - offset - n)
    return select(col).order_by(col).limit(limit).offset(offset)


MAX_NOTES, MAX_NOTE_CHARS = 50, 2_000  # what a page shows of a case's notes


def case_notes(session: Session, run: Run, case_id: str) -> list[str]:
    """The notes the run's suite gives this case (texts for people: what an importer kept of
    the source's checks that ToolLens does not make), bounded for a page."""
    case = suite_for_run(session, run).case(case_id)
    return [n[:MAX_NOTE_CHARS] for n in case.notes[:MAX_NOTES]] if case is not None else []


def failing_neighbours(session: Session, run_id: int, trajectory_id: int) -> tuple[int | None, int | None]:
    """The run's failing trajectories just before and just after this one (by id)."""
    failing = select(TrajectoryRow.id).where(TrajectoryRow.run_id == run_id, TrajectoryRow.passed.is_(False))
    before = session.scalar(failing.where(TrajectoryRow.id < trajectory_id).order_by(TrajectoryRow.id.desc()).limit(1))
    after = session.scalar(failing.where(TrajectoryRow.id > trajectory_id).order_by(TrajectoryRow.id).limit(1))
    return before, after


def _call_public(c: CallRow) -> CallPublic:
    return CallPublic(
        index=c.idx,
        name=c.name,
        arguments=c.arguments,
        observation=c.observation,
        error=None
        if c.error_kind is None
        else {
            "kind": c.error_kind,
            "message": c.error_message or "",
            "injected": c.injected,
            **({} if c.delay_ms is None else {"delay_ms": c.delay_ms}),
        },
        exists=c.exists,
        schema_error=None if c.schema_field is None else {"field": c.schema_field, "message": c.schema_message or ""},
        step=c.step,
        expected_name=c.expected_name,
        selection_ok=c.selection_ok,
        mismatches=c.mismatches,
        dependency_violation=None if c.dependency_before is None else [c.dependency_before, c.name],
        forbidden=c.forbidden,
        reaction=None if c.reaction is None else {"reaction": c.reaction, "acceptable": c.reaction_ok},
        turn=c.turn,
        latency_ms=c.latency_ms,
    )


@dataclass(frozen=True)
class StoredTrajectory:
    """A trajectory's row and its calls in order, read once for a page (``load_trajectory``)."""

    row: TrajectoryRow
    calls: list[CallRow]

    @cached_property
    def detail(self) -> TrajectoryDetail:
        """Its stored detail, read once."""
        return stored_detail(self.row.detail)


def load_trajectory(session: Session, trajectory_id: int) -> StoredTrajectory:
    """The trajectory's row (held for the session) and its calls; NotFound for an unknown one."""
    t = session.get(TrajectoryRow, trajectory_id)
    if t is None:
        raise NotFound(f"no trajectory {trajectory_id}")
    hold(session, t)
    return StoredTrajectory(
        t, list(session.scalars(select(CallRow).where(CallRow.trajectory_id == t.id).order_by(CallRow.idx)))
    )


def get_trajectory(session: Session, trajectory_id: int, *, prices: PriceTable | None = None) -> TrajectoryPublic:
    return trajectory_public(session, load_trajectory(session, trajectory_id), prices=prices)


def trajectory_public(
    session: Session, stored: StoredTrajectory, *, prices: PriceTable | None = None
) -> TrajectoryPublic:
    """A loaded trajectory as the API and the page read it, with its case's expected calls."""
    t, calls = stored.row, stored.calls
    run = get_run_row(session, t.run_id)
    case = suite_for_run(session, run).case(t.case_id)
    expected: list[dict[str, Any]] | None = (
        None
        if case is None or case.expected_calls is None
        else [
            {"name": e.name, "arguments": e.arguments, "tolerance": {k: r.describe() for k, r in e.tolerance.items()}}
            for e in case.expected_calls
        ]
    )
    d = stored.detail
    if expected is not None and d.step_turns is not None and len(d.step_turns) == len(expected):
        for e, turn in zip(expected, d.step_turns, strict=True):
            e["turn"] = turn
    return TrajectoryPublic(
        **_summary(t, d).model_dump(),
        question=t.question,
        answer=t.answer,
        state=t.state,
        detail=d.to_dict(),
        calls=[_call_public(c) for c in calls],
        expected_calls=expected,
        model_calls=t.model_calls,
        usage=trajectory_usage(_model_calls(t.model_calls), prices or current_prices()),
    )


def _exported_call(c: CallRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": c.name,
        "arguments": c.arguments if c.arguments_raw is None else c.arguments_raw,
        "observation": c.observation,
        "error": None
        if c.error_kind is None
        else {
            "kind": c.error_kind,
            "message": c.error_message or "",
            "injected": c.injected,
            **({} if c.delay_ms is None else {"delay_ms": c.delay_ms}),
        },
    }
    if c.turn is not None:
        out["turn"] = c.turn
    if c.latency_ms is not None:
        out["latency_ms"] = c.latency_ms
    return out


def export_records(
    session: Session, run_id: int, *, chunk: int = 1000, checked: bool = False
) -> Iterator[dict[str, Any]]:
    """The run's trajectories back as trajectory records (docs/formats.md), in storage order
    (``checked``: the caller found the run already; otherwise an unknown one is NotFound)."""
    if not checked:
        get_run_row(session, run_id)
    last = 0
    while True:
        trajs = session.scalars(
            select(TrajectoryRow)
            .where(TrajectoryRow.run_id == run_id, TrajectoryRow.id > last)
            .order_by(TrajectoryRow.id)
            .limit(chunk)
        ).all()
        if not trajs:
            return
        ids = [t.id for t in trajs]
        by_traj: dict[int, list[CallRow]] = {i: [] for i in ids}
        for c in session.scalars(
            select(CallRow).where(CallRow.trajectory_id.in_(ids)).order_by(CallRow.trajectory_id, CallRow.idx)
        ):
            by_traj[c.trajectory_id].append(c)
        for t in trajs:
            yield trajectory_record(t, by_traj[t.id])
        last = ids[-1]


def _version_public(v: ToolsetVersion, runs: int = 0) -> ToolsetVersionPublic:
    return ToolsetVersionPublic(
        id=v.id, toolset=v.toolset, hash=v.hash, label=v.label, created_at=v.created_at, tools=v.tools, runs=runs
    )


def list_toolsets(session: Session) -> list[ToolsetPublic]:
    versions = session.scalars(select(ToolsetVersion).order_by(ToolsetVersion.toolset, ToolsetVersion.id)).all()
    runs = dict(session.execute(select(Run.toolset_version_id, func.count()).group_by(Run.toolset_version_id)).all())
    out: dict[str, ToolsetPublic] = {}
    for v in versions:
        out.setdefault(v.toolset, ToolsetPublic(name=v.toolset, versions=[])).versions.append(
            _version_public(v, runs.get(v.id, 0))
        )
    return list(out.values())


def get_toolset(session: Session, name: str) -> ToolsetPublic:
    for ts in list_toolsets(session):
        if ts.name == name:
            return ts
    raise NotFound(f"no toolset {name!r}")


def _find_version(session: Session, toolset: str, ref: str) -> ToolsetVersion:
    """A version by its hash, its label or its numeric id (in that order)."""
    v = session.scalar(
        select(ToolsetVersion)
        .where(ToolsetVersion.toolset == toolset, (ToolsetVersion.hash == ref) | (ToolsetVersion.label == ref))
        .order_by(ToolsetVersion.id.desc())
    )
    if v is None and ref.isdigit() and len(ref) < 19:
        v = session.scalar(
            select(ToolsetVersion).where(ToolsetVersion.toolset == toolset, ToolsetVersion.id == int(ref))
        )
    if v is None:
        raise NotFound(f"no version {ref!r} of toolset {toolset!r}")
    return v


def diff_toolset(session: Session, toolset: str, a: str, b: str) -> ToolsetDiffPublic:
    va, vb = _find_version(session, toolset, a), _find_version(session, toolset, b)
    ta = {t["name"]: t for t in va.tools}
    tb = {t["name"]: t for t in vb.tools}
    changes = []
    for name in sorted(set(ta) | set(tb)):
        x, y = ta.get(name), tb.get(name)
        if x is None:
            change = "added"
        elif y is None:
            change = "removed"
        else:
            change = "same" if x == y else "changed"
        changes.append(
            ToolChange(
                name=name,
                change=change,
                description_a=None if x is None else x["description"],
                description_b=None if y is None else y["description"],
                parameters_changed=x is not None and y is not None and x["parameters"] != y["parameters"],
            )
        )
    return ToolsetDiffPublic(toolset=toolset, a=va.hash, b=vb.hash, tools=changes)


def trajectory_record(t: TrajectoryRow, calls: list[CallRow]) -> dict[str, Any]:
    """A stored trajectory back as its trajectory record (docs/formats.md)."""
    rec: dict[str, Any] = {
        "case_id": t.case_id,
        "trial": t.trial,
        "question": t.question,
        "calls": [_exported_call(c) for c in calls],
        "answer": t.answer,
        "fault": None if t.fault_kind is None else {"step": t.fault_step, "kind": t.fault_kind},
    }
    if t.reward is not None:
        rec["reward"] = t.reward
    if t.state is not None:
        rec["state"] = t.state
    # the rest as the record gave it
    d = stored_detail(t.detail, ("stopped", "user_profile", "agent_error", "user_mirror_trial"))
    if isinstance(d.stopped, str):
        rec["stopped"] = d.stopped
    if isinstance(messages := d.json("messages"), list):
        rec["messages"] = messages
    if isinstance(batches := d.json("batches"), list) and len(batches) == len(rec["calls"]):
        for call, batch in zip(rec["calls"], batches, strict=True):
            if batch is not None:
                call["batch"] = batch
    if isinstance(found := d.json("user_error"), list):
        rec["user_error"] = found
    if isinstance(d.user_profile, str):
        rec["user_profile"] = d.user_profile
        if isinstance(acts := d.json("user_acts"), list):
            rec["user_acts"] = acts
        if type(d.user_mirror_trial) is int:
            rec["user_mirror_trial"] = d.user_mirror_trial
    if t.model_calls is not None:
        rec["model_calls"] = t.model_calls
    if isinstance(d.json("agent_error"), dict) and (d.agent_error is None or d.agent_error.type != UNRECORDED_ERROR):
        rec["agent_error"] = d.json("agent_error")  # only what the record itself held
    return rec
