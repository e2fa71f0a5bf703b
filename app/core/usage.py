"""Tokens, latency and cost: what a trajectory's model requests and tool calls used.

A trajectory record may carry ``model_calls`` (one entry per request to the
model, every key optional) and a ``latency_ms`` on each tool call. What is
absent stays absent: a sum over no reported values is null, never zero.
Cost is never stored: it is computed when figures are read, from a price
table (``app.core.prices``), so a new price re-prices old runs.

Percentiles are nearest-rank: of n sorted values, the p-th percentile is the
value at rank ceil(p/100 * n) (1-based), always an observed value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.prices import PriceTable

MAX_MODEL_CALLS = 5_000
MAX_TOKENS = 2**53  # integers a JSON number holds exactly in every reader
MAX_MS = 1e12
TOKEN_KEYS = ("input_tokens", "output_tokens", "cached_tokens", "total_tokens")


@dataclass(slots=True)
class ModelCall:
    """One request to the model. ``input_tokens`` includes ``cached_tokens``
    (the part of the prompt read from a cache); ``total_tokens`` alone is a
    count without the split (ToolBench), counted as tokens but never priced."""

    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    total_tokens: int | None = None
    latency_ms: float | None = None

    @property
    def tokens(self) -> int | None:
        """Input plus output when either is known, else ``total_tokens``."""
        if self.input_tokens is None and self.output_tokens is None:
            return self.total_tokens
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k in ("model", *TOKEN_KEYS, "latency_ms") if (v := getattr(self, k)) is not None}


def parse_model_calls(raw: Any, bad: Callable[[str, str], Exception]) -> list[ModelCall]:
    """The ``model_calls`` extension key, checked key by key (``bad(message, field)`` raises)."""
    if type(raw) is not list:
        raise bad("must be a list", "model_calls")
    if len(raw) > MAX_MODEL_CALLS:
        raise bad(f"more than {MAX_MODEL_CALLS} entries", "model_calls")
    out = []
    sums = dict.fromkeys(TOKEN_KEYS, 0)
    for i, entry in enumerate(raw):
        where = f"model_calls[{i}]"
        if type(entry) is not dict:
            raise bad("each entry must be an object", where)
        model = entry.get("model")
        if model is not None and (type(model) is not str or len(model) > 256):
            raise bad("must be a string of at most 256 characters", f"{where}.model")
        n_in, n_out, n_cached, n_total = (count(entry.get(k), f"{where}.{k}", bad) for k in TOKEN_KEYS)
        for key, n in zip(TOKEN_KEYS, (n_in, n_out, n_cached, n_total), strict=True):
            sums[key] += n or 0
            if sums[key] >= MAX_TOKENS:  # the trajectory's sums are stored and shown as well
                raise bad(f"the trajectory's {key} add up past {MAX_TOKENS - 1} here", f"{where}.{key}")
        latency = milliseconds(entry.get("latency_ms"), f"{where}.latency_ms", bad)
        out.append(ModelCall(model, n_in, n_out, n_cached, n_total, latency))
    return out


def count(value: Any, where: str, bad: Callable[[str, str], Exception]) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < MAX_TOKENS:
        raise bad(f"must be an integer from 0 to {MAX_TOKENS - 1}", where)
    return value


def milliseconds(value: Any, where: str, bad: Callable[[str, str], Exception]) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 <= value < MAX_MS:  # NaN fails the comparison too
        raise bad("must be a number of milliseconds from 0 to 10^12", where)
    return float(value)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of the values (None for none)."""
    if not values:
        return None
    return nearest_rank(sorted(values), p)


def spread(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95)}


def trajectory_cost(calls: Sequence[ModelCall], prices: PriceTable) -> tuple[float | None, bool]:
    """The cost in USD of the requests that have a price (None when none has:
    an unknown model, or tokens without the input/output split), and whether all had one."""
    total, priced = 0.0, 0
    for mc in calls:
        cost = prices.cost(mc.model, mc.input_tokens, mc.output_tokens, mc.cached_tokens)
        if cost is not None:
            total += cost
            priced += 1
    return (total if priced else None), bool(calls) and priced == len(calls)


