"""Suite validation: every mistake in a suite named before anything runs.

``parse_suite`` stops at the first value it cannot read. This check goes on
over what the loader would take silently and charge to the agent: unknown
keys (with the nearest known one), expected, forbidden and ordered calls to
tools the toolset lacks, expected arguments the tool's own schema rejects,
mocks and fault rules of tools that do not exist, tolerance parameters no
rule reads. ``lint``, ``run``, ``score`` and the API call it; ``lenient``
(for imported suites) makes its findings warnings, except those the loader
refuses anyway (``fatal``).

The known keys come from the suite's dataclasses (a field added to ``Case``
or ``Suite`` is known at once) plus the spellings the loader also reads.
Keys starting with ``x-`` are free annotations.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from app.core.errors import SuiteError, ToolSpecError
from app.core.suites.mocks import MOCK_KEYS
from app.core.suites.schema import ArgumentValidator
from app.core.suites.suite import (
    SAFE_LOADER,
    Case,
    ExpectedCall,
    ForbiddenCall,
    Suite,
    Turn,
    UserSpec,
    parse_suite,
    parse_toolset,
    read_document,
    reading_once,
)
from app.core.suites.tolerance import parse_rule
from app.core.suites.tools import Toolset, ToolSpec


def _names(cls: Any, *, drop: Iterable[str] = (), add: Iterable[str] = ()) -> frozenset[str]:
    return frozenset({f.name for f in fields(cls)} - set(drop) | set(add))


SUITE_KEYS = _names(Suite, drop=("path",))
TOOLSET_KEYS = _names(Toolset, add=("version", "source", "description"))
# ToolLens's tool, OpenAI's wrapper, Anthropic's and MCP's spellings of the same fields
TOOL_KEYS = _names(
    ToolSpec,
    drop=("responder",),
    add=("type", "function", "input_schema", "inputSchema", "outputSchema", "_meta", "icons", "execution"),
)
FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})
# ``source``: where a curated case came from (``notes``, texts for people, is a Case field)
CASE_KEYS = _names(Case, add=("source",))
TURN_KEYS = _names(Turn)
USER_KEYS = _names(UserSpec)
EXPECTED_KEYS = _names(ExpectedCall)
FORBIDDEN_KEYS = _names(ForbiddenCall)
KEYED_RESPONSE_KEYS = frozenset({"when", "arguments", "response"})
EFFECT_KEYS = frozenset({"append", "set", "increment"})
RULE_PARAMS = {
    "number": {"abs", "rel"},
    "one_of": {"values", "value", "normalize"},
    "regex": {"pattern", "value"},
    "contains": {"value"},
    "date": {"dayfirst"},
    "exact": set(),
    "ignore": set(),
    "set": set(),
}

Segment = str | int


@dataclass(frozen=True)
class Problem:
    """One mistake: where (file, line, case, field) and what."""

    message: str
    file: str = ""
    case_id: str = ""
    field: str = ""
    line: int | None = None
    fatal: bool = False  # the loader refuses it even when lenient

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file and self.line else self.file
        parts = [p for p in (where, f"case {self.case_id!r}" if self.case_id else "", self.field) if p]
        return ": ".join([*parts, self.message])

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "case_id": self.case_id or None,
            "field": self.field,
            "message": self.message,
        }


class SuiteProblems(SuiteError):
    """A suite with mistakes: every one of them, in the order of the file."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        files = sorted({p.file for p in problems if p.file})
        noun = "mistake" if len(problems) == 1 else "mistakes"
        self.headline = f"{len(problems)} {noun} in {', '.join(files) or 'the suite'}"
        super().__init__("\n".join([*(str(p) for p in problems), self.headline]))


def _list(raw: Any) -> list[Any]:
    return raw if isinstance(raw, list) else []


