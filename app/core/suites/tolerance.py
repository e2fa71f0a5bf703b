"""Per-field tolerance for argument accuracy (F2), declared in the case.

Rules: ``exact`` (default; strings trimmed and case-insensitive), ``ignore``,
``number`` (``abs``/``rel`` bounds), ``date`` (equivalent spellings of one
date match), ``one_of`` (acceptable values, as BFCL's possible answers; ``""``
in the list means the field may be omitted), ``regex``, ``contains`` and
``set`` (lists compared ignoring order); ``one_of`` with ``normalize: bfcl``
compares texts as BFCL does (``bfcl_standardize``); for nested values, ``fields`` (an
object checked field by field, each field with its own rule) and ``items`` (a
list checked element by element), at any depth, with ``optional: true`` when
the whole value may be left out. A mismatch names the field (a path such as
``conditions[1].value`` inside a nested value), the rule, the expected value
and the value got.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

RULES = ("exact", "ignore", "number", "date", "one_of", "regex", "contains", "set", "fields", "items")
NESTED = ("fields", "items")
MAX_RULE_DEPTH = 32

_MISSING = object()


def fold(text: str) -> str:
    """Case- and accent-insensitive form of a text, apostrophes straight ("No logré" -> "no logre")."""
    return _fold_cached(text) if len(text) <= 1024 else _fold(text)


@lru_cache(maxsize=2048)
def _fold_cached(text: str) -> str:
    return _fold(text)


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _drop_combining(m: re.Match[str]) -> str:
    return "".join(c for c in m.group() if not unicodedata.combining(c))


def _fold(text: str) -> str:
    folded = text.casefold()
    if folded.isascii():  # ASCII has no decompositions and no combining marks
        return folded
    decomposed = unicodedata.normalize("NFKD", folded.replace("’", "'"))  # "won’t" reads as "won't"
    # only the non-ASCII runs can hold combining marks: the rest stays at C speed
    return _NON_ASCII.sub(_drop_combining, decomposed)


def values_equal(got: Any, expected: Any) -> bool:
    """The ``exact`` rule: strings trimmed and case-insensitive, numbers by
    value (but a boolean is never a number), containers element by element."""
    if isinstance(expected, str):
        return isinstance(got, str) and got.strip().casefold() == expected.strip().casefold()
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, (int, float)):
        return isinstance(got, (int, float)) and got == expected
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(values_equal(g, e) for g, e in zip(got, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and got.keys() == expected.keys()
            and all(values_equal(got[k], v) for k, v in expected.items())
        )
    return bool(got == expected)


_BFCL_DROP = re.compile(r"[ ,./\-_*^]")


def bfcl_standardize(text: str) -> str:
    """BFCL's ``standardize_string``: spaces and ``,./-_*^`` removed, lowercased,
    ``'`` read as ``"`` ("y = x^2" and "y=x**2" are both "y=x2")."""
    return _BFCL_DROP.sub("", text).lower().replace("'", '"')


def bfcl_equal(got: Any, expected: Any) -> bool:
    """BFCL's comparison of a value with one possible answer: texts
    standardized (inside lists and objects too), numbers by value."""
    if isinstance(expected, str):
        return isinstance(got, str) and bfcl_standardize(got) == bfcl_standardize(expected)
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(bfcl_equal(g, e) for g, e in zip(got, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and got.keys() == expected.keys()
            and all(bfcl_equal(got[k], v) for k, v in expected.items())
        )
    return values_equal(got, expected)


_MONTHS = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
    "enero": 1,
    "febrero": 2,
    "marzo": 3,
    "abril": 4,
    "mayo": 5,
    "junio": 6,
    "julio": 7,
    "agosto": 8,
    "septiembre": 9,
    "setiembre": 9,
    "octubre": 10,
    "noviembre": 11,
    "diciembre": 12,
}
_ISO = re.compile(r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?:[t ].*)?")
_DMY = re.compile(r"(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})")
_WORDS_DMY = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?\s+(?:de\s+)?([a-z]+)\.?,?\s+(?:de\s+|del\s+)?(\d{4})")
_WORDS_MDY = re.compile(r"([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})")


