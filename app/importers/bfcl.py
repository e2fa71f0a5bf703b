"""``bfcl``: a Berkeley Function-Calling Leaderboard category as a suite.

The question file (JSON Lines: ``{id, question: [[{role, content}]],
function: [...]}``) gives the cases and their tools (BFCL's schema dialect,
``dict``/``float``/``tuple``/``any``, normalised to JSON Schema). The
possible-answer file beside it (``<name>.possible_answer.json``, or
``possible_answer/<name>.json``) gives the expected calls: each argument's
acceptable values become a ``one_of`` tolerance, ``""`` among them meaning the
argument may be left out. Parallel categories match ``unordered``; the
irrelevance categories expect no call at all.

BFCL reuses a tool name with different schemas across questions; a suite has
one toolset, so such questions go to further suites (``extra_suites``), each
with consistent tools. A BFCL file holds no runs: the record stream is empty.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import SuiteError
from app.core.records import loads
from app.core.tools import ToolSpec
from app.importers.base import Conversion, Options, no_records

NAME = "bfcl"


def answers_path(path: Path) -> Path | None:
    """The possible-answer file that goes with a question file, if any."""
    for candidate in (path.with_name(f"{path.stem}.possible_answer{path.suffix}"),
                      path.parent / "possible_answer" / path.name,
                      path.parent.parent / "possible_answer" / path.name):
        if candidate.is_file() and candidate != path:
            return candidate
    return None


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, loads(line)
                except ValueError as exc:
                    hint = " (truncated?)" if not line.endswith(b"\n") else ""
                    raise SuiteError(f"line {number}: not valid JSON{hint} ({exc})", path=str(path)) from None
    except FileNotFoundError:
        raise SuiteError("file not found", path=str(path)) from None


def _question_text(question: Any) -> str:
    turns = question if isinstance(question, list) else [question]
    texts: list[str] = []
    for turn in turns:
        for m in turn if isinstance(turn, list) else [turn]:
            if isinstance(m, Mapping) and m.get("role") == "user" and isinstance(m.get("content"), str):
                texts.append(m["content"])
            elif isinstance(m, str):
                texts.append(m)
    return "\n".join(texts)


def expected_call(entry: Mapping[str, Any]) -> dict[str, Any]:
    """``{func_name: {arg: [acceptable values]}}`` as an expected call."""
    (name, params), = entry.items()
    arguments: dict[str, Any] = {}
    tolerance: dict[str, Any] = {}
    for arg, options in (params or {}).items():
        values = options if isinstance(options, list) else [options]
        given = [v for v in values if v != ""]
        if given:
            arguments[arg] = given[0]
        if len(given) != 1 or len(values) != len(given):
            tolerance[arg] = {"rule": "one_of", "values": values}
    call: dict[str, Any] = {"name": str(name), "arguments": arguments}
    if tolerance:
        call["tolerance"] = tolerance
    return call


def _is_irrelevance(qid: str) -> bool:
    return "irrelevance" in qid


def convert(path: Path, options: Options) -> Conversion:
    if options.tools is not None or options.domain is not None:
        raise SuiteError("bfcl files carry their own tools: --tools and --domain do not apply", path=str(path))
    answers_file = answers_path(path)
    answers: dict[str, list[Any]] = {}
    if answers_file is not None:
        for number, a in _lines(answers_file):
            if not isinstance(a, Mapping) or not isinstance(a.get("id"), str) or not isinstance(
                    a.get("ground_truth"), list):
                raise SuiteError(f"line {number}: expected {{id, ground_truth: [...]}}", path=str(answers_file))
            answers[a["id"]] = a["ground_truth"]
    layers: list[tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]] = []  # (tools by name, cases)
    for number, q in _lines(path):
        where = f"line {number}"
        if not isinstance(q, Mapping) or not isinstance(q.get("id"), str) or not isinstance(q.get("function"), list):
            raise SuiteError(f"{where}: expected {{id, question, function: [...]}}", path=str(path))
        qid = q["id"]
        try:
            tools = [ToolSpec.from_dict(f).contract() for f in q["function"]]
        except Exception as exc:  # any unreadable tool: name the line
            raise SuiteError(f"{where} ({qid}): cannot read a tool: {exc}", path=str(path)) from None
        if _is_irrelevance(qid):
            expected: list[dict[str, Any]] = []
        elif qid in answers:
            try:
                expected = [expected_call(e) for e in answers[qid]]
            except (ValueError, AttributeError, TypeError):
                raise SuiteError(f"{qid}: a ground_truth entry is not {{func_name: {{arg: [values]}}}}",
                                 path=str(answers_file)) from None
        else:
            looked = f"{path.stem}.possible_answer{path.suffix}"
            raise SuiteError(f"{where}: no possible answer for {qid!r} (looked for {looked} beside it)",
                             path=str(path))
        case = {"id": qid, "question": _question_text(q.get("question")) or qid, "expected_calls": expected,
                "match": "unordered" if "parallel" in qid else "strict", "tags": ["bfcl", qid.rsplit("_", 1)[0]]}
        _place(layers, tools, case)
    if not layers:
        raise SuiteError("no questions", path=str(path))
    suites = []
    for i, (tools_by_name, cases) in enumerate(layers):
        name = path.stem if i == 0 else f"{path.stem}-{i + 1}"
        suites.append({"name": name, "toolset": {"name": name, "tools": list(tools_by_name.values())},
                       "cases": cases})
    notes = []
    if len(suites) > 1:
        notes.append(f"BFCL reuses tool names with different schemas: {sum(len(s['cases']) for s in suites[1:])} "
                     f"questions went to {len(suites) - 1} further suites")
    return Conversion(suite=suites[0], records=no_records, extra_suites=suites[1:], notes=notes)


def _place(layers: list[tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]], tools: list[dict[str, Any]],
           case: dict[str, Any]) -> None:
    """Put the case in the first suite whose tools agree with its own."""
    for by_name, cases in layers:
        if all(by_name.get(t["name"], t) == t for t in tools):
            for t in tools:
                by_name.setdefault(t["name"], t)
            cases.append(case)
            return
    layers.append(({t["name"]: t for t in tools}, [case]))
