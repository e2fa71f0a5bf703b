"""Per-app state: caches of scorers by stored suite, of comparisons and of a run's figures."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from threading import Lock
from typing import Any, TypeVar, cast

from sqlalchemy.orm import Session

from app.core.bounded import BoundedCache
from app.core.prices import PriceTable, current_prices
from app.core.score.scoring import Scorer
from app.store import compare as comparing
from app.store import queries
from app.store.ingest import get_run_row, suite_for_run
from app.store.models import Run
from app.store.views import ComparisonPublic

T = TypeVar("T")


class ScorerCache:
    """Scorers compile every tool schema once; keep the recent ones."""

    def __init__(self, size: int = 32):
        self._items: BoundedCache[int, Scorer] = BoundedCache(size)
        self._lock = Lock()

    def for_run(self, session: Session, run: Run) -> Scorer:
        with self._lock:
            cached = self._items.get(run.suite_id)
        if cached is not None:
            return cached
        scorer = Scorer(suite_for_run(session, run))
        with self._lock:
            self._items.put(run.suite_id, scorer)
        return scorer


class ComparisonCache:
    """Comparisons of two runs, kept while neither run changes.

    The key holds both runs' trajectory counts (with their birth, name, status
    and finish: ``compare.run_stamps``, one statement that computes no figure),
    so a batch stored into either run makes a new key: a cached comparison is
    never stale, and a cached view costs that statement."""

    def __init__(self, size: int = 64):
        self._items: BoundedCache[tuple[Any, ...], tuple[PriceTable, ComparisonPublic]] = BoundedCache(size)
        self._lock = Lock()

    def get(self, session: Session, a: int, b: int) -> ComparisonPublic:
        key = comparing.run_stamps(session, a, b)  # an unknown run: 404
        prices = current_prices()  # the cost deltas are priced now: a new table re-prices them
        with self._lock:
            cached = self._items.peek(key)
            if cached is not None and cached[0] is prices:
                self._items.get(key)  # the most recent now
                return cached[1]
        result = comparing.compare_runs(session, a, b)
        if (result.a.trajectories, result.b.trajectories) == (key[0][-1], key[1][-1]):
            with self._lock:  # (a batch stored between the two reads: served, not kept under the older count)
                self._items.put(key, (prices, result))
        return result


@dataclass
class _Summary:
    """A run's figures without their per-case page, as computed once."""

    born: dt.datetime  # the run's created_at: a run id used again after a delete is another run
    count: int  # the run's trajectories when computed
    prices: PriceTable
    data: dict[str, Any]
    at: float  # time.time() of the computation
    at_mono: float  # time.monotonic() of it
    took: float  # seconds the computation took
    tally: queries.UsageSoFar | None = None  # kept for a run that is receiving: the next one adds to it


