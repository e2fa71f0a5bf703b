"""The description linter: the seed's four patterns, checked on a toolset.

The model chooses a tool from its name, description and schema alone; the
seed's lesson is that low selection precision is usually a description that
does not let it decide. Four checks, in Spanish and English text:

``similar_pair``
    two tools whose names or descriptions read alike (a similarity score,
    0..1, with the pair named);
``no_negative_delimitation``
    a tool with a look-alike whose description never says what it is NOT
    for and which tool to use instead ("NO sirve para X: usa Y");
``argument_format``
    a constrained argument (``pattern``, ``format``, ``enum``, an integer id
    or amount) whose format or type the description does not state;
``missing_precondition``
    a declared dependency pair (A before B) that B's description does not
    state ("Obtén el id con A primero");
``unguarded_destructive``
    a tool its server marks destructive (MCP's ``destructiveHint``) whose
    description states no precondition and no confirmation step;
``lookalike_pair``
    two tools a model will take for each other, before any run: names that
    differ in one part ("buscar_pedido"/"buscar_producto", "find_order" /
    "find_product") where a description does not say the word that tells it
    apart or neither shows what its identifier looks like, or descriptions of
    one shape ("Busca un X por su Y." / "Finds a X by its Y."), and neither
    description delimits itself against the other;
``confused_pair`` (only given a run's confusion cells)
    two tools the run confused, whether or not they read alike: observed
    confusions rank first, and such a pair needs a negative delimitation
    like a look-alike.

Messages are in English, as the product's pages; the wording they suggest
for a description is in the toolset's language (Spanish or English,
``app.core.language``), and free of any domain's words.

Findings are plain data (``Finding.to_dict``) with a stable shape, see
``lint_json``; ``lint_pairs`` groups them per tool pair beside the
confusion counts of that pair (the run page and ``toollens lint`` both use it).
"""

from __future__ import annotations

import difflib
import importlib
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from itertools import combinations
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from app.core.language import Language, detect_language
from app.core.suites.suite import load_suite, load_toolset
from app.core.suites.tools import Toolset, ToolSpec

RULES = (
    "similar_pair",
    "no_negative_delimitation",
    "argument_format",
    "missing_precondition",
    "unguarded_destructive",
    "lookalike_pair",
)
CONFUSED = "confused_pair"  # a rule of observed confusions: only given a run's cells (counted apart from RULES)
SIMILAR_THRESHOLD = 0.5  # a pair at or above reads alike (finding)
LOOKALIKE_THRESHOLD = 0.3  # a pair at or above needs a negative delimitation
SHAPE_THRESHOLD = 0.6  # two descriptions whose word sequences match at least this much are of one shape
MAX_FINDINGS = 1000

