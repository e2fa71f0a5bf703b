"""Curation: a trajectory becomes a suite case that reproduces it.

The draft takes the trajectory's calls as expected calls the way scoring
aligns them: a retry of the same tool right after an error is one step with
its first attempt (a field whose value changed between the step's valid
attempts gets a ``one_of`` rule), transparent tools (``think``) and tools
not in the toolset are left out. A conversation with several user messages
becomes a ``turns`` case, split where each user message came
(``calls_before``). The observations become the case's mocks, keyed by the
arguments that produced them. A person's edits (drop a step, a rule per
argument, other values, the expected datum or final state) are applied and
the case is checked against the toolset's schemas: an edit they reject
raises a SuiteError naming the field (``calls[3].arguments.id``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import SuiteError
from app.core.records import Trajectory
from app.core.score.alignment import group_retries
from app.core.suites.suite import parse_suite
from app.core.suites.tolerance import parse_rule
from app.core.suites.tools import Toolset

CURATED_TAG = "curated"


@dataclass(frozen=True)
class Step:
    """A proposed expected call. ``index`` is the trajectory call whose
    arguments it takes (the key of its edits); ``calls`` every attempt of it."""

    index: int
    name: str
    arguments: dict[str, Any] | None  # None: no attempt passed the schema, the step checks the name only
    tolerance: dict[str, Any]
    turn: int
    calls: tuple[int, ...]


@dataclass(frozen=True)
class LeftOut:
    """A call that is no step, and why."""

    index: int
    name: str
    reason: str


@dataclass(frozen=True)
class Draft:
    question: str
    turns: list[str]  # the user messages; one for a single-turn case
    steps: list[Step]
    left_out: list[LeftOut]
    mocks: dict[str, Any]


@dataclass(frozen=True)
class CallEdit:
    """A person's change to one step: drop it, a rule per argument
    (``"exact"`` removes one), or other values (``None`` removes the field)."""

    keep: bool = True
    tolerance: dict[str, Any] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Edits:
    case_id: str
    calls: dict[int, CallEdit] = field(default_factory=dict)
    expected_datum: list[str] | None = None
    expected_state: dict[str, Any] | None = None
    source: dict[str, Any] = field(default_factory=dict)


def _turn_starts(traj: Trajectory) -> tuple[list[str], list[int]]:
    """The user messages and, for each, the index of the first call that answers it."""
    users = [m for m in traj.messages or () if m.role == "user" and m.content.strip()]
    if len(users) < 2:
        return [traj.question or (users[0].content if users else "")], [0]
    return [m.content for m in users], [0, *(m.calls_before for m in users[1:])]


def draft(traj: Trajectory, toolset: Toolset) -> Draft:
    """The case that reproduces ``traj`` before any edit."""
    texts, starts = _turn_starts(traj)
    taking = [i for i, c in enumerate(traj.calls) if c.name not in toolset.transparent]
    left = [
        LeftOut(i, c.name, "only thinks: not aligned")
        for i, c in enumerate(traj.calls)
        if c.name in toolset.transparent
    ]

    def valid(i: int) -> bool:
        tool, args = toolset.get(traj.calls[i].name), traj.calls[i].arguments
        return tool is not None and isinstance(args, dict) and tool.validator.validate(args) is None

    def turn_of(i: int) -> int:
        return sum(1 for s in starts[1:] if s <= i)

    errored = [traj.calls[i].error is not None or not valid(i) for i in taking]
    # a retry joins its first attempt only within one user turn: scoring aligns each turn apart
    keys = [f"{turn_of(i)}\x00{traj.calls[i].name}" for i in taking]
    groups: dict[int, list[int]] = {}
    for i, g in zip(taking, group_retries(keys, errored), strict=True):
        groups.setdefault(g, []).append(i)
    steps: list[Step] = []
    for members in groups.values():
        name = traj.calls[members[0]].name
        if name not in toolset:
            left.extend(LeftOut(i, name, "not in the toolset") for i in members)
            continue
        ok = [i for i in members if valid(i)]
        turn = turn_of(members[0])
        if not ok:
            steps.append(Step(members[0], name, None, {}, turn, tuple(members)))
            continue
        args = dict(traj.calls[ok[-1]].arguments)
        steps.append(Step(ok[-1], name, args, _retry_rules(traj, ok, args), turn, tuple(members)))
    left.sort(key=lambda x: x.index)
    return Draft(question=texts[0], turns=texts, steps=steps, left_out=left, mocks=_mocks(traj, toolset))


def _retry_rules(traj: Trajectory, attempts: list[int], args: dict[str, Any]) -> dict[str, Any]:
    """``one_of`` for a field whose value differs between a step's valid attempts."""
    rules: dict[str, Any] = {}
    for key, want in args.items():
        seen: list[Any] = []
        for i in attempts:
            value = traj.calls[i].arguments.get(key, "")
            if value not in seen:
                seen.append(value)
        if len(seen) > 1 or seen != [want]:
            rules[key] = {"one_of": seen}
    return rules