def _sum(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass(slots=True)
class _Group:
    """Tokens and cost of a group of trajectories (passed, failed, an outcome, …)."""

    trajectories: int = 0
    with_usage: int = 0
    priced: int = 0
    tokens: int = 0
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories,
            "trajectories_with_usage": self.with_usage,
            "total_tokens": self.tokens if self.with_usage else None,
            "mean_tokens": round(self.tokens / self.with_usage, 1) if self.with_usage else None,
            "cost_usd": None if self.cost is None else round(self.cost, 6),
            "trajectories_priced": self.priced,
        }


@dataclass
class UsageTally:
    """Usage over trajectories, priced when the figures are read (``to_json``)."""

    model_calls: list[list[ModelCall]] = field(default_factory=list)  # per trajectory with model calls
    groups: list[tuple[str, ...]] = field(default_factory=list)  # the groups each of those belongs to
    all_groups: Counter[str] = field(default_factory=Counter)  # trajectories per group, with usage or not
    tool_latency: dict[str, list[float]] = field(default_factory=dict)
    trajectories: int = 0

    def add(
        self,
        model_calls: Sequence[ModelCall] | None,
        tool_latency: Iterable[tuple[str, float]],
        *,
        passed: bool,
        failures: Iterable[str] = (),
        outcome: str | None = None,
    ) -> None:
        """One trajectory: its model requests, its tools' (name, latency) and how it ended."""
        self.trajectories += 1
        keys = (
            "passed" if passed else "failed",
            *(f"failure:{f}" for f in failures),
            *(() if outcome is None else (f"outcome:{outcome}",)),
        )
        self.all_groups.update(keys)
        if model_calls:
            self.model_calls.append(list(model_calls))
            self.groups.append(keys)
        for name, ms in tool_latency:
            self.tool_latency.setdefault(name, []).append(ms)

    def add_alike(self, n: int, *, passed: bool, failures: Iterable[str] = (), outcome: str | None = None) -> None:
        """``n`` trajectories without model requests that ended alike: what ``add`` counts of each."""
        self.trajectories += n
        for key in (
            "passed" if passed else "failed",
            *(f"failure:{f}" for f in failures),
            *(() if outcome is None else (f"outcome:{outcome}",)),
        ):
            self.all_groups[key] += n

    def add_tool_latency(self, calls: Iterable[Sequence[Any]]) -> None:
        """Tool calls' (name, latency), of trajectories ``add`` counts (given there without them): pairs
        of any sequence type (a database row too: compiled, a ``tuple`` type would refuse it)."""
        lists = self.tool_latency
        for name, ms in calls:
            held = lists.get(name)
            if held is None:
                held = lists[name] = []
            held.append(float(ms or 0.0))

    def to_json(self, prices: PriceTable) -> dict[str, Any]:
        """The ``usage`` object of the figures (docs/metrics.md)."""
        flat = [mc for calls in self.model_calls for mc in calls]
        costs = [trajectory_cost(calls, prices) for calls in self.model_calls]
        priced = [c for c, _ in costs if c is not None]
        groups: dict[str, _Group] = {k: _Group(trajectories=n) for k, n in self.all_groups.items()}
        for calls, keys, (cost, whole) in zip(self.model_calls, self.groups, costs, strict=True):
            tokens = _sum(mc.tokens for mc in calls)
            for key in keys:
                g = groups[key]
                if tokens is not None:
                    g.with_usage += 1
                    g.tokens += tokens
                if cost is not None:
                    g.cost = (g.cost or 0.0) + cost
                g.priced += whole
        tool_all = [ms for values in self.tool_latency.values() for ms in values]
        unpriced = sorted(
            {
                mc.model or "(no model)"
                for mc in flat  # split tokens and no price for the model
                if (mc.input_tokens is not None or mc.output_tokens is not None) and prices.price(mc.model) is None
            }
        )

        def by(prefix: str, name: str) -> list[dict[str, Any]]:
            return [{name: k[len(prefix) :], **g.to_dict()} for k, g in sorted(groups.items()) if k.startswith(prefix)]

        return {
            "input_tokens": _sum(mc.input_tokens for mc in flat),
            "output_tokens": _sum(mc.output_tokens for mc in flat),
            "cached_tokens": _sum(mc.cached_tokens for mc in flat),
            "total_tokens": _sum(mc.tokens for mc in flat),
            "cost_usd": round(sum(priced), 6) if priced else None,
            "model_latency_ms": spread([mc.latency_ms for mc in flat if mc.latency_ms is not None]),
            "tool_latency_ms": spread(tool_all),
            "trajectories_with_usage": sum(
                1 for calls in self.model_calls if any(mc.tokens is not None for mc in calls)
            ),
            "trajectories_priced": sum(1 for _, whole in costs if whole),
            "model_calls": len(flat),
            "unpriced_models": unpriced,
            "prices_date": prices.date,
            "by_result": {k: groups.get(k, _Group()).to_dict() for k in ("passed", "failed")},
            "by_failure": by("failure:", "failure"),
            "by_outcome": by("outcome:", "outcome"),
            "by_tool": [
                {"tool": name, "calls": len(v), "latency_ms": spread(v)}
                for name, v in sorted(self.tool_latency.items())
            ],
        }


