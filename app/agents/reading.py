"""How the simulated agent reads a toolset: the way the course says a model
does, from each tool's name, description and schema alone, against the question.

- **Match.** A tool's score for a question is the summed rarity of the
  content terms they share (accents folded, stop words out, generic verbs
  such as "buscar"/"consultar"/"get" folded into one, words cut to five
  letters, Spanish and English alike). A tool's terms are its name's words,
  the words of its description's affirmative clauses, its arguments' names
  and allowed values, and the formats it declares: a value of the question
  (``PED-40213``) that fits a schema ``pattern`` is a term of every tool
  taking an argument of that name (the same identifier), and one of the
  shape of an example the description writes ("formato PED-12345") is a
  term of that tool (unless it fits a pattern the toolset declares for an
  argument the tool takes: then it says no more than the schemas). Rarity is ``ln(N / df)``
  over the tools' terms: a term every tool has weighs nothing, so a
  sentence pasted into every description changes no score difference.
  Other tools' names inside a description are references, not content.
- **Clauses.** A description is read clause by clause (sentences, cut at
  ``, ; : ( )`` and at "pero"/"but"; a parenthesis is a unit of its own).
  From the first clause with a negation ("no", "ni", "nunca", "sin", "not",
  "never", "n't", "without", "except", "instead", "en su lugar", "en vez
  de" ...) to the end of its sentence, and in a sentence that redirects to
  another tool ("para eso usa Y", "use Y instead", "si ya está despachado,
  usa Y"), no word is content of the tool, whatever the wording.
- **Negative delimitation.** Such a negated or redirecting part that names
  other tools (outside a clause stating an order: "call Y first") is a
  delimitation: by how much the question speaks of what it is about (its
  words the tool's own text lacks), up to the tool's whole match, it moves
  the tool's score to the named tools in equal shares. It also tells the
  pair apart whatever the question: a clause naming one tool counts fully,
  one naming every other tool counts nothing.
- **Preconditions.** A clause naming another tool with an order word
  ("primero", "antes", "después de", "requiere haber llamado a", "first",
  "before", "after", "requires") and no negation states a precondition
  (``states_precondition``).
- **Choice.** The expected tool competes with every tool the case does not
  expect (the words only the case's other steps' tools hold are left to
  them, and so is a value that fits one of their declared formats, its
  shape too), each weighted by ``exp(BETA × (score - expected's score))``
  (``× (1 - DELIMITED × how clearly a clause tells the pair apart)``);
  ``confusion`` × the rivals' share of the weight is the chance a rival wins.

It stands in for a model (a model of a model): it does not read examples
of whole calls or the system prompt, and it does not reason.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from app.core.advise.lint import _GENERIC, _STOPWORDS, fold
from app.core.suites.tools import Toolset, ToolSpec

BETA = 2.0  # how sharply a score lead turns into certainty (per unit of rarity, ln N/df)
DELIMITED = 0.75  # how much a negative delimitation naming only the partner lowers the pair's weight

# Words that ask, or frame a delimitation, rather than say what about: they tell no tool apart.
_NOISE_TEXT = """
not sirve servir usar usalo usala instead never nunca fue era ser

