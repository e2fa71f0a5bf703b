"""Which language a toolset, a suite or a message is written in: Spanish or
English, the two the product writes its messages, hints and phrase lists in.

Decided by counting common function words of each language (accents folded),
so it needs no model and no data file; a text with no cue at all reads as
English, the language most toolsets are written in."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Literal

Language = Literal["es", "en"]
LANGUAGES: tuple[Language, ...] = ("es", "en")

_WORD = re.compile(r"[a-z]+")

# Short, frequent words that are not words of the other language (no "a", "no", "con").
_CUES: dict[Language, frozenset[str]] = {
    "es": frozenset(
        {
            "el",
            "la",
            "los",
            "las",
            "un",
            "una",
            "unos",
            "unas",
            "de",
            "del",
            "y",
            "o",
            "que",
            "por",
            "para",
            "su",
            "sus",
            "es",
            "son",
            "se",
            "lo",
            "al",
            "como",
            "pero",
            "mas",
            "sin",
            "sobre",
            "entre",
            "cuando",
            "donde",
            "este",
            "esta",
            "estos",
            "esto",
            "ese",
            "esa",
            "usa",
            "sirve",
            "obtiene",
            "devuelve",
            "busca",
            "cliente",
            "numero",
            "fecha",
            "formato",
            "tu",
            "mi",
            "hay",
            "ya",
            "tambien",
            "puede",
            "debe",
        }
    ),
    "en": frozenset(
        {
            "the",
            "of",
            "and",
            "or",
            "to",
            "for",
            "with",
            "is",
            "are",
            "be",
            "by",
            "from",
            "this",
            "that",
            "these",
            "it",
            "its",
            "an",
            "as",
            "on",
            "at",
            "use",
            "not",
            "returns",
            "return",
            "get",
            "gets",
            "which",
            "when",
            "where",
            "your",
            "you",
            "will",
            "can",
            "must",
            "if",
            "into",
            "given",
            "user",
            "date",
            "number",
        }
    ),
}


def fold(text: str) -> str:
    """Lower case without accents, typographic apostrophes straight (``"Número"`` → ``"numero"``,
    ``"won’t"`` → ``"won't"``)."""
    decomposed = unicodedata.normalize("NFKD", text.lower().replace("’", "'"))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def language_scores(texts: Iterable[str]) -> dict[Language, int]:
    """How many cue words of each language the texts hold."""
    scores: dict[Language, int] = {"es": 0, "en": 0}
    for text in texts:
        for word in _WORD.findall(fold(text)):
            for lang in LANGUAGES:
                if word in _CUES[lang]:
                    scores[lang] += 1
    return scores


def detect_language(texts: Iterable[str]) -> Language:
    """``"es"`` when the texts hold more Spanish cue words than English ones, else ``"en"``."""
    scores = language_scores(texts)
    return "es" if scores["es"] > scores["en"] else "en"