def parse_date(value: Any, *, dayfirst: bool = True) -> dt.date | None:
    """Read a date from its common spellings: ISO (with or without time),
    ``DD/MM/YYYY`` (``MM/DD/YYYY`` with ``dayfirst=False``), "5 de marzo de
    2024", "March 5, 2024". Returns None when it is not a date."""
    if isinstance(value, str):
        return _parse_date_text(value, dayfirst)
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return None


@lru_cache(maxsize=1024)
def _parse_date_text(value: str, dayfirst: bool) -> dt.date | None:
    text = fold(value.strip())
    try:
        if m := _ISO.fullmatch(text):
            return dt.date(int(m[1]), int(m[2]), int(m[3]))
        if m := _DMY.fullmatch(text):
            a, b = int(m[1]), int(m[2])
            day, month = (a, b) if dayfirst else (b, a)
            return dt.date(int(m[3]), month, day)
        if (m := _WORDS_DMY.fullmatch(text)) and m[2] in _MONTHS:
            return dt.date(int(m[3]), _MONTHS[m[2]], int(m[1]))
        if (m := _WORDS_MDY.fullmatch(text)) and m[1] in _MONTHS:
            return dt.date(int(m[3]), _MONTHS[m[1]], int(m[2]))
    except ValueError:
        return None
    return None


@dataclass(frozen=True, slots=True)
class Rule:
    """One field's tolerance rule and its parameters."""

    kind: str = "exact"
    abs: int | float | None = None  # `int |`: compiled code (setup.py) would turn 100 into 100.0
    rel: int | float | None = None
    values: tuple[Any, ...] = ()
    pattern: str | None = None
    dayfirst: bool = True
    fields: tuple[tuple[str, Rule], ...] = ()  # ``fields``: each named field's rule
    items: tuple[Rule, ...] = ()  # ``items``: each element's rule
    optional: bool = False  # ``fields``/``items``: the value may be left out
    normalize: str | None = None  # ``one_of``: "bfcl" compares texts as BFCL does

    def check(self, got: Any, expected: Any) -> bool:
        """Whether ``got`` is acceptable for ``expected`` under this rule.
        A missing field is passed as the sentinel ``_MISSING``."""
        if self.kind == "ignore":
            return True
        if self.kind in NESTED:
            return _nested_mismatch(self, got, expected, "") is None
        if self.kind == "one_of":
            options = self.values or (tuple(expected) if isinstance(expected, list) else (expected,))
            if got is _MISSING:
                return any(o == "" or o is None for o in options)
            if self.normalize == "bfcl":
                return any(bfcl_equal(got, o) for o in options)
            return any(values_equal(got, o) for o in options)
        if got is _MISSING:
            return False
        if self.kind == "exact":
            return values_equal(got, expected)
        if self.kind == "number":
            return _close(got, expected, self.abs, self.rel)
        if self.kind == "date":
            a, b = parse_date(got, dayfirst=self.dayfirst), parse_date(expected, dayfirst=self.dayfirst)
            return a is not None and a == b
        if self.kind == "regex":
            pattern = self.pattern if self.pattern is not None else str(expected)
            return isinstance(got, str) and _regex(pattern).fullmatch(got.strip()) is not None
        if self.kind == "contains":
            needle = self.pattern if self.pattern is not None else expected
            if isinstance(got, list):
                return any(values_equal(item, needle) for item in got)
            return isinstance(got, str) and fold(str(needle).strip()) in fold(got)
        if self.kind == "set":
            return _same_multiset(got, expected)
        raise ValueError(f"unknown tolerance rule {self.kind!r}")

    def describe(self) -> str:
        if self.normalize:
            return f"{self.kind}({self.normalize})"
        if self.kind == "number":
            parts = [f"{k}={v}" for k, v in (("abs", self.abs), ("rel", self.rel)) if v is not None]
            return "number(" + ", ".join(parts) + ")"
        return self.kind