_STOPWORD_TEXT = """
a al algo algun alguna como con cual de del desde donde el en entre es esa ese esta este esto la las lo los mas me
mi o otra otro para pero por que se segun si sin sobre su sus tambien te tu un una uno unos unas y ya
about an and any are as at be by for from has have if in into is it its of on or the their this to with your you
no ni eso esto usa usala use solo only siempre always ejemplo example eg dd mm yyyy aaaa
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# Verbs that say only "fetch something": names made of these alone do not tell tools apart
# ("buscar" and "consultar" read the same to a model).
_GENERIC_TEXT = """
buscar busca consultar consulta obtener obtiene ver listar lista traer revisar leer gestionar gestiona
get fetch find search lookup look query read list retrieve show handle manage process info informacion data datos
"""
_GENERIC = frozenset(_GENERIC_TEXT.split())

_NEGATION = re.compile(
    r"\b(no\s+(sirve|usar|uses|la\s+uses|lo\s+uses|es\s+para|se\s+usa|utilizar|utilices)|nunca\s+para|"
    r"not\s+(for|to\s+be\s+used)|do\s+not\s+use|don['’]?t\s+use|never\s+use|instead\s+of)\b",
    re.IGNORECASE,
)
_PRECONDITION = re.compile(
    r"\b(primero|antes|despues|requiere|precondicion|previamente|first|before|after|requires?|prerequisite|"
    r"precondition|only\s+after)\b",
    re.IGNORECASE,
)
_CONFIRMATION = re.compile(
    r"\b(confirm\w*|confirma\w*|ask\s+the\s+user|pregunta\w*\s+al\s+usuario|pide\s+confirmacion|"
    r"only\s+(if|when)|solo\s+(si|cuando))\b",
    re.IGNORECASE,
)
_INTEGER_WORDS = re.compile(r"\b(entero|enteros|integer|integers|int|numerico|numeric|whole\s+number)\b", re.IGNORECASE)
_NUMBER_WORDS = re.compile(r"\b(numero|number|decimal|float|numerico|numeric|entero|integer)\b", re.IGNORECASE)
_FORMAT_HINTS: dict[str, tuple[str, ...]] = {
    "date": ("yyyy-mm-dd", "aaaa-mm-dd", "iso 8601", "iso-8601"),
    "date-time": ("yyyy-mm-ddthh", "iso 8601", "iso-8601", "rfc 3339", "rfc3339"),
    "time": ("hh:mm", "iso 8601"),
    "email": ("email", "e-mail", "correo"),
    "uri": ("url", "uri", "http"),
    "uuid": ("uuid",),
}
_FORMAT_EXAMPLES = {
    "date": re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),
    "date-time": re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}"),
    "email": re.compile(r"\b\S+@\S+\.\w+\b"),
}


# Messages are in English, as every page and command of the product; the wording they suggest
# for a description is in the toolset's language.
_HINTS: dict[Language, dict[str, str]] = {
    "en": {
        "delimit": "not for X: use {other}",
        "precondition": "call {before} first",
        "guard": '"only after …", "confirm with the user first"',
        "integer": "integer",
        "number": "number",
        "wrong_number": "1,500.50",
    },
    "es": {
        "delimit": "NO sirve para X: usa {other}",
        "precondition": "Obtén … con {before} primero",
        "guard": '"solo si …", "confirma con el usuario antes"',
        "integer": "entero",
        "number": "número",
        "wrong_number": "1.500,50",
    },
}
_TEXT = {
    "similar": "{a} and {b} read alike ({what}, similarity {score:.2f}): say what each is for and what it is not for",
    "delimit": '{tool} has look-alikes ({tools}) but never says what it is not for: add "{hint}"',
    "delimit_pair": '{tool} never says what it is not for: add "{hint}"',
    "field": "{tool}.{field}: the description does not state its {missing}",
    "pattern": "pattern {pattern} (give an example that matches it)",
    "format": "format {fmt} (say it, e.g. {example})",
    "enum": "allowed values {values}",
    "integer": 'integer type (say "{word}" next to the field: 42, not "42" or 42.0)',
    "number": 'number type (say "{word}" next to the field: 1500.5, not "{wrong}")',
    "precondition": "{after} must come after {before} (declared pair) but its description does not say so: "
    'add "{hint}"',
    "destructive": "{tool} is destructive (its server says so) but its description states no precondition and no "
    "confirmation step: say when it may run ({hint})",
    "lookalike_names": "{a} and {b}: names that differ only in {x!r} / {y!r}, and {which} does not say it: "
    "a model will take one for the other; say what each is for and what it is not for",
    "lookalike_keys": "{a} and {b}: names that differ only in {x!r} / {y!r}, and neither description shows what "
    "its {ka} / {kb} looks like: a question's value cannot tell them apart; give an example "
    "of each and say what each is not for",
    "lookalike_shape": "{a} and {b}: descriptions of one shape ({shape}) that never say what sets them apart: "
    "say what each is for and what it is not for, naming the other",
    "confused": "{called} was called where {expected} was expected ({n} in the run{back}): read both descriptions "
    "as the model would and say what each is not for",
    "back": ", and {n} the other way",
}


def toolset_language(toolset: Toolset) -> Language:
    """The language the toolset's descriptions are written in (its messages' language)."""
    return detect_language(t.description for t in toolset.tools)


def delimitation_hint(tool: str, other: str, language: Language) -> str:
    """What a tool without negative delimitation should add about one look-alike."""
    return _TEXT["delimit_pair"].format(tool=tool, hint=_HINTS[language]["delimit"].format(other=other))


def fold(text: str) -> str:
    """Lower case without accents: "Información" and "informacion" are one word."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).lower()


def _stem(word: str) -> str:
    return word[:5]  # prefix stemming: buscar/busca, pedido/pedidos, información/informacion


def content_stems(text: str, ignore: Iterable[str] = ()) -> frozenset[str]:
    """The content words of a description, stemmed; stop words and the
    ``ignore`` words (other tools' names) left out."""
    skip = {fold(w) for w in ignore}
    words = re.findall(r"\w+", fold(text))
    return frozenset(
        _stem(w) for w in words if w not in _STOPWORDS and w not in skip and not w.isdigit() and len(w) > 1
    )


def name_tokens(name: str) -> frozenset[str]:
    """A tool name's words, generic verbs folded into one ("buscar" = "consultar")."""
    words = [w for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if w]
    return frozenset("<generic>" if fold(w) in _GENERIC else _stem(fold(w)) for w in words)


def _positive(text: str) -> str:
    """The description without what the tool is NOT for: a negative
    delimitation names the look-alike's subject on purpose and must not make
    two tools read alike."""
    kept = []
    for sentence in re.split(r"(?<=[.;!?])\s+", text):
        m = _NEGATION.search(fold(sentence))
        kept.append(sentence[: m.start()] if m else sentence)
    return " ".join(kept)


@dataclass(frozen=True)
class Similarity:
    name: float
    description: float

    @property
    def score(self) -> float:
        return round(max(self.name, self.description), 3)