def _mocks(traj: Trajectory, toolset: Toolset) -> dict[str, Any]:
    """Per tool, the observation of each distinct argument set (the first one
    seen), most specific first; an injected fault is left to the fault plan."""
    out: dict[str, list[dict[str, Any]]] = {}
    for c in traj.calls:
        if c.name not in toolset or not isinstance(c.arguments, dict) or (c.error is not None and c.error.injected):
            continue
        text = c.observation if c.observation is not None else (c.error.message if c.error else "")
        keyed = out.setdefault(c.name, [])
        if all(k["when"] != c.arguments for k in keyed):
            keyed.append({"when": dict(c.arguments), "response": text})
    return {name: {"responses": sorted(keyed, key=lambda k: -len(k["when"]))} for name, keyed in out.items()}


def case_document(traj: Trajectory, toolset: Toolset, edits: Edits, *, source: Toolset | None = None) -> dict[str, Any]:
    """The case, edits applied and checked against the ``toolset`` of the suite
    it goes to. ``source``: the toolset the trajectory ran with (default the
    same), which tells the calls to invented tools, left out, from the calls
    the suite's toolset lacks, refused unless dropped."""
    d = draft(traj, source or toolset)
    by_index = {s.index: s for s in d.steps}
    for i in edits.calls:
        if i not in by_index:
            raise SuiteError(f"call {i} is no step of this trajectory's case", field=f"calls[{i}]")
    per_turn: list[list[dict[str, Any]]] = [[] for _ in d.turns]
    for step in d.steps:
        edit = edits.calls.get(step.index, CallEdit())
        if edit.keep:
            per_turn[step.turn].append(_expected(step, edit, toolset))
    case: dict[str, Any] = {"id": edits.case_id}
    if len(d.turns) > 1:
        case["turns"] = [{"user": text, "expected_calls": calls} for text, calls in zip(d.turns, per_turn, strict=True)]
    else:
        case["question"] = d.question
        case["expected_calls"] = per_turn[0]
    if edits.expected_datum:
        case["expected_datum"] = edits.expected_datum if len(edits.expected_datum) > 1 else edits.expected_datum[0]
    if edits.expected_state is not None:
        case["expected_state"] = edits.expected_state
    if d.mocks:
        case["mocks"] = d.mocks
    case["tags"] = [CURATED_TAG]
    if edits.source:
        case["source"] = edits.source
    return case


def _expected(step: Step, edit: CallEdit, toolset: Toolset) -> dict[str, Any]:
    where = f"calls[{step.index}]"
    tool = toolset.get(step.name)
    if tool is None:
        raise SuiteError(f"no tool {step.name!r} in the suite's toolset", field=f"{where}.name")
    if step.arguments is None and not edit.arguments:
        if edit.tolerance:
            raise SuiteError(
                "no attempt passed the schema, the step checks the name only: give its arguments first",
                field=f"{where}.tolerance",
            )
        return {"name": step.name}
    args = dict(step.arguments or {})
    for key, value in edit.arguments.items():
        if value is None:
            args.pop(key, None)
        else:
            args[key] = value
    violation = tool.validator.validate(args)
    if violation is not None:
        path = f"{where}.arguments.{violation.field}" if violation.field else f"{where}.arguments"
        raise SuiteError(f"the schema of {step.name!r} rejects it: {violation.message}", field=path)
    known = set((tool.parameters.get("properties") or {}).keys()) | set(args)
    rules = dict(step.tolerance)
    for key, rule in edit.tolerance.items():
        if key not in known:
            raise SuiteError(f"no field {key!r} in the schema of {step.name!r}", field=f"{where}.tolerance.{key}")
        if rule == "exact":
            rules.pop(key, None)
            continue
        try:
            parse_rule(rule)
        except ValueError as exc:
            raise SuiteError(str(exc), field=f"{where}.tolerance.{key}") from None
        rules[key] = rule
    out: dict[str, Any] = {"name": step.name, "arguments": args}
    if rules:
        out["tolerance"] = rules
    return out


def add_cases(document: Mapping[str, Any], cases: list[dict[str, Any]], *, base: Path | None = None) -> dict[str, Any]:
    """A copy of the suite document with ``cases`` added, checked whole (a
    toolset given as a path is read from ``base``, the suite file's folder)."""
    have = {str(c.get("id")) for c in document.get("cases") or [] if isinstance(c, Mapping)}
    for case in cases:
        if case["id"] in have:
            raise SuiteError(f"the suite has a case {case['id']!r} already", field="case_id")
        have.add(case["id"])
    new = {**document, "cases": [*(document.get("cases") or []), *cases]}
    try:
        parse_suite(new, path="suite", base=base)
    except SuiteError as exc:
        raise SuiteError(exc.detail, field=exc.field or "case") from None
    return new
