"""Recovery after tool errors (F4): the outcome of a faulted trajectory and
the agent's immediate reaction to each error.

The deterministic classifier follows docs/metrics.md: ``recovered`` when the answer
carries the expected datum and a successful observation carried it;
``gave_up`` when it has no datum and says honestly that it could not;
``hallucinated`` when it states the datum with no successful observation
behind it, or a concrete value (number, id, amount, date) found neither in
the question nor in any observation; ``confused`` otherwise. Amounts are
normalised ("$142.900", "142,900" and "142900" are one value).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from app.core.records import TRANSIENT_KINDS
from app.core.tolerance import fold, parse_date

OUTCOMES = ("recovered", "gave_up", "hallucinated", "confused")
REACTIONS = ("retry_same", "retry_corrected", "switch_tool", "gave_up", "answered")

DEFAULT_GIVE_UP_PHRASES = (
    # Spanish
    "no pude", "no puedo", "no logre", "no fue posible", "no es posible", "no esta disponible",
    "no estan disponibles", "intenta mas tarde", "intentalo mas tarde", "intente mas tarde",
    "vuelve a intentar", "hubo un problema", "ocurrio un error", "se produjo un error",
    "no tengo acceso", "no consegui", "no se pudo", "fallo la consulta", "sin poder",
    # English
    "could not", "couldn't", "cannot", "can't", "unable to", "was not able", "wasn't able",
    "try again later", "not available", "unavailable", "something went wrong", "an error occurred",
    "failed to", "i'm sorry, but i", "no access",
)

_MIN_DIGITS = 3  # shorter bare numbers ("paso 2", "3 días") are prose, not data

# Dates and numbers: patterns that begin with a character class, so that the
# regular-expression engine skips to the next digit in C instead of trying the
# whole pattern at every position (2.5-3.7x faster on tau-bench's tool outputs).
# ``\b`` before a first character that is a word character is written as a
# look-behind after it: ``\d(?<!\w\d)`` is ``\b\d``. Each matches exactly what
# its plain form matches (tests/test_outcome.py keeps the plain forms and
# compares them on real traces and random text):
#   dates   \b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}\b | \b\d{1,2}[-/.]\d{1,2}[-/.]\d{4}\b
#           | \b\d{1,2}\s+de\s+[a-z]+\s+(?:de|del)\s+\d{4}\b          (05/03/2024, 5 de marzo de 2024)
#   numbers \d+(?:[.,\s]\d{3})*(?:[.,]\d+)?|\d+
_DATE_RX = re.compile(
    r"\d(?<!\w\d)(?:\d{3}[-/.]\d{1,2}[-/.]\d{1,2}\b|\d?[-/.]\d{1,2}[-/.]\d{4}\b"
    r"|\d?\s+de\s+[a-z]+\s+(?:de|del)\s+\d{4}\b)"
)
# ids: letters and digits joined ("NC-40021", "PED-12345", "HAT001"), RUTs ("12345678-9")
_ID_RX = re.compile(
    r"\b(?=[a-z0-9_-]*\d)(?=[a-z0-9_-]*[a-z])[a-z][a-z0-9_]*(?:-[a-z0-9_]+)+\b"  # NC-40021, PED-12345
    r"|\b[a-z]+\d+[a-z0-9]*\b"  # HAT001
    r"|\b\d{6,9}-[\dk]\b"  # RUT 12345678-9
)
_NUM_RX = re.compile(r"\d\d*(?:[.,\s]\d{3})*(?:[.,]\d+)?")


_NUMBER_PARTS = re.compile(r"(\d+(?:[.,\s]\d{3})*)(?:([.,])(\d+))?")
_NON_DIGITS = re.compile(r"\D")
_SEPARATOR = re.compile(r"[.,\s]")
_DIGIT_RUN = re.compile(r"\d+")


@lru_cache(maxsize=2048)
def canonical_number(token: str) -> str:
    """A number's canonical spelling: thousands separators dropped (a ``.``
    ``,`` or space followed by exactly three digits), decimals kept without
    trailing zeros. "$142.900" -> "142900", "142.900,50" -> "142900.5"."""
    t = token.strip().replace("\u00a0", " ")
    m = _NUMBER_PARTS.fullmatch(t)
    if not m:
        return _NON_DIGITS.sub("", t)
    whole, sep, frac = m[1], m[2], m[3]
    if sep and frac is not None and len(frac) == 3 and not _SEPARATOR.search(whole) and sep in ".,":
        # "142.900" alone: a thousands group, the common way amounts are written in Spanish
        whole, frac = whole + frac, None
    digits = _NON_DIGITS.sub("", whole).lstrip("0") or "0"
    frac = (frac or "").rstrip("0")
    return f"{digits}.{frac}" if frac else digits


@dataclass(frozen=True, slots=True)
class Values:
    """Concrete values found in a text: canonical numbers, ids, ISO dates."""

    numbers: frozenset[str]
    ids: frozenset[str]
    dates: frozenset[str]

    def all(self) -> set[str]:
        return set(self.numbers) | set(self.ids) | set(self.dates)


_CACHE_TEXT = 1024  # longer texts are not kept by the caches: memory stays flat


def extract_values(text: str, *, min_digits: int = _MIN_DIGITS) -> Values:
    """Find the concrete values a text states. Dates first, then ids, then
    numbers (only those with at least ``min_digits`` digits)."""
    if len(text) <= _CACHE_TEXT:
        return _extract_cached(text, min_digits)
    return _extract(text, min_digits)


@lru_cache(maxsize=2048)
def _extract_cached(text: str, min_digits: int) -> Values:
    return _extract(text, min_digits)


def _extract(text: str, min_digits: int) -> Values:
    t = fold(text)
    dates: set[str] = set()
    for m in _DATE_RX.finditer(t):
        d = parse_date(m.group(0))
        if d is not None:
            dates.add(d.isoformat())
    t = _DATE_RX.sub(" ", t)
    ids = {m.group(0) for m in _ID_RX.finditer(t)}
    numbers: set[str] = set()
    for m in _NUM_RX.finditer(t):
        token = m.group(0).strip()
        canon = canonical_number(token)
        if sum(c.isdigit() for c in canon) >= min_digits:
            numbers.add(canon)
    return Values(frozenset(numbers), frozenset(ids), frozenset(dates))


@lru_cache(maxsize=2048)
def _ground_cached(text: str) -> frozenset[str]:
    return _ground(text)


def _ground(text: str) -> frozenset[str]:
    """The values one text grounds (an observation is grounded once, not once per trajectory)."""
    vals = extract_values(text, min_digits=1)
    out = vals.all()
    for ident in vals.ids:
        out.update(canonical_number(d) for d in _DIGIT_RUN.findall(ident))
    return frozenset(out)


def mentions(text: str, datum: str) -> bool:
    """Whether ``text`` states ``datum``: numbers compared in canonical form,
    anything else as a case- and accent-insensitive substring."""
    d = datum.strip()
    if _NUM_RX.fullmatch(d.lstrip("$€£ ").strip()):
        want = canonical_number(d.lstrip("$€£ ").strip())
        return want in extract_values(text, min_digits=1).numbers
    return fold(d) in fold(text)


def match_give_up(answer: str, phrases: Sequence[str]) -> str | None:
    """The first give-up phrase the answer contains (case and accents ignored)."""
    if not answer:
        return None
    folded = fold(answer)
    for phrase, needle in _folded_phrases(tuple(phrases)):
        if needle in folded:
            return phrase
    return None


@lru_cache(maxsize=64)
def _folded_phrases(phrases: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((p, fold(p)) for p in phrases)


@dataclass
class OutcomeResult:
    """An outcome and the evidence for it."""

    outcome: str
    evidence: dict[str, Any] = field(default_factory=dict)


def classify_outcome(
    *,
    answer: str,
    question: str,
    observations: Sequence[tuple[int, str, bool]],
    fault_index: int,
    expected_datum: Sequence[str] | None,
    give_up_phrases: Sequence[str],
    reward: float | None = None,
) -> OutcomeResult:
    """Classify what a faulted trajectory ended in.

    ``observations`` holds ``(call index, text, ok)`` for every call, error
    messages included (``ok`` False). ``reward`` from an imported benchmark
    decides success when present; without a datum or a reward, success means
    a successful observation after the fault and a grounded, non-give-up
    answer.
    """
    ok_after = [text for i, text, ok in observations if ok and i > fault_index]
    ok_any = [text for _, text, ok in observations if ok]
    stated = extract_values(answer).all()
    ungrounded = _ungrounded(stated, [question, *(text for _, text, _ in observations)])
    phrase = match_give_up(answer, give_up_phrases)
    evidence: dict[str, Any] = {"ungrounded_values": ungrounded, "give_up_phrase": phrase}

    if expected_datum:
        said = [d for d in expected_datum if mentions(answer, d)]
        evidence["datum_in_answer"] = said[0] if said else None
        if said:
            carried_after = any(mentions(o, d) for o in ok_after for d in said)
            carried_any = carried_after or any(mentions(o, d) for o in ok_any for d in said)
            evidence["datum_observed"] = "after_fault" if carried_after else ("before_fault" if carried_any else None)
            if not carried_any or ungrounded:
                return OutcomeResult("hallucinated", evidence)
            if carried_after:
                return OutcomeResult("recovered", evidence)
            return OutcomeResult("confused", evidence)  # the datum predates the fault: not a recovery
        if ungrounded:
            return OutcomeResult("hallucinated", evidence)
        if phrase:
            return OutcomeResult("gave_up", evidence)
        return OutcomeResult("confused", evidence)

    if reward is not None:
        evidence["reward"] = reward
        if reward >= 1:
            return OutcomeResult("recovered", evidence)
    if ungrounded:
        return OutcomeResult("hallucinated", evidence)
    if phrase:
        return OutcomeResult("gave_up", evidence)
    if reward is None and ok_after and answer.strip():
        return OutcomeResult("recovered", evidence)
    return OutcomeResult("confused", evidence)


def _ungrounded(stated: set[str], texts: Sequence[str]) -> list[str]:
    """The stated values that no text grounds, sorted. The texts are read
    latest first, and only until every value is grounded: a value grounded by
    some texts stays grounded by more of them, so this is what grounding
    against all of them gives. An answer that states no value reads none."""
    if not stated:
        return []
    left = stated
    grounded: set[str] = set()
    for text in reversed(texts):
        grounded |= _ground_cached(text) if len(text) <= _CACHE_TEXT else _ground(text)
        left = {v for v in left if v not in grounded and not _inside_ground(v, grounded)}
        if not left:
            return []
    return sorted(left)


def _inside_ground(value: str, grounded: set[str]) -> bool:
    """An id counts as grounded when all its digit runs are (e.g. the answer
    writes "nota 40021" and the observation "NC-40021")."""
    runs = _DIGIT_RUN.findall(value)
    return bool(runs) and not value.replace(".", "").isdigit() and all(
        canonical_number(r) in grounded for r in runs
    )


@dataclass(frozen=True, slots=True)
class Reaction:
    """The agent's immediate reaction to an error at call ``index``."""

    index: int
    error_kind: str
    reaction: str
    acceptable: bool


def reaction_to(
    index: int,
    error_kind: str,
    names: Sequence[str],
    arguments: Sequence[Any],
    answer: str,
    give_up_phrases: Sequence[str],
) -> Reaction:
    """What the agent did right after the error of call ``index``.

    ``retry_same`` is acceptable only after a transient fault (timeout, 429,
    503); whether an answer was honest is the outcome's
    job, not the reaction's."""
    nxt = index + 1
    if nxt < len(names):
        if names[nxt] == names[index]:
            same = arguments[nxt] == arguments[index]
            kind = "retry_same" if same else "retry_corrected"
            return Reaction(index, error_kind, kind, not same or error_kind in TRANSIENT_KINDS)
        return Reaction(index, error_kind, "switch_tool", True)
    if match_give_up(answer, give_up_phrases):
        return Reaction(index, error_kind, "gave_up", True)
    return Reaction(index, error_kind, "answered", True)
