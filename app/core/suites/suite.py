"""The suite format (docs/formats.md), read from YAML or JSON.

A bad suite fails with a SuiteError naming the file, the case id and the
field at fault, never with a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.core.errors import SuiteError, ToolSpecError
from app.core.suites.mocks import MockSpec, parse_mock
from app.core.suites.tolerance import Rule, parse_rule
from app.core.suites.tools import Toolset

MATCH_MODES = ("strict", "unordered", "subset", "superset")
MAX_SUITE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ExpectedCall:
    """A step of the reference. ``schema_exceptions`` marks arguments whose expected value
    breaks the tool's own schema on purpose (a benchmark's ground truth, e.g. BFCL's), each
    with the reason: the suite check accepts them; scoring is unchanged."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    tolerance: dict[str, Rule] = field(default_factory=dict)
    schema_exceptions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ForbiddenCall:
    """A call that must not run; with ``arguments`` only calls with those
    values (exact rule) are forbidden."""

    name: str
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True)
class Turn:
    """One scripted user turn of a conversation and the calls expected in
    answer to it (aligned within the turn)."""

    user: str
    expected_calls: list[ExpectedCall] | None = None
    match: str = "strict"
    forbidden_calls: list[ForbiddenCall] = field(default_factory=list)


@dataclass(frozen=True)
class UserSpec:
    """A simulated user: it holds ``known`` facts, gives one only when the
    agent asks for it, and ends the conversation by saying ``stop`` when
    satisfied or after ``patience`` replies."""

    instruction: str
    known: dict[str, Any] = field(default_factory=dict)
    patience: int = 5
    stop: str = "###STOP###"


@dataclass
class Case:
    """A case. ``question`` is always the first user message; a scripted
    conversation also has ``turns`` (turn 1 is the question), and then
    ``expected_calls`` is every turn's, in order (``None`` when no turn gives
    any), while ``forbidden_calls`` holds only those of the whole conversation:
    a turn's own stay in the turn."""

    id: str
    question: str
    expected_calls: list[ExpectedCall] | None = None
    match: str = "strict"
    dependencies: list[tuple[str, str]] = field(default_factory=list)
    expected_datum: list[str] | None = None
    expected_state: dict[str, Any] | None = None
    forbidden_calls: list[ForbiddenCall] = field(default_factory=list)
    mocks: dict[str, MockSpec] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # texts for people (an importer's); scoring ignores them
    turns: list[Turn] | None = None
    user: UserSpec | None = None

    @property
    def multi_turn(self) -> bool:
        return self.turns is not None or self.user is not None


@dataclass
class Suite:
    name: str
    toolset: Toolset
    cases: list[Case]
    dependencies: list[tuple[str, str]] = field(default_factory=list)
    give_up_phrases: list[str] = field(default_factory=list)
    path: str = ""
    success_phrases: list[str] = field(default_factory=list)  # claims of success, beside the defaults

    def __post_init__(self) -> None:
        self.by_id: dict[str, Case] = {c.id: c for c in self.cases}

    def case(self, case_id: str) -> Case | None:
        return self.by_id.get(case_id)

    def pairs_for(self, case: Case | None) -> list[tuple[str, str]]:
        """Toolset-wide pairs plus the case's own, without repeats."""
        seen: dict[tuple[str, str], None] = {}
        for pair in [*self.toolset.dependencies, *self.dependencies, *(case.dependencies if case else [])]:
            seen[pair] = None
        return list(seen)


# libyaml's safe loader when PyYAML was built with it: the same documents, read ~10x faster.
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# -- loading -----------------------------------------------------------------


_READ_ONCE: ContextVar[dict[Path, Any] | None] = ContextVar("suite_read_once", default=None)


@contextmanager
def reading_once() -> Iterator[None]:
    """Within it, a file read again is not decoded again (the suite check reads the toolset
    file the loader has read). The decoded documents are shared: only read them."""
    token = _READ_ONCE.set({})
    try:
        yield
    finally:
        _READ_ONCE.reset(token)


def _read_document(path: Path) -> Any:
    once = _READ_ONCE.get()
    if once is None:
        return _decode(path)
    key = path.resolve()
    if key not in once:
        once[key] = _decode(path)
    return once[key]


def _decode(path: Path) -> Any:
    if not path.is_file():
        raise SuiteError("file not found", path=str(path))
    if path.stat().st_size > MAX_SUITE_BYTES:
        raise SuiteError(f"larger than {MAX_SUITE_BYTES} bytes", path=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"not UTF-8 text ({exc.reason})", path=str(path)) from None
    except OSError as exc:
        raise SuiteError(f"cannot read: {exc.strerror}", path=str(path)) from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.load(text, Loader=SAFE_LOADER)
    except RecursionError:
        raise SuiteError("cannot parse: nested too deeply", path=str(path)) from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"cannot parse: {exc.msg} at column {exc.colno}", path=f"{path}:{exc.lineno}") from None
    except yaml.MarkedYAMLError as exc:
        message, where = _yaml_error(exc, path)
        raise SuiteError(message, path=where) from None
    except (ValueError, yaml.YAMLError) as exc:
        raise SuiteError(f"cannot parse: {exc}", path=str(path)) from None