def _nested_mismatch(rule: Rule, got: Any, expected: Any, path: str) -> Mismatch | None:
    """The first place where ``got`` breaks a nested rule (its path, the leaf
    rule, what it expected and what it got), or None when it is acceptable.
    A ``fields`` value is an object whose keys are all named (by the rule or
    the expected object); an ``items`` value is a list of as many elements."""
    if got is _MISSING:
        return None if rule.optional else Mismatch(path, rule.kind, expected, None)
    if rule.kind == "fields":
        if not isinstance(got, dict):
            return Mismatch(path, "fields", expected, got)
        want = expected if isinstance(expected, dict) else {}
        named = dict(rule.fields)
        for key in got:
            if key not in named and key not in want:
                return Mismatch(f"{path}.{key}", "fields", None, got[key])
        for key in [*named, *(k for k in want if k not in named)]:
            found = _leaf_mismatch(named.get(key, EXACT), got.get(key, _MISSING), want.get(key), f"{path}.{key}")
            if found is not None:
                return found
        return None
    if not isinstance(got, list) or len(got) != len(rule.items):
        return Mismatch(path, "items", expected, got)
    want_items = expected if isinstance(expected, list) and len(expected) == len(rule.items) else [None] * len(got)
    for i, (item_rule, have, want_item) in enumerate(zip(rule.items, got, want_items, strict=True)):
        found = _leaf_mismatch(item_rule, have, want_item, f"{path}[{i}]")
        if found is not None:
            return found
    return None


def _leaf_mismatch(rule: Rule, got: Any, expected: Any, path: str) -> Mismatch | None:
    if rule.kind in NESTED:
        return _nested_mismatch(rule, got, expected, path)
    if rule.check(got, expected):
        return None
    shown = list(rule.values) if rule.kind == "one_of" and rule.values else expected
    return Mismatch(path, rule.describe(), shown, None if got is _MISSING else got)


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _close(got: Any, expected: Any, abs_tol: float | None, rel_tol: float | None) -> bool:
    if isinstance(got, bool) or isinstance(expected, bool):
        return False
    if not isinstance(got, (int, float)) or not isinstance(expected, (int, float)):
        return False
    if abs_tol is None and rel_tol is None:
        return bool(got == expected)
    try:
        return math.isclose(got, expected, abs_tol=abs_tol or 0.0, rel_tol=rel_tol or 0.0)
    except OverflowError:  # an integer too large for a float: only equal values are close
        return bool(got == expected)


def _same_multiset(got: Any, expected: Any) -> bool:
    if not isinstance(got, list) or not isinstance(expected, list) or len(got) != len(expected):
        return False
    remaining = list(expected)
    for item in got:
        for i, candidate in enumerate(remaining):
            if values_equal(item, candidate):
                del remaining[i]
                break
        else:
            return False
    return True


def parse_rule(raw: Any, depth: int = 0) -> Rule:
    """Read a rule as written in a suite.

    Accepted: ``"date"``; ``{"number": {"abs": 1}}``; ``{"rule": "number",
    "rel": 0.01}``; ``{"one_of": [a, b]}``; ``{"regex": "^PED-\\d+$"}``;
    ``{"contains": "texto"}``; ``{"fields": {name: rule}, "optional": true}``;
    ``{"items": [rule, ...]}``. Raises ValueError with a readable message.
    """
    if isinstance(raw, Mapping) and "rule" not in raw and ("fields" in raw or "items" in raw):
        return _parse_nested("fields" if "fields" in raw else "items", raw, depth)
    if isinstance(raw, str):
        kind, params = raw, {}
    elif isinstance(raw, Mapping) and "rule" in raw:
        kind, params = str(raw["rule"]), {k: v for k, v in raw.items() if k != "rule"}
    elif isinstance(raw, Mapping) and len(raw) == 1:
        kind, value = next(iter(raw.items()))
        params = dict(value) if isinstance(value, Mapping) else {"value": value}
    else:
        raise ValueError(f"a tolerance rule is a name or a one-key mapping, got {raw!r}")
    if kind not in RULES:
        raise ValueError(f"unknown tolerance rule {kind!r} (known: {', '.join(RULES)})")
    if kind in NESTED:
        return _parse_nested(kind, params, depth)
    value = params.get("value")
    if kind == "number":
        for key in ("abs", "rel"):
            bound = params.get(key)
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound < 0):
                raise ValueError(f"number tolerance '{key}' must be a non-negative number")
        return Rule("number", abs=params.get("abs"), rel=params.get("rel"))
    if kind == "one_of":
        values = params.get("values", value)
        if values is not None and not isinstance(values, list):
            raise ValueError("one_of takes a list of acceptable values")
        normalize = params.get("normalize")
        if normalize is not None and normalize != "bfcl":
            raise ValueError(f"one_of normalize takes 'bfcl' (texts compared as BFCL does), got {normalize!r}")
        return Rule("one_of", values=tuple(values or ()), normalize=normalize)
    if kind == "regex":
        pattern = params.get("pattern", value)
        if pattern is not None:
            try:
                re.compile(str(pattern))
            except re.error as exc:
                raise ValueError(f"invalid regex {pattern!r}: {exc}") from exc
        return Rule("regex", pattern=None if pattern is None else str(pattern))
    if kind == "contains":
        needle = params.get("value")
        return Rule("contains", pattern=None if needle is None else str(needle))
    if kind == "date":
        return Rule("date", dayfirst=bool(params.get("dayfirst", True)))
    return Rule(kind)