hola buenas buenos dias cual cuales cuanto cuanta cuantos cuantas cuando como donde quien quienes que esta estan
estoy soy eres tiene tienen tengo tenemos hay dime decir puedes podrias puede podria quiero quisiera necesito
favor gracias ahora hoy todavia aun nada hacer hagas ayuda ayudame
hi hello what which how when where who whom whose my me mine our we please thanks want need can could would
should do does did tell give show now today still yet help
"""
_NOISE = frozenset(_NOISE_TEXT.split())
_WORD = re.compile(r"\w+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PAREN = re.compile(r"\(([^()]*)\)")
_CLAUSE = re.compile(r"[,;:\[\]]|\s(?:pero|but|aunque|although|whereas)\s")
# A negation, in any wording: from its clause on, a sentence says what the tool is not, or not for.
_NEGATIVE = re.compile(
    r"(\b(no|ni|not|nor|never|nunca|jamas|tampoco|neither|without|sin|except|excepto|salvo|cannot|instead|"
    r"en\s+(vez|lugar)\s+de|en\s+su\s+lugar|rather\s+than|other\s+than)\b|n['\u2019]t\b)"
)
# A redirect to another tool, with or without a negation: "para eso usa Y", "use Y", "llama a Y".
_REDIRECT = re.compile(
    r"\b(usa|usar|use|using|utiliza|utilizar|emplea|llama|call|prefer|prefiere|recurre|try|"
    r"para\s+eso|para\s+esto|for\s+that|for\s+this|en\s+su\s+lugar|instead)\b"
)
# Where a redirect's subject begins: "si ya está despachado, usa Y", "for refunds, use Y".
_CONDITION = re.compile(r"\b(si|if|cuando|when|para|for|en\s+caso|in\s+case)\b")
# An order between two tools: "call Y first", "requiere haber llamado a Y", "después de Y".
_ORDER = re.compile(
    r"\b(primero|antes|despues|requiere|requieren|requisito|precondicion|previamente|first|before|"
    r"after|requires?|prerequisite|precondition|previously|once|una\s+vez)\b"
)
_VALUE = re.compile(r"[A-Za-z0-9][\w\-./]*[A-Za-z0-9]|\d")
MAX_VALUES = 64  # question values checked against the declared formats
MAX_PATTERN = 300  # longer schema patterns are not read as formats


def stem(word: str) -> str:
    """Five letters at most, final vowels cut (two letters kept): "anula"/"anulen",
    "pedido"/"pedidos", "order"/"ordered"."""
    head = word[:5]
    cut = head.rstrip("aeiou")
    return cut if len(cut) >= 2 else head


def name_terms(name: str) -> frozenset[str]:
    """A tool name's words as terms (``buscar_pedido``, ``getOrder``, ``git-log``)."""
    words = re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name)
    return frozenset(t for w in words if w for t in terms(w))


def terms(text: str, names: frozenset[str] = frozenset()) -> frozenset[str]:
    """The content terms of a text as the agent reads them; the tool
    ``names`` it mentions are left out (references, not content), and so are
    values (a word with a digit, ``PED-12345``: their shape is read apart)."""
    out: set[str] = set()
    words_only = _VALUE.sub(lambda m: " " if any(c.isdigit() for c in m.group()) else m.group(), text)
    for token in _WORD.findall(fold(words_only)):
        if token in names:
            continue
        for word in token.split("_"):
            if len(word) < 2 or word.isdigit() or word in _STOPWORDS or word in _NOISE:
                continue
            if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
                word = word[:-1]  # plurals, "gets", "shows"
            out.add("<generic>" if word in _GENERIC else stem(word))
    return frozenset(out)


def shape(value: str) -> str:
    """A value's shape: digits as 9, letters as a (``PED-12345`` -> ``aaa-99999``)."""
    return re.sub(r"[^\W\d_]", "a", re.sub(r"\d", "9", fold(value)))


def _values(text: str) -> set[str]:
    """The example values a text writes (a word with a digit: ``PED-12345``, ``12345678-9``)."""
    return {v for v in _VALUE.findall(text) if any(c.isdigit() for c in v) and len(v) >= 3}


def _examples(text: str) -> set[str]:
    """The shapes of the example values a text writes, as terms."""
    return {"<shape:" + shape(v) + ">" for v in _values(text)}


@dataclass(frozen=True)
class Clause:
    """A negative delimitation: what the tool is not for, and the tools named instead."""

    about: frozenset[str]
    use: tuple[str, ...]