def _map(raw: Any) -> Mapping[Any, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _render(segments: Iterable[Segment]) -> str:
    out = ""
    for s in segments:
        out += f"[{s}]" if isinstance(s, int) else (f".{s}" if out else s)
    return out


def _nearest(word: str, known: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
    if not found:  # "expectedcalls" is "expected_calls" without its underscore
        squashed = {k.replace("_", "").casefold(): k for k in known}
        return squashed.get(word.replace("_", "").replace("-", "").casefold())
    return found[0]


@dataclass
class _Found:
    file: str
    segments: tuple[Segment, ...]
    case_id: str
    case_at: int  # how many leading segments locate the case (its field is rendered from there)
    message: str
    fatal: bool = False


class _Checker:
    """Walks a decoded suite document, collecting what it finds."""

    def __init__(self, toolset: Toolset, file: str, toolset_file: str, toolset_at: tuple[Segment, ...]):
        self.toolset = toolset
        self.file = file
        self.toolset_file = toolset_file
        self.toolset_at = toolset_at  # where the toolset document sits in its file
        self.found: list[_Found] = []
        self._validators: dict[str, Any] = {}
        self.case_id = ""
        self.case_at = 0

    def add(self, segments: tuple[Segment, ...], message: str, *, fatal: bool = False, file: str = "") -> None:
        self.found.append(_Found(file or self.file, segments, self.case_id, self.case_at, message, fatal))

    def keys(self, raw: Any, known: frozenset[str], at: tuple[Segment, ...], file: str = "") -> None:
        if not isinstance(raw, Mapping):
            return
        for key in raw:
            name = str(key)
            if name in known or name.startswith("x-"):
                continue
            near = _nearest(name, known)
            hint = f", did you mean {near}?" if near else f" (known: {', '.join(sorted(known))})"
            self.add((*at, name), f"unknown key{hint}", file=file)

    def tool_name(self, name: Any, at: tuple[Segment, ...], what: str, *, fatal: bool = False, file: str = "") -> None:
        if not isinstance(name, str) or name in self.toolset:
            return
        near = _nearest(name, [t.name for t in self.toolset])
        hint = f", did you mean {near}?" if near else ""
        self.add(at, f"{what}{': ' if what else ''}no tool {name!r} in the toolset{hint}", fatal=fatal, file=file)

    # -- the toolset -----------------------------------------------------------

    def toolset_document(self, raw: Any) -> None:
        at, file = self.toolset_at, self.toolset_file
        tools = raw
        if isinstance(raw, Mapping):
            self.keys(raw, TOOLSET_KEYS, at, file)
            tools = raw.get("tools")
            for i, name in enumerate(raw.get("handoff") or []):
                self.tool_name(name, (*at, "handoff", i), "hand-off tool", file=file)
            self.pairs(raw.get("dependencies"), (*at, "dependencies"), file)
            at = (*at, "tools")
        for i, tool in enumerate(_list(tools)):
            if not isinstance(tool, Mapping) or "inputSchema" in tool:  # MCP's tools/list: the server's own keys
                continue
            self.keys(tool, TOOL_KEYS, (*at, i), file)
            if isinstance(tool.get("function"), Mapping):
                self.keys(tool["function"], FUNCTION_KEYS, (*at, i, "function"), file)
            if "mock" in tool:
                self.mock(tool["mock"], (*at, i, "mock"), file)

    def pairs(self, raw: Any, at: tuple[Segment, ...], file: str = "") -> None:
        for i, pair in enumerate(_list(raw)):
            names = [pair.get("before"), pair.get("after")] if isinstance(pair, Mapping) else pair
            if isinstance(names, list):
                for j, name in enumerate(names[:2]):
                    self.tool_name(name, (*at, i, j), "order pair", file=file)

    def mock(self, raw: Any, at: tuple[Segment, ...], file: str = "") -> None:
        """A structured mock's keys; a mapping that is a fixed response is free,
        unless its keys read like the structured form's misspelt."""
        if not isinstance(raw, Mapping) or not raw:
            return
        keys = {str(k) for k in raw}
        if keys <= MOCK_KEYS and keys & {"response", "responses"}:
            for i, item in enumerate(raw.get("responses") or []):
                self.keys(item, KEYED_RESPONSE_KEYS, (*at, "responses", i), file)
            self.keys(raw.get("effect"), EFFECT_KEYS, (*at, "effect"), file)
            return
        for key in sorted(keys - MOCK_KEYS):
            near = difflib.get_close_matches(key, sorted(MOCK_KEYS), n=1, cutoff=0.8)
            if near:
                self.add(
                    (*at, key),
                    f"did you mean {near[0]}? As written, the whole mapping is the tool's fixed response",
                    file=file,
                )

    # -- the cases -------------------------------------------------------------

    def case(self, raw: Any, index: int, seen: set[str]) -> None:
        at: tuple[Segment, ...] = ("cases", index)
        if not isinstance(raw, Mapping):
            return
        cid = raw.get("id")
        self.case_id, self.case_at = (str(cid) if isinstance(cid, (str, int)) else ""), 2
        if self.case_id in seen:
            self.add((*at, "id"), "duplicate case id", fatal=True)
        seen.add(self.case_id)
        self.keys(raw, CASE_KEYS, at)
        self.calls(raw.get("expected_calls"), (*at, "expected_calls"))
        self.forbidden(raw.get("forbidden_calls"), (*at, "forbidden_calls"))
        self.pairs(raw.get("dependencies"), (*at, "dependencies"))
        for i, turn in enumerate(_list(raw.get("turns"))):
            self.keys(turn, TURN_KEYS, (*at, "turns", i))
            if isinstance(turn, Mapping):
                self.calls(turn.get("expected_calls"), (*at, "turns", i, "expected_calls"))
                self.forbidden(turn.get("forbidden_calls"), (*at, "turns", i, "forbidden_calls"))
        self.keys(raw.get("user"), USER_KEYS, (*at, "user"))
        mocks = raw.get("mocks")
        for name, mock in mocks.items() if isinstance(mocks, Mapping) else []:
            self.tool_name(name, (*at, "mocks", str(name)), "mock", fatal=True)
            self.mock(mock, (*at, "mocks", str(name)))
        self.case_id, self.case_at = "", 0

    def forbidden(self, raw: Any, at: tuple[Segment, ...]) -> None:
        for i, item in enumerate(_list(raw)):
            self.keys(item, FORBIDDEN_KEYS, (*at, i))
            self.tool_name(item.get("name") if isinstance(item, Mapping) else item, (*at, i), "forbidden call")

    def calls(self, raw: Any, at: tuple[Segment, ...]) -> None:
        for i, item in enumerate(_list(raw)):
            if isinstance(item, str):
                self.tool_name(item, (*at, i), "expected call")
                continue
            if not isinstance(item, Mapping):
                continue
            self.keys(item, EXPECTED_KEYS, (*at, i))
            name = item.get("name")
            self.tool_name(name, (*at, i, "name"), "expected call")
            tolerance = _map(item.get("tolerance"))
            for field_name, rule in tolerance.items():
                self.rule_params(rule, (*at, i, "tolerance", str(field_name)))
            tool = self.toolset.get(name) if isinstance(name, str) else None
            if tool is not None and isinstance(item.get("arguments"), Mapping):
                marked = _map(item.get("schema_exceptions"))  # values that break the schema on purpose, said why
                args = {k: v for k, v in item["arguments"].items() if k not in marked}
                self.arguments(tool, args, tolerance, (*at, i, "arguments"))

    def rule_params(self, raw: Any, at: tuple[Segment, ...]) -> None:
        if isinstance(raw, Mapping) and "rule" in raw and str(raw["rule"]) in RULE_PARAMS:
            self.keys(raw, frozenset(RULE_PARAMS[str(raw["rule"])] | {"rule"}), at)
        elif isinstance(raw, Mapping) and len(raw) == 1:
            kind, params = next(iter(raw.items()))
            if str(kind) in RULE_PARAMS and isinstance(params, Mapping):
                self.keys(params, frozenset(RULE_PARAMS[str(kind)]), (*at, str(kind)))

    def arguments(
        self, tool: ToolSpec, args: Mapping[str, Any], tolerance: Mapping[str, Any], at: tuple[Segment, ...]
    ) -> None:
        """Each expected value that the ``exact`` or ``set`` rule compares must
        be one the tool's schema accepts, up to what those rules forgive
        (surrounding blanks, letter case, ``3.0`` for ``3``); a field another
        rule checks (``one_of``, ``regex``, ``date``, ``number``...) may
        legitimately hold a value the schema would not."""
        schema = tool.parameters
        props = _map(schema.get("properties"))
        validator = self._validator(tool)
        for name, value in args.items():
            try:
                kind = parse_rule(tolerance[name]).kind if name in tolerance else "exact"
            except ValueError:
                continue  # the loader names it
            if kind not in ("exact", "set"):
                continue
            where = (*at, str(name))
            if props and name not in props and schema.get("additionalProperties") is not False:
                near = _nearest(str(name), [str(p) for p in props])
                hint = f", did you mean {near}?" if near else ""
                self.add(where, f"{tool.name} has no parameter {name!r}{hint}")
                continue
            violation = validator.validate({name: _forgiven(value)}) if validator else None
            if violation is not None and not _case_of_enum(value, props.get(name)):
                self.add(where, f"{tool.name}'s schema rejects it: {violation.message}")

    def _validator(self, tool: ToolSpec) -> Any:
        """The tool's validator without its top-level ``required`` (an expected
        call may leave out what it does not check)."""
        if tool.name not in self._validators:
            schema = {k: v for k, v in tool.parameters.items() if k != "required"}
            try:
                self._validators[tool.name] = ArgumentValidator(schema)
            except ToolSpecError:  # the loader compiled the schema whole: nothing more to say
                self._validators[tool.name] = None
        return self._validators[tool.name]


def _forgiven(value: Any) -> Any:
    """The value as the ``exact`` rule reads it: strings trimmed, integral floats whole."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_forgiven(v) for v in value]
    if isinstance(value, dict):
        return {k: _forgiven(v) for k, v in value.items()}
    return value


def _case_of_enum(value: Any, prop: Any) -> bool:
    """A string the ``exact`` rule matches to one of the schema's enum values (letter case aside)."""
    enum = prop.get("enum") if isinstance(prop, Mapping) else None
    return (
        isinstance(value, str)
        and isinstance(enum, list)
        and any(isinstance(e, str) and e.casefold() == value.strip().casefold() for e in enum)
    )


# -- entry points --------------------------------------------------------------


def check_document(
    raw: Any, *, path: str = "suite", base: Path | None = None, fault_tools: Iterable[str] = ()
) -> list[Problem]:
    """Every mistake in a decoded suite document (``base``: the suite file's
    folder, where a toolset path is read from), the first one the loader
    refuses included; ``fault_tools``: the tools a fault plan names. A
    toolset that cannot be read at all raises its SuiteError."""
    return _check(raw, path, base, fault_tools)[1]


def _check(raw: Any, path: str, base: Path | None, fault_tools: Iterable[str]) -> tuple[Suite | None, list[Problem]]:
    """The suite as the loader reads it (None when it refuses it) and every problem."""
    with reading_once():
        return _check_once(raw, path, base, fault_tools)


def _check_once(
    raw: Any, path: str, base: Path | None, fault_tools: Iterable[str]
) -> tuple[Suite | None, list[Problem]]:
    suite: Suite | None = None
    structural: SuiteError | None = None
    try:
        suite = parse_suite(raw, path=path, base=base)
    except SuiteError as exc:
        structural = exc
    if not isinstance(raw, Mapping) or "toolset" not in raw:
        return suite, [_from_error(structural, path)] if structural else []
    toolset_raw, toolset_file = raw["toolset"], path
    toolset_at: tuple[Segment, ...] = ("toolset",)
    if isinstance(toolset_raw, str) and base is not None:
        toolset_file = str(base / toolset_raw)
        toolset_raw, toolset_at = read_document(Path(toolset_file)), ()
    toolset = suite.toolset if suite is not None else parse_toolset(raw["toolset"], path, base)
    checker = _Checker(toolset, path, toolset_file, toolset_at)
    checker.keys(raw, SUITE_KEYS, ())
    checker.toolset_document(toolset_raw)
    checker.pairs(raw.get("dependencies"), ("dependencies",))
    seen: set[str] = set()
    for i, case in enumerate(_list(raw.get("cases"))):
        checker.case(case, i, seen)
    for name in fault_tools:
        checker.tool_name(name, (f"tool:{name}",), "", file="--faults")
    if structural is not None and not any(
        f.fatal and f.case_id == structural.case_id and structural.detail in f.message for f in checker.found
    ):
        checker.found.append(_found_from_error(structural, raw, path))
    return suite, _located(checker.found)


def _from_error(exc: SuiteError, path: str) -> Problem:
    return Problem(exc.detail, file=exc.path or path, case_id=exc.case_id, field=exc.field, fatal=True)


def _found_from_error(exc: SuiteError, raw: Mapping[str, Any], path: str) -> _Found:
    """The loader's own error, located like the others (its field read back into a path)."""
    at: tuple[Segment, ...] = ()
    if exc.case_id:
        ids = [str(c.get("id")) if isinstance(c, Mapping) else None for c in _list(raw.get("cases"))]
        at = ("cases", ids.index(exc.case_id)) if exc.case_id in ids else ()
    segments = tuple(int(s) if s.isdigit() else s for s in re.findall(r"[^.\[\]]+", exc.field.split(" ")[0]))
    return _Found(
        path if exc.path in ("", path) else exc.path, (*at, *segments), exc.case_id, len(at), exc.detail, fatal=True
    )


def _located(found: list[_Found]) -> list[Problem]:
    """Problems with their lines (for a file that parses as YAML: JSON does too), in the order of each file."""
    trees: dict[str, Any] = {}
    out = []
    for f in found:
        if f.file not in trees:
            trees[f.file] = _compose(f.file)
        out.append(
            Problem(
                f.message,
                file=f.file,
                case_id=f.case_id,
                field=_render(f.segments[f.case_at :]),
                line=_line(trees[f.file], f.segments),
                fatal=f.fatal,
            )
        )
    rank = {file: i for i, file in enumerate(trees)}
    return sorted(out, key=lambda p: (rank[p.file], p.line or 0))


def _compose(file: str) -> Any:
    p = Path(file)
    try:
        return yaml.compose(p.read_text(encoding="utf-8"), Loader=SAFE_LOADER) if p.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None


def _line(node: Any, segments: tuple[Segment, ...]) -> int | None:
    """The 1-based line of the deepest node the path reaches (a key's own line for a mapping key)."""
    line = None if node is None else node.start_mark.line + 1
    for s in segments:
        if isinstance(node, yaml.MappingNode) and isinstance(s, str):
            hit = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == s), None)
            if hit is None:
                break
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(s, int) and s < len(node.value):
            node = node.value[s]
            line = node.start_mark.line + 1
        else:
            break
    return line