def _parse_nested(kind: str, params: Mapping[str, Any], depth: int) -> Rule:
    if depth >= MAX_RULE_DEPTH:
        raise ValueError(f"tolerance rules nested deeper than {MAX_RULE_DEPTH} levels")
    unknown = sorted(str(k) for k in params if k not in (kind, "optional", "rule"))
    if unknown:
        raise ValueError(f"{kind} takes '{kind}' and 'optional', not {', '.join(unknown)}")
    optional = params.get("optional", False)
    if not isinstance(optional, bool):
        raise ValueError("'optional' is true or false")
    inner = params.get(kind)
    if kind == "fields":
        if not isinstance(inner, Mapping):
            raise ValueError("fields maps each field of the object to its rule")
        return Rule(
            "fields",
            optional=optional,
            fields=tuple((str(k), _sub_rule(v, f"fields.{k}", depth)) for k, v in inner.items()),
        )
    if not isinstance(inner, list):
        raise ValueError("items takes a list of rules, one per element")
    return Rule(
        "items", optional=optional, items=tuple(_sub_rule(v, f"items[{i}]", depth) for i, v in enumerate(inner))
    )


def _sub_rule(raw: Any, where: str, depth: int) -> Rule:
    try:
        return parse_rule(raw, depth + 1)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


EXACT = Rule()


@dataclass(slots=True, init=False, unsafe_hash=True)
class Mismatch:
    """A field whose value was not acceptable."""

    field: str
    rule: str
    expected: Any
    got: Any

    def __init__(self, field: str, rule: str, expected: Any, got: Any) -> None:
        # written out, not frozen: compiled, a native __init__ (records.py says why); hashed as before
        self.field = field
        self.rule = rule
        self.expected = expected
        self.got = got

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "rule": self.rule, "expected": self.expected, "got": self.got}


def compare_arguments(got: Mapping[str, Any], expected: Mapping[str, Any], rules: Mapping[str, Rule]) -> list[Mismatch]:
    """Mismatches of the expected fields (fields the case does not name are
    left to the schema). A field named only in ``rules`` (e.g. a ``one_of``
    with its values) is checked too."""
    out: list[Mismatch] = []
    names = list(expected) + [k for k in rules if k not in expected] if rules else expected
    for name in names:
        want = expected.get(name)
        have = got.get(name, _MISSING)
        rule = rules.get(name) if rules else None
        if rule is None:
            if type(have) is type(want) and have == want:
                continue  # the common case: identical values
            rule = EXACT
        if rule.kind in NESTED:
            found = _nested_mismatch(rule, have, want, name)
            if found is not None:
                out.append(found)
            continue
        if not rule.check(have, want):
            shown_want = list(rule.values) if rule.kind == "one_of" and rule.values else want
            out.append(Mismatch(name, rule.describe(), shown_want, None if have is _MISSING else have))
    return out


Comparison = Callable[[Mapping[str, Any]], list[Mismatch]]


