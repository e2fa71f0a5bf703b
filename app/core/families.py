"""The failure families and the failures of a case, in one catalogue
(docs/metrics.md, docs/formats.md).

A *failure* is what a scored trajectory lists in ``failures`` (``Failure``);
a *family* is a figure of the report (``selection_precision``…, F1 to F5) or
the case effects (forbidden calls, final state), which the figures do not
count. Every failure belongs to exactly one family. Whatever lists, titles,
orders or counts the families reads them here, in this order: adding a
failure kind is one ``Failure`` member, its place in a family's ``failures``
and its rule in ``core/scoring.py`` (and its name in the lists of
docs/formats.md and docs/api.md, which tests/core/test_families.py holds to this one).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
        """"F1 selection precision" (the gate's words); a family without a code is its name."""
        return f"{self.code} {self.name}" if self.code else self.name


FAMILIES: tuple[Family, ...] = (
    Family("selection_precision", "F1", "selection precision", "F1 selection", "precision", "precision",
           "selection precision", (Failure.SELECTION,), Failure.SELECTION, tolerance=0.02, per_call=True,
           num="selection_num", den="selection_den", report_turn="F1 P", column="F1 precision",
           needs_reference=True),
    Family("selection_recall", "F1", "selection recall", "F1 selection", "recall", "recall",
           "selection recall", (), Failure.SELECTION, tolerance=0.02, per_call=True,
           num="recall_num", den="recall_den", report_turn="F1 R", column="F1 recall", needs_reference=True),
    Family("schema_validity", "F2", "schema validity", "F2 arguments", "schema validity", "schema validity",
           "schema validity", (Failure.SCHEMA,), Failure.SCHEMA, tolerance=0.02, per_call=True,
           num="schema_num", den="schema_den", column="F2 schema"),
    Family("argument_accuracy", "F2", "argument accuracy", "F2 arguments", "argument accuracy",
           "argument accuracy", "argument accuracy", (Failure.ARGUMENTS,), Failure.ARGUMENTS, tolerance=0.02,
           per_call=True, num="args_num", den="args_den", report_turn="F2 acc.", column="F2 arguments",
           needs_reference=True),
    Family("hallucinated_tools", "F3", "hallucinated tools", "F3 hallucinated tools", "hallucinated tools",
           "calls to unknown tools", "hallucinated tools", (Failure.HALLUCINATED_TOOL,), Failure.HALLUCINATED_TOOL,
           higher_is_better=False, blocking=True, per_call=True, num="hallucinated_num", den="calls_total",
           report_heading="F3 hallucinated", report_turn="F3", column="F3 hallucinated"),
    Family("recovery", "F4", "recovery", "F4 recovery", "recovery", "recovered after a tool error", "recovery",
           (Failure.RECOVERY_CONFUSED, Failure.STEP_NOT_DONE), tolerance=0.05,
           num="recovery_num", den="recovery_den", report_turn="F4", column="F4 recovery"),
    Family("hallucination_after_error", "F4", "hallucination after error", "F4 recovery",
           "hallucination after error", "invented data after an error", "invented after an error",
           (Failure.RECOVERY_HALLUCINATED,), Failure.RECOVERY_HALLUCINATED, higher_is_better=False, blocking=True,
           num="hallucination_after_error_num", den="recovery_den", column="F4 invented",
           zero_note="hallucination must be 0"),
    Family("dependency_violations", "F5", "dependency violations", "F5 order", "dependency violations",
           "dependency violations", "dependency violations", (Failure.DEPENDENCY,), Failure.DEPENDENCY,
           higher_is_better=False, ratio=False, column="F5 order"),
    Family("effects", "", "effects", "effects", "effects", "effects", "effects",
           (Failure.FORBIDDEN_CALL, Failure.STATE), higher_is_better=False, ratio=False),
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
