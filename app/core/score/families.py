"""The failure families, the failures of a case and the causes of a failed
trajectory, in one catalogue (docs/metrics.md, docs/formats.md).

A *failure* is what a scored trajectory lists in ``failures`` (``Failure``);
a *family* is a figure of the report (``selection_precision``…, F1 to F5) or
the case effects (forbidden calls, final state), which the figures do not
count. Every failure belongs to exactly one family. Whatever lists, titles,
orders or counts the families reads them here, in this order: adding a
failure kind is one ``Failure`` member, its place in a family's ``failures``,
its per-turn attribution (``PER_TURN``) and its rule in ``core/score/scoring.py``
(and its name in the lists of docs/formats.md and docs/api.md, which
tests/core/test_families.py holds to this one).

A *cause* is the kind of a failed trajectory's first divergence (``CAUSES``):
its rank at one call and its words, for ``causes`` and the terminal (``text``)
and for the trajectory page (``sentence``). Adding one is its entry here, its
rule in ``core/score/divergence.py`` and its row in docs/formats.md's table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.score.scored import ScoredCall


class Failure(StrEnum):
    """A case failure, as ``failures`` names it; a ``str`` equal to its value.

    What a score holds and stores is the plain value (``Failure.STATE.value``):
    scored batches cross processes by ``marshal``, which writes exact ``str`` only."""

    SELECTION = "selection"
    ARGUMENTS = "arguments"
    SCHEMA = "schema"
    HALLUCINATED_TOOL = "hallucinated_tool"
    DEPENDENCY = "dependency"
    FORBIDDEN_CALL = "forbidden_call"
    STATE = "state"
    RECOVERY_HALLUCINATED = "recovery_hallucinated"
    RECOVERY_CONFUSED = "recovery_confused"
    STEP_NOT_DONE = "step_not_done"


@dataclass(frozen=True, slots=True)
class Attribution:
    """Which user turns a conversation's failure is noted in (core/score/turns.py): those of the calls that
    pass ``call``, of each expected step not done (``missing_step``), of the faulted call (``fault``)."""

    call: Callable[[ScoredCall], bool] | None = None
    missing_step: bool = False
    fault: bool = False


# Each failure's per-turn attribution, in the order a turn lists them (a call's failures first, then
# the steps', then the fault's). A failure not here belongs to no turn (``state``: the final state).
PER_TURN: dict[str, Attribution] = {  # keyed by the plain value: what a turn's ``failures`` holds
    Failure.HALLUCINATED_TOOL.value: Attribution(call=lambda cs: not cs.exists),
    Failure.SCHEMA.value: Attribution(call=lambda cs: cs.exists and cs.schema_error is not None),
    Failure.SELECTION.value: Attribution(call=lambda cs: cs.exists and cs.selection_ok is False, missing_step=True),
    Failure.ARGUMENTS.value: Attribution(call=lambda cs: cs.exists and bool(cs.mismatches)),
    Failure.DEPENDENCY.value: Attribution(call=lambda cs: cs.exists and cs.dependency_violation is not None),
    Failure.FORBIDDEN_CALL.value: Attribution(call=lambda cs: cs.exists and cs.forbidden),
    Failure.RECOVERY_HALLUCINATED.value: Attribution(fault=True),
    Failure.RECOVERY_CONFUSED.value: Attribution(fault=True),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """One family: how it is named, read, gated and counted."""

    key: str  # the figure's key in ``score --json`` ("selection_precision")
    code: str  # "F1".."F5"; "" for the case effects, which no figure counts
    name: str  # "selection precision": with the code, the gate's title
    heading: str  # its group's heading on the pages and in the terminal report ("F1 selection")
    label: str  # the terminal report's metric column ("precision")
    card: str  # what the run page's card says it counts ("recovered after a tool error")
    turn_label: str  # its column of the per-turn tables
    failures: tuple[Failure, ...] = ()  # the failures that belong to it
    shows: Failure | None = None  # the failure whose trajectories its figure stands for (a filter)
    higher_is_better: bool = True
    blocking: bool = False  # must be zero (the gate blocks on any, the pages flag it)
    tolerance: float | None = None  # the gate's default allowed drop, in ratio points (None: not tolerated)
    ratio: bool = True  # a num/den figure of the report (F5 is a list of pairs; the effects no figure)
    per_call: bool = False  # counted per call (TrajectoryScore's totals), not per faulted trajectory
    num: str = ""  # the attribute holding its numerator (TrajectoryScore for per_call, TurnScore for all)
    den: str = ""  # and its denominator
    report_heading: str = ""  # the terminal report's family column, where shorter than ``heading``
    report_turn: str = ""  # its column in the terminal report's per-turn table ("": not shown there)
    column: str = ""  # its short column header in the pages' tables of runs ("F2 schema")
    zero_note: str = ""  # what a card of several figures says of this blocking one ("hallucination must be 0")
    needs_reference: bool = False  # counted only against expected calls: "no reference" when no case has them

    @property
    def terminal_heading(self) -> str:
        return self.report_heading or self.heading

    @property
    def title(self) -> str:
        """ "F1 selection precision" (the gate's words); a family without a code is its name."""
        return f"{self.code} {self.name}" if self.code else self.name


FAMILIES: tuple[Family, ...] = (
    Family(
        key="selection_precision",
        code="F1",
        name="selection precision",
        heading="F1 selection",
        label="precision",
        card="precision",
        turn_label="selection precision",
        failures=(Failure.SELECTION,),
        shows=Failure.SELECTION,
        tolerance=0.02,
        per_call=True,
        num="selection_num",
        den="selection_den",
        report_turn="F1 P",
        column="F1 precision",
        needs_reference=True,
    ),
    Family(
        key="selection_recall",
        code="F1",
        name="selection recall",
        heading="F1 selection",
        label="recall",
        card="recall",
        turn_label="selection recall",
        failures=(),
        shows=Failure.SELECTION,
        tolerance=0.02,
        per_call=True,
        num="recall_num",
        den="recall_den",
        report_turn="F1 R",
        column="F1 recall",
        needs_reference=True,
    ),
    Family(
        key="schema_validity",
        code="F2",
        name="schema validity",
        heading="F2 arguments",
        label="schema validity",
        card="schema validity",
        turn_label="schema validity",
        failures=(Failure.SCHEMA,),
        shows=Failure.SCHEMA,
        tolerance=0.02,
        per_call=True,
        num="schema_num",
        den="schema_den",
        column="F2 schema",
    ),
    Family(
        key="argument_accuracy",
        code="F2",
        name="argument accuracy",
        heading="F2 arguments",
        label="argument accuracy",
        card="argument accuracy",
        turn_label="argument accuracy",
        failures=(Failure.ARGUMENTS,),
        shows=Failure.ARGUMENTS,
        tolerance=0.02,
        per_call=True,
        num="args_num",
        den="args_den",
        report_turn="F2 acc.",
        column="F2 arguments",
        needs_reference=True,
    ),
    Family(
        key="hallucinated_tools",
        code="F3",
        name="hallucinated tools",
        heading="F3 hallucinated tools",
        label="hallucinated tools",
        card="calls to unknown tools",
        turn_label="hallucinated tools",
        failures=(Failure.HALLUCINATED_TOOL,),
        shows=Failure.HALLUCINATED_TOOL,
        higher_is_better=False,
        blocking=True,
        per_call=True,
        num="hallucinated_num",
        den="calls_total",
        report_heading="F3 hallucinated",
        report_turn="F3",
        column="F3 hallucinated",
    ),
    Family(
        key="recovery",
        code="F4",
        name="recovery",
        heading="F4 recovery",
        label="recovery",
        card="recovered after a tool error",
        turn_label="recovery",
        failures=(Failure.RECOVERY_CONFUSED, Failure.STEP_NOT_DONE),
        tolerance=0.05,
        num="recovery_num",
        den="recovery_den",
        report_turn="F4",
        column="F4 recovery",
    ),
    Family(
        key="hallucination_after_error",
        code="F4",
        name="hallucination after error",
        heading="F4 recovery",
        label="hallucination after error",
        card="invented data after an error",
        turn_label="invented after an error",
        failures=(Failure.RECOVERY_HALLUCINATED,),
        shows=Failure.RECOVERY_HALLUCINATED,
        higher_is_better=False,
        blocking=True,
        num="hallucination_after_error_num",
        den="recovery_den",
        column="F4 invented",
        zero_note="hallucination must be 0",
    ),
    Family(
        key="dependency_violations",
        code="F5",
        name="dependency violations",
        heading="F5 order",
        label="dependency violations",
        card="dependency violations",
        turn_label="dependency violations",
        failures=(Failure.DEPENDENCY,),
        shows=Failure.DEPENDENCY,
        higher_is_better=False,
        ratio=False,
        column="F5 order",
    ),
    Family(
        key="effects",
        code="",
        name="effects",
        heading="effects",
        label="effects",
        card="effects",
        turn_label="effects",
        failures=(Failure.FORBIDDEN_CALL, Failure.STATE),
        higher_is_better=False,
        ratio=False,
    ),
)

BY_KEY: dict[str, Family] = {f.key: f for f in FAMILIES}
RATIO_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES if f.ratio)  # the report's num/den figures
RATIO_KEYS: tuple[str, ...] = tuple(f.key for f in RATIO_FAMILIES)
PER_CALL_FAMILIES: tuple[Family, ...] = tuple(f for f in RATIO_FAMILIES if f.per_call)
BLOCKING_KEYS: tuple[str, ...] = tuple(f.key for f in FAMILIES if f.blocking)
REFERENCE_KEYS: tuple[str, ...] = tuple(f.key for f in FAMILIES if f.needs_reference)
TOLERATED_KEYS: tuple[str, ...] = tuple(f.key for f in FAMILIES if f.tolerance is not None)
FAILURE_FAMILY: dict[str, Family] = {failure: f for f in FAMILIES for failure in f.failures}
# a figure's key -> the failure it stands for, ordered as the failures are
FAMILY_FAILURE: dict[str, Failure] = {f.key: failure for failure in Failure for f in FAMILIES if f.shows is failure}