def similarities(toolset: Toolset) -> dict[tuple[str, str], Similarity]:
    """How alike each pair of tools reads (keys sorted by name), 0..1 each:

    - ``name``: weighted Jaccard of the name words, generic verbs folded
      ("buscar" = "consultar"), each word weighted by its rarity among the
      names (``ln(N/df)``): a prefix every tool has (``git_``) weighs nothing,
      so ``git_branch``/``git_create_branch`` read alike by ``branch`` alone;
    - ``description``: Dice of the description's content words (stemmed, stop
      words, tool names and the negative delimitation left out), each word
      weighted by its rarity in this toolset (``ln((N+1)/df)``): words every
      description uses ("cliente", "id") do not tell tools apart.
    """
    names = [t.name for t in toolset.tools]
    stems = {t.name: content_stems(_positive(t.description), names) for t in toolset.tools}
    df: dict[str, int] = {}
    for words in stems.values():
        for w in words:
            df[w] = df.get(w, 0) + 1
    idf = {w: math.log((len(names) + 1) / d) for w, d in df.items()}
    weight = {n: sum(idf[w] for w in words) for n, words in stems.items()}
    tokens = {n: name_tokens(n) for n in names}
    name_df: dict[str, int] = {}
    for words in tokens.values():
        for w in words:
            name_df[w] = name_df.get(w, 0) + 1
    name_idf = {w: math.log(len(names) / d) for w, d in name_df.items()}
    out: dict[tuple[str, str], Similarity] = {}
    for a, b in combinations(sorted(names), 2):
        wa, wb = stems[a], stems[b]
        total = weight[a] + weight[b]
        desc = 1.0 if not wa and not wb else 2 * sum(idf[w] for w in wa & wb) / total if total else 0.0
        union = sum(name_idf[w] for w in tokens[a] | tokens[b])
        name = sum(name_idf[w] for w in tokens[a] & tokens[b]) / union if union else 0.0
        out[(a, b)] = Similarity(name=round(name, 3), description=round(desc, 3))
    return out


@dataclass(frozen=True)
class Finding:
    """One lint finding. ``tools`` names the tool first, then the tools it
    concerns (the pair, the look-alikes, or the dependency's first tool)."""

    rule: str
    tool: str
    message: str
    related: tuple[str, ...] = ()
    field: str | None = None
    score: float | None = None
    detail: dict[str, Any] = dc_field(default_factory=dict)

    @property
    def tools(self) -> tuple[str, ...]:
        return (self.tool, *self.related)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "tool": self.tool,
            "related": list(self.related),
            "field": self.field,
            "score": self.score,
            "message": self.message,
            "detail": self.detail,
        }


def states_precondition(tool: ToolSpec, before: str) -> bool:
    """The description says to call ``before`` first ("Obtén el id con A primero")."""
    text = fold(tool.description)
    return fold(before) in text and bool(_PRECONDITION.search(text))


def _negative_delimitation(tool: ToolSpec, others: Sequence[str]) -> bool:
    """The description says what the tool is not for and names another tool to use."""
    text = fold(tool.description)
    return bool(_NEGATION.search(text)) and any(fold(o) in text for o in others)


def _tokens(text: str) -> list[str]:
    return [t.strip("()[]{}.,;:!?\"'`«»“”‘’") for t in text.split()]


sre_c: Any = importlib.import_module("re._constants")  # the stdlib's regex parser (no deprecation warning)
sre_parse: Any = importlib.import_module("re._parser")
MAX_PATTERN = 500  # longer schema patterns are only looked for verbatim
MAX_TOKEN = 64  # description words longer than this are not examples
MAX_ITEMS = 64  # character positions of a pattern checked against words
MAX_WORDS = 1000  # distinct description words checked