def compile_comparison(expected: Mapping[str, Any], rules: Mapping[str, Rule]) -> Comparison:
    """``compare_arguments`` with the expected side prepared once (per expected
    step, not per executed call): the fields to check, an exact string's folded
    form, a rule's test specialised to its expected value, the rule's name and
    the expected value a mismatch shows. Plain tuples: cheap to build and to keep."""
    names = list(expected) + [k for k in rules if k not in expected] if rules else list(expected)
    fields: list[tuple[str, Any, str | None, Callable[[Any], bool] | None, str, Any, bool, Rule | None]] = []
    for name in names:
        want = expected.get(name)
        rule = rules.get(name) if rules else None
        if rule is None:
            fields.append(
                (name, want, want.strip().casefold() if type(want) is str else None, None, "exact", want, False, None)
            )
        elif rule.kind in NESTED:  # checked where it fails, to name the nested field
            fields.append((name, want, None, _nested_test(rule, want), rule.kind, want, False, rule))
        elif rule.kind != "ignore":  # ignore accepts anything, a missing field included
            listed = rule.kind == "one_of" and bool(rule.values)
            fields.append(
                (
                    name,
                    want,
                    None,
                    _field_test(want, rule),
                    rule.describe(),
                    rule.values if listed else want,
                    listed,
                    None,
                )
            )
    checks = tuple(fields)

    def compare(got: Mapping[str, Any]) -> list[Mismatch]:
        out: list[Mismatch] = []
        for name, want, folded, test, rule_name, shown, listed, nested in checks:
            have = got.get(name, _MISSING)
            if test is None:  # the default exact rule
                if type(have) is type(want) and have == want:
                    continue  # the common case: identical values
                if folded is not None:
                    if isinstance(have, str) and have.strip().casefold() == folded:
                        continue
                elif have is not _MISSING and values_equal(have, want):
                    continue
            elif test(have):
                continue
            if nested is not None:
                found = _nested_mismatch(nested, have, want, name)
                if found is not None:
                    out.append(found)
                continue
            out.append(Mismatch(name, rule_name, list(shown) if listed else shown, None if have is _MISSING else have))
        return out

    return compare


def _nested_test(rule: Rule, want: Any) -> Callable[[Any], bool]:
    return lambda have: _nested_mismatch(rule, have, want, "") is None


def _field_test(want: Any, rule: Rule | None) -> Callable[[Any], bool]:
    """Whether a value (``_MISSING`` when absent) is acceptable for one field:
    the same answer as ``compare_arguments`` gives, with the expected side's
    work done once."""
    if rule is not None and rule.kind != "exact":
        return _rule_test(want, rule)
    if type(want) is str:
        folded = want.strip().casefold()
        return lambda have: isinstance(have, str) and (have == want or have.strip().casefold() == folded)
    if type(want) is int or type(want) is float:
        return lambda have: (
            (
                type(have) is int
                or type(have) is float
                or (isinstance(have, (int, float)) and not isinstance(have, bool))
            )
            and have == want
        )
    return lambda have: (
        (type(have) is type(want) and have == want) or (have is not _MISSING and values_equal(have, want))
    )


def _rule_test(want: Any, rule: Rule) -> Callable[[Any], bool]:
    """``rule.check`` against a fixed expected value, with that value's side
    (options, folded needle, parsed date, compiled pattern) prepared once."""
    kind = rule.kind
    if kind == "one_of":
        options = rule.values or (tuple(want) if isinstance(want, list) else (want,))
        if options and all(type(o) is str for o in options):
            may_omit = "" in options
            if rule.normalize == "bfcl":
                standard = frozenset(bfcl_standardize(o) for o in options)
                return lambda have: (
                    may_omit if have is _MISSING else (isinstance(have, str) and bfcl_standardize(have) in standard)
                )
            folded = frozenset(o.strip().casefold() for o in options)
            return lambda have: (
                may_omit if have is _MISSING else (isinstance(have, str) and have.strip().casefold() in folded)
            )
    elif kind == "number":
        a, r = rule.abs, rule.rel
        return lambda have: have is not _MISSING and _close(have, want, a, r)
    elif kind == "date":
        dayfirst = rule.dayfirst
        day = parse_date(want, dayfirst=dayfirst)
        return lambda have: (
            have is not _MISSING and (got := parse_date(have, dayfirst=dayfirst)) is not None and (got == day)
        )
    elif kind == "regex":
        try:
            rx = _regex(rule.pattern if rule.pattern is not None else str(want))
        except re.error:
            pass  # raised where the check runs, as before
        else:
            return lambda have: isinstance(have, str) and rx.fullmatch(have.strip()) is not None
    elif kind == "contains":
        needle = rule.pattern if rule.pattern is not None else want
        folded_needle = fold(str(needle).strip())
        return lambda have: (
            any(values_equal(item, needle) for item in have)
            if isinstance(have, list)
            else (isinstance(have, str) and folded_needle in fold(have))
        )
    elif kind == "set":
        return lambda have: _same_multiset(have, want)
    return lambda have: rule.check(have, want)
