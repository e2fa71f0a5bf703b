"""A failed trajectory's first divergence from its case: what sank it.

Walk the timeline in call order and take the first thing that went wrong and
that the case does not allow: an expected step not done (never called, another
tool in its place, wrong values, arguments that break the schema, or only calls
that failed), a call to a tool that does not exist, a forbidden call, a call
before the one it depends on, an extra call where the case allows none, or the
fault met badly (the outcome is neither recovered nor gave_up). A step is done
only by a call that ran and succeeded with the expected values: a failed call is
never a step done.

Where a reward decides (imported benchmarks), only what the reference shows
counts: a mistake the agent corrected later is no cause. Without a reward the
scorer's failures decide, so a corrected mistake still counts, at its call.
Passed trajectories have no divergence: their cause would be nothing.

The divergence's ``key`` groups trajectories into causes (the run page's
"What went wrong", ``causes`` in the figures), ``text`` names it. Each kind's
rank and words are in the catalogue (families.CAUSES); this module holds only
the rules that find them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.score.families import CAUSE, CAUSES, Failure, cause_of

if TYPE_CHECKING:
    from app.core.score.scored import Scored, ScoredCall
    from app.core.suites.suite import Case

KINDS = tuple(c.kind for c in CAUSES)  # the kinds, their rank and words: families.CAUSES
_MAX_PART = 200  # a name the agent supplied is bounded before it becomes a key
_GOOD_OUTCOMES = ("recovered", "gave_up")
_BY_TOOL = ("arguments", "schema")


@dataclass(slots=True, init=False, unsafe_hash=True)
class Divergence:
    """The first thing that went wrong: its kind, the tool it concerns (the
    expected step's tool, or the tool called), a detail (the tool called
    instead, the field, the call that must come first, the outcome, the state
    key), the call it is seen at and the expected step."""

    kind: str
    tool: str = ""
    other: str = ""
    call: int | None = None
    step: int | None = None

    def __init__(
        self, kind: str, tool: str = "", other: str = "", call: int | None = None, step: int | None = None
    ) -> None:
        # written out, not frozen: compiled, a native __init__ (records.py says why); hashed as before
        self.kind = kind
        self.tool = tool
        self.other = other
        self.call = call
        self.step = step

    @property
    def cause(self) -> tuple[str, str, str]:
        """The cause it belongs to, what a run groups by: kind, tool and
        detail, less the field of a wrong value or a schema error (a cause is
        the tool's, whichever field went wrong first)."""
        other = "" if self.kind in _BY_TOOL else self.other
        return (self.kind, self.tool[:_MAX_PART], other[:_MAX_PART])  # bounded: a name may come from the agent

    @property
    def key(self) -> str:
        """The cause's key: what a run's trajectories are filtered by."""
        return cause_key(*self.cause)

    @property
    def text(self) -> str:
        return cause_text(*self.cause)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tool": self.tool,
            "other": self.other,
            "call": self.call,
            "step": self.step,
            "key": self.key,
            "text": self.text,
        }


def _part(s: str) -> str:
    return s.replace("%", "%25").replace(":", "%3A")


def cause_key(kind: str, tool: str, other: str) -> str:
    """``kind:tool:other``, with ``%`` and ``:`` escaped in each part, so two causes never share a key."""
    return ":".join((kind, _part(tool), _part(other)))


def cause_text(kind: str, tool: str, other: str) -> str:
    """A cause in words, read after "N failed trajectories: " (its words: families.CAUSES)."""
    return cause_of(kind).text(tool, other)


def _order(d: Divergence, at: float) -> tuple[float, int]:
    return (at, CAUSE[d.kind].rank)  # at one call, the lower rank is named first