CharTest = Callable[[str], bool]
_CATEGORIES: dict[Any, CharTest] = {
    sre_c.CATEGORY_DIGIT: str.isdigit,
    sre_c.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    sre_c.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    sre_c.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
    sre_c.CATEGORY_SPACE: str.isspace,
    sre_c.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
}
_ANCHORS = {sre_c.AT_BEGINNING, sre_c.AT_BEGINNING_STRING, sre_c.AT_END, sre_c.AT_END_STRING}
_REPEATS = {sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", sre_c.MAX_REPEAT)}


class _Unsupported(Exception):
    pass


def _between(lo: int, hi: int, negate: bool = False) -> CharTest:
    return lambda c: (lo <= ord(c) <= hi) != negate


def _any_of(tests: list[CharTest], negate: bool) -> CharTest:
    return lambda c: any(t(c) for t in tests) != negate


def _char_test(op: Any, av: Any) -> CharTest:
    """One character position of a pattern, as a predicate."""
    if op is sre_c.LITERAL:
        return _between(av, av)
    if op is sre_c.NOT_LITERAL:
        return _between(av, av, negate=True)
    if op is sre_c.ANY:
        return _between(10, 10, negate=True)  # not a newline
    if op is sre_c.IN:
        negate = False
        tests: list[CharTest] = []
        for iop, iav in av:
            if iop is sre_c.NEGATE:
                negate = True
            elif iop is sre_c.LITERAL:
                tests.append(_between(iav, iav))
            elif iop is sre_c.RANGE:
                tests.append(_between(iav[0], iav[1]))
            elif iop is sre_c.CATEGORY and iav in _CATEGORIES:
                tests.append(_CATEGORIES[iav])
            else:
                raise _Unsupported
        return _any_of(tests, negate)
    raise _Unsupported


def _flat(items: Any, out: list[tuple[CharTest, int, int]]) -> None:
    """A pattern as a flat sequence of (character test, min, max): literals,
    classes and repeats of one character; groups without repeats are
    inlined. Anything else (alternation, nested repeats, back references,
    lookaround) is not supported."""
    for op, av in items:
        if op is sre_c.AT:
            if av not in _ANCHORS:
                raise _Unsupported
        elif op in _REPEATS:
            lo, hi, sub = av
            if len(sub) != 1:
                raise _Unsupported
            ((sop, sav),) = list(sub)
            out.append((_char_test(sop, sav), lo, min(hi, MAX_TOKEN)))
        elif op is sre_c.SUBPATTERN:
            _flat(av[-1], out)
        else:
            out.append((_char_test(op, av), 1, 1))


def _template(pattern: str) -> list[tuple[CharTest, int, int]] | None:
    if len(pattern) > MAX_PATTERN:
        return None
    try:
        parsed = sre_parse.parse(pattern)
        out: list[tuple[CharTest, int, int]] = []
        _flat(parsed, out)
    except (_Unsupported, re.error, RecursionError, OverflowError, ValueError, TypeError):
        return None
    return out if len(out) <= MAX_ITEMS else None


def _fullmatch(template: list[tuple[CharTest, int, int]], token: str) -> bool:
    """Whether the token matches the flat template: the reachable positions,
    item by item, in O(len(token)) per item (no backtracking)."""
    n = len(token)
    if not sum(lo for _, lo, _ in template) <= n <= sum(hi for _, _, hi in template):
        return False
    reach = [True] + [False] * n
    for test, lo, hi in template:
        run = [0] * (n + 1)  # run[p]: how many characters from p pass the test
        for p in range(n - 1, -1, -1):
            run[p] = run[p + 1] + 1 if test(token[p]) else 0
        cover = [0] * (n + 2)  # reachable next: the union of [p + lo, p + min(hi, run[p])]
        for p in range(n + 1):
            if reach[p] and min(hi, run[p]) >= lo:
                cover[p + lo] += 1
                cover[p + min(hi, run[p]) + 1] -= 1
        depth = 0
        for p in range(n + 1):
            depth += cover[p]
            reach[p] = depth > 0
        if not any(reach):
            return False
    return reach[n]


def _mentions_pattern(description: str, pattern: str) -> bool:
    """Whether the description gives the pattern or an example of it. The
    schema's regex is never run: it is parsed, and only the simple shapes of
    identifiers (literals, character classes, repeats of one character) are
    checked against the description's words, in time linear in the pattern
    and quadratic in a word of at most ``MAX_TOKEN`` characters. Other
    patterns count as mentioned only when written out verbatim."""
    if pattern in description:
        return True
    template = _template(pattern)
    if not template:
        return False
    words = list(dict.fromkeys(t for t in _tokens(description) if t and len(t) <= MAX_TOKEN))[:MAX_WORDS]
    return any(_fullmatch(template, t) for t in words)


def _says_type(type_words: re.Pattern[str], description: str, field: str, own: str) -> bool:
    """The field's own description says its type, or the tool's description names the field and says it."""
    text = fold(description)
    return bool(type_words.search(fold(own))) or (fold(field) in text and bool(type_words.search(text)))


def _field_findings(tool: ToolSpec, lang: Language) -> list[Finding]:
    m, words = _TEXT, _HINTS[lang]
    props = tool.parameters.get("properties")
    if not isinstance(props, Mapping):
        return []
    out: list[Finding] = []
    for fname, schema in props.items():
        if not isinstance(schema, Mapping):
            continue
        own = schema.get("description")
        own = own if isinstance(own, str) else ""  # the field's own description is read with the tool's
        desc = f"{tool.description}\n{own}"
        text = fold(desc)
        missing: list[str] = []
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and not _mentions_pattern(desc, pattern):
            missing.append(m["pattern"].format(pattern=pattern))
        fmt = schema.get("format")
        if isinstance(fmt, str):
            hints = _FORMAT_HINTS.get(fmt, (fmt,))
            example = _FORMAT_EXAMPLES.get(fmt)
            if not any(h in text for h in hints) and not (example and example.search(desc)):
                example_text = hints[0].upper() if fmt.startswith("date") else fmt
                missing.append(m["format"].format(fmt=fmt, example=example_text))
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            absent = [str(v) for v in enum if fold(str(v)) not in text]
            if absent:
                missing.append(m["enum"].format(values=", ".join(absent)))
        kind = schema.get("type")
        if kind == "integer" and not _says_type(_INTEGER_WORDS, tool.description, str(fname), own):
            missing.append(m["integer"].format(word=words["integer"]))
        elif kind == "number" and not _says_type(_NUMBER_WORDS, tool.description, str(fname), own):
            missing.append(m["number"].format(word=words["number"], wrong=words["wrong_number"]))
        if missing:
            out.append(
                Finding(
                    rule="argument_format",
                    tool=tool.name,
                    field=str(fname),
                    message=m["field"].format(tool=tool.name, field=fname, missing="; ".join(missing)),
                    detail={"missing": missing},
                )
            )
    return out


_PARENS = re.compile(r"\([^()]*\)")


def _sentences(description: str) -> list[str]:
    return [fold(x) for x in re.split(r"(?<=[.;!?])\s+", _PARENS.sub(" ", _positive(description)).strip()) if x]


def _shape_words(sentences: list[str], boilerplate: set[str]) -> list[str]:
    """The words of the first clause (up to a comma, colon or "and") of the first
    sentence (folded, parentheses out) that is not the toolset's boilerplate:
    what a model reads first about this tool."""
    first = next((x for x in sentences if x not in boilerplate), "")
    clause = re.split(r"[,;:]|\s(?:and|y|e)\s", first)[0]
    return [_ARTICLES.get(w, w) for w in re.findall(r"\w+", clause)]


# An article is one slot whatever its gender, number or the sound that follows ("un pedido" / "una
# reserva", "a coupon" / "an order"): the sentence is the same.
_ARTICLES = {"una": "un", "unos": "un", "unas": "un", "la": "el", "los": "el", "las": "el", "an": "a"}


def _shape(a: list[str], b: list[str], common: Callable[[str], bool]) -> tuple[float, str]:
    """How much two word sequences are one sentence with slots (0..1), and that
    sentence with X for each slot: "busca un X por su X". Three words shared,
    one of them neither a stop word nor ``common`` (on most descriptions)."""
    if len(a) < 3 or len(b) < 3:
        return 0.0, ""
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    blocks = [m for m in matcher.get_matching_blocks() if m.size]
    shared = sum(m.size for m in blocks)
    if shared < 3 or not any(w not in _STOPWORDS and not common(w) for m in blocks for w in a[m.a : m.a + m.size]):
        return 0.0, ""
    out: list[str] = []
    i = 0
    for m in blocks:
        if m.a > i:
            out.append("X")
        out.extend(a[m.a : m.a + m.size])
        i = m.a + m.size
    if i < len(a) or blocks[-1].b + blocks[-1].size < len(b):
        out.append("X")
    return 2 * shared / (len(a) + len(b)), " ".join(out)


def _name_parts(name: str) -> list[str]:
    return [fold(w) for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name) if w]


