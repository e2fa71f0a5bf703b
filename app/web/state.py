"""Per-app state: a small cache of scorers by stored suite."""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from sqlalchemy.orm import Session

from app.core.scoring import Scorer
from app.store.ingest import suite_for_run
from app.store.models import Run


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
