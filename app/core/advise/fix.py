"""Proposed description edits from a run: what to rewrite this afternoon.

A run's failures point at the text that let the model go wrong. Each source
gives proposals, each one an edit of one text, written from a template in the
toolset's own language and filled only with facts from the toolset and the
run (tool names, the schema's type, format, pattern or enum, a value a valid
call sent, the values the agent actually sent):

- a confused pair (expected A, called B): B's description says what it is
  NOT for and names A (``negative_delimitation``); a description that does not
  say what tells it apart from its partner starts with it (``distinct_names``:
  names are kept, the description leads with the name's own words and the
  arguments that set the tool apart);
- an argument that failed validation or matched the wrong value on the right
  tool: the argument's type and format, with a valid value seen and the wrong
  ones sent (``argument_format``), in the parameter's description when it has
  one, else the tool's;
- a declared pair broken (B before A): B's description says to call A first
  and what to get from it (``precondition``);
- a tool name not in the toolset: the system prompt says it does not exist
  and which tool the step needed (``known_tools``);
- the same failing call repeated after a non-transient error: the tool's
  error message says not to repeat it and what to do (``error_message``).

Each proposal says what it addresses: the confusion cells and failures, and
how many FAILED trajectories hold its evidence (passed ones never count).
Proposals are ranked by that count. Tool and parameter descriptions are
applied by ``apply_proposals``: each edit adds sentences (a leading one, or
trailing ones), so any subset composes; the system prompt and error messages
live outside the suite and are only printed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.advise.fix_words import (
    description_texts,
    effect,
    fold,
    gerund,
    meaning_match,
    spelled,
    spelled_word,
    texts_language,
)
from app.core.advise.lint import lint_toolset
from app.core.language import Language
from app.core.records import TRANSIENT_KINDS
from app.core.suites.tools import Toolset, ToolSpec
from app.core.textdiff import word_diff

PATTERNS = (
    "distinct_names",
    "negative_delimitation",
    "argument_format",
    "precondition",
    "known_tools",
    "error_message",
)
TARGETS = ("tool_description", "parameter_description", "system_prompt", "error_message")
APPLIED = ("tool_description", "parameter_description")  # what --out writes into a suite
MAX_SHOWN = 40  # characters of a value quoted in a proposal
MAX_TOOLS_LISTED = 12  # a system prompt lists the tools when there are at most this many
MAX_QUESTION = 200  # characters of a question quoted in a pair's evidence (a longer one is not quoted, never cut)
# a description that names the other tool with one of these says the order already (the linter's words)
_STATES_ORDER = re.compile(
    r"\b(primero|antes|despues|requiere|precondicion|previamente|first|before|after|"
    r"requires?|prerequisite|precondition)\b"
)


@dataclass(frozen=True)
class CallFact:
    """One executed call as the run stored it (what the proposals read)."""

    name: str
    arguments: Any = None
    exists: bool = True
    expected: str | None = None  # the aligned expected tool
    schema_field: str | None = None
    schema_message: str | None = None
    mismatches: tuple[Mapping[str, Any], ...] = ()
    dependency_before: str | None = None  # a declared pair broken: this call came before that tool
    error_kind: str | None = None
    error_message: str | None = None
    reaction: str | None = None
    reaction_ok: bool | None = None


@dataclass(frozen=True)
class TrajectoryFact:
    """A trajectory: its key (``case#trial`` and the fault), question, verdict and calls;
    ``cause``, where the run knows it, is what sank it: its first divergence as
    ``(kind, tool, other)`` (``wrong_tool``, expected, called; ``schema``, tool, "")."""

    key: str
    case_id: str
    question: str
    passed: bool
    failures: tuple[str, ...]
    calls: tuple[CallFact, ...]
    cause: tuple[str, str, str] | None = None


@dataclass
class Addresses:
    """What a proposal is meant to fix, counted over the run."""

    cells: dict[tuple[str, str], int] = field(default_factory=dict)  # (expected, called) -> calls
    failures: Counter[str] = field(default_factory=Counter)  # failure name -> failed trajectories with it
    trajectories: set[str] = field(default_factory=set)  # keys of the FAILED trajectories with the evidence
    cases: set[str] = field(default_factory=set)
    questions: list[str] = field(default_factory=list)  # a few questions of those trajectories


@dataclass
class Proposal:
    """One edit of one text. ``before`` is the text today, ``after`` the text
    with this edit alone; ``lead`` / ``tail`` are the sentences it adds, or
    ``replace`` the whole new text (a model's rewrite)."""

    where: str  # one of TARGETS
    pattern: str  # one of PATTERNS
    tool: str | None
    field: str | None
    partner: str | None
    before: str
    after: str
    addresses: Addresses
    evidence: list[str]
    lead: str = ""
    tail: str = ""
    replace: str | None = None
    source: str = "deterministic"
    number: int = 0  # rank, from 1

    @property
    def applies(self) -> bool:
        return self.where in APPLIED

    @property
    def explains(self) -> int:
        return len(self.addresses.trajectories)

    @property
    def advice(self) -> bool:
        """It explains no failed trajectory (what shows it sank on something
        else first): listed apart, never written by ``--out`` unless asked by number."""
        return self.explains == 0

    def to_dict(self) -> dict[str, Any]:
        a = self.addresses
        return {
            "number": self.number,
            "where": self.where,
            "pattern": self.pattern,
            "tool": self.tool,
            "field": self.field,
            "partner": self.partner,
            "before": self.before,
            "after": self.after,
            "applies": self.applies,
            "advice": self.advice,
            "source": self.source,
            "evidence": self.evidence,
            "addresses": {
                "failed_trajectories": len(a.trajectories),
                "cells": [{"expected": e, "called": c, "count": n} for (e, c), n in sorted(a.cells.items())],
                "failures": dict(sorted(a.failures.items())),
                "cases": sorted(a.cases),
            },
        }


# -- templates, in the toolset's language ------------------------------------------------------------------

_KIND: dict[Language, dict[str, str]] = {
    "es": {
        "integer": "número entero",
        "number": "número",
        "string": "texto",
        "boolean": "booleano (true o false)",
        "array": "lista",
        "object": "objeto",
    },
    "en": {
        "integer": "an integer",
        "number": "a number",
        "string": "a string",
        "boolean": "a boolean (true or false)",
        "array": "a list",
        "object": "an object",
    },
}
_DATE: dict[str, dict[Language, str]] = {
    "date": {"es": "AAAA-MM-DD", "en": "YYYY-MM-DD"},
    "date-time": {"es": "ISO 8601", "en": "ISO 8601"},
    "time": {"es": "HH:MM", "en": "HH:MM"},
}
_T: dict[Language, dict[str, str]] = {
    "es": {
        "distinct": "{words} (por {args}).",
        "distinct_noargs": "{words}.",
        "of": "{field} de {thing}",
        "negative": "NO sirve para {words}{fact}: usa {partner}.",
        "by": " por {arg}",
        "by_format": " por {arg} (formato {f})",
        "writes": " (esa hace cambios)",
        "reads": " (esa solo consulta)",
        "format": "{field}: {kind}{fmt}{example}{wrong}.",
        "with_format": ", formato {f}",
        "with_pattern": " que cumple el patrón {p}",
        "one_of": ", uno de: {values}",
        "example": " (p. ej. {v})",
        "wrong": ", no {values}",
        "missing": "; no lo omitas",
        "precondition": "Antes llama a {before} para obtener {args}.",
        "precondition_noargs": "Antes llama a {before}.",
        "unknown": "La herramienta {name} no existe: para eso usa {expected}.",
        "unknown_noexpected": "La herramienta {name} no existe.",
        "only": "Usa solo las herramientas declaradas: {tools}.",
        "only_many": "Usa solo las {n} herramientas declaradas; nunca inventes un nombre.",
        "retry_schema": "No repitas la misma llamada: corrige {field} ({kind}{fmt}).",
        "retry_not_found": "No repitas la misma llamada: confirma {args} con el usuario.",
        "retry_other": "No repitas la misma llamada: con los mismos argumentos vuelve a fallar; corrígelos o avisa "
        "al usuario.",
        "or": " o ",
    },
    "en": {
        "distinct": "{words} (given {args}).",
        "distinct_noargs": "{words}.",
        "of": "{field} of the {thing}",
        "negative": "NOT for {words}{fact}: use {partner}.",
        "by": " by {arg}",
        "by_format": " by {arg} (format {f})",
        "writes": " (that one makes changes)",
        "reads": " (that one only reads)",
        "format": "{field}: {kind}{fmt}{example}{wrong}.",
        "with_format": ", format {f}",
        "with_pattern": " matching the pattern {p}",
        "one_of": ", one of: {values}",
        "example": " (e.g. {v})",
        "wrong": ", not {values}",
        "missing": "; do not leave it out",
        "precondition": "Call {before} first to get {args}.",
        "precondition_noargs": "Call {before} first.",
        "unknown": "There is no tool named {name}: use {expected} for that.",
        "unknown_noexpected": "There is no tool named {name}.",
        "only": "Call only the declared tools: {tools}.",
        "only_many": "Call only the {n} declared tools; never invent a tool name.",
        "retry_schema": "Do not repeat the same call: fix {field} ({kind}{fmt}).",
        "retry_not_found": "Do not repeat the same call: check {args} with the user.",
        "retry_other": "Do not repeat the same call: it fails again with the same arguments; change them or tell "
        "the user.",
        "or": " or ",
    },
}


def shown(value: Any) -> str:
    """A value as the agent sent it, JSON-quoted and clipped (``"15.000"`` is not ``15000``)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def toolset_language(toolset: Toolset) -> Language:
    """The language the toolset's descriptions are written in."""
    texts = [t.description for t in toolset.tools]
    for t in toolset.tools:
        for prop in _properties(t).values():
            if isinstance(prop, Mapping) and isinstance(prop.get("description"), str):
                texts.append(prop["description"])
    return texts_language(tuple(texts))


def _properties(tool: ToolSpec) -> Mapping[str, Any]:
    props = tool.parameters.get("properties")
    return props if isinstance(props, Mapping) else {}


def _required(tool: ToolSpec) -> list[str]:
    req = tool.parameters.get("required")
    props = _properties(tool)
    names = [str(r) for r in req if str(r) in props] if isinstance(req, list) else []
    return names or [str(n) for n in list(props)[:1]]


def _name_words(name: str, toolset: Toolset) -> list[str]:
    """A tool name's words, less a prefix every tool shares (``git_``)."""

    def split(n: str) -> list[str]:
        return [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", n) if w]

    words = split(name)
    if len(toolset) > 2:
        common = set.intersection(*(set(split(t.name)) for t in toolset.tools))
        kept = [w for w in words if w not in common]
        words = kept or words
    return words


def _format_phrase(schema: Mapping[str, Any], example: Any, lang: Language, *, with_example: bool = True) -> str:
    t = _T[lang]
    out = ""
    fmt = schema.get("format")
    pattern = schema.get("pattern")
    enum = schema.get("enum")
    if isinstance(fmt, str):
        out += t["with_format"].format(f=_DATE.get(fmt, {}).get(lang, fmt))
    elif isinstance(pattern, str):
        out += (
            t["with_format"].format(f=example)
            if isinstance(example, str) and with_example
            else t["with_pattern"].format(p=pattern)
        )
    if isinstance(enum, list) and enum:
        out += t["one_of"].format(values=", ".join(shown(v) if not isinstance(v, str) else v for v in enum[:12]))
    return out


def _kind(schema: Mapping[str, Any], lang: Language) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return _KIND[lang].get(str(kind), _KIND[lang]["string"] if kind is None else str(kind))


def _identified(tool: ToolSpec, field: str, toolset: Toolset) -> list[str]:
    """What a patterned argument of the tool identifies, where the toolset
    says it: the last word of the names of the tools that require that
    argument alone with the same pattern, when they all end in it (``numero``,
    ``^PED-\\d{5}$``, is what ``buscar_pedido`` takes: a pedido), unless the
    argument's name says it already (``ticket_id``)."""
    schema = _properties(tool).get(field)
    pattern = schema.get("pattern") if isinstance(schema, Mapping) else None
    if not isinstance(pattern, str):
        return []
    owners = [
        t
        for t in toolset.tools
        if _required(t) == [field]
        and isinstance(_properties(t).get(field), Mapping)
        and _properties(t)[field].get("pattern") == pattern
    ]
    if not [t for t in owners if t.name != tool.name]:
        return []
    last = {(_name_words(t.name, toolset) or [""])[-1] for t in owners}
    word = last.pop() if len(last) == 1 else ""
    return [word] if len(word) > 2 and fold(word) not in fold(field) else []


def _sentence_in(text: str, sentence: str) -> bool:
    return fold(sentence).strip(" .") in fold(text)


def compose(text: str, lead: Iterable[str] = (), tail: Iterable[str] = ()) -> str:
    """The text with sentences added before and after it (each once)."""
    parts = [s for s in dict.fromkeys(lead) if s and not _sentence_in(text, s)]
    body = text.strip()
    if body and not body.endswith((".", "!", "?", ":", ";")) and tail:
        body += "."
    parts.append(body)
    parts.extend(s for s in dict.fromkeys(tail) if s and not _sentence_in(text, s))
    return " ".join(p for p in parts if p)


# -- the evidence ------------------------------------------------------------------------------------------


def _has_reference(t: TrajectoryFact) -> bool:
    return any(c.expected is not None for c in t.calls)


def shape(value: Any) -> str:
    """A value's shape: its JSON type and, for text, its characters as classes
    (``"PED-12345"`` → ``"A-9"``, ``"15.000"`` → ``"9.9"``)."""
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        classes = re.sub(r"[^\W\d_]+", "A", re.sub(r"\d+", "9", value.strip()))
        return "str:" + re.sub(r"\s+", " ", classes)[:40]
    return type(value).__name__


def _misshapen(got: Any, expected: Any) -> bool:
    """Whether a wrong value differs from the expected one in shape (a type,
    a format, left out), not only in value: 2 bags for 0, "business" for
    "economy" are wrong values a format sentence would not prevent."""
    return got is None or shape(got) != shape(expected)


def _note(a: Addresses, t: TrajectoryFact) -> None:
    if t.key not in a.trajectories:
        a.trajectories.add(t.key)
        a.cases.add(t.case_id)
        if len(a.questions) < 5 and t.question and t.question not in a.questions:
            a.questions.append(t.question)


def propose(
    toolset: Toolset,
    trajectories: Iterable[TrajectoryFact],
    *,
    cells: Mapping[tuple[str, str], int] | None = None,
    examples: Mapping[tuple[str, str], Any] | None = None,
    flows: Mapping[tuple[str, str], set[str]] | None = None,
    system_prompt: str = "",
    language: Language | None = None,
) -> list[Proposal]:
    """Every proposal the run's FAILED trajectories call for, ranked by how
    many of them each explains (then by the confusion calls it addresses).
    ``cells``: the run's confusion counts ``(expected, called) -> calls``
    (default: counted from the trajectories given); ``examples``: a value a
    valid call sent, per ``(tool, field)``; ``flows``: per ``(A, B)`` the
    arguments of B the run took from an observation of A."""
    lang = language or toolset_language(toolset)
    ex = _valid_examples(toolset, examples or {})
    failed = [t for t in trajectories if not t.passed]
    counted: Counter[tuple[str, str]] = Counter()
    asked: dict[tuple[str, str], set[str]] = {}
    confused: dict[tuple[str, str], Addresses] = {}
    fields: dict[tuple[str, str], tuple[Addresses, Counter[str], list[Any]]] = {}
    broken: dict[tuple[str, str], Addresses] = {}
    unknown: dict[str, tuple[Addresses, Counter[str]]] = {}
    retries: dict[tuple[str, str], tuple[Addresses, Counter[str], Counter[str]]] = {}
    for t in failed:
        reference = _has_reference(t)
        for c in t.calls:
            if c.expected and c.expected != c.name and c.expected in toolset and c.name in toolset:
                counted[(c.expected, c.name)] += 1
                asked.setdefault((c.expected, c.name), set()).add(t.question)
                _note(confused.setdefault((c.expected, c.name), Addresses()), t)
            if not c.exists:
                a, expected = unknown.setdefault(c.name, (Addresses(), Counter()))
                _note(a, t)
                if c.expected and c.expected in toolset:
                    expected[c.expected] += 1
            on_right_tool = c.exists and (c.expected == c.name or not reference)
            if on_right_tool and c.schema_field:
                a, wrong_kind, wrong = fields.setdefault((c.name, c.schema_field), (Addresses(), Counter(), []))
                _note(a, t)
                missing = "required field is missing" in (c.schema_message or "")
                value = c.arguments.get(c.schema_field) if isinstance(c.arguments, Mapping) else None
                wrong_kind["missing" if missing else "schema"] += 1
                if not missing and value is not None and len(wrong) < 50:
                    wrong.append(value)
            if on_right_tool and c.mismatches:
                for m in c.mismatches:
                    name = str(m.get("field", ""))
                    got = m.get("got")
                    if not name or not _misshapen(got, m.get("expected")):
                        continue  # a value of the right shape, only the wrong one: no format would prevent it
                    a, wrong_kind, wrong = fields.setdefault((c.name, name), (Addresses(), Counter(), []))
                    _note(a, t)
                    wrong_kind["missing" if got is None else "value"] += 1
                    if got is not None and len(wrong) < 50:
                        wrong.append(got)
            if c.dependency_before and c.dependency_before in toolset and c.name in toolset:
                _note(broken.setdefault((c.dependency_before, c.name), Addresses()), t)
            if c.reaction == "retry_same" and c.reaction_ok is False and c.name in toolset:
                kind = c.error_kind or "error"
                if kind not in TRANSIENT_KINDS:
                    a, messages, flds = retries.setdefault((c.name, kind), (Addresses(), Counter(), Counter()))
                    _note(a, t)
                    messages[c.error_message or ""] += 1
                    if c.schema_field:
                        flds[c.schema_field] += 1
    all_cells = dict(cells) if cells is not None else dict(counted)
    out: list[Proposal] = []
    out += _pair_proposals(toolset, confused, all_cells, ex, lang, asked)
    out += _field_proposals(toolset, fields, ex, lang)
    out += _precondition_proposals(toolset, broken, flows or {}, lang)
    out += _unknown_proposals(toolset, unknown, system_prompt, lang)
    out += _retry_proposals(toolset, retries, ex, lang)
    causes = {t.key: t.cause for t in failed if t.cause is not None}
    case_of = {t.key: t.case_id for t in failed}
    if causes:  # the run knows what sank each trajectory: a proposal explains those its edit is about
        for p in out:
            p.addresses.trajectories = {k for k in p.addresses.trajectories if k not in causes or _about(p, causes[k])}
            p.addresses.cases = {case_of[k] for k in p.addresses.trajectories}
    failures = {t.key: t.failures for t in failed}
    for p in out:
        p.addresses.failures = Counter(f for key in p.addresses.trajectories for f in failures.get(key, ()))
    order = {p: i for i, p in enumerate(PATTERNS)}
    out.sort(
        key=lambda p: (
            -p.explains,
            -sum(p.addresses.cells.values()),
            order[p.pattern],
            p.tool or "",
            p.partner or "",
            p.field or "",
        )
    )
    for i, p in enumerate(out, 1):
        p.number = i
    return out


def pair_proposals(
    toolset: Toolset,
    cells: Mapping[tuple[str, str], int],
    *,
    examples: Mapping[tuple[str, str], Any] | None = None,
    language: Language | None = None,
) -> list[Proposal]:
    """The description edits of every confused pair, from the run's confusion
    cells alone (no trajectory read: what a run page shows beside each pair).
    Same texts as ``propose`` writes for those pairs; nothing counted."""
    confused = {(e, c): Addresses() for (e, c), n in cells.items() if n and e != c and e in toolset and c in toolset}
    return _pair_proposals(
        toolset, confused, cells, _valid_examples(toolset, examples or {}), language or toolset_language(toolset), {}
    )


def for_pairs(proposals: Iterable[Proposal], pairs: Iterable[tuple[str, str]]) -> list[Proposal]:
    """The description edits of the given pairs of tools (either order)."""
    wanted = {frozenset(p) for p in pairs}
    return [
        p
        for p in proposals
        if p.pattern in ("negative_delimitation", "distinct_names")
        and p.tool
        and any(frozenset(cell) in wanted and p.tool in cell for cell in p.addresses.cells)
    ]


# The wording of the pairs' edits (``pair_proposals``, ``pair_edits``): a finished run keeps its edits
# with this number, and a page computes them again when it differs. Change it with their texts
# (tests/core/test_fix.py pins the demo run's edits with it).
PAIR_EDITS_VERSION = 1

PairEdit = tuple[str, str, list[tuple[str, str]]]  # (tool, pattern, word-diff segments (op, text))


def pair_edits(proposals: Sequence[Proposal]) -> list[tuple[str, str, list[PairEdit]]]:
    """Per confused pair of tools (a < b, in order), the description edits ``toollens fix RUN --pair
    a,b`` writes (``for_pairs``), each as the word diff of its description before and after."""
    pairs = {(min(e, c), max(e, c)) for p in proposals for e, c in p.addresses.cells if e != c}
    diffs: dict[int, list[tuple[str, str]]] = {}  # an edit of a tool in several pairs: one diff

    def diff(p: Proposal) -> list[tuple[str, str]]:
        if id(p) not in diffs:
            diffs[id(p)] = [(s.op, s.text) for s in word_diff(p.before, p.after)]
        return diffs[id(p)]

    out: list[tuple[str, str, list[PairEdit]]] = []
    for a, b in sorted(pairs):
        edits = for_pairs(proposals, [(a, b)])
        if edits:
            out.append((a, b, [(p.tool or "", p.pattern, diff(p)) for p in edits]))
    return out


def _tool_edit(
    tool: ToolSpec,
    pattern: str,
    partner: str | None,
    a: Addresses,
    evidence: list[str],
    *,
    lead: str = "",
    tail: str = "",
) -> Proposal:
    return Proposal(
        where="tool_description",
        pattern=pattern,
        tool=tool.name,
        field=None,
        partner=partner,
        before=tool.description,
        after=compose(tool.description, [lead], [tail]),
        addresses=a,
        evidence=evidence,
        lead=lead,
        tail=tail,
    )


# the word of an identifier's name that says it is one ("ticket_id"), and how a description says so
# ("by its ticket number", "por su código")
_ID_WORDS = frozenset({"id", "number", "num", "no", "nro", "code", "numero", "codigo", "key", "clave"})
_ID_SAID = re.compile(r"\b(id|ids|identifier|identificador|number|numero|code|codigo|key|clave)\b")


def _stem(word: str, verb: bool = False) -> str:
    return fold(word)[: 4 if verb else 5]


def _patterned(tool: ToolSpec, name: str) -> bool:
    schema = _properties(tool).get(name)
    return isinstance(schema, Mapping) and isinstance(schema.get("pattern") or schema.get("format"), str)


def _arg_fact(
    tool: ToolSpec, name: str, toolset: Toolset, ex: Mapping[tuple[str, str], Any], lang: Language
) -> tuple[str, str]:
    """An argument as a description would name it (``RUT``, ``numero de pedido``) and its format, if any."""
    label = spelled_word(name, description_texts(toolset), spanish=lang == "es") if "_" not in name else name
    thing = " ".join(w for w in _identified(tool, name, toolset) if w not in _name_words(tool.name, toolset))
    if thing:  # "número de pedido" for verificar_compra; buscar_cliente's rut is a cliente's already
        label = _T[lang]["of"].format(field=label, thing=spelled(["", *thing.split()], toolset).strip())
    schema = _properties(tool).get(name)
    schema = schema if isinstance(schema, Mapping) else {}
    example = ex.get((tool.name, name))
    if isinstance(schema.get("format"), str):
        return label, str(_DATE.get(schema["format"], {}).get(lang, schema["format"]))
    if isinstance(schema.get("pattern"), str):
        return label, shown(example) if isinstance(example, str) else schema["pattern"]
    return label, ""


def _telling_arg(tool: ToolSpec, toolset: Toolset, *, patterned_only: bool = False) -> str | None:
    """The argument that sets a tool apart: a required one with a pattern or a
    format first, else a required one no other tool takes (with
    ``patterned_only``, only when it is the one the tool goes by: its sole
    required argument, a key like ``rut``, not one of ``id, monto, motivo``)."""
    required = _required(tool)
    for f in required:
        if _patterned(tool, f):
            return f
    if patterned_only and len(required) != 1:
        return None
    others = {f for t in toolset.tools if t.name != tool.name for f in _properties(t)}
    return next((f for f in required if f not in others), None)


def _distinct_lead(tool: ToolSpec, toolset: Toolset, ex: Mapping[tuple[str, str], Any], t: Mapping[str, str]) -> str:
    """The sentence a description should open with to say what its tool is
    (its name's words, as the toolset spells them) and the argument that sets
    it apart; "" when the description says both already (nothing to add)."""
    lang: Language = "es" if t is _T["es"] else "en"
    words = _name_words(tool.name, toolset)
    text = fold(tool.description)
    objects = words[1:] or words  # the verb may be conjugated or a synonym: the object must be said
    name_said = all(_stem(w) in text for w in objects if len(w) > 2)
    arg = _telling_arg(tool, toolset, patterned_only=name_said)
    arg_said = (
        arg is None
        or all(
            _stem(w) in text or (w in _ID_WORDS and _ID_SAID.search(text))
            for w in re.split(r"[_\-\s]+", fold(arg))
            if len(w) > 1
        )
        or any(_stem(w) in text for w in _identified(tool, arg, toolset))
    )  # "del pedido" says what numero is
    if name_said and arg_said:
        return ""
    phrase = spelled(words, toolset)
    if lang == "en":  # "Get the status of a coupon", not "Get status coupon"
        phrase = _english_action(phrase, toolset, ing=False)
    phrase = phrase[:1].upper() + phrase[1:]
    if arg is None or arg_said:  # the name's words alone; a one-word name ("Reset.") would say nothing
        return t["distinct_noargs"].format(words=phrase) if len(words) > 1 else ""
    label, fmt = _arg_fact(tool, arg, toolset, ex, lang)
    return t["distinct"].format(words=phrase, args=label + (t["with_format"].format(f=fmt) if fmt else ""))


def _telling_fact(
    tool: ToolSpec, partner: ToolSpec, toolset: Toolset, ex: Mapping[tuple[str, str], Any], lang: Language
) -> str:
    """One fact that tells the partner from the tool: an argument the partner
    requires and the tool lacks (its format first), else what each does (one
    reads, the other writes), else an argument the partner requires and no
    other tool takes (``por SKU``)."""
    t = _T[lang]
    own = [f for f in _required(partner) if f not in _properties(tool)]
    patterned = [f for f in own if _patterned(partner, f)]
    if patterned:
        label, fmt = _arg_fact(partner, patterned[0], toolset, ex, lang)
        return t["by_format"].format(arg=label, f=fmt)
    e_partner, e_tool = effect(partner, toolset), effect(tool, toolset)
    if e_partner and e_partner != e_tool:
        return t[e_partner]
    others = {f for x in toolset.tools if x.name not in (partner.name, tool.name) for f in _properties(x)}
    unique = [f for f in own if f not in others]  # an id every other tool takes tells nothing apart
    if unique:
        return t["by"].format(arg=_arg_fact(partner, unique[0], toolset, ex, lang)[0])
    return ""


def quoted_question(questions: Iterable[str]) -> str:
    """The question a pair's evidence quotes, of those where the wrong tool was
    chosen: the shortest (then the first in order of characters), whole; ""
    when none fits in ``MAX_QUESTION`` characters."""
    fit = [q for q in (" ".join(str(x).split()) for x in questions) if q and len(q) <= MAX_QUESTION]
    return min(fit, key=lambda q: (len(q), q)) if fit else ""


def _english_action(phrase: str, toolset: Toolset, *, ing: bool = True) -> str:
    """A tool name's words as an English action: its verb (as "-ing" with
    ``ing``) and its object with an article (``cancel ticket`` → "cancelling a
    ticket", ``get status customer`` → "get the status of a customer"); a name
    whose first word is no verb (``log``) as it is."""
    head, _, rest = phrase.partition(" ")
    verb = gerund(head)
    if verb == head or not rest:
        return phrase if verb == head else (verb if ing else head)
    verb = verb if ing else head
    nouns = rest.split(" ")
    if len(nouns) > 2 or any(n in ("of", "the", "a", "an", "for", "by") for n in nouns):
        return f"{verb} {rest}"  # a phrase a description writes: as it writes it

    def article(noun: str) -> str:
        for text in description_texts(toolset):
            found = re.search(rf"\b(a|an)\s+{re.escape(noun)}\b", text, re.IGNORECASE)
            if found:
                return found.group(1).lower()
        return "an" if noun[:1].lower() in "aeiou" else "a"

    last = nouns[-1]
    obj = f"{article(last)} {last}" if not last.isupper() else last
    return f"{verb} the {nouns[0]} of {obj}" if len(nouns) == 2 else f"{verb} {obj}"


def _negative_sentence(
    tool: ToolSpec, partner: ToolSpec, toolset: Toolset, ex: Mapping[tuple[str, str], Any], lang: Language
) -> str:
    """``NO sirve para <what the partner does><one fact>: usa <partner>.``: the
    partner's name words as the toolset spells them and ONE fact that tells
    the two apart (``_telling_fact``): never the partner's description pasted;
    the whole action, its object too, even where the tool works on the same
    object (``verificar_compra``: "NO sirve para buscar pedido: usa buscar_pedido.")."""
    words = _name_words(partner.name, toolset)
    phrase = spelled(words, toolset)
    if lang == "en":  # "NOT for cancelling a ticket", not "NOT for cancel ticket"
        phrase = _english_action(phrase, toolset)
    return _T[lang]["negative"].format(
        words=phrase, partner=partner.name, fact=_telling_fact(tool, partner, toolset, ex, lang)
    )


_DATE_SHAPES = {
    "date": r"\d{4}-\d{2}-\d{2}",
    "date-time": r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}.*",
    "time": r"\d{2}:\d{2}(:\d{2})?.*",
}


def _attempt(value: Any, example: Any) -> bool:
    """Whether a wrong value of a patterned argument is an attempt at its
    format (``12345``, ``"ped 12345"`` for ``"PED-12345"``) rather than other
    words sent there (a product's name): quoting those would put the
    question's words into the description."""
    if not isinstance(value, str):
        return True
    known = {w for w in re.findall(r"[^\W\d_]{2,}", fold(str(example or "")))}
    return all(w in known for w in re.findall(r"[^\W\d_]{2,}", fold(value)))


def _valid_examples(toolset: Toolset, examples: Mapping[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """The examples a proposal may quote: a text value must fit its argument's
    pattern and date format (a value the schema let through, "12 de marzo de
    2024" for a date, is no example of the format)."""
    out = {}
    for (name, fname), value in examples.items():
        tool = toolset.get(name)
        schema = _properties(tool).get(fname) if tool is not None else None
        if isinstance(value, str) and isinstance(schema, Mapping):
            pattern, fmt = schema.get("pattern"), schema.get("format")
            try:
                if isinstance(pattern, str) and not re.search(pattern, value):
                    continue
            except re.error:
                pass
            if isinstance(fmt, str) and fmt in _DATE_SHAPES and not re.fullmatch(_DATE_SHAPES[fmt], value):
                continue
        out[(name, fname)] = value
    return out


def _about(p: Proposal, cause: tuple[str, str, str]) -> bool:
    """Whether a trajectory sunk by ``cause`` (its first divergence) is one the proposal's edit is about."""
    kind, tool, other = cause
    if p.pattern in ("negative_delimitation", "distinct_names"):
        return kind == "wrong_tool" and (tool, other) in p.addresses.cells
    if p.pattern == "argument_format":
        return kind in ("arguments", "schema", "step_failed") and tool == p.tool
    if p.pattern == "precondition":
        return kind == "dependency" and (tool, other) == (p.tool, p.partner)
    if p.pattern == "known_tools":
        return kind == "hallucinated_tool" and bool(tool) and tool in p.tail
    # a blind retry: the error was not recovered, or the call it repeated never got right arguments
    return kind in ("recovery", "step_failed", "arguments", "schema") and tool == p.tool


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def _pair_proposals(
    toolset: Toolset,
    confused: dict[tuple[str, str], Addresses],
    cells: Mapping[tuple[str, str], int],
    ex: Mapping[tuple[str, str], Any],
    lang: Language,
    asked: Mapping[tuple[str, str], Iterable[str]],
) -> list[Proposal]:
    t = _T[lang]
    out: list[Proposal] = []
    distinct_done: dict[str, Proposal | None] = {}
    for (expected, called), found in sorted(confused.items(), key=lambda kv: (-len(kv[1].trajectories), kv[0])):
        a_tool, b_tool = toolset.get(expected), toolset.get(called)
        if a_tool is None or b_tool is None:
            continue
        n = cells.get((expected, called), 0) or len(found.trajectories)
        question = quoted_question(asked.get((expected, called), ()))
        evidence = [
            f"{called} called where {expected} was expected: {_calls(n)}"
            + (f", as in {json.dumps(question, ensure_ascii=False)}" if question else "")
        ]
        if fold(expected) not in fold(b_tool.description):
            sentence = _negative_sentence(b_tool, a_tool, toolset, ex, lang)
            a = Addresses(
                cells={(expected, called): n},
                trajectories=set(found.trajectories),
                cases=set(found.cases),
                questions=list(found.questions),
            )
            out.append(_tool_edit(b_tool, "negative_delimitation", expected, a, evidence, tail=sentence))
        for tool, partner in ((a_tool, b_tool), (b_tool, a_tool)):
            if tool.name not in distinct_done:  # one lead per tool, whatever the pair: the same on every page
                lead = _distinct_lead(tool, toolset, ex, t)
                distinct_done[tool.name] = (
                    _tool_edit(tool, "distinct_names", partner.name, Addresses(), [], lead=lead) if lead else None
                )
                if lead:
                    out.append(distinct_done[tool.name])  # type: ignore[arg-type]
            p = distinct_done[tool.name]
            if p is None:
                continue
            p.addresses.cells[(expected, called)] = n
            for key in found.trajectories:
                p.addresses.trajectories.add(key)
            p.addresses.cases |= found.cases
            p.addresses.questions.extend(q for q in found.questions if q not in p.addresses.questions)
            p.evidence.append(
                f"{called} called where {expected} was expected: {_calls(n)}; the description "
                f"does not say what sets {tool.name} apart"
            )
    return out


def _field_proposals(
    toolset: Toolset,
    fields: dict[tuple[str, str], tuple[Addresses, Counter[str], list[Any]]],
    ex: Mapping[tuple[str, str], Any],
    lang: Language,
) -> list[Proposal]:
    t = _T[lang]
    out: list[Proposal] = []
    unstated = {(f.tool, f.field) for f in lint_toolset(toolset) if f.rule == "argument_format"} if fields else set()
    for (name, fname), (a, kinds, wrong) in fields.items():
        tool = toolset.get(name)
        schema = _properties(tool).get(fname) if tool is not None else None
        if tool is None or not isinstance(schema, Mapping):
            continue
        shaped = bool(
            schema.get("format")
            or schema.get("pattern")
            or schema.get("enum")
            or schema.get("type") in ("integer", "number", "boolean")
        )
        if not shaped and set(kinds) <= {"value"} and kinds:
            continue  # a wrong value of a free text: no format to state
        own = schema.get("description")
        said = fold(tool.description + " " + (own if isinstance(own, str) else ""))
        if (name, fname) not in unstated and re.search(rf"\b{re.escape(fold(fname))}\b", said):
            continue  # the description speaks of the argument and states its format already: not what failed
        example = ex.get((name, fname))
        if isinstance(schema.get("pattern"), str):  # quote attempts at the pattern, not a question's words
            wrong = [v for v in wrong if _attempt(v, example)]
        values = list(dict.fromkeys(shown(v) for v in wrong))
        if example is not None:
            values = [v for v in values if v != shown(example)]
        shape = (
            shown(example)
            if isinstance(example, str)
            and isinstance(schema.get("pattern"), str)
            and not isinstance(schema.get("format"), str)
            else None
        )  # the example is the pattern's shape
        sentence = t["format"].format(
            field=fname,
            kind=_kind(schema, lang),
            fmt=_format_phrase(schema, shape, lang),
            example=t["example"].format(v=shown(example)) if example is not None and shape is None else "",
            wrong=(t["wrong"].format(values=t["or"].join(values[:2])) if values else "")
            + (t["missing"] if kinds.get("missing") else ""),
        )
        said_wrong = ([f"sent {', '.join(values[:3])}"] if values else []) + (
            [f"left out {kinds['missing']} times"] if kinds.get("missing") else []
        )
        evidence = [f"{name}.{fname}: " + ("; ".join(said_wrong) or "a value of another shape")]
        if isinstance(own, str) and own.strip():
            out.append(
                Proposal(
                    where="parameter_description",
                    pattern="argument_format",
                    tool=name,
                    field=fname,
                    partner=None,
                    before=own,
                    after=compose(own, (), [sentence]),
                    addresses=a,
                    evidence=evidence,
                    tail=sentence,
                )
            )
        else:
            p = _tool_edit(tool, "argument_format", None, a, evidence, tail=sentence)
            p.field = fname
            out.append(p)
    return out


def _precondition_proposals(
    toolset: Toolset,
    broken: dict[tuple[str, str], Addresses],
    flows: Mapping[tuple[str, str], set[str]],
    lang: Language,
) -> list[Proposal]:
    t = _T[lang]
    out: list[Proposal] = []
    for (before, after), a in sorted(broken.items()):
        first, tool = toolset.get(before), toolset.get(after)
        if first is None or tool is None:
            continue
        text = fold(tool.description)
        if fold(before) in text and _STATES_ORDER.search(text):
            continue
        given = flows.get((before, after), set())
        needed = [f for f in _required(tool) if f in given]
        sentence = (
            t["precondition"].format(before=before, args=", ".join(needed))
            if needed
            else t["precondition_noargs"].format(before=before)
        )
        out.append(
            _tool_edit(
                tool,
                "precondition",
                before,
                a,
                [f"{after} called before {before} (declared pair)"],
                lead="",
                tail=sentence,
            )
        )
    return out


def _unknown_proposals(
    toolset: Toolset, unknown: dict[str, tuple[Addresses, Counter[str]]], system_prompt: str, lang: Language
) -> list[Proposal]:
    t = _T[lang]
    names = [x.name for x in toolset.tools]
    only = (
        t["only"].format(tools=", ".join(names))
        if len(names) <= MAX_TOOLS_LISTED
        else t["only_many"].format(n=len(names))
    )
    out = []
    for name, (a, expected) in sorted(unknown.items()):
        target = meaning_match(name, toolset)  # what the name means, never merely the step that was expected
        sentence = (
            t["unknown"].format(name=name, expected=target) if target else t["unknown_noexpected"].format(name=name)
        )
        out.append(
            Proposal(
                where="system_prompt",
                pattern="known_tools",
                tool=None,
                field=None,
                partner=target,
                before=system_prompt,
                after=compose(system_prompt, (), [sentence, only]),
                addresses=a,
                evidence=[
                    f"{name} called, not in the toolset"
                    + (f"; its name means {target}" if target else "; no declared tool means it")
                    + (f" (the step expected {expected.most_common(1)[0][0]})" if expected else "")
                ],
                tail=f"{sentence} {only}",
            )
        )
    return out


def _retry_proposals(
    toolset: Toolset,
    retries: dict[tuple[str, str], tuple[Addresses, Counter[str], Counter[str]]],
    ex: Mapping[tuple[str, str], Any],
    lang: Language,
) -> list[Proposal]:
    t = _T[lang]
    out = []
    for (name, kind), (a, messages, flds) in sorted(retries.items()):
        tool = toolset.get(name)
        if tool is None:
            continue
        message = messages.most_common(1)[0][0]
        error = "error" if kind == "error" else f"{kind} error"
        if kind == "schema" and flds:
            fname = flds.most_common(1)[0][0]
            schema = _properties(tool).get(fname)
            schema = schema if isinstance(schema, Mapping) else {}
            example = ex.get((name, fname))
            sentence = t["retry_schema"].format(
                field=fname,
                kind=_kind(schema, lang),
                fmt=_format_phrase(schema, shown(example) if isinstance(example, str) else None, lang),
            )
        elif kind == "not_found":
            sentence = t["retry_not_found"].format(args=", ".join(_required(tool)) or name)
        else:
            sentence = t["retry_other"].format(tool=name)
        out.append(
            Proposal(
                where="error_message",
                pattern="error_message",
                tool=name,
                field=None,
                partner=None,
                before=message,
                after=compose(message, (), [sentence]),
                addresses=a,
                evidence=[f"{name}: the same call repeated after its {error}"],
                tail=sentence,
            )
        )
    return out


# -- applying ------------------------------------------------------------------------------------------------


def select(proposals: Sequence[Proposal], only: Iterable[int] | None) -> list[Proposal]:
    """The proposals numbered in ``only`` (all when None); an unknown number is an error."""
    if only is None:
        return list(proposals)
    wanted = list(dict.fromkeys(only))
    numbers = {p.number: p for p in proposals}
    unknown = [n for n in wanted if n not in numbers]
    if unknown:
        raise ValueError(f"no proposal numbered {', '.join(map(str, unknown))} (there are {len(proposals)})")
    return [numbers[n] for n in wanted]


def _body(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """Where a tool document keeps its name and description, and the key of its
    schema (the plain shape, OpenAI's ``function`` or Anthropic's ``input_schema``)."""
    inner = doc.get("function")
    if isinstance(inner, Mapping):
        return inner, "parameters"
    return doc, "input_schema" if "input_schema" in doc and "parameters" not in doc else "parameters"


def apply_proposals(tools: Sequence[Mapping[str, Any]], proposals: Iterable[Proposal]) -> list[dict[str, Any]]:
    """Tool documents (name, description, parameters, mock...) with the tool
    and parameter description edits applied; everything else as it was. A
    model's rewrite of a description replaces it (the template edits of the
    same description then add only what it lacks)."""
    chosen = [p for p in proposals if p.applies and p.tool]
    out = []
    for doc in tools:
        body, schema_key = _body(doc)
        mine = [p for p in chosen if p.tool == str(body.get("name", ""))]
        if not mine:
            out.append(dict(doc))
            continue
        new_body = dict(body)
        own = [p for p in mine if p.where == "tool_description"]
        if own:
            new_body["description"] = _edited(str(body.get("description") or ""), own)
        params = [p for p in mine if p.where == "parameter_description" and p.field]
        if params:
            schema = json.loads(json.dumps(body.get(schema_key) or {}))
            props = schema.get("properties") or {}
            for fname in dict.fromkeys(p.field for p in params):
                prop = props.get(fname)
                if isinstance(prop, dict):
                    prop["description"] = _edited(
                        str(prop.get("description") or ""), [p for p in params if p.field == fname]
                    )
            new_body[schema_key] = schema
        out.append({**doc, "function": new_body} if body is not doc else new_body)
    return out


def candidate_toolset(toolset_doc: Any, proposals: Sequence[Proposal]) -> dict[str, Any]:
    """A toolset document (a mapping with ``tools``, or a bare list of tools)
    with the proposals applied and a new version label."""
    raw = dict(toolset_doc) if isinstance(toolset_doc, Mapping) else {"tools": list(toolset_doc or [])}
    label = str(raw.get("label") or raw.get("version") or "")
    raw.pop("version", None)
    raw["label"] = candidate_label(label, proposals)
    raw["tools"] = apply_proposals(raw.get("tools") or [], proposals)
    return raw


def candidate_suite(document: Mapping[str, Any], proposals: Sequence[Proposal]) -> dict[str, Any]:
    """A self-contained suite document with the proposals applied to its
    toolset: cases, mocks, names and schemas as they were."""
    return {**document, "toolset": candidate_toolset(document.get("toolset"), proposals)}


def _edited(text: str, edits: Sequence[Proposal]) -> str:
    replaced = [p.replace for p in edits if p.replace]
    base = replaced[0] if replaced else text
    order = {p: i for i, p in enumerate(PATTERNS)}
    ranked = sorted(edits, key=lambda p: order[p.pattern])
    return compose(
        base, [p.lead for p in ranked if p.lead and not p.replace], [p.tail for p in ranked if p.tail and not p.replace]
    )


def candidate_label(label: str, proposals: Sequence[Proposal]) -> str:
    """The candidate toolset's version label: the old one, marked as fixed by these proposals."""
    numbers = ",".join(str(p.number) for p in proposals if p.applies)
    return f"{label or 'v'}+fix{numbers}"[:100] if numbers else label


def changed_descriptions(before: Any, after: Any) -> list[tuple[str, str, str]]:
    """Every description that differs between two toolset documents, tool by
    tool: ``(tool, old, new)`` and ``(tool.field, old, new)`` for a parameter's."""

    def texts(raw: Any) -> dict[str, str]:
        tools = raw.get("tools") if isinstance(raw, Mapping) else raw
        out: dict[str, str] = {}
        for doc in tools if isinstance(tools, list) else []:
            if not isinstance(doc, Mapping):
                continue
            body, key = _body(doc)
            name = str(body.get("name", ""))
            out[name] = str(body.get("description") or "")
            props = (body.get(key) or {}).get("properties") if isinstance(body.get(key), Mapping) else None
            for fname, prop in (props or {}).items() if isinstance(props, Mapping) else ():
                if isinstance(prop, Mapping) and isinstance(prop.get("description"), str):
                    out[f"{name}.{fname}"] = prop["description"]
        return out

    a, b = texts(before), texts(after)
    return [(k, a.get(k, ""), b[k]) for k in b if a.get(k, "") != b[k]]