def _differ_in_one_part(a: list[str], b: list[str]) -> tuple[list[str], list[str]] | None:
    """The one part each name has where the other differs (a shared head and tail
    around it), or None."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    x, y = a[head : len(a) - tail], b[head : len(b) - tail]
    if not x or not y or head + tail == 0:
        return None
    return x, y


def _says(description: str, words: list[str]) -> bool:
    """The description says each word (a generic verb: any generic verb)."""
    said = content_stems(_positive(description))
    return all(_stem(w) in said or (w in _GENERIC and any(g in said for g in _GENERIC_STEMS)) for w in words)


_GENERIC_STEMS = frozenset(_stem(w) for w in _GENERIC)


def _delimited_against(tool: ToolSpec, other: str) -> bool:
    """The description names ``other`` in a negation or a redirect ("NO sirve para X: usa other")."""
    text = fold(tool.description)
    return fold(other) in text and bool(_NEGATION.search(text) or _REDIRECTS.search(text))


_REDIRECTS = re.compile(r"\b(para\s+eso|en\s+su\s+lugar|instead|for\s+that)\b")


def _leads_with(description: str, part: str) -> bool:
    """A sentence of the description starts with the name's differing part: it leads with what the
    tool does differently ("Tool description: Follow a user" / "… Unfollow a user"), which a
    question's verb tells apart."""
    for piece in re.split(r"[.:;!?]", fold(_positive(description))):
        words = re.findall(r"\w+", piece)
        if words and _stem(words[0]) == _stem(part):
            return True
    return False


def _keys(tool: ToolSpec) -> list[str]:
    """The tool's required arguments, sorted."""
    required = tool.parameters.get("required")
    return sorted(str(r) for r in required) if isinstance(required, list) else []


_EXAMPLE = re.compile(r"\d|\b(e\.?g\.?|such\s+as|for\s+example|like|por\s+ejemplo|como|formato|format)\b|['\"`]")


def _shows_its_keys(tool: ToolSpec) -> bool:
    """The description, or a required field's own, shows what its value looks like (a digit, a
    quoted value, "e.g.", "such as", "formato" …)."""
    props = tool.parameters.get("properties")
    fields = props if isinstance(props, dict) else {}
    texts = [_positive(tool.description)]
    texts += [str(f.get("description", "")) for k, f in fields.items() if k in _keys(tool) and isinstance(f, dict)]
    return any(_EXAMPLE.search(fold(t)) for t in texts)