@dataclass(frozen=True)
class Reading:
    """A toolset as the agent reads it (see the module docstring)."""

    names: tuple[str, ...]
    content: dict[str, frozenset[str]]  # tool -> its terms (name, affirmative clauses, arguments, formats)
    clauses: dict[str, tuple[Clause, ...]]
    rarity: dict[str, float]  # term -> ln(N / df) over the tools' terms
    refs: frozenset[str] = frozenset()  # the tool names, folded (references in a text, not content)
    patterns: dict[str, tuple[re.Pattern[str], ...]] = field(default_factory=dict)  # argument term -> patterns
    preconditions: frozenset[tuple[str, str]] = frozenset()  # (tool, the tool its description says comes before)

    def weight(self, term: str) -> float:
        return self.rarity.get(term, math.log(len(self.names)) if self.names else 0.0)

    def asked(self, question: str) -> frozenset[str]:
        """The question's terms: its words, and the declared formats its values fit."""
        words = set(terms(question, self.refs))
        values = list(dict.fromkeys(v for v in _VALUE.findall(question) if any(c.isdigit() for c in v)))
        for value in values[:MAX_VALUES]:
            words.add("<shape:" + shape(value) + ">")
            words.update(t for t, found in self.patterns.items() if any(p.fullmatch(value) for p in found))
        return frozenset(words)

    def _shapes_of(self, question: str, held: frozenset[str]) -> frozenset[str]:
        """The shape terms of the question's values that fit a declared format among ``held``
        (a RUT given for another step is that step's, its shape too)."""
        out = set()
        values = list(dict.fromkeys(v for v in _VALUE.findall(question) if any(c.isdigit() for c in v)))
        for value in values[:MAX_VALUES]:
            if any(t in held and any(p.fullmatch(value) for p in found) for t, found in self.patterns.items()):
                out.add("<shape:" + shape(value) + ">")
        return frozenset(out)

    def scores(self, asked: frozenset[str]) -> dict[str, float]:
        """Tool -> how well the question's terms match it, delimitations applied:
        a clause moves its tool's score, up to the weight of the question's
        words it is about that the tool's own content lacks ("not for the
        *status* of an order" in a tool that reads orders speaks of the
        status), to the tools it names, in equal shares."""
        base = {n: sum(self.weight(w) for w in asked & self.content[n]) for n in self.names}
        out = dict(base)
        for name in self.names:
            for clause in self.clauses[name]:
                said = sum(self.weight(w) for w in asked & (clause.about - self.content[name]))
                moved = min(said, base[name])
                if moved > 0 and clause.use:
                    out[name] -= moved
                    for other in clause.use:
                        out[other] += moved / len(clause.use)
        return out

    def delimited(self, a: str, b: str) -> float:
        """How clearly a delimitation tells ``a`` and ``b`` apart (0..1): a clause
        of one naming the other, counting less the more tools it names."""
        others = len(self.names) - 1
        best = 0.0
        for tool, other in ((a, b), (b, a)):
            for clause in self.clauses.get(tool, ()):
                if other in clause.use:
                    k = len(clause.use)
                    best = max(best, 1.0 if others <= 1 else (others - k) / (others - 1))
        return best

    def rivals(self, question: str, expected: str, exclude: frozenset[str] = frozenset()) -> dict[str, float]:
        """Each tool that could be called instead of ``expected`` -> its weight
        against the expected tool's 1. The tools in ``exclude`` (the case's
        other expected steps) are no rivals, and the question's words that
        only they hold are theirs: a step is chosen on what is left."""
        if expected not in self.content:
            return {}
        asked = self.asked(question)
        for other in exclude - {expected}:
            theirs = self.content.get(other, frozenset()) - self.content[expected]
            asked -= theirs | self._shapes_of(question, theirs)
        scores = self.scores(asked)
        base = scores[expected]
        return {
            n: math.exp(BETA * (s - base)) * (1 - DELIMITED * self.delimited(expected, n))
            for n, s in scores.items()
            if n != expected and n not in exclude
        }


def confusion_chance(rivals: dict[str, float], confusion: float) -> float:
    """The chance a rival wins: ``confusion`` × the rivals' share of the weight."""
    total = sum(rivals.values())
    return confusion * total / (1 + total)


def read_toolset(toolset: Toolset) -> Reading:
    return _read(tuple((t.name, t.description, _schema_key(t)) for t in toolset.tools))


def states_precondition(toolset: Toolset, tool: str, before: str) -> bool:
    """``tool``'s description states that ``before`` comes first, in a clause
    of its own that names it with an order word and no negation."""
    return (tool, before) in read_toolset(toolset).preconditions


def _schema_key(tool: ToolSpec) -> str:
    try:
        return json.dumps(tool.parameters or {}, sort_keys=True, default=str)[:20_000]
    except (TypeError, ValueError):
        return "{}"


@dataclass
class _Parsed:
    content: set[str]
    formats: set[str]  # example values written in affirmative clauses
    clauses: list[Clause]
    before: set[str]  # tools a clause says come first


def _units(description: str) -> list[str]:
    """Sentences, each parenthesis a unit of its own, except one inside a negated
    clause, which stays in it ("NO sirve para X (esa hace cambios): usa Y")."""
    inner: list[str] = []

    def place(m: re.Match[str]) -> str:
        before = re.split(r"[.!?;,:]", fold(description[: m.start()]))[-1]
        if _NEGATIVE.search(before):
            return ", " + m.group(1) + ","
        inner.append(m.group(1))
        return " "

    outer = _PAREN.sub(place, description)
    return [u for u in (*_SENTENCE.split(outer), *inner) if u.strip()]


