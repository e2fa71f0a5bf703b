"""The price table: model name to USD per million input, output and cached tokens.

A bundled table (``prices.yaml`` beside this module, with the date its prices
were listed) is extended or overridden by a file of the same shape
(``--prices FILE`` or ``TOOLLENS_PRICES``). A model is found by its exact
name, else by the longest listed name it starts with followed by ``-`` (a
dated snapshot such as ``gpt-4o-2024-08-06``), ignoring case and a provider
prefix (``openai/gpt-4o``). An unknown model has no price: its cost is None,
never 0.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.core.bounded import BoundedCache
from app.core.errors import ToolLensError

BUNDLED = Path(__file__).with_name("prices.yaml")
ENV = "TOOLLENS_PRICES"


class PriceTableError(ToolLensError):
    """A price file that cannot be read."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens; ``cached`` None prices cached tokens as input."""

    input: float
    output: float
    cached: float | None = None


@dataclass(frozen=True)
class PriceTable:
    date: str
    models: dict[str, Price]
    _seen: dict[str, Price | None] = field(default_factory=dict, compare=False, repr=False)  # lookups made

    def price(self, model: str | None) -> Price | None:
        if not model:
            return None
        if model not in self._seen:
            if len(self._seen) >= 4096:  # names come from traces: remembered, but not without bound
                self._seen.clear()
            self._seen[model] = self._lookup(model)
        return self._seen[model]

    def _lookup(self, model: str) -> Price | None:
        name = model.rsplit("/", 1)[-1].strip().lower()
        found = self.models.get(name)
        if found is not None:
            return found
        prefixes = [k for k in self.models if name.startswith(k + "-")]
        return self.models[max(prefixes, key=len)] if prefixes else None

    def cost(
        self, model: str | None, input_tokens: int | None, output_tokens: int | None, cached_tokens: int | None = None
    ) -> float | None:
        """USD for one request, or None: no price for the model, or no input/output split."""
        p = self.price(model)
        if p is None or (input_tokens is None and output_tokens is None):
            return None
        cached = min(cached_tokens or 0, input_tokens or 0)
        fresh = (input_tokens or 0) - cached
        return (
            fresh * p.input + cached * (p.input if p.cached is None else p.cached) + (output_tokens or 0) * p.output
        ) / 1_000_000

    def merged(self, other: PriceTable) -> PriceTable:
        return PriceTable(other.date or self.date, {**self.models, **other.models})


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e6:
        raise PriceTableError(f"{where}: must be a price in USD per million tokens (a number from 0)")
    return float(value)


def parse_prices(data: Any, source: str) -> PriceTable:
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise PriceTableError(f"{source}: expected a mapping with `models:` (model: {{input, output, cached}})")
    models: dict[str, Price] = {}
    for name, entry in data["models"].items():
        where = f"{source}: models.{name}"
        if not isinstance(entry, dict) or "input" not in entry or "output" not in entry:
            raise PriceTableError(f"{where}: needs `input` and `output`")
        unknown = set(entry) - {"input", "output", "cached"}
        if unknown:
            raise PriceTableError(f"{where}: unknown key {sorted(unknown)[0]!r}")
        cached = entry.get("cached")
        models[str(name).strip().lower()] = Price(
            _number(entry["input"], f"{where}.input"),
            _number(entry["output"], f"{where}.output"),
            None if cached is None else _number(cached, f"{where}.cached"),
        )
    return PriceTable(str(data.get("date") or ""), models)


def read_prices(path: str | Path) -> PriceTable:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PriceTableError(f"{path}: cannot read the price file ({exc})") from None
    return parse_prices(data, str(path))


@functools.cache
def bundled_prices() -> PriceTable:
    return read_prices(BUNDLED)


_CURRENT: dict[tuple[str, int, int, int], PriceTable] = {}  # the file's (path, inode, size, mtime): its table
_GOOD: dict[str, PriceTable] = {}  # per path, the last table read from it whole
_BAD: BoundedCache[tuple[str, int, int, int], str] = BoundedCache(64)  # a file state that failed, and why (warned once)
log = logging.getLogger("toollens.prices")


def current_prices() -> PriceTable:
    """The table in force now: the bundled one, extended by ``TOOLLENS_PRICES``
    when set, read again when that file changes (figures re-price on their next
    read). A file that cannot be read or is not a price table is a logged
    warning, once per state of the file, and never an error: the last table
    read from it whole keeps serving (the bundled one if there was none)."""
    path = os.environ.get(ENV) or ""
    if not path:
        return bundled_prices()
    try:
        st = os.stat(path)
        key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError as exc:
        return _last_good(path, (path, -1, -1, -1), f"cannot read the price file ({exc.strerror})")
    table = _CURRENT.get(key)
    if table is None:
        bad = _BAD.get(key)
        if bad is not None:
            return _last_good(path, key, bad)
        try:
            table = load_prices(path)
        except PriceTableError as exc:
            return _last_good(path, key, str(exc))
        _CURRENT.clear()
        _BAD.clear()
        _CURRENT[key] = _GOOD[path] = table
    return table


def _last_good(path: str, key: tuple[str, int, int, int], reason: str) -> PriceTable:
    fallback = _GOOD.get(path)
    if key not in _BAD:
        _BAD.put(key, reason)
        log.warning(
            "%s: %s; the %s keeps serving",
            path,
            reason.removeprefix(f"{path}: "),
            "last good table read from it" if fallback else "bundled price table",
        )
    return fallback or bundled_prices()


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The bundled table, extended by ``path`` (else ``TOOLLENS_PRICES`` when set)."""
    table = bundled_prices()
    extra = path or os.environ.get(ENV) or None
    return table if extra is None else table.merged(read_prices(extra))