def _keys_look_alike(a: ToolSpec, b: ToolSpec) -> bool:
    """Two tools each asking for different arguments of one type (one identifier each: an order
    number and a locator), neither showing what its value looks like: the value in the question
    cannot tell them apart, only the noun can."""
    ka, kb = _keys(a), _keys(b)
    if not ka or len(ka) != len(kb) or set(ka) & set(kb):
        return False

    def kinds(tool: ToolSpec, keys: list[str]) -> list[str]:
        props = tool.parameters.get("properties")
        fields = props if isinstance(props, dict) else {}
        return sorted(str(f.get("type", "")) if isinstance(f := fields.get(k), dict) else "" for k in keys)

    return kinds(a, ka) == kinds(b, kb) and not _shows_its_keys(a) and not _shows_its_keys(b)


def lookalike_pairs(toolset: Toolset) -> list[tuple[str, str, float, dict[str, Any]]]:
    """Pairs a model will take for each other before any run (``lookalike_pair``):
    ``(a, b, score, detail)``, names sorted. Names that differ in one part (a
    word or two) and share a word that is no generic verb and not on most
    names (a prefix every tool has tells nothing),
    where a description does not say its own differing word, or (one word each,
    generic verbs counting) where they ask for different identifiers of one type
    and no description shows one (``_keys_look_alike``); or first sentences
    of one shape (word sequences matching at least ``SHAPE_THRESHOLD``, three
    words shared, one of them no stop word and not on most first sentences; a sentence three descriptions
    share, or every one, is boilerplate and skipped). Never a pair where either
    description delimits itself against the other."""
    tools = {t.name: t for t in toolset.tools}
    parts = {n: _name_parts(n) for n in tools}
    df: dict[str, int] = {}
    for words in parts.values():
        for w in set(words):
            df[w] = df.get(w, 0) + 1
    common = max(2.0, len(tools) / 2)
    sentences = {n: _sentences(t.description) for n, t in tools.items()}
    seen: dict[str, int] = {}
    for found in sentences.values():
        for x in set(found):
            seen[x] = seen.get(x, 0) + 1
    boilerplate = {x for x, k in seen.items() if k >= 3 or (k >= 2 and k == len(tools))}
    shapes = {n: _shape_words(found, boilerplate) for n, found in sentences.items()}
    word_df: dict[str, int] = {}
    for words in shapes.values():
        for w in set(words):
            word_df[w] = word_df.get(w, 0) + 1

    def on_most(word: str) -> bool:
        return word_df.get(word, 0) > common

    for words in shapes.values():  # a lead every description has ("Tool description:") is no shape
        while words and on_most(words[0]) and words[0] not in _STOPWORDS:
            words.pop(0)
    out: list[tuple[str, str, float, dict[str, Any]]] = []
    for a, b in combinations(sorted(tools), 2):
        ta, tb = tools[a], tools[b]
        if _delimited_against(ta, b) or _delimited_against(tb, a):
            continue
        detail: dict[str, Any] = {}
        score = 0.0
        differ = _differ_in_one_part(parts[a], parts[b])
        if differ is not None:
            xs, ys = differ
            shared = [w for w in parts[a] if w in parts[b]]
            sides: list[tuple[str, list[str]]] = [(a, xs), (b, ys)]
            unsaid = [n for n, part in sides if not _says(tools[n].description, part)]
            telling = [w for w in shared if df[w] <= common and w not in _GENERIC]
            if len(xs) <= 2 and len(ys) <= 2 and telling and unsaid:
                detail.update({"differ": ["_".join(xs), "_".join(ys)], "unsaid": unsaid})
                score = 1.0 - 1.0 / (len(shared) + 1)
            elif (
                len(xs) == 1
                and len(ys) == 1
                and any(df[w] <= common for w in shared)
                and not _leads_with(ta.description, xs[0])
                and not _leads_with(tb.description, ys[0])
                and _keys_look_alike(ta, tb)
            ):
                detail.update({"differ": [xs[0], ys[0]], "keys": [_keys(ta), _keys(tb)]})
                score = 1.0 - 1.0 / (len(shared) + 1)
        ratio, shape = _shape(shapes[a], shapes[b], on_most)
        if ratio >= SHAPE_THRESHOLD:
            detail["shape"] = shape
            score = max(score, ratio)
        if detail:
            out.append((a, b, round(score, 3), detail))
    return out