def _yaml_error(exc: yaml.MarkedYAMLError, path: Path) -> tuple[str, str]:
    """One line number for a YAML error, the mistake's: where an unclosed bracket or quote was
    opened, else where the parser stopped (a block that merely contains the mistake began earlier)."""
    unclosed = exc.context is not None and any(w in exc.context for w in ("flow", "quoted"))
    mark = exc.context_mark if unclosed and exc.context_mark is not None else exc.problem_mark
    what = "; ".join(x for x in (exc.context, exc.problem) if x)
    return f"cannot parse: {what}", f"{path}:{mark.line + 1}" if mark is not None else str(path)


read_document = _read_document  # a suite file as decoded, before any check


def load_suite(path: str | Path) -> Suite:
    """Load a suite file (YAML or JSON); the toolset may be a path relative to it."""
    p = Path(path)
    return parse_suite(_read_document(p), path=str(p), base=p.parent)


def load_suite_document(path: str | Path) -> dict[str, Any]:
    """The suite file as one self-contained document: a toolset given as a
    path is read and put inline (what a store or a server keeps)."""
    p = Path(path)
    doc = _read_document(p)
    if not isinstance(doc, Mapping):
        raise SuiteError("a suite must be a mapping with name, toolset and cases", path=str(p))
    doc = dict(doc)
    if isinstance(doc.get("toolset"), str):
        tpath = p.parent / doc["toolset"]
        toolset_doc = _read_document(tpath)
        if isinstance(toolset_doc, Mapping) and not toolset_doc.get("name"):
            toolset_doc = {**toolset_doc, "name": tpath.stem}
        doc["toolset"] = toolset_doc
    doc.setdefault("name", p.stem)
    parse_suite(doc, path=str(p), base=p.parent)  # validate now, with the file's name in errors
    return doc


def load_toolset(path: str | Path) -> Toolset:
    p = Path(path)
    toolset = parse_toolset(_read_document(p), str(p), p.parent)
    toolset.name = toolset.name or p.stem
    return toolset


def _pairs(raw: Any, where: str, path: str, case_id: str = "") -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SuiteError("must be a list of [before, after] pairs", path=path, case_id=case_id, field=where)
    out: list[tuple[str, str]] = []
    for i, pair in enumerate(raw):
        if isinstance(pair, Mapping) and {"before", "after"} <= set(pair):
            pair = [pair["before"], pair["after"]]
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise SuiteError(
                "each pair is [before, after] (two tool names)", path=path, case_id=case_id, field=f"{where}[{i}]"
            )
        out.append((pair[0], pair[1]))
    return out


def parse_toolset(raw: Any, path: str, base: Path | None) -> Toolset:
    if isinstance(raw, str):
        if base is None:
            raise SuiteError(
                "give the toolset inline (a path is read only from a suite file)", path=path, field="toolset"
            )
        try:
            return load_toolset(base / raw)
        except SuiteError as exc:
            raise SuiteError(str(exc), path=path, field="toolset") from None
    deps: list[tuple[str, str]] = []
    handoff: list[str] = []
    label = name = ""
    if isinstance(raw, Mapping):
        deps = _pairs(raw.get("dependencies"), "toolset.dependencies", path)
        label = str(raw.get("label") or raw.get("version") or "")
        name = str(raw.get("name") or "")
        handoff = raw.get("handoff") or []
        if not isinstance(handoff, list) or not all(isinstance(x, str) for x in handoff):
            raise SuiteError("must be a list of tool names", path=path, field="toolset.handoff")
        raw = raw.get("tools")
    if not isinstance(raw, list) or not raw:
        raise SuiteError("toolset must be a path or a non-empty list of tools", path=path, field="toolset")
    try:
        tools = Toolset.from_list(raw, dependencies=deps, label=label, name=name, handoff=list(handoff))
        for t in tools:
            _ = t.validator  # compile now so a broken schema is reported at load
    except (ToolSpecError, SuiteError) as exc:
        raise SuiteError(str(exc), path=path, field="toolset") from None
    return tools