def trajectory_usage(calls: Sequence[ModelCall], prices: PriceTable) -> dict[str, Any] | None:
    """One trajectory's sums (the timeline's usage line), None without model requests."""
    if not calls:
        return None
    cost, whole = trajectory_cost(calls, prices)
    latencies = [mc.latency_ms for mc in calls if mc.latency_ms is not None]
    return {
        "requests": len(calls),
        **{k: _sum(getattr(mc, k) for mc in calls) for k in ("input_tokens", "output_tokens", "cached_tokens")},
        "total_tokens": _sum(mc.tokens for mc in calls),
        "cost_usd": None if cost is None else round(cost, 6),
        "priced": whole,
        "model_latency_ms": round(sum(latencies), 3) if latencies else None,
    }


def totals_by_model(per_model: dict[str, dict[str, int]], prices: PriceTable) -> tuple[int | None, float | None]:
    """A run's total tokens and cost from its per-model sums (``input_tokens``,
    ``output_tokens``, ``cached_tokens``, ``unsplit_tokens``): cost is linear in
    tokens, so summed tokens price exactly as request by request."""
    tokens: int | None = None
    cost: float | None = None
    for model, sums in per_model.items():
        split = sums.get("input_tokens", 0) + sums.get("output_tokens", 0)
        n = split + sums.get("unsplit_tokens", 0)
        if n or "input_tokens" in sums or "output_tokens" in sums:
            tokens = (tokens or 0) + n
        if "input_tokens" in sums or "output_tokens" in sums:
            c = prices.cost(
                model, sums.get("input_tokens", 0), sums.get("output_tokens", 0), sums.get("cached_tokens", 0)
            )
            if c is not None:
                cost = (cost or 0.0) + c
    return tokens, None if cost is None else round(cost, 6)


USAGE_DELTAS = (  # (key, label, unit): what the comparison of two runs lists
    ("tokens_per_trajectory", "tokens per trajectory", "tokens"),
    ("cost_per_trajectory", "cost per trajectory", "usd"),
    ("model_latency_p50", "model latency p50", "ms"),
    ("model_latency_p95", "model latency p95", "ms"),
    ("tool_latency_p50", "tool latency p50", "ms"),
    ("tool_latency_p95", "tool latency p95", "ms"),
)


def comparable(usage: dict[str, Any], trajectories: int) -> dict[str, float | None]:
    """A run's usage as figures two runs of different sizes compare on: tokens
    per trajectory that reported them, cost per trajectory, the percentiles."""
    with_usage = usage.get("trajectories_with_usage") or 0
    tokens, cost = usage.get("total_tokens"), usage.get("cost_usd")
    return {
        "tokens_per_trajectory": None if tokens is None or not with_usage else tokens / with_usage,
        "cost_per_trajectory": None if cost is None or not trajectories else cost / trajectories,
        "model_latency_p50": usage["model_latency_ms"]["p50"],
        "model_latency_p95": usage["model_latency_ms"]["p95"],
        "tool_latency_p50": usage["tool_latency_ms"]["p50"],
        "tool_latency_p95": usage["tool_latency_ms"]["p95"],
    }


def unpriced(tally: UsageTally) -> dict[str, Any]:
    """What ``comparable`` reads of a run's usage, before prices (kept per finished run:
    ``app.store.aggregates``): the token sum, the trajectories that reported tokens, the latency
    percentiles, and per model the fresh input, cached input and output tokens of its requests
    that split them (the only ones a price applies to), from which ``priced`` gives the cost."""
    flat = [mc for calls in tally.model_calls for mc in calls]
    spent: dict[str | None, list[int]] = {}
    for mc in flat:
        if mc.input_tokens is None and mc.output_tokens is None:
            continue
        cached = min(mc.cached_tokens or 0, mc.input_tokens or 0)
        row = spent.setdefault(mc.model, [0, 0, 0])
        row[0] += (mc.input_tokens or 0) - cached
        row[1] += cached
        row[2] += mc.output_tokens or 0
    return {
        "total_tokens": _sum(mc.tokens for mc in flat),
        "trajectories_with_usage": sum(1 for calls in tally.model_calls if any(mc.tokens is not None for mc in calls)),
        "model_latency_ms": spread([mc.latency_ms for mc in flat if mc.latency_ms is not None]),
        "tool_latency_ms": spread([ms for values in tally.tool_latency.values() for ms in values]),
        "spent": [[model, *row] for model, row in spent.items()],
    }


