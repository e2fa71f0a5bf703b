"""How the simulated agent reads a toolset: the way the course says a model
does, from each tool's name and description alone, against the question.

- **Match.** A tool's score for a question is the summed rarity of the
  content words they share (accents folded, stop words out, generic verbs
  such as "buscar"/"consultar"/"get" folded into one, words cut to five
  letters, Spanish and English alike). Rarity is ``ln(N / df)`` over the
  tools' names and descriptions: a word every tool has weighs nothing, so a
  sentence pasted into every description changes no score difference.
  Other tools' names inside a description are references, not content.
- **Negative delimitation.** A sentence saying what the tool is *not* for and
  naming the tool to use ("NO sirve para X: usa Y", "not for X: use Y",
  "para eso usa Y", "si ya está despachado, usa Y") is no content of the
  tool: by how much the question speaks of X (its words the tool's own text
  lacks), up to the tool's whole match, it moves the tool's score to the
  named tools in equal shares. It also tells the pair apart whatever the
  question: a clause naming one tool counts fully, one naming every other
  tool counts nothing. Words after a bare negation ("NO el RUT") are no
  content either.
- **Choice.** The expected tool competes with every tool the case does not
  expect (the words only the case's other steps' tools hold are left to
  them), each weighted by ``exp(BETA × (score - expected's score))``
  (``× (1 - DELIMITED × how clearly a clause tells the pair apart)``);
  ``confusion`` × the rivals' share of the weight is the chance a rival wins.

It stands in for a model: it does not read schemas, examples or the system
prompt, and it does not reason about the order of the steps.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from app.core.lint import _GENERIC, _NEGATION, _STOPWORDS, fold
from app.core.tools import Toolset

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
# A redirect without a negation: "para eso usa Y", "use Y instead", "si ya está despachado, usa Y".
_DELIMITATION = re.compile(
    r"\b(para\s+eso|para\s+esto|en\s+su\s+lugar|for\s+that|instead|(si|if)\b[^.;:]*?\b(usa|use))\b")
_WORD = re.compile(r"\w+")
# What a description says the tool does not take or do ("NO el RUT", "sin puntos", "not a name"): no content.
_NEGATED = re.compile(r"\b(no|ni|not|nor|never|nunca|sin|without)\b[^,;:.()]*")


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
    ``names`` it mentions are left out (references, not content)."""
    out: set[str] = set()
    for token in _WORD.findall(fold(text)):
        if token in names:
            continue
        for word in token.split("_"):
            if len(word) < 2 or word.isdigit() or word in _STOPWORDS or word in _NOISE:
                continue
            if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
                word = word[:-1]  # plurals, "gets", "shows"
            out.add("<generic>" if word in _GENERIC else stem(word))
    return frozenset(out)


@dataclass(frozen=True)
class Clause:
    """A negative delimitation: what the tool is not for, and the tools named instead."""

    about: frozenset[str]
    use: tuple[str, ...]


@dataclass(frozen=True)
class Reading:
    """A toolset as the agent reads it (see the module docstring)."""

    names: tuple[str, ...]
    content: dict[str, frozenset[str]]  # tool -> its terms (name and description, delimitations left out)
    clauses: dict[str, tuple[Clause, ...]]
    rarity: dict[str, float]  # term -> ln(N / df) over the tools' names and descriptions
    refs: frozenset[str] = frozenset()  # the tool names, folded (references in a text, not content)

    def weight(self, term: str) -> float:
        return self.rarity.get(term, math.log(len(self.names)) if self.names else 0.0)

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
        asked = terms(question, self.refs)
        for other in exclude - {expected}:
            asked -= self.content.get(other, frozenset()) - self.content[expected]
        scores = self.scores(asked)
        base = scores[expected]
        return {n: math.exp(BETA * (s - base)) * (1 - DELIMITED * self.delimited(expected, n))
                for n, s in scores.items() if n != expected and n not in exclude}


def confusion_chance(rivals: dict[str, float], confusion: float) -> float:
    """The chance a rival wins: ``confusion`` × the rivals' share of the weight."""
    total = sum(rivals.values())
    return confusion * total / (1 + total)


def read_toolset(toolset: Toolset) -> Reading:
    return _read(tuple((t.name, t.description) for t in toolset.tools))


@lru_cache(maxsize=64)
def _read(tools: tuple[tuple[str, str], ...]) -> Reading:
    names = tuple(n for n, _ in tools)
    folded = {fold(n): n for n in names}
    refs = frozenset(folded)
    content: dict[str, frozenset[str]] = {}
    clauses: dict[str, tuple[Clause, ...]] = {}
    for name, description in tools:
        words = set(name_terms(name))
        found: list[Clause] = []
        for sentence in re.split(r"(?<=[.;!?])\s+", description):
            text = fold(sentence)
            negated = _NEGATION.search(text)
            start = negated.start() if negated else None
            if start is None:
                redirect = _DELIMITATION.search(text)
                if redirect and _named(text, refs, name):  # "si ya está despachado, usa Y"; "para eso usa Y"
                    start = redirect.start() if redirect.group(2) else 0
            named = [folded[r] for r in _named(text[start:], refs, name)] if start is not None else []
            if start is None or not named:
                words |= terms(_NEGATED.sub(" ", text), refs)
                continue
            words |= terms(_NEGATED.sub(" ", text[:start]), refs)
            found.append(Clause(about=terms(text[start:], refs), use=tuple(sorted(named))))
        content[name] = frozenset(words)
        clauses[name] = tuple(found)
    df: dict[str, int] = {}
    for name in names:
        for w in content[name].union(*(c.about for c in clauses[name])):
            df[w] = df.get(w, 0) + 1
    rarity = {w: math.log(len(names) / d) for w, d in df.items()}
    return Reading(names=names, content=content, clauses=clauses, rarity=rarity, refs=refs)


def _named(text: str, refs: frozenset[str], own: str) -> list[str]:
    """The tool names (folded) a text mentions, its own left out."""
    own_folded = fold(own)
    return [r for r in sorted(refs) if r != own_folded and r in text
            and re.search(rf"(?<![\w]){re.escape(r)}(?![\w])", text)]