def _parse(name: str, description: str, folded: Mapping[str, str], refs: frozenset[str]) -> _Parsed:
    out = _Parsed(set(), set(), [], set())
    for unit in _units(description):
        text = fold(unit)
        clauses = [c for c in _CLAUSE.split(text) if c.strip()]
        named = [[folded[r] for r in _named(c, refs, name)] for c in clauses]
        ordered = [bool(_ORDER.search(c)) and not _NEGATIVE.search(c) for c in clauses]
        for tools, order in zip(named, ordered, strict=True):
            if order:
                out.before.update(tools)
        negated = next((i for i, c in enumerate(clauses) if _NEGATIVE.search(c)), None)
        redirect = None
        if any(t for t, o in zip(named, ordered, strict=True) if not o):
            hit = next((i for i, c in enumerate(clauses) if _REDIRECT.search(c)), None)
            if hit is not None:
                cond = next((i for i in range(hit + 1) if _CONDITION.search(clauses[i])), None)
                redirect = cond if cond is not None else 0
        starts = [i for i in (negated, redirect) if i is not None]
        start = min(starts) if starts else len(clauses)
        for i, clause in enumerate(clauses):
            if i < start and not named[i]:
                out.content |= terms(clause, refs)
        # a value written in a negated or redirecting part ("NO sirve para X (formato "TK-34946"): usa Y")
        # is the other tool's format, never this one's
        out.formats |= _values(" ".join(c for i, c in enumerate(clauses) if i < start))
        use = sorted({t for i in range(start, len(clauses)) if not ordered[i] for t in named[i]})
        if start < len(clauses) and use:
            about = frozenset().union(*(terms(c, refs) | _examples(c) for c in clauses[start:]))
            out.clauses.append(Clause(about=about, use=tuple(use)))
    return out


def _schema_terms(schema: Any) -> tuple[set[str], dict[str, str]]:
    """An object schema's argument names and allowed values as terms, and one
    value term per argument (``<value:rut>``: a value of the question that fits
    a pattern declared for an argument of that name is one of them), with the
    pattern declared for it, if any."""
    words: set[str] = set()
    patterns: dict[str, str] = {}
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return words, patterns
    for key, prop in list(props.items())[:100]:
        words |= terms(str(key).replace("_", " "))
        term = "<value:" + fold(str(key)) + ">"
        words.add(term)
        if not isinstance(prop, Mapping):
            continue
        for value in (prop.get("enum") or [])[:50] if isinstance(prop.get("enum"), list) else []:
            if isinstance(value, str):
                words |= terms(value)
        pattern = prop.get("pattern")
        if isinstance(pattern, str) and len(pattern) <= MAX_PATTERN:
            patterns[term] = pattern
    return words, patterns


@lru_cache(maxsize=64)
def _read(tools: tuple[tuple[str, str, str], ...]) -> Reading:
    names = tuple(n for n, _, _ in tools)
    folded = {fold(n): n for n in names}
    refs = frozenset(folded)
    content: dict[str, frozenset[str]] = {}
    clauses: dict[str, tuple[Clause, ...]] = {}
    patterns: dict[str, tuple[re.Pattern[str], ...]] = {}
    before: set[tuple[str, str]] = set()
    read: list[tuple[str, _Parsed, set[str]]] = []
    for name, description, schema_text in tools:
        parsed = _parse(name, description, folded, refs)
        try:
            schema = json.loads(schema_text)
        except ValueError:
            schema = {}
        words, declared = _schema_terms(schema)
        for term, pattern in declared.items():
            try:
                patterns[term] = (*patterns.get(term, ()), re.compile(pattern))
            except re.error:
                continue
        read.append((name, parsed, words))
    for name, parsed, words in read:
        for value in parsed.formats:  # an example of an identifier's declared format says no more than the schema
            fits = [
                t
                for t in words
                if t in patterns  # the text was folded: an upper-case code is tried as such
                and any(p.fullmatch(value) or p.fullmatch(value.upper()) for p in patterns[t])
            ]
            words.update(fits or ["<shape:" + shape(value) + ">"])
        content[name] = frozenset(set(name_terms(name)) | parsed.content | words)
        clauses[name] = tuple(parsed.clauses)
        before |= {(name, b) for b in parsed.before}
    df: dict[str, int] = {}
    for name in names:
        for w in content[name]:
            df[w] = df.get(w, 0) + 1
    rarity = {w: math.log(len(names) / d) for w, d in df.items()}
    return Reading(
        names=names,
        content=content,
        clauses=clauses,
        rarity=rarity,
        refs=refs,
        patterns=patterns,
        preconditions=frozenset(before),
    )


def _named(text: str, refs: frozenset[str], own: str) -> list[str]:
    """The tool names (folded) a text mentions, its own left out."""
    own_folded = fold(own)
    return [
        r
        for r in sorted(refs)
        if r != own_folded and r in text and re.search(rf"(?<![\w]){re.escape(r)}(?![\w])", text)
    ]