def unpriced_requests(stored: Iterable[Any]) -> dict[str, Any]:
    """``unpriced``'s figures of the model requests (all but ``tool_latency_ms``) from the
    trajectories' stored ``model_calls`` in id order (lists of the dicts ``ModelCall.to_dict``
    wrote, as read back: what is not a list, or not a dict in one, is skipped like the tally's
    reader skips it), without building a tally: the same values, the models in the same order
    (a first view of a run without kept aggregates reads millions of requests)."""
    # Any: the values as stored (compiled, a declared int or float would check each one)
    spent: dict[Any, list[Any]] = {}
    latencies: list[Any] = []
    total: Any = None
    with_usage = 0
    for calls in stored:
        if not isinstance(calls, list):
            continue
        counted = False
        for d in calls:
            if not isinstance(d, dict):
                continue
            n_in, n_out = d.get("input_tokens"), d.get("output_tokens")
            ms = d.get("latency_ms")
            if ms is not None:
                latencies.append(ms)
            if n_in is None and n_out is None:
                n_total = d.get("total_tokens")
                if n_total is not None:
                    total = (total or 0) + n_total
                    counted = True
                continue
            total = (total or 0) + (n_in or 0) + (n_out or 0)
            counted = True
            cached = min(d.get("cached_tokens") or 0, n_in or 0)
            model = d.get("model")
            row = spent.get(model)
            if row is None:
                row = spent[model] = [0, 0, 0]
            row[0] += (n_in or 0) - cached
            row[1] += cached
            row[2] += n_out or 0
        if counted:
            with_usage += 1
    latencies.sort()
    return {
        "total_tokens": total,
        "trajectories_with_usage": with_usage,
        "model_latency_ms": {"p50": nearest_rank(latencies, 50), "p95": nearest_rank(latencies, 95)},
        "spent": [[model, *row] for model, row in spent.items()],
    }


def rank(n: int, p: float) -> int:
    """The nearest rank (1-based) of the p-th percentile of n values (``percentile``)."""
    return max(1, math.ceil(p / 100 * n))


def nearest_rank(ordered: Sequence[float], p: float) -> float | None:
    """``percentile`` of values already sorted."""
    return ordered[rank(len(ordered), p) - 1] if ordered else None


def priced(kept: dict[str, Any], prices: PriceTable) -> dict[str, Any]:
    """``unpriced`` figures priced now: the keys of the ``usage`` figures that ``comparable`` reads,
    equal to those ``UsageTally.to_json`` gives (the cost summed per model rather than per request:
    the same to the rounding of floating point)."""
    costs = []
    for model, fresh, cached, output in kept["spent"]:
        p = prices.price(model)
        if p is not None:
            costs.append(
                (fresh * p.input + cached * (p.input if p.cached is None else p.cached) + output * p.output) / 1_000_000
            )
    return {
        "total_tokens": kept["total_tokens"],
        "trajectories_with_usage": kept["trajectories_with_usage"],
        "cost_usd": round(sum(costs), 6) if costs else None,
        "model_latency_ms": kept["model_latency_ms"],
        "tool_latency_ms": kept["tool_latency_ms"],
    }


def usage_deltas(a: dict[str, float | None], b: dict[str, float | None]) -> list[dict[str, Any]]:
    """B against A, figure by figure (``comparable``): the change and the relative change."""
    out = []
    for key, label, unit in USAGE_DELTAS:
        x, y = a.get(key), b.get(key)
        if x is None and y is None:
            continue
        delta = None if x is None or y is None else y - x
        out.append(
            {
                "key": key,
                "label": label,
                "unit": unit,
                "a": x,
                "b": y,
                "delta": delta,
                "relative": None if delta is None or not x else delta / x,
            }
        )
    return out
