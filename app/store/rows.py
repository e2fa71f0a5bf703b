"""A scored batch as database rows, built without a database (so that another process can build it).

Kept free of SQLAlchemy: ``setup.py`` compiles it with the scoring path, since
every stored call goes through it.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from app.core.records import Trajectory
from app.core.reports.report import COOPERATIVE, PROFILE_MARK, Report
from app.core.score.scoring import TrajectoryScore
from app.core.usage import ModelCall


class TrajectoryScorer(Protocol):
    """What scores a trajectory: ``app.core.score.scoring.Scorer``, or a wrapper that remembers its scores."""

    def score(self, traj: Trajectory) -> TrajectoryScore: ...


def to_json(value: Any) -> str | None:
    """JSON text for a JSON column (None stays SQL NULL)."""
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode("utf-8")
    except TypeError:  # integers beyond 64 bits, non-string keys
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def fault_key(traj: Trajectory) -> str:
    """The declared fault as a key: one trajectory per case, trial and fault. A simulated user
    with a profile other than the cooperative one adds ``|user:<profile>``, so that two runs pair
    a conversation only with one under the same user."""
    key = "" if traj.fault is None else f"{traj.fault.step}:{traj.fault.kind}"
    profile = traj.user_profile
    if profile is not None and profile != COOPERATIVE:
        key = f"{key}{PROFILE_MARK}{profile}"[:100]
    return key


CALL_COLUMNS = (
    "id",
    "trajectory_id",
    "run_id",
    "idx",
    "name",
    "arguments",
    "arguments_raw",
    "observation",
    "error_kind",
    "error_message",
    "injected",
    "exists",
    "schema_field",
    "schema_message",
    "step",
    "expected_name",
    "selection_ok",
    "mismatches",
    "dependency_before",
    "forbidden",
    "reaction",
    "reaction_ok",
    "turn",
    "latency_ms",
    "delay_ms",
)
TRAJECTORY_COLUMNS = (
    "id",
    "run_id",
    "case_id",
    "trial",
    "fault_key",
    "fault_step",
    "fault_kind",
    "recovery_kind",
    "question",
    "answer",
    "reward",
    "state",
    "outcome",
    "passed",
    "failures",
    "detail",
    "n_calls",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "total_tokens",
    "model_latency_ms",
)
TAG_COLUMNS = ("trajectory_id", "run_id", "kind", "value")


def _call_rows(
    traj: Trajectory, ts: TrajectoryScore, trajectory_id: int, run_id: int, ids: Iterator[int]
) -> Iterator[tuple[Any, ...]]:
    for call, cs in zip(traj.calls, ts.calls, strict=True):
        err = call.error
        schema = cs.schema_error
        yield (
            next(ids),
            trajectory_id,
            run_id,
            cs.index,
            call.name,
            to_json(call.arguments),
            call.raw_arguments,
            call.observation,
            None if err is None else err.kind,
            None if err is None else err.message,
            bool(err and err.injected),
            cs.exists,
            None if schema is None else schema.field,
            None if schema is None else schema.message,
            cs.step,
            cs.expected_name,
            cs.selection_ok,
            None if cs.mismatches is None else to_json([m.to_dict() for m in cs.mismatches]),
            None if cs.dependency_violation is None else cs.dependency_violation[0],
            cs.forbidden,
            None if cs.reaction is None else cs.reaction.reaction,
            None if cs.reaction is None else cs.reaction.acceptable,
            cs.turn,
            call.latency_ms,
            None if err is None else err.delay_ms,
        )


def usage_columns(calls: list[ModelCall] | None) -> tuple[Any, ...]:
    """``model_calls`` as JSON and its sums: input, output, cached, total tokens, model latency."""
    if not calls:
        return (None,) * 6

    def total(values: list[Any]) -> Any:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    return (
        to_json([m.to_dict() for m in calls]),
        total([m.input_tokens for m in calls]),
        total([m.output_tokens for m in calls]),
        total([m.cached_tokens for m in calls]),
        total([m.tokens for m in calls]),
        total([m.latency_ms for m in calls]),
    )


def usage_counters(calls: list[ModelCall] | None, into: Counter[tuple[str, str, str, str]]) -> None:
    """Token sums per model as run counters ``("usage", model, key, "")``: the runs list prices
    them without reading trajectories. Tokens without the input/output split count as
    ``unsplit_tokens``, never priced."""
    for m in calls or ():
        model = m.model or ""
        into[("usage", model, "requests", "")] += 1
        if m.input_tokens is None and m.output_tokens is None:
            if m.total_tokens is not None:
                into[("usage", model, "unsplit_tokens", "")] += m.total_tokens
            continue
        into[("usage", model, "input_tokens", "")] += m.input_tokens or 0
        into[("usage", model, "output_tokens", "")] += m.output_tokens or 0
        into[("usage", model, "cached_tokens", "")] += m.cached_tokens or 0


@dataclass(slots=True)
class ScoredBatch:
    """A batch scored and turned into rows before it has ids (so that it can be
    built in another process): a row's ``id`` is its position in the batch,
    ``trajectory_id`` the position of its trajectory, and ``run_id`` 0."""

    keys: list[tuple[str, int, str]]
    trajectories: list[tuple[Any, ...]]
    calls: list[tuple[Any, ...]]
    tags: list[tuple[Any, ...]]
    counters: list[tuple[str, str, str, str, int]]


def score_batch(scorer: TrajectoryScorer, trajectories: Sequence[Trajectory]) -> ScoredBatch:
    """Score a batch and build its rows (no database work)."""
    report = Report(keep_cases=False)
    traj_rows: list[tuple[Any, ...]] = []
    call_rows: list[tuple[Any, ...]] = []
    tag_rows: list[tuple[Any, ...]] = []
    call_ids = itertools.count()
    counters: Counter[tuple[str, str, str, str]] = Counter()
    for tid, t in enumerate(trajectories):
        ts = scorer.score(t)
        report.add(ts)
        traj_rows.append(
            (
                tid,
                0,
                t.case_id,
                t.trial,
                fault_key(t),
                None if t.fault is None else t.fault.step,
                None if t.fault is None else t.fault.kind,
                ts.fault_kind,
                t.question,
                t.answer,
                t.reward,
                to_json(t.state),
                None if ts.outcome is None else ts.outcome.outcome,
                ts.passed,
                to_json(ts.failures),
                to_json(ts.detail().with_inputs(t).to_dict()),
                len(t.calls),
                *usage_columns(t.model_calls),
            )
        )
        usage_counters(t.model_calls, counters)
        call_rows.extend(_call_rows(t, ts, tid, 0, call_ids))
        tag_rows.extend((tid, 0, "failure", f) for f in ts.failures)
        if ts.divergence is not None and not ts.user_error:
            tag_rows.append((tid, 0, "cause", ts.divergence.key))
        if ts.blame is not None:  # who failed the conversation: the run page's filter (app/store/blame.py)
            tag_rows.append((tid, 0, "blame", ts.blame["blame"]))
        missing = sorted({e for e, c in ts.confusion if c == "(missing)"})
        tag_rows.extend((tid, 0, "missing", m) for m in missing)
    keys = [(t.case_id, t.trial, fault_key(t)) for t in trajectories]
    usage = [(*key, v) for key, v in counters.items()]
    return ScoredBatch(keys, traj_rows, call_rows, tag_rows, [*report.counters(), *usage])