def first_divergence(ts: Scored, case: Case | None) -> Divergence | None:
    """The failed trajectory's first divergence (None when it passed)."""
    if ts.passed:
        return None
    by_reward = ts.reward is not None
    found: list[tuple[tuple[float, int], Divergence]] = []

    def add(d: Divergence, at: float) -> None:
        found.append((_order(d, at), d))

    calls = ts.calls
    bad_outcome = ts.outcome is not None and ts.outcome.outcome not in _GOOD_OUTCOMES
    gave_up = ts.outcome is not None and ts.outcome.outcome == "gave_up"
    want = [e.name for e in case.expected_calls or []] if case is not None and ts.has_reference else []
    if want:
        _steps(ts, case, want, add)
    after_fault = ts.fault_step if ts.fault_step is not None else len(calls)
    failures = ts.failures
    for cs in calls:
        i = cs.index
        if not cs.exists:
            add(Divergence("hallucinated_tool", cs.name, call=i), i)
        elif cs.forbidden:
            add(Divergence("forbidden_call", cs.name, call=i), i)
        if cs.dependency_violation is not None:
            add(Divergence("dependency", cs.name, cs.dependency_violation[0], call=i), i)
        if cs.selection_ok is False and cs.step is None and not (gave_up and i > after_fault):
            add(Divergence("extra_call", cs.name, call=i), i)
        if not by_reward and cs.step is not None:
            # without a reward, a corrected mistake still fails the case: it counts at its call
            if cs.mismatches and Failure.ARGUMENTS in failures:
                add(Divergence("arguments", cs.expected_name or cs.name, cs.mismatches[0].field, i, cs.step), i)
            elif cs.selection_ok is False and Failure.SELECTION in failures:
                add(Divergence("wrong_tool", cs.expected_name or "", cs.name, i, cs.step), i)
        # a call no step expects there is a selection (or extra-call) cause, not its tool's schema
        if (
            not by_reward
            and cs.schema_error is not None
            and cs.exists
            and cs.selection_ok is not False
            and Failure.SCHEMA in failures
        ):
            add(Divergence("schema", cs.name, cs.schema_error.field, i, cs.step), i)
    if bad_outcome and ts.fault_step is not None and ts.outcome is not None:
        add(
            Divergence("recovery", calls[ts.fault_step].name, ts.outcome.outcome, call=ts.fault_step),
            ts.fault_step + 0.5,
        )
    if found:
        return min(found, key=lambda f: f[0])[1]
    if gave_up and ts.fault_step is not None:  # the steps after the error were excused: the error sank it
        return Divergence("recovery", calls[ts.fault_step].name, "gave_up", call=ts.fault_step)
    if ts.state_mismatches:
        return Divergence("state", other=str(ts.state_mismatches[0].get("key", "")))
    if by_reward:
        return Divergence("unexplained", f"{ts.reward:g}")
    return Divergence("unexplained")


def _steps(ts: Scored, case: Case | None, want: list[str], add: Any) -> None:
    """Each expected step not done, at the call where the timeline shows it."""
    excused = set(ts.excused_steps)
    lenient = _lenient_steps(case, len(want))
    on: dict[int, list[ScoredCall]] = {}
    for cs in ts.calls:
        if cs.step is not None:
            on.setdefault(cs.step, []).append(cs)
    for j, name in enumerate(want):
        got = on.get(j, [])
        right = [cs for cs in got if cs.name == name]
        if any(cs.error_kind is None and cs.schema_error is None and not cs.mismatches for cs in right):
            continue  # done: a call that ran and succeeded with the expected values
        if j in excused:
            continue
        if not got:
            if j in lenient:
                continue
            # where the timeline shows it: before the first call taken for a later step, else at the end
            later = [cs.index for s, css in on.items() if s > j for cs in css]
            at = min(later) - 0.5 if later else len(ts.calls) + j / (len(want) + 1)
            add(Divergence("missing_step", name, step=j), at)
            continue
        if not right:
            add(Divergence("wrong_tool", name, got[0].name, got[0].index, j), got[0].index)
            continue
        wrong = [cs for cs in right if cs.mismatches]  # wrong values, whether the call then ran or failed
        broke = [cs for cs in right if cs.schema_error is not None]
        if wrong:
            first = wrong[0]
            assert first.mismatches
            add(Divergence("arguments", name, first.mismatches[0].field, first.index, j), first.index)
        elif broke:
            first = broke[0]
            assert first.schema_error is not None
            add(Divergence("schema", name, first.schema_error.field, first.index, j), first.index)
        elif not (ts.outcome is not None and any(cs.index == ts.fault_step for cs in right)):
            # every call failed; when one of them is the fault, its outcome names it (met badly, or given up)
            add(Divergence("step_failed", name, call=right[0].index, step=j), right[0].index)


def _lenient_steps(case: Case | None, n: int) -> set[int]:
    """The steps the case lets the agent skip: all of them under ``superset``,
    those of a conversation's ``superset`` turns."""
    if case is None:
        return set()
    if case.turns is None:
        return set(range(n)) if case.match == "superset" else set()
    return superset_steps(case)


def superset_steps(case: Case) -> set[int]:
    """The expected steps of a scripted conversation's ``superset`` turns."""
    out: set[int] = set()
    j = 0
    for turn in case.turns or ():
        n = len(turn.expected_calls or ())
        if turn.match == "superset":
            out.update(range(j, j + n))
        j += n
    return out
