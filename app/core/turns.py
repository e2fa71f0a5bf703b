"""A conversation's figures per user turn (docs/metrics.md).

The conversation is scored as a whole first (scoring.py: in a scripted one,
each turn's calls are aligned to that turn's steps); this splits what was
found by the turn of each call, so that the turns' figures add up to the
conversation's. An expected step belongs to its scripted turn; with a
simulated user (or an imported conversation) to the turn of the call aligned
to it, and a missing step to the turn of the next step that was taken (it
should have come before it), or to the last turn when none was. A failure
of the conversation goes to the turns whose calls show it; ``state`` (the
final state) belongs to no turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.families import RATIO_FAMILIES, Failure
from app.core.records import Trajectory, user_turns

if TYPE_CHECKING:
    from app.core.scoring import TrajectoryScore
    from app.core.suite import Case


@dataclass(slots=True)
class TurnScore:
    """The five families of one user turn: numerators and denominators."""

    turn: int
    user: str = ""
    selection_num: int = 0
    selection_den: int = 0
    recall_num: int = 0
    recall_den: int = 0
    schema_num: int = 0
    schema_den: int = 0
    args_num: int = 0
    args_den: int = 0
    hallucinated_num: int = 0
    calls_total: int = 0
    recovery_num: int = 0
    recovery_den: int = 0
    hallucination_after_error_num: int = 0
    failures: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, dict[str, int]]:
        """The families in the shape of ``score --json`` (num/den)."""
        return {f.key: {"num": getattr(self, f.num), "den": getattr(self, f.den)} for f in RATIO_FAMILIES}

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "user": self.user, "figures": self.figures(), "failures": list(self.failures)}


def step_turns(ts: TrajectoryScore, case: Case | None, last: int) -> list[int]:
    """The user turn of each expected step (``last``: the conversation's last turn)."""
    if case is None or case.expected_calls is None:
        return []
    if case.turns is not None:
        return [t for t, turn in enumerate(case.turns, start=1) for _ in turn.expected_calls or ()]
    first: dict[int, int] = {}
    for cs in ts.calls:
        if cs.step is not None and cs.step not in first:
            first[cs.step] = cs.turn or 1
    out: list[int] = []
    for j in range(len(case.expected_calls) - 1, -1, -1):
        out.append(first.get(j, out[-1] if out else last))
    return out[::-1]


def turn_scores(ts: TrajectoryScore, case: Case | None, traj: Trajectory) -> tuple[list[TurnScore], list[int]]:
    """The conversation's figures and failures per turn, and each step's turn."""
    said = user_turns(traj)
    scripted = [] if case is None or case.turns is None else [t.user for t in case.turns]
    n = max(len(scripted), len(said), max((cs.turn or 1 for cs in ts.calls), default=1))
    steps = step_turns(ts, case, n)
    out = [TurnScore(t, said[t - 1] if t <= len(said) else scripted[t - 1] if t <= len(scripted) else "")
           for t in range(1, n + 1)]
    failed = set(ts.failures)
    for cs in ts.calls:
        s = out[(cs.turn or 1) - 1]
        s.calls_total += 1
        if not cs.exists:
            s.hallucinated_num += 1
            _fail(s, Failure.HALLUCINATED_TOOL.value, failed)
            continue
        s.schema_den += 1
        if cs.schema_error is None:
            s.schema_num += 1
        else:
            _fail(s, Failure.SCHEMA.value, failed)
        if cs.selection_ok is not None:
            s.selection_den += 1
            s.selection_num += cs.selection_ok
            if not cs.selection_ok:
                _fail(s, Failure.SELECTION.value, failed)
        if cs.mismatches is not None:
            s.args_den += 1
            s.args_num += not cs.mismatches
            if cs.mismatches:
                _fail(s, Failure.ARGUMENTS.value, failed)
        if cs.dependency_violation is not None:
            _fail(s, Failure.DEPENDENCY.value, failed)
        if cs.forbidden:
            _fail(s, Failure.FORBIDDEN_CALL.value, failed)
    missing = set(ts.missing_steps)
    for j, t in enumerate(steps):
        s = out[t - 1]
        s.recall_den += 1
        if j in missing:
            match = "strict" if case is None else case.turns[t - 1].match if case.turns else case.match
            if j not in ts.excused_steps and match != "superset":
                _fail(s, Failure.SELECTION.value, failed)
        else:
            s.recall_num += 1
    if ts.outcome is not None and ts.fault_step is not None:
        s = out[(ts.calls[ts.fault_step].turn or 1) - 1]
        s.recovery_den += 1
        s.recovery_num += ts.outcome.outcome == "recovered"
        s.hallucination_after_error_num += ts.outcome.outcome == "hallucinated"
        for name in (Failure.RECOVERY_HALLUCINATED.value, Failure.RECOVERY_CONFUSED.value):
            _fail(s, name, failed)
    return out, steps


def _fail(s: TurnScore, name: str, failed: set[str]) -> None:
    """Note a failure in a turn when the conversation has it (once)."""
    if name in failed and name not in s.failures:
        s.failures.append(name)
