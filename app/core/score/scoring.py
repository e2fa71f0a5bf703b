"""Scoring one trajectory against its case: the five failure families.

For every executed call, in order: does the tool exist (F3)? is it the tool
the aligned expected step wanted (F1)? do its arguments pass the schema and
match the expected values (F2)? were its dependencies kept (F5)? and, when a
tool errored, what did the agent do next and how did it end (F4)?
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.records import Message, Trajectory, call_turns
from app.core.score.alignment import Alignment, align
from app.core.score.blame import blame_of
from app.core.score.detail import (
    AgentError,
    Blame,
    Evidence,
    Fault,
    FaultNotReached,
    FirstDivergence,
    Note,
    StateMismatch,
    TrajectoryDetail,
    Turn,
)
from app.core.score.divergence import Divergence, first_divergence, superset_steps
from app.core.score.families import PER_CALL_FAMILIES, Failure
from app.core.score.grounding import Source, ground
from app.core.score.outcome import (
    DEFAULT_GIVE_UP_PHRASES,
    MIN_DIGITS,
    AfterFault,
    OutcomeResult,
    Reaction,
    StepWords,
    classify_outcome,
    extract_values,
    find_claim,
    ground_values,
    reaction_to,
    reports_failure,
    sentence_with,
    step_words,
)
from app.core.score.turns import TurnTable, turn_scores
from app.core.suites.mocks import ToolFailure
from app.core.suites.schema import SchemaViolation
from app.core.suites.suite import Case, Suite
from app.core.suites.tolerance import Comparison, Mismatch, compile_comparison, values_equal

_DIGIT = re.compile(r"\d")
MISSING = "(missing)"
EXTRA = "(extra)"

_ALIGN_MEMO = 1024  # remembered alignments per scorer: bounded, so memory stays flat
_COMPARISON_MEMO = 16_384  # compiled argument comparisons per scorer (one per expected step)

# Errors that are F2/F3 findings, not a tool failing at run time.
VALIDATION_KINDS = frozenset({"schema", "unknown_tool"})
# What made a faulted call fail (docs/outcomes.md): a fault ToolLens injected,
# the tool's own error, a call refused by schema validation, an unknown tool.
ERROR_SOURCES = ("injected", "tool", "schema", "unknown_tool")


@dataclass(slots=True, init=False)
class CallScore:
    """What scoring found about one executed call."""

    index: int
    name: str
    exists: bool
    schema_error: SchemaViolation | None = None
    step: int | None = None
    expected_name: str | None = None
    selection_ok: bool | None = None
    mismatches: list[Mismatch] | None = None
    dependency_violation: tuple[str, str] | None = None
    forbidden: bool = False
    error_kind: str | None = None
    injected: bool = False
    reaction: Reaction | None = None
    turn: int | None = None  # the user turn it answers, in a conversation

    def __init__(
        self,
        index: int,
        name: str,
        exists: bool,
        schema_error: SchemaViolation | None = None,
        step: int | None = None,
        expected_name: str | None = None,
        selection_ok: bool | None = None,
        mismatches: list[Mismatch] | None = None,
        dependency_violation: tuple[str, str] | None = None,
        forbidden: bool = False,
        error_kind: str | None = None,
        injected: bool = False,
        reaction: Reaction | None = None,
    ) -> None:
        # written out: compiled, a native __init__ (records.py says why)
        self.index = index
        self.name = name
        self.exists = exists
        self.schema_error = schema_error
        self.step = step
        self.expected_name = expected_name
        self.selection_ok = selection_ok
        self.mismatches = mismatches
        self.dependency_violation = dependency_violation
        self.forbidden = forbidden
        self.error_kind = error_kind
        self.injected = injected
        self.reaction = reaction
        self.turn = None

    @property
    def schema_ok(self) -> bool:
        return self.exists and self.schema_error is None

    @property
    def done(self) -> bool:
        """The call ran and succeeded: a known tool, valid arguments, no error
        (injected or real). Only such a call does a step or changes state."""
        return self.exists and self.schema_error is None and self.error_kind is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "exists": self.exists,
            "schema_error": None
            if self.schema_error is None
            else {"field": self.schema_error.field, "message": self.schema_error.message},
            "step": self.step,
            "expected_name": self.expected_name,
            "selection_ok": self.selection_ok,
            "mismatches": None if self.mismatches is None else [m.to_dict() for m in self.mismatches],
            "dependency_violation": None if self.dependency_violation is None else list(self.dependency_violation),
            "forbidden": self.forbidden,
            "error_kind": self.error_kind,
            "injected": self.injected,
            "reaction": None
            if self.reaction is None
            else {"reaction": self.reaction.reaction, "acceptable": self.reaction.acceptable},
            **({} if self.turn is None else {"turn": self.turn}),
        }


UNRECORDED_ERROR = "(not recorded)"  # the type of an agent error whose record says only that it raised


@dataclass(slots=True, init=False)
class TrajectoryScore:
    """Every figure of one trajectory; the aggregate is a sum of these."""

    case_id: str
    trial: int
    has_reference: bool
    calls: list[CallScore]
    fault_kind: str | None = None
    fault_step: int | None = None
    missing_steps: list[int] = field(default_factory=list)
    excused_steps: list[int] = field(default_factory=list)
    undone_steps: list[int] = field(default_factory=list)  # attempted on the right tool, no call of it succeeded
    confusion: list[tuple[str, str]] = field(default_factory=list)
    pairs_checked: list[tuple[str, str]] = field(default_factory=list)
    violations: list[tuple[str, str]] = field(default_factory=list)
    outcome: OutcomeResult | None = None
    final_state: dict[str, Any] | None = None
    state_mismatches: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    passed: bool = True
    reward: float | None = None
    any_error: bool = False  # some call errored, was invalid or called an unknown tool
    # numerators and denominators
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
    fault_not_reached: tuple[int | None, str] | None = None  # a planned fault the agent never reached
    turns: TurnTable | None = None  # a conversation's figures per user turn (app/core/score/turns.py)
    step_turns: list[int] | None = None  # the user turn of each expected step, in a conversation
    user_error: list[dict[str, str]] | None = None  # the simulated user's faults: never the agent's
    agent_error: dict[str, Any] | None = None  # what the agent raised: {type, message, traceback}
    fault_source: str | None = None  # what made the faulted call fail: one of ERROR_SOURCES
    divergence: Divergence | None = None  # a failed trajectory's first divergence (app/core/score/divergence.py)
    blame: dict[str, Any] | None = None  # a failed conversation's blame (app/core/score/blame.py)
    user_profile: str | None = None  # the simulated user's profile (app/core/reports/profiles.py)
    user_acts: list[dict[str, str]] | None = None  # what that profile did on purpose
    user_mirror_trial: int | None = None  # under a profile: the cooperative trial it mirrors

    def __init__(
        self,
        case_id: str,
        trial: int,
        has_reference: bool,
        calls: list[CallScore],
        fault_kind: str | None = None,
        fault_step: int | None = None,
        missing_steps: list[int] | None = None,
        excused_steps: list[int] | None = None,
        confusion: list[tuple[str, str]] | None = None,
        pairs_checked: list[tuple[str, str]] | None = None,
        violations: list[tuple[str, str]] | None = None,
        outcome: OutcomeResult | None = None,
        final_state: dict[str, Any] | None = None,
        state_mismatches: list[dict[str, Any]] | None = None,
        failures: list[str] | None = None,
        passed: bool = True,
        reward: float | None = None,
        any_error: bool = False,
        selection_num: int = 0,
        selection_den: int = 0,
        recall_num: int = 0,
        recall_den: int = 0,
        schema_num: int = 0,
        schema_den: int = 0,
        args_num: int = 0,
        args_den: int = 0,
        hallucinated_num: int = 0,
        calls_total: int = 0,
        fault_not_reached: tuple[int | None, str] | None = None,
    ) -> None:
        # written out: compiled, a native __init__ (records.py says why)
        self.case_id = case_id
        self.trial = trial
        self.has_reference = has_reference
        self.calls = calls
        self.fault_kind = fault_kind
        self.fault_step = fault_step
        self.missing_steps = [] if missing_steps is None else missing_steps
        self.excused_steps = [] if excused_steps is None else excused_steps
        self.confusion = [] if confusion is None else confusion
        self.pairs_checked = [] if pairs_checked is None else pairs_checked
        self.violations = [] if violations is None else violations
        self.outcome = outcome
        self.final_state = final_state
        self.state_mismatches = [] if state_mismatches is None else state_mismatches
        self.failures = [] if failures is None else failures
        self.passed = passed
        self.reward = reward
        self.any_error = any_error
        self.selection_num = selection_num
        self.selection_den = selection_den
        self.recall_num = recall_num
        self.recall_den = recall_den
        self.schema_num = schema_num
        self.schema_den = schema_den
        self.args_num = args_num
        self.args_den = args_den
        self.hallucinated_num = hallucinated_num
        self.calls_total = calls_total
        self.fault_not_reached = fault_not_reached
        self.turns = None
        self.step_turns = None
        self.user_error = None
        self.agent_error = None
        self.undone_steps = []
        self.fault_source = None
        self.divergence = None
        self.blame = None
        self.user_profile = None
        self.user_acts = None
        self.user_mirror_trial = None

    def to_dict(self) -> dict[str, Any]:
        """The per-trajectory detail (what a timeline page shows)."""
        return {
            "case_id": self.case_id,
            "trial": self.trial,
            "passed": self.passed,
            "failures": list(self.failures),
            "calls": [c.to_dict() for c in self.calls],
            **self.summary(),
        }

    def fault(self) -> Fault | None:
        """The fault found: its call, its kind, what made it fail and, in a conversation, its turn."""
        if self.fault_kind is None:
            return None
        more: dict[str, Any] = {}
        if self.fault_source is not None:
            more["source"] = self.fault_source
        if self.fault_step is not None and self.calls[self.fault_step].turn is not None:
            more["turn"] = self.calls[self.fault_step].turn
        return Fault.of(step=self.fault_step, kind=self.fault_kind, **more)

    def fault_dict(self) -> dict[str, Any] | None:
        found = self.fault()
        return None if found is None else found.to_dict()

    def detail(self) -> TrajectoryDetail:
        """Everything but the calls and the identity: what a store keeps beside its call rows, its
        keys in the order the store has always written them."""
        values: dict[str, Any] = {
            "has_reference": self.has_reference,
            "fault": self.fault(),
            "missing_steps": tuple(self.missing_steps),
            "excused_steps": tuple(self.excused_steps),
            "undone_steps": tuple(self.undone_steps),
            "dependency_violations": tuple(self.violations),
            "outcome": None if self.outcome is None else self.outcome.outcome,
            "outcome_evidence": None if self.outcome is None else Evidence.from_dict(self.outcome.evidence),
            "final_state": self.final_state,
            "state_mismatches": tuple(StateMismatch.from_dict(m) for m in self.state_mismatches),
            "reward": self.reward,
            "figures": {f.key: {"num": getattr(self, f.num), "den": getattr(self, f.den)} for f in PER_CALL_FAMILIES},
        }
        if self.fault_not_reached is not None:
            step, kind = self.fault_not_reached
            values["fault_not_reached"] = FaultNotReached.of(step=step, kind=kind)
        if self.turns is not None:
            values["turns"] = tuple(Turn.from_dict(t) for t in self.turns.to_dicts())
            values["step_turns"] = None if self.step_turns is None else tuple(self.step_turns)
        if self.user_error:
            values["user_error"] = tuple(Note.from_dict(u) for u in self.user_error)
        if self.agent_error is not None:
            values["agent_error"] = AgentError.from_dict(self.agent_error)
        if self.divergence is not None:
            values["divergence"] = FirstDivergence.of_divergence(self.divergence)
        if self.blame is not None:
            values["blame"] = Blame.from_dict(self.blame)
        if self.user_profile is not None:
            values["user_profile"] = self.user_profile
        if self.user_acts:
            values["user_acts"] = tuple(Note.from_dict(u) for u in self.user_acts)
        if self.user_mirror_trial is not None:
            values["user_mirror_trial"] = self.user_mirror_trial
        return TrajectoryDetail.of(**values)

    def summary(self) -> dict[str, Any]:
        """``detail()`` as the stored JSON."""
        return self.detail().to_dict()


class Scorer:
    """Scores trajectories against one suite. Reusable and cheap per call:
    schemas are compiled once per tool."""

    def __init__(self, suite: Suite):
        self.suite = suite
        self.toolset = suite.toolset
        self.give_up_phrases = (*DEFAULT_GIVE_UP_PHRASES, *suite.give_up_phrases)
        self.success_phrases = tuple(suite.success_phrases)  # added to the defaults of the message's language
        self._pairs: dict[str | None, list[tuple[str, str]]] = {}
        self._validators = {t.name: t.validator for t in self.toolset}
        self._transparent = self.toolset.transparent
        self._handoff = frozenset(self.toolset.handoff)
        self._want: dict[str, list[str]] = {}
        self._comparisons: dict[tuple[str, int], Comparison] = {}
        self._alignments: dict[tuple[str, tuple[str, ...], tuple[bool, ...] | None], Alignment] = {}

    def _want_of(self, case: Case) -> list[str]:
        """The case's expected tool names."""
        want = self._want.get(case.id)
        if want is None:
            want = self._want[case.id] = [e.name for e in case.expected_calls or []]
        return want

    def _comparison(self, case: Case, step: int) -> Comparison:
        """The argument comparison of one expected step, compiled on first use
        and remembered (bounded: memory stays flat however large the suite)."""
        key = (case.id, step)
        found = self._comparisons.get(key)
        if found is None:
            exp = (case.expected_calls or [])[step]
            found = compile_comparison(exp.arguments, exp.tolerance)
            if len(self._comparisons) >= _COMPARISON_MEMO:
                self._comparisons.clear()
            self._comparisons[key] = found
        return found

    def _align_strict(self, case_id: str, names: list[str], errored: list[bool] | None, want: list[str]) -> Alignment:
        """Strict alignment, remembered by name sequence: trials of a case repeat it."""
        key = (case_id, tuple(names), None if errored is None else tuple(errored))
        found = self._alignments.get(key)
        if found is None:
            found = align(names, errored or [False] * len(names), want)
            if len(self._alignments) >= _ALIGN_MEMO:
                self._alignments.clear()
            self._alignments[key] = found
        return found

    def pairs(self, case: Case | None) -> list[tuple[str, str]]:
        key = None if case is None else case.id
        if key not in self._pairs:
            self._pairs[key] = self.suite.pairs_for(case)
        return self._pairs[key]

    def score(self, traj: Trajectory) -> TrajectoryScore:
        case = self.suite.by_id.get(traj.case_id)
        calls = traj.calls
        scores: list[CallScore] = []
        validators = self._validators
        hallucinated = valid = 0
        any_error = False
        append = scores.append
        for i, call in enumerate(calls):
            name = call.name
            validator = validators.get(name)
            err = call.error
            if validator is None:
                hallucinated += 1
                any_error = True
                if err is None:
                    append(CallScore(i, name, False, error_kind="unknown_tool"))
                else:
                    append(CallScore(i, name, False, error_kind=err.kind, injected=err.injected))
                continue
            violation = validator.validate(call.arguments)
            if err is not None:
                any_error = True
                append(CallScore(i, name, True, violation, error_kind=err.kind, injected=err.injected))
            elif violation is None:
                valid += 1
                append(CallScore(i, name, True))
            else:
                any_error = True
                append(CallScore(i, name, True, violation, error_kind="schema"))
            if err is not None and violation is None:
                valid += 1
        n = len(calls)
        ts = TrajectoryScore(
            traj.case_id,
            traj.trial,
            case is not None and case.expected_calls is not None,
            scores,
            reward=traj.reward,
            schema_num=valid,
            schema_den=n - hallucinated,
            hallucinated_num=hallucinated,
            calls_total=n,
            any_error=any_error,
        )
        turns = call_turns(traj)
        conversation = turns is not None or (case is not None and case.multi_turn)
        if conversation:
            for cs, t in zip(scores, turns or [1] * n, strict=True):
                cs.turn = t
        self._fault(traj, ts)
        if case is not None and case.expected_calls is not None:
            self._selection_and_arguments(traj, case, ts)
        self._dependencies(case, ts)
        self._reactions(traj, case, ts)
        if case is not None:
            self._forbidden(case, traj, ts)
            self._state(case, traj, ts)
        if ts.fault_step is not None:
            ts.outcome = self._outcome(traj, case, ts)
        self._failures(case, ts)
        ts.divergence = first_divergence(ts, case)
        if conversation:
            ts.turns, ts.step_turns = turn_scores(ts, case, traj)
        if traj.user_error:
            ts.user_error = [u.to_dict() for u in traj.user_error]
        ts.user_profile = traj.user_profile
        ts.user_mirror_trial = traj.user_mirror_trial
        if traj.user_acts:
            ts.user_acts = [u.to_dict() for u in traj.user_acts]
        if traj.agent_error is not None:
            ts.agent_error = traj.agent_error.to_dict()
        elif traj.stopped == "agent_error":  # a source that says the agent raised, not what
            ts.agent_error = {"type": UNRECORDED_ERROR, "message": "", "traceback": []}
        if conversation and not ts.passed:  # who failed: the agent, the simulated user or the task
            found = blame_of(traj, case, ts)
            ts.blame = None if found is None else found.to_dict()
        return ts

    # -- parts ---------------------------------------------------------------

    @staticmethod
    def _fault(traj: Trajectory, ts: TrajectoryScore) -> None:
        """Find the faulted call: the first injected error or, with none, the
        first error the agent saw (a call the record shows failing: the tool's
        own error, a call refused by schema validation, a call to an unknown
        tool). A declared fault at a call the agent never made, or at a call
        the checks refused (the tool never ran, so nothing could be
        injected), was not reached (``fault_not_reached``); the trajectory is
        still a recovery case when it met another error."""
        planned = traj.fault
        if not ts.any_error:
            if planned is not None:
                ts.fault_not_reached = (planned.step, planned.kind)
            return
        for cs in ts.calls:
            if cs.injected:
                ts.fault_step, ts.fault_kind, ts.fault_source = cs.index, cs.error_kind, "injected"
                return
        if planned is not None:
            step = planned.step
            at = ts.calls[step] if step is not None and 0 <= step < len(ts.calls) else None
            if at is not None and at.error_kind is not None and at.schema_ok and at.error_kind not in VALIDATION_KINDS:
                ts.fault_step, ts.fault_kind, ts.fault_source = step, planned.kind, "injected"
                return
            ts.fault_not_reached = (step, planned.kind)
        calls = traj.calls
        for cs in ts.calls:
            if cs.error_kind is not None and calls[cs.index].error is not None:
                ts.fault_step, ts.fault_kind, ts.fault_source = cs.index, cs.error_kind, error_source(cs)
                return

    def _selection_and_arguments(self, traj: Trajectory, case: Case, ts: TrajectoryScore) -> None:
        """Align the calls to the expected steps: the whole sequence, or, in a
        scripted conversation, each turn's calls to that turn's steps."""
        transparent = self._transparent
        # transparent calls (think, compute) are neither right nor wrong selections: left out of the alignment
        taking = ts.calls if not transparent else [cs for cs in ts.calls if cs.name not in transparent]
        if case.turns is None:
            self._align_part(traj, case, ts, taking, self._want_of(case), case.match, 0, case.id)
            return
        offset = 0
        last = max((cs.turn or 1 for cs in taking), default=1)
        for t in range(1, max(len(case.turns), last) + 1):
            turn = case.turns[t - 1] if t <= len(case.turns) else None
            want = [] if turn is None else [e.name for e in turn.expected_calls or []]
            part = [cs for cs in taking if (cs.turn or 1) == t]
            self._align_part(
                traj, case, ts, part, want, "strict" if turn is None else turn.match, offset, f"{case.id}\x00{t}"
            )
            offset += len(want)

    def _align_part(
        self,
        traj: Trajectory,
        case: Case,
        ts: TrajectoryScore,
        taking: list[CallScore],
        want: list[str],
        match: str,
        offset: int,
        memo: str,
    ) -> None:
        """Align ``taking`` to ``want`` (the expected steps from ``offset`` on)
        and add up selection, recall and argument figures."""
        errored = [cs.error_kind is not None for cs in taking] if ts.any_error else None
        names = [cs.name for cs in taking]
        if match == "strict":
            al = self._align_strict(memo, names, errored, want)
        else:

            def fits(i: int, j: int) -> bool:
                """Call i's arguments are acceptable for step j (multiset modes)."""
                cs = taking[i]
                args = traj.calls[cs.index].arguments
                return (
                    cs.schema_error is None and isinstance(args, dict) and not self._comparison(case, offset + j)(args)
                )

            al = align(names, errored or [False] * len(names), want, match, fits)
        allow_extra = match == "subset"
        matched: set[int] = set()
        done: set[int] = set()
        confusion = ts.confusion
        calls = traj.calls
        sel_num = sel_den = args_num = args_den = 0
        for cs, step in zip(taking, al.step_of_call, strict=True):
            name = cs.name
            if step is None:
                confusion.append((EXTRA, name))
                if not cs.exists or allow_extra:
                    continue
                sel_den += 1
                cs.selection_ok = False
                continue
            cs.step = offset + step
            expected_name = cs.expected_name = want[step]
            confusion.append((expected_name, name))
            if expected_name != name:
                if cs.exists:
                    sel_den += 1
                    cs.selection_ok = False
                continue
            matched.add(step)
            if not cs.exists:  # a suite may expect a tool that is not in its toolset
                continue
            if cs.done:
                done.add(step)
            sel_den += 1
            sel_num += 1
            cs.selection_ok = True
            if cs.schema_error is None:
                mismatches = cs.mismatches = self._comparison(case, offset + step)(calls[cs.index].arguments)
                args_den += 1
                if not mismatches:
                    args_num += 1
        ts.selection_num += sel_num
        ts.selection_den += sel_den
        ts.args_num += args_num
        ts.args_den += args_den
        ts.recall_den += len(want)
        if len(done) < len(matched):
            self._undone(ts, taking, al, want, matched - done, offset)
        if len(matched) == len(want):
            ts.recall_num += len(want)
            return
        for j in range(len(want)):
            if j in matched:
                ts.recall_num += 1
                continue
            ts.missing_steps.append(offset + j)
            if al.call_of_step[j] is None:
                ts.confusion.append((want[j], MISSING))

    @staticmethod
    def _undone(
        ts: TrajectoryScore, taking: list[CallScore], al: Alignment, want: list[str], steps: set[int], offset: int
    ) -> None:
        """Note the steps taken on the right tool that no call did: every
        attempt failed, and no later call of that tool (left extra by the
        alignment: a retry after another call) succeeded."""
        for j in sorted(steps):
            first = next(p for p, st in enumerate(al.step_of_call) if st == j and taking[p].name == want[j])
            if not any(
                al.step_of_call[p] is None and taking[p].name == want[j] and taking[p].done
                for p in range(first + 1, len(taking))
            ):
                ts.undone_steps.append(offset + j)

    def _dependencies(self, case: Case | None, ts: TrajectoryScore) -> None:
        pairs = self.pairs(case)
        if not pairs:
            return
        first_valid: dict[str, int] = {}  # each tool's first call that succeeded: a failed A meets no pair
        for cs in ts.calls:
            if cs.exists and cs.schema_error is None and cs.error_kind is None and cs.name not in first_valid:
                first_valid[cs.name] = cs.index  # cs.done, inline
        for before, after in pairs:
            b = first_valid.get(after)
            if b is None:
                continue
            ts.pairs_checked.append((before, after))
            a = first_valid.get(before)
            if a is None or a > b:
                ts.violations.append((before, after))
                if ts.calls[b].dependency_violation is None:
                    ts.calls[b].dependency_violation = (before, after)

    def _reactions(self, traj: Trajectory, case: Case | None, ts: TrajectoryScore) -> None:
        if not ts.any_error:
            return
        names = [c.name for c in traj.calls]
        args = [c.arguments for c in traj.calls]
        sources: list[Source] | None = None
        for cs in ts.calls:
            if cs.error_kind is not None:
                nxt = self._next_call(traj, names, cs.index)
                said = self._said_next(traj, cs.index, nxt)
                r = reaction_to(
                    cs.index,
                    cs.error_kind,
                    names,
                    args,
                    next_call=nxt,
                    said_next=said,
                    handoff=self._handoff,
                    give_up_phrases=self.give_up_phrases,
                    went_on=nxt is not None and said is None and self._went_on(case, ts, cs, nxt),
                )
                if r.reaction == "answered" and said is not None:  # honest only when it invented nothing
                    if sources is None:
                        sources = self._sources(traj, case)
                    if self._invented(said, cs, sources):
                        r = Reaction(r.index, r.error_kind, r.reaction, False)
                cs.reaction = r

    def _went_on(self, case: Case | None, ts: TrajectoryScore, cs: CallScore, nxt: int) -> bool:
        """Whether call ``nxt``, right after the error of ``cs``, is a later step
        that needed ``cs`` to have worked: the second of a declared pair whose
        first is the failed tool, or a later expected step than the failed
        call's, while no call had yet done the failed one."""
        after = ts.calls[nxt]
        if after.name == cs.name:
            return False
        before = ts.calls[:nxt]
        if (cs.name, after.name) in self.pairs(case):
            return not any(c.done and c.name == cs.name for c in before)
        if (
            cs.selection_ok
            and after.selection_ok
            and cs.step is not None
            and after.step is not None
            and after.step > cs.step
        ):
            return not any(c.done and c.step == cs.step for c in before)
        return False

    def _invented(self, said: str, cs: CallScore, sources: list[Source]) -> bool:
        """Whether a message right after the error of ``cs`` (before any other
        call) states a value nothing grounds or the failed call's result."""
        if find_claim(
            said, [(cs.index, cs.name)], ok_after=False, extra=self.success_phrases, refusals=self.give_up_phrases
        ):
            return True
        stated = extract_values(said, min_digits=2).all()
        return bool(stated) and bool(ground(stated, sources, ground_values).ungrounded)

    def _next_call(self, traj: Trajectory, names: list[str], index: int) -> int | None:
        """The agent's next call after ``index`` that is not a transparent one,
        nor one issued in the same model response (a parallel batch is no
        reaction to an error the agent had not yet seen)."""
        batch = traj.calls[index].batch
        for j in range(index + 1, len(names)):
            if batch is not None and traj.calls[j].batch == batch:
                continue
            if names[j] not in self._transparent:
                return j
        return None

    @staticmethod
    def _said_next(traj: Trajectory, index: int, next_call: int | None) -> str | None:
        """What the agent told the user after call ``index``, when it spoke
        before acting again (text that only leads into its next call, in the
        same turn, is not a reaction of its own). Without a conversation, the
        final answer when no call follows."""
        if traj.messages is None:
            answer = _final_answer(traj)
            return answer if next_call is None and answer.strip() else None
        before = len(traj.calls) if next_call is None else next_call
        spoke: str | None = None
        for m in traj.messages:
            if m.calls_before <= index:
                continue
            if m.calls_before > before:
                break
            if m.role == "assistant" and spoke is None:
                if m.calls_before < before or next_call is None:
                    return m.content
                spoke = m.content  # said right before the next call: its own turn only if the user answered
            elif m.role == "user" and spoke is not None:
                return spoke
        return None

    def _forbidden(self, case: Case, traj: Trajectory, ts: TrajectoryScore) -> None:
        rules = [(rule, 0) for rule in case.forbidden_calls]
        for t, turn in enumerate(case.turns or (), start=1):  # a turn's own rules hold in that turn only
            rules.extend((rule, t) for rule in turn.forbidden_calls)
        for rule, within in rules:
            for cs in ts.calls:
                if cs.name != rule.name or not cs.schema_ok or (within and (cs.turn or 1) != within):
                    continue
                got = traj.calls[cs.index].arguments
                if rule.arguments is None or all(
                    k in got and values_equal(got[k], v) for k, v in rule.arguments.items()
                ):
                    cs.forbidden = True

    def _state(self, case: Case, traj: Trajectory, ts: TrajectoryScore) -> None:
        if case.expected_state is None:
            return
        state = traj.state if traj.state is not None else self.replay_state(case, traj, ts)
        ts.final_state = state
        if state is None:
            ts.state_mismatches.append(
                {
                    "key": "",
                    "expected": case.expected_state,
                    "got": None,
                    "note": "final state unknown: no state in the record, no declarative mocks",
                }
            )
            return
        ts.state_mismatches.extend(state_diff(case.expected_state, state))

    def replay_state(self, case: Case, traj: Trajectory, ts: TrajectoryScore) -> dict[str, Any] | None:
        """Rebuild the final state from the successful calls and the
        declarative mocks' effects (None when a tool uses a Python responder)."""
        state: dict[str, Any] = {}
        for cs in ts.calls:
            if not cs.schema_ok or cs.error_kind is not None:
                continue
            tool = self.toolset.get(cs.name)
            assert tool is not None
            mock = case.mocks.get(cs.name, tool.mock)
            if mock is None:
                if tool.responder is not None:
                    return None
                continue
            try:
                mock.respond(dict(traj.calls[cs.index].arguments), state)
            except ToolFailure:
                continue
        return state

    def _outcome(self, traj: Trajectory, case: Case | None, ts: TrajectoryScore) -> OutcomeResult:
        """The outcome of a faulted trajectory, from what the agent did after the fault."""
        fault = ts.fault_step
        assert fault is not None
        calls, scores, transparent = traj.calls, ts.calls, self._transparent
        acted = [cs for cs in scores[fault + 1 :] if cs.name not in transparent]
        last = acted[-1] if acted else None
        said = [(k, m) for k, m in enumerate(traj.messages or ()) if m.role == "assistant" and m.calls_before > fault]
        text = _final_answer(traj) if traj.messages is None else (said[-1][1].content if said else "")
        ok_after = any(cs.done for cs in acted)
        memo: dict[int, StepWords] = {}
        rewarded = traj.reward is not None and traj.reward >= 1  # a reward of 1 decides first: nothing to look for
        after = AfterFault(
            text=text,
            handoff=last.name if last is not None and last.name in self._handoff else None,
            gave_up=traj.stopped == "gave_up",
            ok_after=ok_after,
            claim=None if rewarded else self._claim(traj, ts, said, text, memo),
            invented=None if rewarded or traj.messages is None else self._invented_after(traj, case, ts, said),
            judged_every_message=traj.messages is not None,
            reported=None if rewarded else self._reported(traj, ts, said, text, memo),
        )
        checked = case is not None and (
            case.expected_calls is not None
            or case.expected_state is not None
            or bool(case.forbidden_calls)
            or _turn_rules(case)
        )
        return classify_outcome(
            after=after,
            sources=self._sources(traj, case) if traj.messages is None else [],  # else judged message by message
            observations=[
                (
                    i,
                    c.observation if c.observation is not None else (c.error.message if c.error else ""),
                    c.error is None and scores[i].schema_ok,
                )
                for i, c in enumerate(calls)
            ],
            fault_index=fault,
            expected_datum=case.expected_datum if case else None,
            give_up_phrases=self.give_up_phrases,
            reward=traj.reward,
            # the faulted call's own findings (a wrong tool, bad arguments, an unknown name) are F1-F3's:
            # recovery asks whether the task got done after it
            succeeded=not self._base_failures(case, ts, skip=_attempt(ts, fault)) if checked else None,
        )

    def _unmade(self, ts: TrajectoryScore, upto: int) -> list[CallScore]:
        """The calls from the fault up to call ``upto`` (excluded) that failed
        and that no later call of their tool made good, latest failure of each tool."""
        fault = ts.fault_step
        assert fault is not None
        last_done: dict[str, int] = {}
        for cs in ts.calls:
            if cs.done:
                last_done[cs.name] = cs.index
        failed = {
            cs.name: cs
            for cs in ts.calls[fault:upto]
            if cs.error_kind is not None and cs.name not in self._transparent and last_done.get(cs.name, -1) < cs.index
        }
        return sorted(failed.values(), key=lambda cs: cs.index)

    @staticmethod
    def _step_words(traj: Trajectory, memo: dict[int, StepWords], i: int) -> StepWords:
        """The step words of call ``i``, once per trajectory."""
        got = memo.get(i)
        if got is None:
            got = memo[i] = step_words(traj.calls[i].name, traj.calls[i].arguments)
        return got

    def _claim(
        self,
        traj: Trajectory,
        ts: TrajectoryScore,
        said: list[tuple[int, Message]],
        text: str,
        memo: dict[int, StepWords],
    ) -> dict[str, Any] | None:
        """The first sentence, in any message after the fault (or the answer,
        without a conversation), claiming the result of a call that had failed
        by then and that no later call of its tool made good."""
        fault = ts.fault_step
        assert fault is not None
        texts = (
            [(k, m.content, m.calls_before) for k, m in said]
            if traj.messages is not None
            else [(None, text, len(ts.calls))]
        )
        for k, content, upto in texts:
            failed = self._unmade(ts, upto)
            if not failed or not content.strip():
                continue
            ok_after = any(cs.done for cs in ts.calls[fault + 1 : upto] if cs.name not in self._transparent)

            def done_words(upto: int = upto) -> list[StepWords]:
                return [self._step_words(traj, memo, cs.index) for cs in ts.calls[:upto] if cs.done]

            claim = find_claim(
                content,
                [(cs.index, cs.name) for cs in failed],
                ok_after=ok_after,
                extra=self.success_phrases,
                refusals=self.give_up_phrases,
                succeeded=done_words,
                words={cs.index: self._step_words(traj, memo, cs.index) for cs in failed},
            )
            if claim is not None:
                return claim if k is None else {**claim, "message": k + 1}
        return None

    def _reported(
        self,
        traj: Trajectory,
        ts: TrajectoryScore,
        said: list[tuple[int, Message]],
        text: str,
        memo: dict[int, StepWords],
    ) -> dict[str, Any] | None:
        """The first sentence after the fault that tells the user a step that
        failed (and was never made good) did not work, in any words, in a
        message after which no call succeeded (the agent stopped there)."""
        texts = (
            [(k, m.content, m.calls_before) for k, m in said]
            if traj.messages is not None
            else [(None, text, len(ts.calls))]
        )
        for k, content, upto in texts:
            failed = self._unmade(ts, upto)
            if not failed or any(cs.done for cs in ts.calls[upto:] if cs.name not in self._transparent):
                continue  # a report the agent then acted past is no stop
            errors = [traj.calls[cs.index].error for cs in failed]
            sentence = reports_failure(
                content,
                [self._step_words(traj, memo, cs.index) for cs in failed],
                [e.message for e in errors if e is not None],
                extra=self.give_up_phrases,
                succeeded=[self._step_words(traj, memo, cs.index) for cs in ts.calls[:upto] if cs.done],
            )
            if sentence is not None:
                return {"sentence": sentence} if k is None else {"message": k + 1, "sentence": sentence}
        return None

    def _invented_after(
        self, traj: Trajectory, case: Case | None, ts: TrajectoryScore, said: list[tuple[int, Message]]
    ) -> dict[str, Any] | None:
        """The first message after the fault stating a value that nothing
        grounds: no tool output, the question, or a user message that came
        before the agent first stated it after the fault (a user repeating the
        agent's number grounds nothing; a value first stated before the fault
        is judged where it is restated, as the text before the fault is not).
        In the last message, after an error that no call made good, two-digit
        numbers are data too.

        Messages are read in order, each value once, where it is first stated
        after the fault: what a value was grounded by there stays true later."""
        if not said:
            return None
        fault = ts.fault_step
        assert fault is not None
        messages = traj.messages or []
        question = traj.question or (case.question if case else "")
        last_k = said[-1][0]
        ok_after = any(cs.done for cs in ts.calls[fault + 1 :] if cs.name not in self._transparent)
        memo: dict[str, frozenset[str]] = {}

        def values_of(text: str) -> frozenset[str]:  # each source's values, once per trajectory (ground stops
            # at the latest sources that hold every value: the long outputs of early calls are rarely read)
            got = memo.get(text)
            if got is None:
                got = memo[text] = ground_values(text)
            return got

        checked: set[str] = set()
        for k, m in enumerate(messages):
            if m.role != "assistant" or m.calls_before <= fault or not m.content:
                continue
            if _DIGIT.search(m.content) is None:
                continue  # no number, id or date in it
            digits = 2 if k == last_k and not ok_after else MIN_DIGITS
            stated = set(extract_values(m.content, min_digits=digits).all()) - checked
            if not stated:
                continue
            checked |= stated
            g = ground(stated, self._sources_before(question, traj, messages, k), values_of, totals=True)
            if g.ungrounded:
                return {
                    "message": k + 1,
                    "values": g.ungrounded,
                    "sentence": sentence_with(m.content, g.ungrounded),
                    "looked_in": g.looked_in,
                    "failed_call": fault,
                }
        return None

    @staticmethod
    def _sources_before(question: str, traj: Trajectory, messages: list[Message], cut: int) -> list[Source]:
        """What a value stated in message ``cut`` may come from: the question,
        the user messages before it, and the outputs of the calls made before it."""
        upto = messages[cut].calls_before
        out = [Source("the question", question)]
        users = [(k, m) for k, m in enumerate(messages[:cut]) if m.role == "user"]
        u = 0
        for i, c in enumerate(traj.calls[:upto]):
            while u < len(users) and users[u][1].calls_before <= i:
                out.append(Source(f"user message {u + 1}", users[u][1].content))
                u += 1
            obs = c.observation if c.observation is not None else (c.error.message if c.error else "")
            if obs:
                out.append(Source(f"call #{i + 1}", obs))
        out.extend(Source(f"user message {j + 1}", m.content) for j, (_, m) in enumerate(users[u:], start=u))
        return out

    @staticmethod
    def _sources(traj: Trajectory, case: Case | None) -> list[Source]:
        """What a stated value may come from, in order: the question, the
        user's messages, every call's observation (error messages included)."""
        out = [Source("the question", traj.question or (case.question if case else ""))]
        users = [m for m in traj.messages or () if m.role == "user"]
        u = 0
        for i, c in enumerate(traj.calls):
            while u < len(users) and users[u].calls_before <= i:
                out.append(Source(f"user message {u + 1}", users[u].content))
                u += 1
            text = c.observation if c.observation is not None else (c.error.message if c.error else "")
            if text:
                out.append(Source(f"call #{i + 1}", text))
        out.extend(Source(f"user message {k + 1}", m.content) for k, m in enumerate(users[u:], start=u))
        return out

    def _base_failures(
        self, case: Case | None, ts: TrajectoryScore, gave_up: bool = False, skip: frozenset[int] | None = None
    ) -> list[str]:
        """The failures of every family but recovery (after an honest give-up,
        the excused steps are not missing, the hand-off it ended with is no
        wrong selection, and the state is not judged). ``skip``: calls whose
        own findings (wrong tool, mismatched values, schema, unknown name) do
        not count."""
        f: list[str] = []
        others = ts.calls if skip is None else [cs for cs in ts.calls if cs.index not in skip]
        if ts.has_reference and case is not None:
            missing = [j for j in ts.missing_steps if j not in ts.excused_steps]
            # a counted call on another tool than its step's
            wrong = (
                ts.selection_num < ts.selection_den if skip is None else any(cs.selection_ok is False for cs in others)
            )
            if wrong and gave_up:
                after = ts.fault_step if ts.fault_step is not None else len(ts.calls)
                wrong = any(
                    cs.selection_ok is False and not (cs.step is None and cs.index > after and cs.name in self._handoff)
                    for cs in ts.calls
                )
            if case.turns is not None:  # a missing step of a superset turn is no failure
                lenient = superset_steps(case)
                missing = [j for j in missing if j not in lenient]
            if wrong or (missing and case.match != "superset"):
                f.append(Failure.SELECTION.value)
            # a call on its step's tool whose values did not match
            if ts.args_num < ts.args_den if skip is None else any(cs.mismatches for cs in others):
                f.append(Failure.ARGUMENTS.value)
            if _not_done(case, ts):
                f.append(Failure.STEP_NOT_DONE.value)
        if (
            ts.schema_num < ts.schema_den
            if skip is None
            else any(cs.schema_error is not None and cs.exists for cs in others)
        ):
            f.append(Failure.SCHEMA.value)
        if ts.hallucinated_num if skip is None else any(not cs.exists for cs in others):
            f.append(Failure.HALLUCINATED_TOOL.value)
        if ts.violations:
            f.append(Failure.DEPENDENCY.value)
        if case is not None and (case.forbidden_calls or case.turns) and any(cs.forbidden for cs in ts.calls):
            f.append(Failure.FORBIDDEN_CALL.value)
        if ts.state_mismatches and not gave_up:
            f.append(Failure.STATE.value)
        return f

    def _failures(self, case: Case | None, ts: TrajectoryScore) -> None:
        gave_up = ts.outcome is not None and ts.outcome.outcome == "gave_up"
        if gave_up and ts.has_reference and case is not None and ts.fault_step is not None:
            # An honest give-up after a fault is acceptable: the steps it did
            # not take are excused, not selection errors.
            faulted = ts.calls[ts.fault_step].step
            cut = faulted if faulted is not None else 0
            ts.excused_steps = [j for j in ts.missing_steps if j >= cut]
        f = self._base_failures(case, ts, gave_up)
        if ts.outcome is not None and ts.outcome.outcome == "hallucinated":
            f.append(Failure.RECOVERY_HALLUCINATED.value)
        if ts.outcome is not None and ts.outcome.outcome == "confused":
            f.append(Failure.RECOVERY_CONFUSED.value)
        ts.failures = f
        ts.passed = (ts.reward >= 1) if ts.reward is not None else not f