def raise_or_warn(problems: list[Problem], *, lenient: bool) -> list[Problem]:
    """Raise SuiteProblems for the errors (every problem, or only the fatal
    ones when lenient); return what is left as warnings."""
    errors = [p for p in problems if p.fatal or not lenient]
    if errors:
        raise SuiteProblems(errors)
    return problems


def validate_suite_file(
    path: str | Path, *, lenient: bool = False, fault_tools: Iterable[str] = ()
) -> tuple[Suite, list[Problem]]:
    """Load a suite file once every mistake is ruled out (``SuiteProblems``
    lists them all); with ``lenient`` only what the loader refuses is an
    error, the rest comes back as warnings."""
    p = Path(path)
    suite, problems = _check(read_document(p), str(p), p.parent, fault_tools)
    warnings = raise_or_warn(problems, lenient=lenient)
    assert suite is not None  # what the loader refuses is an error, lenient or not
    return suite, warnings


def validate_suite_document(document: Any, *, lenient: bool = False) -> list[Problem]:
    """The same for a self-contained document (the API's inline suite)."""
    return raise_or_warn(check_document(document), lenient=lenient)


def validate_lint_target(path: str | Path, *, lenient: bool = False) -> list[Problem]:
    """A suite file is checked whole; a toolset file, its tools' keys and mocks."""
    p = Path(path)
    document = read_document(p)
    if isinstance(document, Mapping) and "cases" in document:
        return validate_suite_file(p, lenient=lenient)[1]
    toolset = parse_toolset(document, str(p), p.parent)
    checker = _Checker(toolset, str(p), str(p), ())
    checker.toolset_document(document)
    return raise_or_warn(_located(checker.found), lenient=lenient)
