"""Grounding: whether a value the agent stated comes from what it was told.

A value (a number, an id, a date) stated in an answer is *grounded* when it
appears in a source — the question, a user message, or a tool's observation
(error messages included) — or is derived from values that do, in the ways
agents really derive them:

- the same value written another way (``$1,625.00`` is 1625, ``May 20, 2024``
  is 2024-05-20 and states the year 2024);
- the leading or trailing digits (four or more) of an observed id or number
  of six digits or more ("card ending in 6644" from ``gift_card_6276644``);
- a sum or difference of two or three observed numbers of 10 or more
  (1000 = 673 + 327);
- an observed amount times, or divided by, an observed whole number from 2
  to 99 (a price times the passengers);
- a percentage of an observed amount, where the percentage itself is observed
  ("10%").

Every grounded value records how ("1000 = 673 + 327 (call #4, call #6)"); an
ungrounded one, where it was looked for. The search is bounded, and kept
narrow so that it does not ground everything: sums of three use only the
``POOL_FOR_THREE`` most recently observed numbers, operands below 10 take no
part in sums (1437 is not 1436 + 1), and at most ``MAX_VALUES`` stated values
are derived, so an answer full of numbers costs milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

POOL_FOR_THREE = 40  # observed numbers tried in sums of three (the latest ones)
MIN_OPERAND = 10_00  # hundredths: smaller numbers take no part in sums and differences
MAX_VALUES = 50  # stated values that are derived; more are looked up directly only
MAX_TOTAL = 10_000_000  # hundredths: larger numbers (ids, phone numbers) are never totals
MAX_LISTED = 12  # grounded numbers of one text a total may add up (a subset sum over a bitset)
_MIN_AFFIX = 4  # digits of an id that may be quoted alone ("ending in 6644")
_MIN_ID = 6  # digits of a number read as an id (an amount of 15000 does not ground 1500)

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_PERCENT = re.compile(r"(\d+(?:[.,]\d+)?)\s*(?:%|percent\b|por ciento\b)", re.IGNORECASE)
_DIGITS = re.compile(r"\d+")


@dataclass(slots=True, init=False, unsafe_hash=True)
class Source:
    """A text the agent was given, and where it was (for people: "call #4")."""

    where: str
    text: str

    def __init__(self, where: str, text: str) -> None:
        # written out, not frozen: compiled, a native __init__ (records.py says why); hashed as before
        self.where = where
        self.text = text


@dataclass(slots=True)
class Grounding:
    """How each stated value was grounded, and the values nothing grounds."""

    grounded: dict[str, str] = field(default_factory=dict)  # value -> how
    ungrounded: list[str] = field(default_factory=list)
    looked_in: list[str] = field(default_factory=list)  # where the ungrounded values were looked for

    def to_dict(self) -> dict[str, object]:
        return {"grounded": dict(self.grounded), "ungrounded": list(self.ungrounded), "looked_in": self.looked_in}


def _cents(value: str) -> int | None:
    """A canonical number as whole hundredths (None for more than two decimals)."""
    if not _NUMBER.fullmatch(value):
        return None
    whole, _, frac = value.partition(".")
    if len(frac) > 2:
        return None
    return int(whole) * 100 + int((frac + "00")[:2])


def _show(cents: int) -> str:
    whole, frac = divmod(cents, 100)
    return f"{whole}" if not frac else f"{whole}.{frac:02d}".rstrip("0")


@lru_cache(maxsize=1024)
def _percents(text: str) -> frozenset[int]:
    out = set()
    for m in _PERCENT.finditer(text):
        c = _cents(m.group(1).replace(",", "."))
        if c is not None and 0 < c <= 100_00:
            out.add(c)
    return frozenset(out)


class _Pool:
    """The observed numbers (in hundredths) and where each was first seen."""

    def __init__(self, seen: dict[str, str]) -> None:
        self.where: dict[int, str] = {}
        for value, where in seen.items():
            c = _cents(value)
            if c is not None and c not in self.where:
                self.where[c] = where
        # latest sources first (the caller fills ``seen`` that way); small numbers take no part in sums
        self.values = [c for c in self.where if c >= MIN_OPERAND]
        self.quantities = sorted({c // 100 for c in self.where if c % 100 == 0 and 2 <= c // 100 <= 99})
        self.digit_runs = [v for v in seen if v.isdigit() and len(v) >= _MIN_ID]

    def _at(self, *cents: int) -> str:
        return ", ".join(dict.fromkeys(self.where[c] for c in cents))

    def derive(self, value: str, percents: frozenset[int]) -> str | None:
        """How ``value`` derives from the pool, or None."""
        if value.isdigit() and len(value) >= _MIN_AFFIX:
            for run in self.digit_runs:
                if run != value and (run.endswith(value) or run.startswith(value)):
                    return f"digits of {run} ({self._seen_run(run)})"
        t = _cents(value)
        if t is None or not self.values:
            return None
        where = self.where
        for a in self.values:  # a + b, a - b
            if t - a >= MIN_OPERAND and t - a in where:
                return f"{value} = {_show(a)} + {_show(t - a)} ({self._at(a, t - a)})"
            if a - t >= MIN_OPERAND and a - t in where:
                return f"{value} = {_show(a)} - {_show(a - t)} ({self._at(a, a - t)})"
        for q in self.quantities:  # a × q, a ÷ q
            if t % q == 0 and t // q in where:
                return f"{value} = {_show(t // q)} × {q} ({self._at(t // q, q * 100)})"
            if t * q in where:
                return f"{value} = {_show(t * q)} ÷ {q} ({self._at(t * q, q * 100)})"
        for p in percents:  # p% of a
            a, rest = divmod(t * 100_00, p)
            if not rest and a in where:
                return f"{value} = {_show(p)}% of {_show(a)} ({self._at(a)})"
        few = self.values[:POOL_FOR_THREE]
        for i, a in enumerate(few):  # a + b + c, a + b - c, a - b - c
            for b in few[i:]:
                for c, how in (
                    (t - a - b, "{a} + {b} + {c}"),
                    (a + b - t, "{a} + {b} - {c}"),
                    (a - b - t, "{a} - {b} - {c}"),
                    (b - a - t, "{b} - {a} - {c}"),
                ):
                    if c >= MIN_OPERAND and c in where:
                        text = how.format(a=_show(a), b=_show(b), c=_show(c))
                        return f"{value} = {text} ({self._at(a, b, c)})"
        return None

    def _seen_run(self, run: str) -> str:
        c = _cents(run)
        return self.where.get(c, "observed") if c is not None else "observed"


def _totals(out: Grounding, left: set[str], seen: dict[str, str]) -> None:
    """Ground the stated numbers that total several other stated numbers
    already grounded (a list of prices and its total, stated together: a
    subset sum of the ``MAX_LISTED`` largest below it), and let later
    derivations use them (the difference of two totals)."""
    stated = sorted({c for v in out.grounded if (c := _cents(v)) is not None and 100 <= c <= MAX_TOTAL})
    for v in sorted(left):
        t = _cents(v)
        if t is None or t > MAX_TOTAL:
            continue
        below = [c for c in stated if c < t][-MAX_LISTED:]
        if len(below) < 2:
            continue
        reach = 1  # bit n set: some subset of ``below`` sums to n hundredths
        for c in below:
            reach |= reach << c
        if reach >> t & 1:
            out.grounded[v] = f"{v} = a total of values stated beside it"
            seen.setdefault(v, "a total of values stated beside it")
            left.discard(v)


def ground(
    stated: Iterable[str],
    sources: Sequence[Source],
    ground_text: Callable[[str], frozenset[str]],
    *,
    totals: bool = False,
) -> Grounding:
    """Ground each stated value against the sources, latest source first.

    ``ground_text(text)`` gives the values one text grounds directly (its
    numbers, ids, dates and the digit runs of its ids). With ``totals``, the
    stated values come from one text, and a number that totals several of
    the others, themselves grounded, is grounded too."""
    out = Grounding()
    left = set(stated)
    if not left:
        return out
    seen: dict[str, str] = {}
    for source in reversed(sources):
        for v in sorted(ground_text(source.text)):  # sorted: the same derivation on every run
            seen.setdefault(v, source.where)
        for v in [v for v in left if v in seen]:
            out.grounded[v] = f"in {seen[v]}"
            left.discard(v)
        if not left:
            return out
    for v in sorted(left):
        runs = _DIGITS.findall(v)
        if runs and not _NUMBER.fullmatch(v) and all(r.lstrip("0") in seen or r in seen for r in runs):
            # an id whose digits are all observed ("nota 40021" for NC-40021)
            out.grounded[v] = "digits in " + ", ".join(
                dict.fromkeys(seen.get(r.lstrip("0"), seen.get(r, "")) for r in runs)
            )
            left.discard(v)
    if left and totals:
        _totals(out, left, seen)
    if left:
        pool = _Pool(seen)
        percents = frozenset().union(*(_percents(s.text) for s in sources)) if sources else frozenset()
        for v in sorted(left)[:MAX_VALUES]:
            how = pool.derive(v, percents)
            if how is not None:
                out.grounded[v] = how
                left.discard(v)
    out.ungrounded = sorted(left)
    if left:
        out.looked_in = [s.where for s in sources]
    return out
