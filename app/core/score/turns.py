"""A conversation's figures per user turn (docs/metrics.md).

The conversation is scored as a whole first (scoring.py: in a scripted one,
each turn's calls are aligned to that turn's steps); this splits what was
found by the turn of each call, so that the turns' figures add up to the
conversation's. An expected step belongs to its scripted turn; with a
simulated user (or an imported conversation) to the turn of the call aligned
to it, and a missing step to the turn of the next step that was taken (it
should have come before it), or to the last turn when none was. A failure
of the conversation goes to the turns the catalogue's rule names
(families.PER_TURN: the calls that show it, a missing step, the fault);
``state`` (the final state) belongs to no turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.records import Trajectory, user_turns
from app.core.score.families import PER_TURN, RATIO_FAMILIES

if TYPE_CHECKING:
    from app.core.score.scored import Scored
    from app.core.suites.suite import Case


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


def step_turns(ts: Scored, case: Case | None, last: int) -> list[int]:
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


# A turn's totals in one flat list, ``WIDTH`` slots a turn, in the order of the report's turn
# counters (report.TURN_KEYS): each ratio family's num and den, then "trajectories" and "failed".
ATTRS: tuple[str, ...] = tuple(a for f in RATIO_FAMILIES for a in (f.num, f.den))
WIDTH = len(ATTRS) + 2
TRAJECTORIES = WIDTH - 2
FAILED = WIDTH - 1


def _slots(attr: str) -> tuple[int, ...]:
    """The slots a TurnScore attribute fills (a denominator shared by two families fills two)."""
    return tuple(i for i, a in enumerate(ATTRS) if a == attr)


def _one(attr: str) -> int:
    (slot,) = _slots(attr)
    return slot


CALLS = _one("calls_total")
HALLUCINATED = _one("hallucinated_num")
SCHEMA_NUM, SCHEMA_DEN = _one("schema_num"), _one("schema_den")
SELECTION_NUM, SELECTION_DEN = _one("selection_num"), _one("selection_den")
ARGS_NUM, ARGS_DEN = _one("args_num"), _one("args_den")
RECALL_NUM, RECALL_DEN = _one("recall_num"), _one("recall_den")
RECOVERY_NUM, INVENTED_NUM = _one("recovery_num"), _one("hallucination_after_error_num")
RECOVERY_DEN = _slots("recovery_den")
_FIRST = tuple((a, _slots(a)[0]) for a in dict.fromkeys(ATTRS))  # each attribute and the first slot it fills
_FIGURES = tuple((f.key, 2 * i, 2 * i + 1) for i, f in enumerate(RATIO_FAMILIES))  # key, num slot, den slot


class TurnTable:
    """A conversation's figures per user turn without an object per turn: ``counts`` holds
    ``WIDTH`` slots a turn (turn t at ``(t - 1) * WIDTH``), ``failures`` the failures of the
    turns that have some. Read as a sequence of TurnScore, each built when asked for."""

    __slots__ = ("counts", "failures", "n", "users")

    def __init__(self, n: int, users: list[str], counts: list[int], failures: dict[int, list[str]]) -> None:
        self.n = n
        self.users = users
        self.counts = counts
        self.failures = failures

    @classmethod
    def of(cls, turns: list[TurnScore]) -> TurnTable:
        """The table of TurnScore objects numbered 1, 2… in order."""
        counts: list[int] = []
        failures: dict[int, list[str]] = {}
        for t in turns:
            counts += [getattr(t, a) for a in ATTRS]
            counts += [1, 1 if t.failures else 0]
            if t.failures:
                failures[t.turn] = list(t.failures)
        return cls(len(turns), [t.user for t in turns], counts, failures)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> TurnScore:
        if index < 0:
            index += self.n
        if not 0 <= index < self.n:
            raise IndexError(index)
        at = index * WIDTH
        out = TurnScore(index + 1, self.users[index])
        for attr, slot in _FIRST:
            setattr(out, attr, self.counts[at + slot])
        out.failures = list(self.failures.get(index + 1, ()))
        return out

    def __iter__(self) -> Iterator[TurnScore]:
        for i in range(self.n):
            yield self[i]

    def to_dicts(self) -> list[dict[str, Any]]:
        """Each turn as ``TurnScore.to_dict`` writes it, read from the counts."""
        counts = self.counts
        out = []
        for i in range(self.n):
            at = i * WIDTH
            figures = {key: {"num": counts[at + num], "den": counts[at + den]} for key, num, den in _FIGURES}
            out.append(
                {
                    "turn": i + 1,
                    "user": self.users[i],
                    "figures": figures,
                    "failures": list(self.failures.get(i + 1, ())),
                }
            )
        return out


def turn_scores(ts: Scored, case: Case | None, traj: Trajectory) -> tuple[TurnTable, list[int]]:
    """The conversation's figures and failures per turn, and each step's turn."""
    said = user_turns(traj)
    scripted = [] if case is None or case.turns is None else [t.user for t in case.turns]
    n = max(len(scripted), len(said), max((cs.turn or 1 for cs in ts.calls), default=1))
    steps = step_turns(ts, case, n)
    users = (
        said[:n] if len(said) >= n else said + [scripted[t] if t < len(scripted) else "" for t in range(len(said), n)]
    )
    counts = [0] * (n * WIDTH)
    for t in range(n):
        counts[t * WIDTH + TRAJECTORIES] = 1
    failures: dict[int, list[str]] = {}
    failed = set(ts.failures)
    on_call = [(name, a.call) for name, a in PER_TURN.items() if a.call is not None and name in failed]
    for cs in ts.calls:
        turn = cs.turn or 1
        at = (turn - 1) * WIDTH
        counts[at + CALLS] += 1
        for name, shows in on_call:  # the catalogue's rules: which calls show each failure
            if shows(cs):
                _fail(failures, turn, name, failed)
        if not cs.exists:
            counts[at + HALLUCINATED] += 1
            continue
        counts[at + SCHEMA_DEN] += 1
        if cs.schema_error is None:
            counts[at + SCHEMA_NUM] += 1
        if cs.selection_ok is not None:
            counts[at + SELECTION_DEN] += 1
            if cs.selection_ok:
                counts[at + SELECTION_NUM] += 1
        if cs.mismatches is not None:
            counts[at + ARGS_DEN] += 1
            if not cs.mismatches:
                counts[at + ARGS_NUM] += 1
    missing = set(ts.missing_steps)
    on_step = [name for name, a in PER_TURN.items() if a.missing_step]
    for j, t in enumerate(steps):
        at = (t - 1) * WIDTH
        counts[at + RECALL_DEN] += 1
        if j in missing:
            match = "strict" if case is None else case.turns[t - 1].match if case.turns else case.match
            if j not in ts.excused_steps and match != "superset":
                for name in on_step:
                    _fail(failures, t, name, failed)
        else:
            counts[at + RECALL_NUM] += 1
    if ts.outcome is not None and ts.fault_step is not None:
        turn = ts.calls[ts.fault_step].turn or 1
        at = (turn - 1) * WIDTH
        for slot in RECOVERY_DEN:
            counts[at + slot] += 1
        counts[at + RECOVERY_NUM] += ts.outcome.outcome == "recovered"
        counts[at + INVENTED_NUM] += ts.outcome.outcome == "hallucinated"
        for name, a in PER_TURN.items():
            if a.fault:
                _fail(failures, turn, name, failed)
    for turn in failures:
        counts[(turn - 1) * WIDTH + FAILED] = 1
    return TurnTable(n, users, counts, failures), steps


def _fail(failures: dict[int, list[str]], turn: int, name: str, failed: set[str]) -> None:
    """Note a failure in a turn when the conversation has it (once)."""
    if name in failed:
        names = failures.get(turn)
        if names is None:
            failures[turn] = [name]
        elif name not in names:
            names.append(name)