def parse_suite(raw: Any, *, path: str = "<suite>", base: Path | None = None) -> Suite:
    """Build a Suite from a decoded document. A toolset given as a path is
    read only when ``base`` (the suite file's folder) is given."""
    if not isinstance(raw, Mapping):
        raise SuiteError("a suite must be a mapping with name, toolset and cases", path=path)
    if "toolset" not in raw:
        raise SuiteError("required", path=path, field="toolset")
    toolset = parse_toolset(raw["toolset"], path, base)
    raw_cases = raw.get("cases")
    if not isinstance(raw_cases, list):
        raise SuiteError("required, a list of cases", path=path, field="cases")
    phrases = raw.get("give_up_phrases") or []
    if not isinstance(phrases, list) or not all(isinstance(x, str) for x in phrases):
        raise SuiteError("must be a list of strings", path=path, field="give_up_phrases")
    claims = raw.get("success_phrases") or []
    if not isinstance(claims, list) or not all(isinstance(x, str) for x in claims):
        raise SuiteError("must be a list of strings", path=path, field="success_phrases")
    cases: list[Case] = []
    seen: set[str] = set()
    for i, rc in enumerate(raw_cases):
        case = _case(rc, i, path, toolset)
        if case.id in seen:
            raise SuiteError("duplicate case id", path=path, case_id=case.id, field="id")
        seen.add(case.id)
        cases.append(case)
    return Suite(
        name=str(raw.get("name") or Path(path).stem),
        toolset=toolset,
        cases=cases,
        dependencies=_pairs(raw.get("dependencies"), "dependencies", path),
        give_up_phrases=list(phrases),
        path=path,
        success_phrases=list(claims),
    )


def _case(rc: Any, index: int, path: str, toolset: Toolset) -> Case:
    if not isinstance(rc, Mapping):
        raise SuiteError("each case must be a mapping", path=path, field=f"cases[{index}]")
    cid = rc.get("id")
    if not isinstance(cid, (str, int)) or isinstance(cid, bool) or str(cid) == "":
        raise SuiteError("required, a non-empty string", path=path, field=f"cases[{index}].id")
    cid = str(cid)

    def bad(message: str, where: str) -> SuiteError:
        return SuiteError(message, path=path, case_id=cid, field=where)

    turns = _turns(rc, bad) if "turns" in rc else None
    question = turns[0].user if turns else rc.get("question")
    if not isinstance(question, str) or not question.strip():
        raise bad("required, a non-empty string", "question")
    match = rc.get("match", "strict")
    if match not in MATCH_MODES:
        raise bad(f"must be one of {', '.join(MATCH_MODES)}", "match")
    expected: list[ExpectedCall] | None = None
    if turns is not None:
        if any(t.expected_calls is not None for t in turns):
            expected = [ec for t in turns for ec in t.expected_calls or []]
    elif "expected_calls" in rc and rc["expected_calls"] is not None:
        if not isinstance(rc["expected_calls"], list):
            raise bad("must be a list", "expected_calls")
        expected = [_expected_call(ec, j, bad) for j, ec in enumerate(rc["expected_calls"])]
    datum = rc.get("expected_datum")
    if datum is not None:
        datums = datum if isinstance(datum, list) else [datum]
        if not datums or not all(isinstance(d, (str, int, float)) and not isinstance(d, bool) for d in datums):
            raise bad("must be a string or number (or a list of acceptable ones)", "expected_datum")
        datum = [str(d) for d in datums]
    state = rc.get("expected_state")
    if state is not None and not isinstance(state, Mapping):
        raise bad("must be a mapping (subset of the final state)", "expected_state")
    forbidden = [_forbidden(f, j, bad) for j, f in enumerate(rc.get("forbidden_calls") or [])]
    user = _user(rc["user"], bad) if rc.get("user") is not None else None
    if user is not None and turns is not None:
        raise bad("a case has scripted turns or a simulated user, not both", "user")
    mocks_raw = rc.get("mocks") or {}
    if not isinstance(mocks_raw, Mapping):
        raise bad("must map tool names to mocks", "mocks")
    mocks: dict[str, MockSpec] = {}
    for tool_name, mock in mocks_raw.items():
        if tool_name not in toolset:
            raise bad(f"no tool {tool_name!r} in the toolset", f"mocks.{tool_name}")
        try:
            mocks[tool_name] = parse_mock(mock, where=f"mocks.{tool_name}")
        except SuiteError as exc:
            raise bad(exc.detail, exc.field) from None
    tags = rc.get("tags") or []
    if not isinstance(tags, list):
        raise bad("must be a list of strings", "tags")
    notes = rc.get("notes") or []
    if isinstance(notes, str):
        notes = [notes]
    if not isinstance(notes, list):
        raise bad("must be a list of texts", "notes")
    return Case(
        id=cid,
        question=question,
        expected_calls=expected,
        match=match,
        dependencies=_pairs(rc.get("dependencies"), "dependencies", path, cid),
        expected_datum=datum,
        expected_state=None if state is None else dict(state),
        forbidden_calls=forbidden,
        mocks=mocks,
        tags=[str(t) for t in tags],
        notes=[str(n) for n in notes],
        turns=turns,
        user=user,
    )


MAX_TURNS = 100


