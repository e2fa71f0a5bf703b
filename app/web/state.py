"""Per-app state: a small cache of scorers by stored suite."""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from sqlalchemy.orm import Session

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
        self._items: OrderedDict[tuple[int, ...], ComparisonPublic] = OrderedDict()
        self._lock = Lock()

    def get(self, session: Session, a: int, b: int) -> ComparisonPublic:
        ra, rb = queries.get_run(session, a), queries.get_run(session, b)
        key = (a, b, ra.trajectories, rb.trajectories)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        result = comparing.compare_runs(session, a, b)
        with self._lock:
            self._items[key] = result
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return result
