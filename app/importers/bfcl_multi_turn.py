"""BFCL's multi-turn categories as conversations (scripted turns).

A question (``{id, question: [[messages of turn 1], …], involved_classes,
initial_config, excluded_function?, missed_function?}``) becomes one case with
one turn per user turn; its ground truth (one list of Python-call strings per
turn, ``"mv(source='a.pdf', destination='temp')"``) becomes each turn's
expected calls, in order. The strings are parsed with ``ast`` and their
argument values read with ``ast.literal_eval``: nothing is executed; a
positional argument takes the name of the schema's property at its position.
A turn whose ground truth is empty expects no call (BFCL's way of saying the
request cannot be served with these tools).

The toolset is the involved classes' functions (``multi_turn_func_doc/``,
beside the file or one folder up) minus ``excluded_function``; questions with
the same toolset share a suite. A ``missed_function`` is offered from the
first turn (a suite's toolset does not change mid-conversation): a note says
so. A turn with no user message (where BFCL hands the held-back function
over) keeps a placeholder text. BFCL checks these categories by executing the
calls against its own Python classes and comparing their state; ToolLens
does not ship those classes and compares the calls only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core.errors import SuiteError
from app.core.suites.tools import ToolSpec
from app.importers.bfcl_exceptions import mark_exceptions

# BFCL's class -> function-doc file (bfcl_eval's MULTI_TURN_FUNC_DOC_FILE_MAPPING)
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
    "WebSearchAPI": "web_search.json",
    "MemoryAPI_kv": "memory_kv.json",
    "MemoryAPI_vector": "memory_vector.json",
    "MemoryAPI_rec_sum": "memory_rec_sum.json",
}
NO_MESSAGE = "(no new user message: BFCL makes the held-back function available here)"
MAX_CALL_TEXT = 10_000  # characters of one ground-truth call string


def func_doc_dir(path: Path) -> Path:
    for candidate in (path.parent / "multi_turn_func_doc", path.parent.parent / "multi_turn_func_doc"):
        if candidate.is_dir():
            return candidate
    raise SuiteError(
        "multi-turn BFCL needs its tools: no multi_turn_func_doc/ folder beside the file or one folder up",
        path=str(path),
    )


class FuncDocs:
    """The functions of each API class, read on first use."""

    def __init__(self, folder: Path, lines: Any):
        self.folder = folder
        self._lines = lines
        self._by_class: dict[str, list[dict[str, Any]]] = {}

    def functions(self, cls: str) -> list[dict[str, Any]]:
        found = self._by_class.get(cls)
        if found is None:
            name = FUNC_DOC_FILES.get(cls)
            if name is None:
                raise SuiteError(
                    f"unknown BFCL API class {cls!r} (known: {', '.join(FUNC_DOC_FILES)})", path=str(self.folder)
                )
            found = self._by_class[cls] = [f for _, f in self._lines(self.folder / name)]
        return found


def parse_call(text: str, properties: Mapping[str, list[str]], where: str) -> dict[str, Any]:
    """One ground-truth string as an expected call ``{name, arguments}``;
    ``properties`` gives each tool's argument names in order (for positional ones)."""
    if len(text) > MAX_CALL_TEXT:
        raise SuiteError(f"{where}: a ground-truth call longer than {MAX_CALL_TEXT} characters")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        raise SuiteError(f"{where}: not a Python call: {text[:200]!r}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise SuiteError(f"{where}: not a call of a function by name: {text[:200]!r}")
    name = node.func.id
    names = properties.get(name, [])
    arguments: dict[str, Any] = {}
    try:
        for i, arg in enumerate(node.args):
            if i >= len(names):
                raise SuiteError(f"{where}: {name} takes {len(names)} arguments by position, the call gives more")
            arguments[names[i]] = ast.literal_eval(arg)
        for kw in node.keywords:
            if kw.arg is None:
                raise SuiteError(f"{where}: {name}: **kwargs are not read")
            arguments[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise SuiteError(f"{where}: {name}: an argument that is not a literal value: {text[:200]!r}") from None
    return {"name": name, "arguments": arguments}


def _user_text(turn: Any) -> str:
    messages = turn if isinstance(turn, list) else [turn]
    texts = [
        m["content"]
        for m in messages
        if isinstance(m, Mapping) and m.get("role") == "user" and isinstance(m.get("content"), str)
    ]
    return "\n".join(texts)


def convert_multi_turn(
    path: Path, questions: Iterator[tuple[int, Any]], answers: dict[str, list[Any]], lines: Any
) -> tuple[list[dict[str, Any]], list[str]]:
    """The suites (one per distinct toolset) and the notes of a multi-turn file."""
    docs = FuncDocs(func_doc_dir(path), lines)
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    checks: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[dict[str, list[str]], dict[str, Any]]] = {}
    notes: list[str] = []
    missed = 0
    for number, q in questions:
        where = f"line {number}"
        if not isinstance(q, Mapping) or not isinstance(q.get("id"), str) or not isinstance(q.get("question"), list):
            raise SuiteError(f"{where}: expected {{id, question: [[...], ...], involved_classes}}", path=str(path))
        qid = q["id"]
        classes = q.get("involved_classes")
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise SuiteError(f"{where} ({qid}): involved_classes must be a list of class names", path=str(path))
        excluded = q.get("excluded_function") or []
        key = (tuple(sorted(classes)), tuple(sorted(str(e) for e in excluded)))
        if key not in groups:
            tools = _toolset(docs, key, path)
            groups[key] = (tools, [])
            checks[key] = (
                {t["name"]: list((t.get("parameters") or {}).get("properties") or {}) for t in tools},
                {t["name"]: ToolSpec.from_dict(t).validator for t in tools},
            )
        cases = groups[key][1]
        properties, validators = checks[key]
        truth = answers.get(qid)
        if truth is None:
            raise SuiteError(f"{where}: no possible answer for {qid!r}", path=str(path))
        if len(truth) != len(q["question"]):
            raise SuiteError(
                f"{qid}: {len(q['question'])} user turns but {len(truth)} ground-truth turns", path=str(path)
            )
        turns = []
        for t, (message, calls) in enumerate(zip(q["question"], truth, strict=True), start=1):
            if not isinstance(calls, list):
                raise SuiteError(f"{qid}: turn {t}: the ground truth is a list of call strings", path=str(path))
            if not all(isinstance(text, str) for text in calls):
                raise SuiteError(f"{qid}: turn {t}: the ground truth is a list of call strings", path=str(path))
            expected = [parse_call(text, properties, f"{qid}: turn {t} call {j + 1}") for j, text in enumerate(calls)]
            for call in expected:
                if call["name"] not in validators:
                    notes.append(
                        f"{qid}: turn {t}: the ground truth calls {call['name']!r}, a tool of no involved class"
                    )
                    continue
                breaks = _breaks(call, validators[call["name"]])
                mark_exceptions(call, breaks, multi_turn=True)
                notes.extend(
                    f"{qid}: turn {t}: the ground truth breaks its tool's own schema (written as a marked "
                    f"exception): {call['name']}: {m}"
                    for m in breaks.values()
                )
            turns.append({"user": _user_text(message) or NO_MESSAGE, "expected_calls": expected})
        if q.get("missed_function"):
            missed += 1
        cases.append({"id": qid, "turns": turns, "tags": ["bfcl", qid.rsplit("_", 1)[0]]})
    if not groups:
        raise SuiteError("no questions", path=str(path))
    suites = []
    for i, ((classes, excluded), (tools, cases)) in enumerate(groups.items()):
        name = path.stem if i == 0 else f"{path.stem}-{i + 1}"
        label = "+".join(classes) + (f" without {', '.join(excluded)}" if excluded else "")
        suites.append({"name": name, "toolset": {"name": name, "label": label[:100], "tools": tools}, "cases": cases})
    notes.append(
        "multi-turn BFCL: calls are compared, not state (BFCL's state check runs its own Python "
        f"classes, which ToolLens does not ship); {len(suites)} suites, one per set of involved classes"
    )
    if missed:
        notes.append(
            f"{missed} questions hold a function back until a later turn (missed_function): "
            "ToolLens offers it from the first turn"
        )
    return suites, notes


def _breaks(call: dict[str, Any], validator: Any) -> dict[str, str]:
    """The values of an expected call that its tool's schema refuses, by argument."""
    breaks: dict[str, str] = {}
    args = dict(call["arguments"])
    for _ in range(len(args)):
        violation = validator.validate(args)
        if violation is None:
            break
        arg = str(violation.field).split("[", 1)[0].split(".", 1)[0]
        if arg not in args:
            break
        breaks[arg] = violation.message
        del args[arg]
    return breaks


def _toolset(docs: FuncDocs, key: tuple[tuple[str, ...], tuple[str, ...]], path: Path) -> list[dict[str, Any]]:
    """The involved classes' functions, BFCL's schema dialect read as JSON Schema."""
    classes, excluded = key
    tools: dict[str, dict[str, Any]] = {}
    for cls in classes:
        for f in docs.functions(cls):
            try:
                spec = ToolSpec.from_dict(f)
            except Exception as exc:  # any unreadable tool: name it
                raise SuiteError(f"{cls}: cannot read a tool: {exc}", path=str(path)) from None
            if spec.name not in excluded:
                tools.setdefault(spec.name, spec.contract())
    return list(tools.values())