def lint_toolset(
    toolset: Toolset,
    dependencies: Iterable[tuple[str, str]] = (),
    *,
    similar: float = SIMILAR_THRESHOLD,
    lookalike: float = LOOKALIKE_THRESHOLD,
    confusions: Mapping[tuple[str, str], int] | None = None,
    language: Language | None = None,
) -> list[Finding]:
    """Every finding of the rules, ranked: by score (highest first; findings
    without a score after), then rule, tool, related tools and field.
    ``dependencies`` adds pairs to the toolset's own (a suite's and its
    cases'). A pair is a look-alike exactly when its score is at least
    ``lookalike``, and reads alike exactly when at least ``similar``.

    ``confusions`` (a run's cells, ``(expected, called) -> count``) adds a
    ``confused_pair`` finding per pair of the toolset's tools the run
    confused, makes each such pair a look-alike whatever its score, and
    ranks the findings about confused pairs first (most confused first).
    Suggested wording is in ``language`` (default: the toolset's)."""
    lang = language or toolset_language(toolset)
    m, hints = _TEXT, _HINTS[lang]
    tools = list(toolset.tools)
    names = [t.name for t in tools]
    known = set(names)
    confused: dict[tuple[str, str], int] = {}
    for (e, c), n in (confusions or {}).items():
        if n > 0 and e != c and e in known and c in known:
            key = (min(e, c), max(e, c))
            confused[key] = confused.get(key, 0) + n
    findings: list[Finding] = []
    lookalikes: dict[str, list[tuple[str, float]]] = {n: [] for n in names}
    for (a, b), sim in similarities(toolset).items():
        if sim.score >= lookalike or (a, b) in confused:
            lookalikes[a].append((b, sim.score))
            lookalikes[b].append((a, sim.score))
        if sim.score >= similar:
            what = "descriptions" if sim.description >= sim.name else "names"
            findings.append(
                Finding(
                    rule="similar_pair",
                    tool=a,
                    related=(b,),
                    score=sim.score,
                    message=m["similar"].format(a=a, b=b, what=what, score=sim.score),
                    detail={"name_similarity": sim.name, "description_similarity": sim.description},
                )
            )
        if (a, b) in confused:
            cells = confusions or {}
            ab, ba = cells.get((a, b), 0), cells.get((b, a), 0)
            expected, called = (a, b) if ab >= ba else (b, a)
            back = m["back"].format(n=min(ab, ba)) if min(ab, ba) else ""
            findings.append(
                Finding(
                    rule=CONFUSED,
                    tool=expected,
                    related=(called,),
                    score=sim.score,
                    message=m["confused"].format(called=called, expected=expected, n=max(ab, ba), back=back),
                    detail={
                        "confusions": ab + ba,
                        "a_called_as_b": ab,
                        "b_called_as_a": ba,
                        "name_similarity": sim.name,
                        "description_similarity": sim.description,
                    },
                )
            )
    for a, b, score, detail in lookalike_pairs(toolset) if lookalike < 1.0 else []:
        if "shape" in detail:
            message = m["lookalike_shape"].format(a=a, b=b, shape=repr(detail["shape"]))
        elif "keys" in detail:
            x, y = detail["differ"]
            message = m["lookalike_keys"].format(
                a=a, b=b, x=x, y=y, ka=", ".join(detail["keys"][0]), kb=", ".join(detail["keys"][1])
            )
        else:
            x, y = detail["differ"]
            message = m["lookalike_names"].format(a=a, b=b, x=x, y=y, which=" and ".join(detail["unsaid"]))
        findings.append(
            Finding(
                rule="lookalike_pair", tool=a, related=(b,), message=message, detail={**detail, "similarity": score}
            )
        )
    for t in sorted(tools, key=lambda t: t.name):
        alike = sorted(lookalikes[t.name], key=lambda x: (-x[1], x[0]))
        if alike and not _negative_delimitation(t, [n for n in names if n != t.name]):
            top = [n for n, _ in alike]
            findings.append(
                Finding(
                    rule="no_negative_delimitation",
                    tool=t.name,
                    related=tuple(top),
                    score=alike[0][1],
                    detail={"similarity": dict(alike)},
                    message=m["delimit"].format(
                        tool=t.name, tools=", ".join(top), hint=hints["delimit"].format(other=top[0])
                    ),
                )
            )
    for t in sorted(tools, key=lambda t: t.name):
        findings.extend(_field_findings(t, lang))
    pairs = dict.fromkeys([*toolset.dependencies, *dependencies])
    for before, after in sorted(pairs):
        tool = toolset.get(after)
        if tool is None or before not in toolset:
            continue
        if not states_precondition(tool, before):
            findings.append(
                Finding(
                    rule="missing_precondition",
                    tool=after,
                    related=(before,),
                    message=m["precondition"].format(
                        after=after, before=before, hint=hints["precondition"].format(before=before)
                    ),
                )
            )
    for t in sorted(tools, key=lambda t: t.name):
        text = fold(t.description)
        if t.destructive and not (_PRECONDITION.search(text) or _CONFIRMATION.search(text)):
            findings.append(
                Finding(
                    rule="unguarded_destructive",
                    tool=t.name,
                    message=m["destructive"].format(tool=t.name, hint=hints["guard"]),
                    detail={"annotations": dict(t.annotations or {})},
                )
            )
    order = {r: i for i, r in enumerate((CONFUSED, *RULES))}

    def observed(f: Finding) -> int:
        return max([confused.get((min(f.tool, r), max(f.tool, r)), 0) for r in f.related] or [0])

    findings.sort(
        key=lambda f: (
            -observed(f),
            f.score is None,
            -(f.score or 0.0),
            order[f.rule],
            f.tool,
            f.related,
            f.field or "",
        )
    )
    return findings[:MAX_FINDINGS]