def _turns(rc: Mapping[str, Any], bad: Any) -> list[Turn]:
    """Scripted turns; the case-level question, expected calls and match
    belong to the turns then, so giving them too is an error."""
    raw = rc["turns"]
    if not isinstance(raw, list) or not raw:
        raise bad("must be a non-empty list of {user, expected_calls?, match?, forbidden_calls?}", "turns")
    if len(raw) > MAX_TURNS:
        raise bad(f"at most {MAX_TURNS} turns", "turns")
    for key in ("question", "expected_calls", "match"):
        if key in rc:
            raise bad(f"with turns, give the {key} in each turn (turns[0].user is the question)", key)
    out: list[Turn] = []
    for i, rt in enumerate(raw):
        where = f"turns[{i}]"
        if not isinstance(rt, Mapping):
            raise bad("each turn must be a mapping with a 'user' message", where)
        text = rt.get("user")
        if not isinstance(text, str) or not text.strip():
            raise bad("required, a non-empty string (what the user says)", f"{where}.user")
        match = rt.get("match", "strict")
        if match not in MATCH_MODES:
            raise bad(f"must be one of {', '.join(MATCH_MODES)}", f"{where}.match")
        expected: list[ExpectedCall] | None = None
        if rt.get("expected_calls") is not None:
            if not isinstance(rt["expected_calls"], list):
                raise bad("must be a list", f"{where}.expected_calls")
            expected = [
                _expected_call(ec, j, bad, f"{where}.expected_calls") for j, ec in enumerate(rt["expected_calls"])
            ]
        forbidden_raw = rt.get("forbidden_calls") or []
        if not isinstance(forbidden_raw, list):
            raise bad("must be a list", f"{where}.forbidden_calls")
        forbidden = [_forbidden(f, j, bad, f"{where}.forbidden_calls") for j, f in enumerate(forbidden_raw)]
        out.append(Turn(user=text, expected_calls=expected, match=match, forbidden_calls=forbidden))
    return out


def _user(raw: Any, bad: Any) -> UserSpec:
    if not isinstance(raw, Mapping):
        raise bad("must be a mapping {instruction, known?, patience?, stop?}", "user")
    instruction = raw.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise bad("required, a non-empty string (who the user is and what they want)", "user.instruction")
    known = raw.get("known") or {}
    if not isinstance(known, Mapping) or not all(isinstance(k, str) for k in known):
        raise bad("must map a fact's name to its value", "user.known")
    patience = raw.get("patience", 5)
    if not isinstance(patience, int) or isinstance(patience, bool) or not 1 <= patience <= MAX_TURNS:
        raise bad(f"must be a whole number from 1 to {MAX_TURNS}", "user.patience")
    stop = raw.get("stop", "###STOP###")
    if not isinstance(stop, str) or not stop.strip():
        raise bad("must be a non-empty string", "user.stop")
    return UserSpec(instruction=instruction, known=dict(known), patience=patience, stop=stop)


def _expected_call(ec: Any, j: int, bad: Any, within: str = "expected_calls") -> ExpectedCall:
    where = f"{within}[{j}]"
    if isinstance(ec, str):
        return ExpectedCall(name=ec)
    if not isinstance(ec, Mapping) or not isinstance(ec.get("name"), str):
        raise bad("each expected call needs a 'name'", where)
    args = ec.get("arguments") or {}
    if not isinstance(args, Mapping):
        raise bad("must be a mapping", f"{where}.arguments")
    tol_raw = ec.get("tolerance") or {}
    if not isinstance(tol_raw, Mapping):
        raise bad("must map a field to its rule", f"{where}.tolerance")
    tolerance: dict[str, Rule] = {}
    for fname, rule in tol_raw.items():
        try:
            tolerance[str(fname)] = parse_rule(rule)
        except ValueError as exc:
            raise bad(str(exc), f"{where}.tolerance.{fname}") from None
    marked = ec.get("schema_exceptions") or {}
    if not isinstance(marked, Mapping) or not all(isinstance(v, str) for v in marked.values()):
        raise bad("must map an argument to the reason its value breaks the schema", f"{where}.schema_exceptions")
    return ExpectedCall(
        name=ec["name"],
        arguments=dict(args),
        tolerance=tolerance,
        schema_exceptions={str(k): v for k, v in marked.items()},
    )


def _forbidden(raw: Any, j: int, bad: Any, within: str = "forbidden_calls") -> ForbiddenCall:
    if isinstance(raw, str):
        return ForbiddenCall(raw)
    if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
        args = raw.get("arguments")
        if args is not None and not isinstance(args, Mapping):
            raise bad("must be a mapping", f"{within}[{j}].arguments")
        return ForbiddenCall(raw["name"], None if args is None else dict(args))
    raise bad("a tool name or {name, arguments}", f"{within}[{j}]")
