"""``bfcl``: a Berkeley Function-Calling Leaderboard category as a suite.

The question file (JSON Lines: ``{id, question: [[{role, content}]],
function: [...]}``) gives the cases and their tools (BFCL's schema dialect,
``dict``/``float``/``tuple``/``any``, normalised to JSON Schema). The
possible-answer file beside it (``<name>.possible_answer.json``, or
``possible_answer/<name>.json``) gives the expected calls: each argument's
acceptable values become a ``one_of`` tolerance, ``""`` among them meaning the
argument may be left out. A nested possible answer (an object whose fields
list their own acceptable values, or a list of such objects) becomes a nested
``fields`` / ``items`` tolerance with a ``one_of`` at every depth. Parallel
categories match ``unordered``; the irrelevance categories expect no call.

The notes name each question whose possible answers cannot all be met (an
empty list of acceptable values: that argument is not checked) or break the
question's own schema (a required argument that "may be omitted", a value of
the wrong type). Multi-turn categories become conversations
(``bfcl_multi_turn.py``): calls compared, not BFCL's state.

BFCL reuses a tool name with different schemas across questions; a suite has
one toolset, so such questions go to further suites (``extra_suites``), each
with consistent tools. A BFCL file holds no runs: the record stream is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import SuiteError
from app.core.suites.schema import ArgumentValidator
from app.core.suites.tolerance import MAX_RULE_DEPTH
from app.core.suites.tools import ToolSpec
from app.importers.base import Conversion, Options, no_records
from app.importers.bfcl_exceptions import mark_exceptions
from app.importers.bfcl_files import _is_multi_turn, _lines, _question_text, answers_path
from app.importers.bfcl_multi_turn import convert_multi_turn

NAME = "bfcl"


_OMITTED = object()
Warn = Callable[[str], None]


def _nested(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, dict) for v in value))


def possible_values(values: list[Any], where: str, warn: Warn, depth: int = 0) -> tuple[Any, dict[str, Any] | None]:
    """One possible-answer list as (the first acceptable value, its tolerance
    rule or None for a plain exact value); the value is ``_OMITTED`` when the
    list names none, the rule None too when nothing can be checked."""
    if not values:
        warn(f"{where}: the possible answers are an empty list: no value is acceptable, the argument is not checked")
        return _OMITTED, None
    optional = "" in values
    given = [v for v in values if v != ""]
    if not given:
        return _OMITTED, {"rule": "one_of", "values": values}
    structured = [v for v in given if _nested(v)]
    if not structured:
        return given[0], ({"rule": "one_of", "values": values} if optional or len(given) > 1 else None)
    if len(given) > 1:
        warn(f"{where}: {len(given)} acceptable nested values: only the first is accepted")
    value, rule = _pattern(given[0], where, warn, depth + 1)
    if optional:
        rule["optional"] = True
    return value, rule


def _pattern(value: Any, where: str, warn: Warn, depth: int = 0) -> tuple[Any, dict[str, Any]]:
    """A nested possible answer: an object whose fields list their acceptable
    values (``fields``), or a list of such objects (``items``)."""
    if depth > MAX_RULE_DEPTH // 2:  # each level is a fields and a one_of
        raise SuiteError(f"{where}: a possible answer nested deeper than {MAX_RULE_DEPTH // 2} levels")
    if isinstance(value, dict):
        canonical: dict[str, Any] = {}
        fields: dict[str, Any] = {}
        for key, options in value.items():
            first, rule = possible_values(
                options if isinstance(options, list) else [options], f"{where}.{key}", warn, depth
            )
            if first is not _OMITTED:
                canonical[key] = first
            if rule is not None or first is not _OMITTED:
                fields[key] = rule or {"rule": "one_of", "values": [first]}
        return canonical, {"fields": fields}
    items: list[Any] = []
    rules: list[dict[str, Any]] = []
    for i, element in enumerate(value):
        if isinstance(element, dict):
            first, rule = _pattern(element, f"{where}[{i}]", warn, depth + 1)
        else:
            first, rule = element, {"rule": "one_of", "values": [element]}
        items.append(first)
        rules.append(rule)
    return items, {"items": rules}


def expected_call(entry: Mapping[str, Any], where: str = "", warn: Warn | None = None) -> dict[str, Any]:
    """``{func_name: {arg: [acceptable values]}}`` as an expected call."""
    ((name, params),) = entry.items()
    arguments: dict[str, Any] = {}
    tolerance: dict[str, Any] = {}
    for arg, options in (params or {}).items():
        values = options if isinstance(options, list) else [options]
        first, rule = possible_values(values, f"{where}{name}.{arg}", warn or (lambda _: None))
        if first is not _OMITTED:
            arguments[arg] = first
        if rule is not None:
            tolerance[arg] = rule
    call: dict[str, Any] = {"name": str(name), "arguments": arguments}
    if tolerance:
        call["tolerance"] = tolerance
    return call


def _schema_breaks(entry: Mapping[str, Any], call: dict[str, Any], spec: ToolSpec | None) -> dict[str, str]:
    """How the ground truth breaks its tool's schema, by argument: a required argument
    that the possible answers let be omitted, or an acceptable value that fails
    validation (the first such value of each argument)."""
    ((_, params),) = entry.items()
    params = params if isinstance(params, Mapping) else {}
    breaks: dict[str, str] = {}
    if spec is None:
        return breaks
    for arg in spec.parameters.get("required") or []:
        if arg in params and isinstance(params[arg], list) and "" in params[arg]:
            breaks[arg] = f"{arg!r} is required by the schema but its possible answers let it be omitted"
    validator = ArgumentValidator({k: v for k, v in spec.parameters.items() if k != "required"})
    for arg, options in params.items():
        for option in options if isinstance(options, list) else [options]:
            if option == "" or arg in breaks:
                continue
            value = _pattern(option, "", lambda _: None)[0] if _nested(option) else option
            violation = validator.validate({arg: value})
            if violation is not None:
                breaks[arg] = violation.message
    return breaks


def _is_irrelevance(qid: str) -> bool:
    return "irrelevance" in qid


def convert(path: Path, options: Options) -> Conversion:
    if options.tools is not None or options.domain is not None:
        raise SuiteError("bfcl files carry their own tools: --tools and --domain do not apply", path=str(path))
    from app.importers import bfcl_results  # a result file: runs, with BFCL's verdict

    if bfcl_results.is_result(next(_lines(path), (0, None))[1]):
        return bfcl_results.convert_results(path, options, convert)
    if options.questions is not None:
        raise SuiteError(
            "--questions goes with a BFCL result file ({id, result} lines); this is not one", path=str(path)
        )
    answers_file = answers_path(path)
    answers: dict[str, list[Any]] = {}
    if answers_file is not None:
        for number, a in _lines(answers_file):
            if (
                not isinstance(a, Mapping)
                or not isinstance(a.get("id"), str)
                or not isinstance(a.get("ground_truth"), list)
            ):
                raise SuiteError(f"line {number}: expected {{id, ground_truth: [...]}}", path=str(answers_file))
            answers[a["id"]] = a["ground_truth"]
    first = next(_lines(path), None)
    if first is not None and _is_multi_turn(first[1], path):
        suites, notes = convert_multi_turn(path, _lines(path), answers, _lines)
        return Conversion(suite=suites[0], records=no_records, extra_suites=suites[1:], notes=notes)
    layers: list[tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]] = []  # (tools by name, cases)
    warnings: list[str] = []
    for number, q in _lines(path):
        where = f"line {number}"
        if _is_multi_turn(q, path):
            raise SuiteError(f"{where}: a multi-turn question in a single-turn file", path=str(path))
        if not isinstance(q, Mapping) or not isinstance(q.get("id"), str) or not isinstance(q.get("function"), list):
            raise SuiteError(f"{where}: expected {{id, question, function: [...]}}", path=str(path))
        qid = q["id"]
        try:
            specs = {spec.name: spec for spec in (ToolSpec.from_dict(f) for f in q["function"])}
            tools = [spec.contract() for spec in specs.values()]
        except Exception as exc:  # any unreadable tool: name the line
            raise SuiteError(f"{where} ({qid}): cannot read a tool: {exc}", path=str(path)) from None
        if _is_irrelevance(qid):
            expected: list[dict[str, Any]] = []
        elif qid in answers:
            try:
                expected = [expected_call(e, f"{qid}: ", warnings.append) for e in answers[qid]]
                broken: list[str] = []
                for e, call in zip(answers[qid], expected, strict=True):
                    spec = specs.get(call["name"])
                    if spec is None:
                        broken.append(f"calls {call['name']!r}, a tool the question does not offer")
                        continue
                    breaks = _schema_breaks(e, call, spec)
                    mark_exceptions(call, breaks)
                    broken.extend(f"{call['name']}: {m}" for m in breaks.values())
                if broken:
                    warnings.append(
                        f"{qid}: the ground truth breaks the question's own schema (written as a marked "
                        f"exception): {'; '.join(broken)}"
                    )
            except (ValueError, AttributeError, TypeError):
                raise SuiteError(
                    f"{qid}: a ground_truth entry is not {{func_name: {{arg: [values]}}}}", path=str(answers_file)
                ) from None
        else:
            looked = f"{path.stem}.possible_answer{path.suffix}"
            raise SuiteError(f"{where}: no possible answer for {qid!r} (looked for {looked} beside it)", path=str(path))
        case = {
            "id": qid,
            "question": _question_text(q.get("question")) or qid,
            "expected_calls": expected,
            "match": "unordered" if "parallel" in qid else "strict",
            "tags": ["bfcl", qid.rsplit("_", 1)[0]],
        }
        _place(layers, tools, case)
    if not layers:
        raise SuiteError("no questions", path=str(path))
    suites = []
    for i, (tools_by_name, cases) in enumerate(layers):
        name = path.stem if i == 0 else f"{path.stem}-{i + 1}"
        suites.append({"name": name, "toolset": {"name": name, "tools": list(tools_by_name.values())}, "cases": cases})
    notes = []
    if len(suites) > 1:
        notes.append(
            f"BFCL reuses tool names with different schemas: {sum(len(s['cases']) for s in suites[1:])} "
            f"questions went to {len(suites) - 1} further suites"
        )
    notes.extend(warnings)
    return Conversion(suite=suites[0], records=no_records, extra_suites=suites[1:], notes=notes)


def _place(
    layers: list[tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]],
    tools: list[dict[str, Any]],
    case: dict[str, Any],
) -> None:
    """Put the case in the first suite whose tools agree with its own."""
    for by_name, cases in layers:
        if all(by_name.get(t["name"], t) == t for t in tools):
            for t in tools:
                by_name.setdefault(t["name"], t)
            cases.append(case)
            return
    layers.append(({t["name"]: t for t in tools}, [case]))
