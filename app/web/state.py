"""Per-app state: a small cache of scorers by stored suite."""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock
from typing import Any

from sqlalchemy.orm import Session

from app.core.prices import PriceTable, current_prices
from app.core.scoring import Scorer
from app.store import compare as comparing
from app.store import queries
from app.store.ingest import suite_for_run
from app.store.models import Run
from app.store.views import ComparisonPublic


class ScorerCache:
    """Scorers compile every tool schema once; keep the recent ones."""

    def __init__(self, size: int = 32):
        self._size = size
        self._items: OrderedDict[int, Scorer] = OrderedDict()
        self._lock = Lock()

    def for_run(self, session: Session, run: Run) -> Scorer:
        with self._lock:
            if run.suite_id in self._items:
                self._items.move_to_end(run.suite_id)
                return self._items[run.suite_id]
        scorer = Scorer(suite_for_run(session, run))
        with self._lock:
            self._items[run.suite_id] = scorer
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return scorer


class ComparisonCache:
    """Comparisons of two runs, kept while neither run changes.

    The key holds both runs' trajectory counts, so a batch stored into either
    run makes a new key: a cached comparison is never stale."""

    def __init__(self, size: int = 64):
        self._size = size
        self._items: OrderedDict[tuple[int, ...], tuple[PriceTable, ComparisonPublic]] = OrderedDict()
        self._lock = Lock()

    def get(self, session: Session, a: int, b: int) -> ComparisonPublic:
        ra, rb = queries.get_run(session, a), queries.get_run(session, b)
        key = (a, b, ra.trajectories, rb.trajectories)
        prices = current_prices()  # the cost deltas are priced now: a new table re-prices them
        with self._lock:
            cached = self._items.get(key)
            if cached is not None and cached[0] is prices:
                self._items.move_to_end(key)
                return cached[1]
        result = comparing.compare_runs(session, a, b)
        with self._lock:
            self._items[key] = (prices, result)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return result


class FiguresCache:
    """A run's report (without its per-case page), kept while the run's
    trajectory count stays the same: rebuilding it from the counters costs
    more than the page around it on a run with many trials."""

    def __init__(self, size: int = 64):
        self._size = size
        self._items: OrderedDict[tuple[int, int], tuple[PriceTable, dict[str, Any]]] = OrderedDict()
        self._lock = Lock()

    def figures(self, session: Session, run_id: int, *, cases_limit: int = 100,
                cases_offset: int = 0) -> dict[str, Any]:
        prices = current_prices()  # the usage figures are priced now: a new table re-prices them
        key = (run_id, queries.run_trajectory_count(session, run_id))
        with self._lock:
            cached = self._items.get(key)
            if cached is not None:
                self._items.move_to_end(key)
        summary = cached[1] if cached is not None and cached[0] is prices else None
        if summary is None:
            summary = {**queries.run_report(session, run_id).to_json(),
                       "usage": queries.run_usage(session, run_id, prices)}
            summary.pop("cases", None)
            with self._lock:
                self._items[key] = (prices, summary)
                while len(self._items) > self._size:
                    self._items.popitem(last=False)
        return queries.figures(session, run_id, cases_limit=cases_limit, cases_offset=cases_offset,
                               summary=summary)