def _attempt(ts: TrajectoryScore, fault: int) -> frozenset[int]:
    """The faulted call and the failed retries of its tool right after it
    (one attempt, as the alignment groups them)."""
    calls = ts.calls
    j = fault + 1
    while j < len(calls) and calls[j].name == calls[fault].name and calls[j].error_kind is not None:
        j += 1
    return frozenset(range(fault, j))


def error_source(cs: CallScore) -> str:
    """What made a failed call fail, one of ERROR_SOURCES."""
    if cs.injected:
        return "injected"
    if not cs.exists or cs.error_kind == "unknown_tool":
        return "unknown_tool"
    if cs.schema_error is not None or cs.error_kind == "schema":
        return "schema"
    return "tool"


def _not_done(case: Case, ts: TrajectoryScore) -> bool:
    """Whether an expected step was taken and never done (every attempt
    failed), or left untaken after an honest give-up: the task did not
    succeed. Steps a ``superset`` match may leave out are not counted."""
    left = [*ts.undone_steps, *ts.excused_steps]
    if not left or case.match == "superset":
        return False
    if case.turns is not None:
        lenient = superset_steps(case)
        return any(j not in lenient for j in left)
    return True


def _turn_rules(case: Case) -> bool:
    """Whether a scripted turn forbids a call."""
    return any(t.forbidden_calls for t in case.turns or ())


def _final_answer(traj: Trajectory) -> str:
    """The answer the agent gave the user at the end; none when its loop was cut
    short (``stopped``: a step or call limit, an exception), whatever text the
    record kept (a last thought, say). A record that says it gave up keeps it."""
    return traj.answer if traj.stopped is None or traj.stopped == "gave_up" else ""


def state_diff(expected: Any, got: Any, key: str = "") -> list[dict[str, Any]]:
    """Where ``got`` does not contain ``expected``: mappings as subsets, lists
    item by item with the same length, scalars by the exact rule."""
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return [{"key": key, "expected": expected, "got": got}]
        out: list[dict[str, Any]] = []
        for k, v in expected.items():
            sub = f"{key}.{k}" if key else str(k)
            if k not in got:
                out.append({"key": sub, "expected": v, "got": None, "note": "missing"})
            else:
                out.extend(state_diff(v, got[k], sub))
        return out
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [{"key": key, "expected": expected, "got": got}]
        out = []
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            out.extend(state_diff(e, g, f"{key}[{i}]"))
        return out
    return [] if values_equal(got, expected) else [{"key": key, "expected": expected, "got": got}]