def lint_json(
    toolset: Toolset,
    findings: Sequence[Finding],
    *,
    language: Language | None = None,
    run: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``toollens lint --json`` object (a public contract: keys are added, never renamed)::

    {"toolset": str, "version": str, "label": str, "tools": int, "language": "es"|"en",
     "counts": {rule: int for each of RULES (+ "confused_pair" with a run)},
     "findings": [{"rule", "tool", "related": [str], "field": str|null,
                   "score": float|null, "message": str, "detail": {}}],
     "run": {...}  (only with a run: what ``run`` holds)}
    """
    counts = {r: 0 for r in (*RULES, *((CONFUSED,) if run is not None else ()))}
    for f in findings:
        counts[f.rule] = counts.get(f.rule, 0) + 1
    out = {
        "toolset": toolset.name,
        "version": toolset.version,
        "label": toolset.label,
        "tools": len(toolset),
        "language": language or toolset_language(toolset),
        "counts": counts,
        "findings": [f.to_dict() for f in findings],
    }
    if run is not None:
        out["run"] = dict(run)
    return out


class Paired(Protocol):
    """A finding as the core or a page shows it: a tool and the tools it concerns."""

    @property
    def rule(self) -> str: ...

    @property
    def tool(self) -> str: ...

    @property
    def related(self) -> Sequence[str]: ...

    @property
    def score(self) -> float | None: ...

    @property
    def detail(self) -> dict[str, Any]: ...


def pair_score(f: Paired, other: str) -> float:
    """How alike the finding's tool and ``other`` read (a finding naming
    several look-alikes keeps each one's score in ``detail.similarity``)."""
    scores = f.detail.get("similarity")
    if isinstance(scores, dict) and isinstance(scores.get(other), (int, float)):
        return float(scores[other])
    return f.score or 0.0


F = TypeVar("F", bound=Paired)


@dataclass
class LintPair(Generic[F]):
    """Two tools (sorted by name): the findings about the pair and how often
    each was called where the other was expected (confusion cells)."""

    a: str
    b: str
    a_called_as_b: int = 0  # expected a, called b
    b_called_as_a: int = 0  # expected b, called a
    findings: list[F] = dc_field(default_factory=list)

    @property
    def score(self) -> float:
        """The pair's similarity as its findings give it (0 for a pair found only by a dependency)."""
        return max([pair_score(f, self.b if f.tool == self.a else self.a) for f in self.findings] or [0.0])


def lint_pairs(
    findings: Iterable[F], confusions: Mapping[tuple[str, str], int] | None = None, tools: Iterable[str] = ()
) -> list[LintPair[F]]:
    """Every finding about a pair of tools filed under that pair (a finding
    naming several tools under each of its pairs), beside the confusion
    cells ``(expected, called) -> count`` of the pair in both directions; a
    confused pair of known ``tools`` with no finding is listed too. Ranked:
    most confused first, then highest score, then names."""
    cells = confusions or {}
    known = set(tools)
    rows: dict[tuple[str, str], LintPair[F]] = {}
    for f in findings:
        for r in f.related:
            a, b = min(f.tool, r), max(f.tool, r)
            rows.setdefault((a, b), LintPair(a, b)).findings.append(f)
    for (e, c), n in cells.items():
        if n and e != c and e in known and c in known:
            rows.setdefault((min(e, c), max(e, c)), LintPair(min(e, c), max(e, c)))
    order = {r: i for i, r in enumerate((CONFUSED, *RULES))}
    for (a, b), row in rows.items():
        row.a_called_as_b, row.b_called_as_a = cells.get((a, b), 0), cells.get((b, a), 0)
        row.findings.sort(key=lambda f: (order.get(f.rule, len(order)), f.tool))
    return sorted(rows.values(), key=lambda p: (-(p.a_called_as_b + p.b_called_as_a), -p.score, p.a, p.b))


def load_lint_target(path: str | Path) -> tuple[Toolset, list[tuple[str, str]]]:
    """A toolset file, or a suite file: its toolset plus every dependency
    pair the suite and its cases declare (the toolset's own ride along)."""
    p = Path(path)
    head = p.read_text(encoding="utf-8", errors="replace")[:1_000_000] if p.is_file() else ""
    if re.search(r'^cases\s*:|"cases"\s*:', head, re.MULTILINE):
        suite = load_suite(p)
        pairs: dict[tuple[str, str], None] = dict.fromkeys(suite.dependencies)
        for case in suite.cases:
            pairs.update(dict.fromkeys(case.dependencies))
        return suite.toolset, list(pairs)
    return load_toolset(p), []