def family_of(failure: str) -> str:
    """The key of the family a failure belongs to (an unknown name is its own family)."""
    f = FAILURE_FAMILY.get(failure)
    return f.key if f is not None else failure


def counter_keys(families: tuple[Family, ...]) -> tuple[str, ...]:
    """``"<key>.num", "<key>.den"`` of each family, in order: the slots of a counter row."""
    return tuple(f"{f.key}.{part}" for f in families for part in ("num", "den"))


# --- Causes: what a failed trajectory's first divergence names (core/score/divergence.py finds them) ---

Part = tuple[str, str]
"""A piece of a cause's page sentence: ``("", words)``, ``("code", name)``, ``("call", "")`` (the
call, linked) or ``("step", tool)`` (the expected step, linked, then its tool); web/why.py displays them."""

CALL: Part = ("call", "")


def _w(text: str) -> Part:
    return ("", text)


def _code(name: str) -> Part:
    return ("code", name)


def _step(tool: str) -> Part:
    return ("step", tool)


@dataclass(frozen=True, slots=True)
class Cause:
    """One kind of first divergence: its rank and its words.

    ``rank``: at one call, the lower is named first. ``text(tool, other)``: the cause in words,
    read after "N failed trajectories: " (``score``'s ``causes``, the run page, the terminal).
    ``sentence(tool, other)``: the trajectory page's sentence after "First divergence: "."""

    kind: str
    rank: int
    text: Callable[[str, str], str]
    sentence: Callable[[str, str], tuple[Part, ...]]


