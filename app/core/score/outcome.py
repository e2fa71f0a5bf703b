"""Recovery after tool errors (F4): the outcome of a faulted trajectory and
the agent's immediate reaction to each error (docs/outcomes.md).

The outcome is judged on what the agent said after the fault, never before:
``hallucinated`` when that states the expected datum with no successful
observation behind it, or a concrete value (number, id, amount, date) that
nothing grounds (``app/core/score/grounding.py``), or claims the result of a
call that failed and never succeeded afterwards ("tu hora quedó agendada"
after the booking failed: ``find_claim``); ``recovered`` when the
trajectory still succeeds (its reward is 1, or its case passes: every
expected step done by a call that succeeded); ``gave_up``
when it stops honestly (says it could not, hands the conversation to a
person, or the record says it gave up); ``confused`` otherwise (also a run
that ends on the error, saying nothing). Amounts are normalised ("$142.900",
"142,900" and "142900" are one value).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from app.core.language import detect_language
from app.core.records import TRANSIENT_KINDS
from app.core.score.grounding import Grounding, Source, ground
from app.core.suites.tolerance import fold, parse_date

OUTCOMES = ("recovered", "gave_up", "hallucinated", "confused")
REACTIONS = ("retry_same", "retry_corrected", "switch_tool", "ignored_error", "gave_up", "answered", "stopped")

DEFAULT_GIVE_UP_PHRASES = (
    # Spanish
    "no pude",
    "no puedo",
    "no logre",
    "no fue posible",
    "no es posible",
    "no esta disponible",
    "no estan disponibles",
    "intenta mas tarde",
    "intentalo mas tarde",
    "intente mas tarde",
    "vuelve a intentar",
    "hubo un problema",
    "ocurrio un error",
    "se produjo un error",
    "no tengo acceso",
    "no consegui",
    "no se pudo",
    "fallo la consulta",
    "sin poder",
    # English
    "could not",
    "couldn't",
    "cannot",
    "can't",
    "unable to",
    "was not able",
    "wasn't able",
    "try again later",
    "not available",
    "unavailable",
    "something went wrong",
    "an error occurred",
    "failed to",
    "i'm sorry, but i",
    "no access",
)

# What an agent writes when it tells the user that a step failed (beside the
# give-up phrases): its reaction to the error is then an honest report, not an answer.
REPORT_PHRASES = (
    # English
    "issue",
    "error",
    "problem",
    "not enough",
    "insufficient",
    "not sufficient",
    "no longer available",
    "not eligible",
    "cannot be used",
    "can't be used",
    "failed",
    "did not work",
    "didn't work",
    "not found",
    # Spanish
    "problema",
    "no hay suficiente",
    "insuficiente",
    "no alcanza",
    "fallo",
    "no funciono",
    "no se encontro",
)

# What an agent writes when it tells the user that a step worked, per language
# (app/core/language.py picks one from the message); a suite adds its own
# (``success_phrases``). A sentence with one of them claims a step's result
# when it also names the failed tool's action, or when no call succeeded
# after the error at all (docs/outcomes.md).
DEFAULT_SUCCESS_PHRASES: dict[str, tuple[str, ...]] = {
    "es": (
        "listo",
        "quedo",
        "quedaron",
        "ya esta",
        "ya estan",
        "exitosamente",
        "con exito",
        "correctamente",
        "ha sido",
        "han sido",
        "se ha ",
        "se han ",
        "fue ",
        "fueron ",
        "he realizado",
        "confirmad",
        "realizad",
    ),
    "en": (
        "successfully",
        "has been",
        "have been",
        "is now",
        "are now",
        "all set",
        "all done",
        "done",
        "i've ",
        "i have ",
        "went through",
        "is confirmed",
        "are confirmed",
        "completed",
        "is complete",
        "are complete",
        "is processed",
        "is all set",
        "is done",
    ),
}

MIN_DIGITS = 3  # shorter bare numbers ("paso 2", "3 días") are prose, not data

# Dates and numbers: patterns that begin with a character class, so that the
# regular-expression engine skips to the next digit in C instead of trying the
# whole pattern at every position (2.5-3.7x faster on tau-bench's tool outputs).
# ``\b`` before a first character that is a word character is written as a
# look-behind after it: ``\d(?<!\w\d)`` is ``\b\d``. Each matches exactly what
# its plain form matches (tests/core/test_outcome.py keeps the plain forms and
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
# times of day: "07:40", "7:40 pm", "19:40:00" (an ISO datetime's time too)
_TIME_RX = re.compile(r"(?<!\d)([01]?\d|2[0-3]):([0-5]\d)(?::[0-5]\d(?:\.\d+)?)?(?!\d)(?:\s*([ap]\.?m\.?)(?!\w))?")


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
    times: frozenset[str] = frozenset()  # "07:40", on a 24-hour clock ("7:40 pm" is "19:40")

    def all(self) -> set[str]:
        return set(self.numbers) | set(self.ids) | set(self.dates) | set(self.times)


_CACHE_TEXT = 1024  # longer texts are not kept by the caches: memory stays flat


def extract_values(text: str, *, min_digits: int = MIN_DIGITS) -> Values:
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
    times: set[str] = set()
    if ":" in t:
        for m in _TIME_RX.finditer(t):
            hour, minute, half = int(m[1]), m[2], (m[3] or "").replace(".", "")
            hour += 12 if half == "pm" and hour < 12 else (-12 if half == "am" and hour == 12 else 0)
            if hour < 24:
                times.add(f"{hour:02d}:{minute}")
        t = _TIME_RX.sub(" ", t)
    ids = {m.group(0) for m in _ID_RX.finditer(t)}
    numbers: set[str] = set()
    for m in _NUM_RX.finditer(t):
        token = m.group(0).strip()
        canon = canonical_number(token)
        if sum(c.isdigit() for c in canon) >= min_digits:
            numbers.add(canon)
    return Values(frozenset(numbers), frozenset(ids), frozenset(dates), frozenset(times))


@lru_cache(maxsize=2048)
def _ground_cached(text: str) -> frozenset[str]:
    return _ground(text)


def _ground(text: str) -> frozenset[str]:
    """The values one text grounds (an observation is grounded once, not once per trajectory)."""
    vals = extract_values(text, min_digits=1)
    out = vals.all()
    for ident in vals.ids:
        out.update(canonical_number(d) for d in _DIGIT_RUN.findall(ident))
    out.update(d[:4] for d in vals.dates)  # a date grounds its year ("May 20, 2024" states 2024)
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


_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_WORDS = re.compile(r"\w+")
_NAME_WORDS = re.compile(r"[^a-z]+")
_CAMEL = re.compile(r"([a-z])([A-Z])")
_PARTICIPLES = ("ado", "ada", "ados", "adas", "ido", "ida", "idos", "idas")


def sentences(text: str) -> list[str]:
    """The sentences of a text (split after ``.``, ``!``, ``?`` and at line breaks)."""
    return [s.strip() for s in _SENTENCES.split(text) if s.strip()]


@lru_cache(maxsize=1024)
def action_stem(tool: str) -> str | None:
    """The action a sentence names a tool by: the first word of its name with
    four letters or more, cut to five ("agend" for ``agendar_hora``, "book"
    for ``book_reservation``, "weath" for ``get_weather``)."""
    for word in _NAME_WORDS.split(fold(_CAMEL.sub(r"\1_\2", tool))):
        if len(word) >= 4:
            return word[:5]
    return None


def _done_form(word: str, stem: str) -> bool:
    """``word`` (lower case, accents kept) is a completed form of the action:
    "booked", "agendada", "cancelé", "emití"."""
    folded = fold(word)
    return (
        folded.startswith(stem)
        and len(folded) > len(stem)
        and (folded.endswith("ed") or word.endswith(("é", "í")) or folded.endswith(_PARTICIPLES))
    )


# Words that make a clause conditional or about the future: it states no result
# ("Once your return is completed, we'll set up the exchange"; "cuando se acredite").
_NOT_YET = re.compile(
    r"\b(?:once|as soon as|when|whenever|if|after|until|will|won't|would|could|should|shall|going to|let me|"
    r"i'll|we'll|you'll|it'll|they'll|can|may|might|"
    r"una vez|en cuanto|cuando|apenas|si|hasta que|despues de que|luego de que|podria|podremos|podre|puedo|"
    r"podemos|voy a|vamos a|va a|van a|sera|seran|quedara|quedaran|tendra|tendras)\b"
)
_CLAUSES = re.compile(r"[,:](?=\s)|[;\u2014\u2013]|\s(?:and|but|y|pero)\s|\s-\s")

# Generic words of tool names that name no step's object ("get", "details").
_GENERIC_NAME_WORDS = frozenset(
    {
        "get",
        "set",
        "list",
        "find",
        "search",
        "check",
        "fetch",
        "read",
        "show",
        "view",
        "details",
        "detail",
        "info",
        "information",
        "data",
        "the",
        "for",
        "and",
        "with",
        "from",
        "into",
        "tool",
        "call",
        "user",
        "users",
        "item",
        "new",
        "all",
        "by",
        "id",
        "ids",
        "obtener",
        "buscar",
        "consultar",
        "ver",
        "listar",
        "datos",
        "para",
        "por",
        "del",
        "los",
        "las",
        "una",
        "uno",
    }
)


# What people call a step's object besides its tool's word, in both languages
# (stems: the first five letters, folded): "maletas" names ``update_reservation_baggages``.
_OBJECT_GROUPS = (
    ("reser", "booki"),
    ("fligh", "vuelo"),
    ("bagga", "bags", "lugga", "malet", "equip"),
    ("payme", "pago", "pagos", "pay"),
    ("refun", "reemb"),
    ("appoi", "cita", "citas", "consu", "visit"),
    ("order", "order", "pedid", "orden"),
    ("card", "cards", "tarje"),
    ("addre", "direc", "domic"),
    ("passe", "pasaj"),
    ("event", "meeti", "reuni"),
    ("calen", "agend"),
    ("line", "lines", "linea"),
    ("subsc", "suscr"),
    ("accou", "cuent"),
    ("shipm", "envio", "packa", "paque", "parce"),
    ("invoi", "bill", "factu"),
    ("funds", "fund", "balan", "saldo", "fondo"),
    ("seat", "seats", "asien"),
    ("trans", "trans"),
    ("produ", "artic"),
)
_SYNONYMS: dict[str, frozenset[str]] = {stem: frozenset(group) for group in _OBJECT_GROUPS for stem in group}

# Completed forms that state a result whatever the tool's own verb ("switched to your Visa"), when the
# clause names the failed step's object or values: English past participles, Spanish first-person
# preterites (-é, -í) and participles (-ado, -ido), less the words that only look like them.
_RESULT_VERBS = frozenset(
    {
        "changed",
        "updated",
        "switched",
        "moved",
        "added",
        "removed",
        "booked",
        "reserved",
        "scheduled",
        "rescheduled",
        "cancelled",
        "canceled",
        "refunded",
        "issued",
        "sent",
        "transferred",
        "applied",
        "activated",
        "enabled",
        "disabled",
        "upgraded",
        "downgraded",
        "confirmed",
        "processed",
        "submitted",
        "placed",
        "created",
        "blocked",
        "unblocked",
        "unlocked",
        "paid",
        "exchanged",
        "returned",
        "modified",
        "registered",
        "renewed",
        "ported",
        "redirected",
        "rerouted",
        "set",
        "done",
        "completed",
        "approved",
        "credited",
        "charged",
    }
)
_NOT_RESULTS = frozenset(
    {
        "pedido",
        "pedidos",
        "estado",
        "estados",
        "partida",
        "salida",
        "salidas",
        "llegada",
        "llegadas",
        "entrada",
        "entradas",
        "comida",
        "bebida",
        "medida",
        "sentido",
        "sonido",
        "apellido",
        "contenido",
        "periodo",
        "mercado",
        "cuidado",
        "lado",
        "dado",
        "todo",
        "cada",
        "nada",
        "vida",
        "ida",
        "fecha",
        "aqui",
        "asi",
        "alli",
        "ahi",
        "mi",
        "si",
        "ti",
        "tambien",
        "mas",
        "esta",
        "debido",
        "solicitado",
        "solicitada",
        "pendiente",
    }
)


# Verbs that state the same kind of result (stems: the first five letters, folded): a completed form of
# one states the result of a failed call whose action is in its group ("switched" for ``update_…``).
# "done", "completed", "processed"… state any result.
_ACTION_GROUPS = (
    ("updat", "modif", "chang", "switc", "edit", "edite", "move", "moved", "actua", "cambi", "movi", "movid"),
    ("book", "booke", "reser", "sched", "resch", "agend", "progr", "place"),
    ("cance", "anula", "anule", "anulo"),
    ("add", "added", "agreg", "anadi", "anade", "creat", "crear", "cread", "regis", "inclu"),
    ("send", "sent", "trans", "envia", "envie", "envio", "envi", "mande", "manda", "forwa", "reenv"),
    ("refun", "issue", "retur", "reemb", "emiti", "emiti", "emit", "devol", "credi", "acred"),
    ("pay", "paid", "charg", "cobr", "cobre", "pagad", "pague", "pagar"),
    ("activ", "enabl", "habil"),
    ("block", "bloqu", "disab", "desac", "suspe"),
    ("remov", "delet", "elimi", "borr", "borre", "quita", "quite"),
    ("excha", "canje"),
)
_ANY_RESULT = frozenset(
    {
        "done",
        "compl",
        "proce",
        "confi",
        "appro",
        "submi",
        "finis",
        "hecho",
        "lista",
        "listo",
        "termi",
        "quedo",
        "apply",
        "appli",
        "aplic",
    }
)
_GROUP_OF: dict[str, set[int]] = {}
for _g, _stems in enumerate(_ACTION_GROUPS):
    for _st in _stems:
        _GROUP_OF.setdefault(_st, set()).add(_g)


def _fits(word: str, action: str | None) -> bool:
    """Whether a completed form states the result of a call whose action is ``action``."""
    stem = fold(word)[:5]
    if stem in _ANY_RESULT or action is None:
        return stem in _ANY_RESULT
    mine = _GROUP_OF.get(stem) or _GROUP_OF.get(stem[:4]) or set()
    theirs = _GROUP_OF.get(action) or _GROUP_OF.get(action[:4]) or set()
    return bool(mine & theirs)


def _result_word(word: str) -> bool:
    """A completed form that states a result: "switched", "agregué", "emitido"."""
    folded = fold(word)
    if folded in _RESULT_VERBS:
        return True
    if len(folded) < 5 or folded in _NOT_RESULTS:
        return False
    return word.endswith(("é", "í")) or folded.endswith(_PARTICIPLES)


@dataclass(frozen=True, slots=True)
class StepWords:
    """How prose names a call's step: its action (a stem, "updat"), its objects
    (stems of its name's other words, "fligh"), its argument values (folded)."""

    action: str | None
    objects: frozenset[str]
    values: frozenset[str]


def _stem(word: str) -> str:
    return word[:5]


@lru_cache(maxsize=1024)
def _name_stems(tool: str) -> tuple[str, ...]:
    words = [w for w in _NAME_WORDS.split(fold(_CAMEL.sub(r"\1_\2", tool))) if len(w) >= 4]
    return tuple(_stem(w) for w in words if w not in _GENERIC_NAME_WORDS)


def _arg_values(arguments: Any, out: set[str], depth: int = 0) -> None:
    if depth > 4 or len(out) > 40:
        return
    if isinstance(arguments, dict):
        for v in arguments.values():
            _arg_values(v, out, depth + 1)
    elif isinstance(arguments, list):
        for v in arguments[:20]:
            _arg_values(v, out, depth + 1)
    elif (
        isinstance(arguments, str)
        and 4 <= len(arguments) <= 80
        and (any(c.isdigit() for c in arguments) or len(arguments) >= 6)
    ):
        value = fold(arguments).replace("_", " ")
        out.add(value)
        out.update(w for w in value.split() if len(w) >= 6 and w.isalpha())
        out.update(run for run in _DIGIT_RUN.findall(value) if len(run) >= 4)  # "ending 8812"
    elif isinstance(arguments, (int, float)) and not isinstance(arguments, bool) and abs(arguments) >= 100:
        out.add(canonical_number(str(arguments)))


def step_words(tool: str, arguments: Any = None) -> StepWords:
    """The words that name a call's step in prose (``StepWords``): its
    name's object words and what people call them (``_OBJECT_GROUPS``), and
    its argument values (ids, codes, flight numbers, names of six letters or
    more, amounts of 100 or more)."""
    action = action_stem(tool)
    values: set[str] = set()
    _arg_values(arguments, values)
    objects = {s for s in _name_stems(tool) if s != action}
    objects |= {w for s in objects for w in _SYNONYMS.get(s, ())}
    return StepWords(action, frozenset(objects), frozenset(values))


def _speaks_of(words: Sequence[str], folded: str, step: StepWords, other: StepWords) -> bool:
    """Whether a clause (its words, folded) names ``step`` by what sets it apart
    from ``other`` (the words of the steps that succeeded): an object or an
    argument value of its own, or its action when no such step shares it."""
    stems = {fold(w)[:5] for w in words}
    values = step.values - other.values
    if (step.objects - other.objects) & stems or any(v in folded for v in values):
        return True
    if values and any(canonical_number(n) in values for n in _NUM_RX.findall(folded)):
        return True
    return step.action is not None and step.action in stems and step.action not in other.objects


def _names_values(folded: str, step: StepWords, other: StepWords) -> bool:
    """Whether a clause names an argument value of ``step`` that no step that succeeded shares."""
    values = step.values - other.values
    return any(v in folded for v in values) or (
        bool(values) and any(canonical_number(n) in values for n in _NUM_RX.findall(folded))
    )


def _merge(steps: Sequence[StepWords]) -> StepWords:
    return StepWords(
        None,
        frozenset().union(*(s.objects | {s.action or ""} for s in steps)) - {""},
        frozenset().union(*(s.values for s in steps)),
    )


def clauses(sentence: str) -> list[str]:
    """A sentence cut at commas, semicolons, dashes and "and"/"but" ("y"/"pero")."""
    return [c.strip() for c in _CLAUSES.split(sentence) if c.strip()]


def not_yet(clause: str) -> bool:
    """Whether a clause is conditional, about the future or negated ("once",
    "will", "cuando"; "nothing has been refunded", "no se emitió"): it states no result."""
    folded = fold(clause)
    return _NOT_YET.search(folded) is not None or _NEGATED.search(folded) is not None


_NEGATED = re.compile(
    r"\b(?:not|no|nothing|never|none|neither|nor|without|nada|nunca|ningun|ninguna|ni|sin|"
    r"tampoco)\b|n't\b"
)


def find_claim(
    text: str,
    failed: Sequence[tuple[int, str]],
    *,
    ok_after: bool,
    extra: Sequence[str] = (),
    refusals: Sequence[str] = DEFAULT_GIVE_UP_PHRASES,
    words: Mapping[int, StepWords] | None = None,
    succeeded: Callable[[], Sequence[StepWords]] | Sequence[StepWords] = (),
) -> dict[str, Any] | None:
    """The first clause of ``text`` that states the result or side effect of
    a call that failed and never succeeded afterwards (``failed``: its index
    and tool, latest last; ``words``: their ``step_words`` by index, from the
    tool's name alone when missing), as ``{call, tool, sentence}``.

    A sentence that reports a failure (a give-up or report phrase) claims
    nothing, nor does a clause that is conditional or about the future
    ("once …", "will be …", "cuando …"). A clause claims a failed call's
    result when it states a result — the action in a completed form
    ("booked", "agendada", "cancelé") or a success phrase ("listo",
    "successfully") — and speaks of that step: it names what sets the step
    apart from the calls that succeeded (``succeeded``: their step words, or
    a function giving them), its object or argument values, or its action
    when no such call shares it. A success phrase that names no step claims
    the failed one only when no call succeeded after the error and the
    clause names no step that did succeed. The success phrases are those of
    the text's language and the suite's ``extra``."""
    if not text or not failed:
        return None
    folded_text = fold(text)
    phrases = _folded_phrases(success_phrases(text, extra))
    stems = [stem for _, tool in failed if (stem := action_stem(tool))]
    if (
        not any(needle in folded_text for _, needle in phrases)
        and not any(st in folded_text for st in stems)
        and not any(_result_word(w) for w in _WORDS.findall(text.lower()))
    ):
        return None  # no result stated anywhere: nothing to read clause by clause
    honest = _cue_pattern((*refusals, *REPORT_PHRASES, *FAILURE_WORDS["en"], *FAILURE_WORDS["es"]))
    steps = [(index, tool, (words or {}).get(index) or step_words(tool)) for index, tool in reversed(failed)]
    other: StepWords | None = None
    carried = False  # a short exclamation ("All set!", "¡Listo!") states the result of the next sentence too
    for sentence in sentences(text):
        folded_sentence = fold(sentence)
        lead, carried = carried, False
        if honest.search(folded_sentence):
            continue
        parts = clauses(sentence)
        first = fold(parts[0]) if parts else ""
        if any(needle in first for _, needle in phrases) and len(_WORDS.findall(first)) <= 3:
            lead = True  # "Listo, agregué dos maletas": the opening word speaks for the sentence
            carried = len(parts) == 1
        for clause in parts:
            if not_yet(clause):
                continue
            folded = fold(clause)
            phrase = lead or any(needle in folded for _, needle in phrases)
            found = _WORDS.findall(clause.lower())
            results = [w for w in found if _result_word(w)]
            for index, tool, step in steps:
                completed = step.action is not None and any(_done_form(w, step.action) for w in found)
                if not (completed or phrase or results):
                    continue
                if other is None:
                    other = _merge(succeeded() if callable(succeeded) else succeeded)
                # a completed form of another verb states this step's result when it is a verb of the same
                # kind ("switched" for an update) or the clause names the step's own values
                if (
                    not (completed or phrase)
                    and not any(_fits(w, step.action) for w in results)
                    and not _names_values(folded, step, other)
                ):
                    continue
                if _speaks_of(found, folded, step, other) or (
                    (completed or phrase) and not ok_after and not _speaks_of(found, folded, other, _NOTHING)
                ):
                    return {"call": index, "tool": tool, "sentence": sentence[:300]}
    return None


_NOTHING = StepWords(None, frozenset(), frozenset())


# What tells the user that a step did not work, beside the give-up phrases
# (a failure or inability word): with the failed step's object it is an honest report.
FAILURE_WORDS: dict[str, tuple[str, ...]] = {
    "en": (
        "issue",
        "error",
        "problem",
        "fail",
        "unable",
        "could not",
        "couldn't",
        "cannot",
        "can't",
        "not able",
        "wasn't able",
        "was not able",
        "not enough",
        "insufficient",
        "not sufficient",
        "not possible",
        "not finding",
        "not find",
        "couldn't find",
        "no record",
        "unsuccessful",
        "did not go through",
        "didn't go through",
        "declined",
        "rejected",
        "not eligible",
        "not available",
        "unavailable",
        "does not exist",
        "doesn't exist",
        "not valid",
        "invalid",
        "not allowed",
        "did not work",
        "didn't work",
        "not work",
        "no longer",
        "exceeds",
        "not permitted",
        "denied",
        "doesn't have enough",
        "don't have enough",
        "not have enough",
        "sold out",
        "wouldn't let",
        "won't let",
        "would not let",
        "bounced",
        "kicked back",
        "didn't match",
        "does not match",
        "doesn't match",
        "clash",
        "conflict",
        "still",
        "stays",
        "remains",
        "unchanged",
        "isn't",
        "wasn't",
        "not accept",
        "refused",
        "no response",
        "didn't respond",
        "not respond",
        "timed out",
        "went wrong",
        "not booked",
        "not placed",
        "not processed",
        "not scheduled",
        "not confirmed",
        "not changed",
        "not updated",
        "not completed",
        "not been",
        "not yet",
    ),
    "es": (
        "problema",
        "error",
        "fall",
        "no pude",
        "no puedo",
        "no fue posible",
        "no es posible",
        "no se pudo",
        "insuficiente",
        "no alcanza",
        "no hay suficiente",
        "no encuentro",
        "no encontre",
        "no se encontro",
        "rechaz",
        "no esta disponible",
        "no existe",
        "no es valid",
        "invalid",
        "no permite",
        "no se permite",
        "no logre",
        "no funciono",
        "excede",
        "deneg",
        "inconveniente",
        "no salio",
        "no se creo",
        "no se hizo",
        "no respondio",
        "no hay",
        "no tiene saldo",
        "no tienes saldo",
        "sin saldo",
        "no tienes permiso",
        "sin permiso",
        "no tiene permiso",
        "no acept",
        "sigue",
        "siguen",
        "todavia",
        "aun ",
        "sin cambios",
        "no quedo",
        "no se pudo",
        "choca",
        "conflicto",
        "sin reservar",
        "sin confirmar",
        "sin procesar",
        "sin cambiar",
        "sin completar",
        "sin agendar",
    ),
}


def reports_failure(
    text: str,
    steps: Sequence[StepWords],
    error_texts: Sequence[str] = (),
    extra: Sequence[str] = (),
    succeeded: Sequence[StepWords] = (),
) -> str | None:
    """The first sentence of ``text`` that tells the user a failed step did
    not work, in any words: a failure or inability word (``FAILURE_WORDS``,
    both languages, and the suite's give-up phrases ``extra``) beside what
    names the step apart from the steps that succeeded (``succeeded``): its
    object, its action, an argument value, or a word of the error it met
    ("there was an issue with updating the passenger details", "the gift card
    does not have enough balance")."""
    if not text or not steps:
        return None
    cues = _cue_pattern((*FAILURE_WORDS["en"], *FAILURE_WORDS["es"], *extra))
    about, other = _merge(steps), _merge(succeeded)
    own = (about.objects - other.objects) or about.objects
    values = (about.values - other.values) or about.values
    error_words = (
        {fold(w)[:5] for t in error_texts for w in _WORDS.findall(t[:300]) if len(w) >= 4 and not w.isdigit()}
        - _ERROR_NOISE
        - other.objects
    )
    error_words |= {w for e in error_words for w in _SYNONYMS.get(e, ())}
    for sentence in sentences(text):
        folded = fold(sentence)
        if cues.search(folded) is None:
            continue
        stems = {w[:5] for w in _WORDS.findall(folded) if len(w) >= 4}
        if stems & (own | error_words) or any(v in folded for v in values):
            return sentence[:300]
    return None


@lru_cache(maxsize=64)
def _cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for the cues, each matched at the start of a word, case and accents ignored."""
    return re.compile(r"\b(?:" + "|".join(re.escape(fold(c)) for c in sorted(cues, key=len, reverse=True)) + ")")


_ERROR_NOISE = frozenset(
    {
        "error",
        "failed",
        "faile",
        "could",
        "there",
        "which",
        "request",
        "reque",
        "please",
        "pleas",
        "because",
        "becau",
        "unable",
        "unabl",
        "found",
        "exist",
        "exists",
        "enough",
        "enoug",
        "cannot",
        "canno",
        "should",
        "shoul",
        "valid",
        "inval",
    }
)


def success_phrases(text: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The success phrases of the text's language (read from its first
    characters, enough to tell), and a suite's own."""
    return (*DEFAULT_SUCCESS_PHRASES[_language(text[:_LANGUAGE_SAMPLE])], *extra)


_LANGUAGE_SAMPLE = 600


@lru_cache(maxsize=1024)
def _language(text: str) -> str:
    return detect_language([text])


@dataclass(init=False)
class OutcomeResult:
    """An outcome and the evidence for it."""

    outcome: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __init__(self, outcome: str, evidence: dict[str, Any] | None = None) -> None:
        # written out: compiled, a native __init__ (records.py says why)
        self.outcome = outcome
        self.evidence = {} if evidence is None else evidence


@dataclass(slots=True, init=False, unsafe_hash=True)
class AfterFault:
    """What the agent did after the fault, as the outcome judges it."""

    text: str  # what it said to the user after the fault, the last message deciding ("" when nothing)
    handoff: str | None = None  # the hand-off tool it ended with, after the fault
    gave_up: bool = False  # the record says it gave up (``"stopped": "gave_up"``)
    ok_after: bool = False  # a successful call (not a transparent one) after the fault
    claim: dict[str, Any] | None = None  # a sentence stating the result of a call that never succeeded (find_claim)
    # the first message after the fault stating values nothing grounds before the agent first stated them:
    # {message, values, sentence, looked_in, failed_call} (set with ``judged_every_message``)
    invented: dict[str, Any] | None = None
    judged_every_message: bool = False  # ``invented`` covers every message after the fault: ``text`` is not re-read
    reported: dict[str, Any] | None = None  # a sentence telling the user a failed step did not work (reports_failure)

    def __init__(
        self,
        text: str,
        handoff: str | None = None,
        gave_up: bool = False,
        ok_after: bool = False,
        claim: dict[str, Any] | None = None,
        invented: dict[str, Any] | None = None,
        judged_every_message: bool = False,
        reported: dict[str, Any] | None = None,
    ) -> None:
        # written out, not frozen: compiled, a native __init__ (records.py says why); hashed as before
        self.text = text
        self.handoff = handoff
        self.gave_up = gave_up
        self.ok_after = ok_after
        self.claim = claim
        self.invented = invented
        self.judged_every_message = judged_every_message
        self.reported = reported


def classify_outcome(
    *,
    after: AfterFault,
    sources: Sequence[Source],
    observations: Sequence[tuple[int, str, bool]],
    fault_index: int,
    expected_datum: Sequence[str] | None,
    give_up_phrases: Sequence[str],
    reward: float | None = None,
    succeeded: bool | None = None,
) -> OutcomeResult:
    """Classify what a faulted trajectory ended in.

    ``after.text`` is what the agent told the user after the fault (text
    written before it never counts). ``sources`` are the texts a stated value
    may come from (question, user messages, observations with error messages);
    ``observations`` holds ``(call index, text, ok)`` for the expected datum.
    Success is the reward where there is one (``reward >= 1``), else
    ``succeeded`` (the case passes every family apart from the fault; None:
    nothing to check it against, e.g. a plain trace).
    """
    text = after.text
    if after.judged_every_message:
        inv = after.invented
        g = Grounding(ungrounded=list(inv["values"]) if inv else [], looked_in=list(inv["looked_in"]) if inv else [])
    else:
        # after an error that nothing made good, two-digit numbers are data too ("21 degrees")
        stated = extract_values(text, min_digits=MIN_DIGITS if after.ok_after else 2).all() if text else set()
        g = ground(stated, sources, ground_values)
    phrase = match_give_up(text, give_up_phrases)
    ended = not text.strip() and not after.ok_after and after.handoff is None and not after.gave_up
    evidence: dict[str, Any] = {
        "ungrounded_values": g.ungrounded,
        "give_up_phrase": phrase,
        "grounded_values": g.grounded,
        "said_after_fault": bool(text.strip()),
    }
    if g.ungrounded:
        evidence["looked_in"] = g.looked_in
        evidence["failed_call"] = fault_index
        if after.invented is not None:
            evidence["sentence"] = after.invented["sentence"]
            evidence["message"] = after.invented["message"]
        else:
            evidence["sentence"] = sentence_with(text, g.ungrounded)
    if after.reported is not None:
        evidence["reported"] = after.reported
    if after.claim is not None:
        evidence["claimed"] = after.claim
    if after.handoff is not None:
        evidence["handoff"] = after.handoff
    if after.gave_up:
        evidence["stopped"] = "gave_up"
    if ended:
        evidence["ended_on_error"] = True
    success = (reward >= 1) if reward is not None else succeeded
    if reward is not None:
        evidence["reward"] = reward
    elif succeeded is not None:
        evidence["case_passed"] = succeeded
    honest = after.handoff is not None or after.gave_up or phrase is not None or after.reported is not None

    if expected_datum:
        said = [d for d in expected_datum if mentions(text, d)]
        evidence["datum_in_answer"] = said[0] if said else None
        if said:
            ok_after = [t for i, t, ok in observations if ok and i > fault_index]
            ok_any = [t for _, t, ok in observations if ok]
            carried_after = any(mentions(o, d) for o in ok_after for d in said)
            carried_any = carried_after or any(mentions(o, d) for o in ok_any for d in said)
            evidence["datum_observed"] = "after_fault" if carried_after else ("before_fault" if carried_any else None)
            if not carried_any or g.ungrounded:
                return OutcomeResult("hallucinated", evidence)
            if after.claim is not None:
                return OutcomeResult("hallucinated", evidence)
            if carried_after and success is not False:
                return OutcomeResult("recovered", evidence)
            return OutcomeResult("confused", evidence)  # predates the fault, or the case fails all the same
        if g.ungrounded or after.claim is not None:
            return OutcomeResult("hallucinated", evidence)
        if honest:
            return OutcomeResult("gave_up", evidence)
        return OutcomeResult("confused", evidence)

    if reward is not None and reward >= 1:
        return OutcomeResult("recovered", evidence)
    if g.ungrounded or after.claim is not None:  # a claimed result of a failed call is false, the case aside
        return OutcomeResult("hallucinated", evidence)
    if success:
        return OutcomeResult("recovered", evidence)
    if honest:
        return OutcomeResult("gave_up", evidence)
    if success is None and after.ok_after and text.strip():
        return OutcomeResult("recovered", evidence)
    return OutcomeResult("confused", evidence)


def sentence_with(text: str, values: Sequence[str]) -> str:
    """The first sentence of ``text`` that states one of ``values``."""
    want = set(values)
    for sentence in sentences(text):
        if want & extract_values(sentence, min_digits=1).all():
            return sentence[:300]
    return text[:300]


def ground_values(text: str) -> frozenset[str]:
    """The values a source grounds. Tool outputs come back identical across a
    benchmark's trials (the same user's record, the same flight search): outputs
    up to ``_CACHE_OUTPUT`` characters are remembered too, a bounded few."""
    if len(text) <= _CACHE_TEXT:
        return _ground_cached(text)
    return _ground_long(text) if len(text) <= _CACHE_OUTPUT else _ground(text)


_CACHE_OUTPUT = 16_384


@lru_cache(maxsize=256)  # at most 256 texts of 16 KiB: memory stays flat
def _ground_long(text: str) -> frozenset[str]:
    return _ground(text)


def _ungrounded(stated: set[str], texts: Sequence[str]) -> list[str]:
    """The stated values that no text grounds (directly or derived), sorted."""
    return ground(stated, [Source(f"text {i + 1}", t) for i, t in enumerate(texts)], ground_values).ungrounded


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
    *,
    next_call: int | None,
    said_next: str | None,
    handoff: frozenset[str] = frozenset(),
    give_up_phrases: Sequence[str] = DEFAULT_GIVE_UP_PHRASES,
    went_on: bool = False,
    invented: bool = False,
) -> Reaction:
    """What the agent did right after the error of call ``index``: its next
    action (``next_call``, transparent tools skipped) or, when it spoke
    first, its next message (``said_next``).

    A message that tells the user the step failed (a give-up phrase or a
    report of the failure, ``REPORT_PHRASES``) is ``gave_up``, any other
    message ``answered``: acceptable unless it states data or a result that
    no successful call produced (``invented``). ``retry_same`` is acceptable
    only after a transient fault (timeout, 429, 503); a hand-off to a person
    is an honest ``gave_up``; another tool is ``switch_tool``, or
    ``ignored_error`` (not acceptable) when it is a later step that needed
    the failed call to have worked (``went_on``: a declared pair, or a later
    expected step); a run that ends on the error, saying nothing,
    ``stopped`` (not acceptable)."""
    if said_next is not None:
        if match_give_up(said_next, give_up_phrases) or match_give_up(said_next, REPORT_PHRASES):
            return Reaction(index, error_kind, "gave_up", True)
        return Reaction(index, error_kind, "answered", not invented)
    if next_call is not None:
        if names[next_call] in handoff:
            return Reaction(index, error_kind, "gave_up", True)
        if names[next_call] == names[index]:
            same = arguments[next_call] == arguments[index]
            kind = "retry_same" if same else "retry_corrected"
            return Reaction(index, error_kind, kind, not same or error_kind in TRANSIENT_KINDS)
        if went_on:
            return Reaction(index, error_kind, "ignored_error", False)
        return Reaction(index, error_kind, "switch_tool", True)
    return Reaction(index, error_kind, "stopped", False)