class FiguresCache:
    """A run's figures (without their per-case page), computed once and shared.

    While the run's trajectory count stays the same they are current. A run
    that is receiving traces changes after every batch: its figures are then
    computed again at most once per ``interval`` seconds (sooner when they
    cost little: ten times what they took), and between two
    computations the last one is served with how far behind it is
    (``computed_at``, ``trajectories_behind``, ``recompute_interval_s``).
    Concurrent requests for a run share one computation: the others wait for
    it. The usage figures of a receiving run are computed incrementally, from
    the trajectories stored since (``queries.UsageSoFar``)."""

    def __init__(self, size: int = 64, *, interval: float = 5.0, live_tallies: int = 4):
        self.interval = interval
        self._live_tallies = live_tallies
        self._items: BoundedCache[int, _Summary] = BoundedCache(size)
        self._running: dict[int, threading.Event] = {}
        self._lock = Lock()
        self._derived: BoundedCache[tuple[int, dt.datetime, int, str], tuple[Any]] = BoundedCache(size)
        self._memo: BoundedCache[Hashable, tuple[Any]] = BoundedCache(size)

    def derived(self, run_id: int, born: dt.datetime, trajectories: int, what: str, compute: Callable[[], T]) -> T:
        """What a page derives from the run's stored rows and counters alone (``what`` names it,
        with what else it depends on: the run page's rewrites of the run's name), computed once per
        trajectory count: a batch stored into the run (``trajectories``, its counter as the page read
        it), or its id used again after a delete (``born``), is a new key. Only the app's memory is
        written: a page read never writes the database."""
        key = (run_id, born, trajectories, what)
        held = self._derived.get(key)
        if held is None:
            held = (compute(),)
            self._derived.put(key, held)
        return cast(T, held[0])

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """What a page computes from inputs it read (``key`` holds them all, with what it is), computed
        once while kept (the run page's pair rewrites: ``app.store.pairs.compute_pair_edits``)."""
        held = self._memo.get(key)
        if held is None:
            held = (compute(),)
            self._memo.put(key, held)
        return cast(T, held[0])

    def figures(
        self, session: Session, run_id: int, *, cases_limit: int = 100, cases_offset: int = 0
    ) -> dict[str, Any]:
        summary = self.summary(session, run_id)
        return queries.figures(session, run_id, cases_limit=cases_limit, cases_offset=cases_offset, summary=summary)

    def summary(self, session: Session, run_id: int) -> dict[str, Any]:
        """The run's figures without ``cases``, with the keys that say when they were computed."""
        prices = current_prices()  # the usage figures are priced now: a new table re-prices them
        born = get_run_row(session, run_id).created_at  # an unknown run: 404, and nothing computed
        count = queries.run_trajectory_count(session, run_id)
        while True:
            with self._lock:
                cached = self._items.peek(run_id)
                if cached is not None and cached.born != born:
                    cached = None
                usable = cached is not None and cached.prices is prices
                if (
                    cached is not None
                    and usable
                    and (cached.count == count or time.monotonic() - cached.at_mono < self._wait(cached))
                ):
                    self._items.get(run_id)  # the most recent now
                    return self._stamped(cached, count)
                running = self._running.get(run_id)
                if running is None:
                    done = self._running[run_id] = threading.Event()
            if running is not None:  # another request computes them: share its result
                running.wait()
                with self._lock:
                    cached = self._items.peek(run_id)
                    if cached is not None and cached.prices is prices and cached.born == born:
                        return self._stamped(cached, count)
                continue  # it failed: compute them here
            try:
                try:
                    fresh = self._compute(session, run_id, born, prices, cached if usable else None)
                except BaseException:
                    if cached is not None:
                        cached.tally = None  # it may hold part of the failed computation
                    raise
                with self._lock:
                    self._items.put(run_id, fresh)
                    live = [v for _, v in self._items.newest_first() if v.tally is not None]
                    for v in live[self._live_tallies :]:  # the tallies of the runs that received last only
                        v.tally = None
                return self._stamped(fresh, count)
            finally:
                with self._lock:
                    self._running.pop(run_id, None)
                done.set()

    def _compute(
        self, session: Session, run_id: int, born: dt.datetime, prices: PriceTable, previous: _Summary | None
    ) -> _Summary:
        at, mono = time.time(), time.monotonic()
        count = queries.run_trajectory_count(session, run_id)
        receiving = previous is not None and previous.count != count
        tally = previous.tally if receiving and previous is not None else None
        data, tally = queries.run_summary(session, run_id, prices, usage=tally, keep_usage=receiving)
        return _Summary(
            born=born,
            count=int(data["trajectories"]),
            prices=prices,
            data=data,
            at=at,
            at_mono=mono,
            took=time.monotonic() - mono,
            tally=tally,
        )

    def _wait(self, s: _Summary) -> float:
        """How long a receiving run's figures are served before they are computed
        again: ``interval``, or less for figures that cost little (ten times their cost)."""
        return min(self.interval, 10 * s.took)

    def _stamped(self, s: _Summary, count: int) -> dict[str, Any]:
        """The figures; when they are behind the run, with when they were computed and how far behind."""
        if count <= s.count:
            return s.data  # current: exactly the shape of ``toollens score --json``
        return {
            **s.data,
            "computed_at": dt.datetime.fromtimestamp(s.at, dt.UTC).isoformat(timespec="milliseconds"),
            "trajectories_behind": count - s.count,
            "recompute_interval_s": round(self._wait(s), 3),
        }