def _recovery_words(other: str) -> str:
    return {
        "hallucinated": "answered with data no call returned",
        "confused": "lost its way (neither recovered nor said it could not)",
        "gave_up": "said it could not (an honest give-up, yet the task failed)",
    }.get(other, f"ended {other}")


def _unexplained_text(tool: str, other: str) -> str:
    if tool:
        return f"failed by the benchmark's reward (reward {tool}) with every expected step done"
    return "failed with no divergence from the case found"


def _unexplained_sentence(tool: str, other: str) -> tuple[Part, ...]:
    if tool:
        return (_w(f"none in the case's reference: every expected step was done, yet the reward is {tool}."),)
    return (_w("none found in the case."),)


# In the order docs/formats.md lists them; ``rank`` orders the kinds met at one call.
CAUSES: tuple[Cause, ...] = (
    Cause(
        "missing_step",
        6,
        lambda tool, other: f"expected call to {tool} never made",
        lambda tool, other: (_step(tool), _w(": no call was made for it.")),
    ),
    Cause(
        "wrong_tool",
        2,
        lambda tool, other: f"called {other} where {tool} was expected",
        lambda tool, other: (
            _w("at "),
            CALL,
            _w(" the agent called "),
            _code(other),
            _w(" where "),
            _step(tool),
            _w(" was expected."),
        ),
    ),
    Cause(
        "arguments",
        3,
        lambda tool, other: f"{tool} never called with the expected values" + (f" (wrong {other})" if other else ""),
        lambda tool, other: (
            _step(tool),
            _w(" was never called with the expected values: at "),
            CALL,
            _w(" "),
            *((_code(other), _w(" differs from the expected value.")) if other else (_w("its values differ."),)),
        ),
    ),
    Cause(
        "schema",
        4,
        lambda tool, other: f"{tool} called with arguments that break its schema" + (f" ({other})" if other else ""),
        lambda tool, other: (
            _w("at "),
            CALL,
            _w(" the arguments of "),
            _code(tool),
            _w(" break its schema" + (f" ({other})." if other else ".")),
        ),
    ),
    Cause(
        "step_failed",
        5,
        lambda tool, other: f"expected step {tool} never done: every call to it failed",
        lambda tool, other: (_step(tool), _w(" was never done: every call to it failed, the first at "), CALL, _w(".")),
    ),
    Cause(
        "hallucinated_tool",
        0,
        lambda tool, other: f"called {tool}, a tool that does not exist",
        lambda tool, other: (
            _w("at "),
            CALL,
            _w(" the agent called "),
            _code(tool),
            _w(", a tool that does not exist."),
        ),
    ),
    Cause(
        "forbidden_call",
        1,
        lambda tool, other: f"made a call the case forbids: {tool}",
        lambda tool, other: (_w("at "), CALL, _w(" the agent made a call the case forbids: "), _code(tool), _w(".")),
    ),
    Cause(
        "extra_call",
        8,
        lambda tool, other: f"called {tool} where no step expects it (the case allows no extra call)",
        lambda tool, other: (
            _w("at "),
            CALL,
            _w(" the agent called "),
            _code(tool),
            _w(", which no step expects (the case allows no extra call)."),
        ),
    ),
    Cause(
        "dependency",
        7,
        lambda tool, other: f"called {tool} before {other}, which must come first",
        lambda tool, other: (
            _w("at "),
            CALL,
            _w(" the agent called "),
            _code(tool),
            _w(" before "),
            _code(other),
            _w(", which must come first."),
        ),
    ),
    Cause(
        "recovery",
        9,
        lambda tool, other: f"after the error on {tool}, {_recovery_words(other)}",
        lambda tool, other: (
            _w("the error at "),
            CALL,
            _w(" ("),
            _code(tool),
            _w(f") was met badly: the outcome is {other}."),
        ),
    ),
    Cause(
        "state",
        10,
        lambda tool, other: f"left the final state different from the expected one ({other or 'the whole state'})",
        lambda tool, other: (
            _w("the final state differs from the expected one at "),
            _code(other or "(the whole state)"),
            _w("."),
        ),
    ),
    Cause("unexplained", 11, _unexplained_text, _unexplained_sentence),
)

CAUSE: dict[str, Cause] = {c.kind: c for c in CAUSES}
UNEXPLAINED = CAUSE["unexplained"]  # what a kind the catalogue does not know reads as


def cause_of(kind: str) -> Cause:
    """The kind's cause (a kind not in the catalogue, say from an old store, reads as unexplained)."""
    return CAUSE.get(kind, UNEXPLAINED)
