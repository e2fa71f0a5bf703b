"""The chunks of traces handed to the scoring worker process, in the order they were handed
over, and the worker itself: started on first use (or at the server's start), replaced when
it dies, stopped when it is stuck."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from app.otlp.buffer import Clock, Key, Pending
from app.otlp.spans import SpanRef
from app.otlp.worker import WorkerResult, load_decoders, score_traces, start_worker
from app.store.gc_tuning import give_back_memory
from app.store.scoring_worker import ScoringWorker

log = logging.getLogger("toollens.otlp")

MAX_SCORING = 4  # chunks handed to the worker and not scored yet
WORKER_TIMEOUT = 120.0  # seconds a chunk may take in the worker before it counts as stuck


@dataclass
class Fresh:
    """A taken trace: its buffered spans, the new ones, how often it was stored before."""

    key: Key
    pending: Pending
    fresh: list[SpanRef]
    flushes: int

    def refs(self) -> list[tuple[int, int]]:
        """Where its fresh spans are staged: (batch, position)."""
        return [(s.batch, s.index) for s in self.fresh]


@dataclass
class Flight:
    """A chunk the worker process is scoring (or, taken early, waiting to settle)."""

    run_id: int
    chunk: list[Fresh]
    future: Future[WorkerResult] | None  # None: the worker could not take it (scored in-process)
    worker: ScoringWorker | None
    deadline: float  # the clock's time after which the worker counts as stuck
    settles_at: float = 0.0  # taken early: not stored before this time

    def scored(self) -> bool:
        return self.future is None or self.future.done()

    def overdue(self, now: float) -> bool:
        return now > self.deadline

    def landable(self, now: float) -> bool:
        """Scored (or stuck in the worker), and settled."""
        return (self.scored() or self.overdue(now)) and now >= self.settles_at


class Scoring:
    """The worker process (``use``: one pays on this machine) and the chunks it holds."""

    def __init__(
        self,
        use: bool,
        *,
        clock: Clock = time.monotonic,
        start: Callable[[], ScoringWorker] = start_worker,
        timeout: float = WORKER_TIMEOUT,
    ):
        self.use, self.clock, self.start, self.timeout = use, clock, start, timeout
        self.worker: ScoringWorker | None = None  # started with the first large batch
        self.flights: deque[Flight] = deque()  # chunks handed to the worker, in order
        self.flying: set[Key] = set()  # their traces: not taken again until stored

    def behind(self) -> bool:
        """The worker holds ``MAX_SCORING`` chunks not scored yet: traces wait, and make larger batches."""
        return sum(1 for f in self.flights if not f.scored()) >= MAX_SCORING

    def flying_pending(self, keys: Any) -> dict[Key, Pending]:
        """The traces among ``keys`` taken to be scored early, as they were taken."""
        if not self.flying:
            return {}
        return {f.key: f.pending for flight in list(self.flights) for f in flight.chunk if f.key in keys}

    def submit(
        self, run_id: int, chunk: list[Fresh], document: dict[str, Any], key: str, bodies: dict[int, tuple[str, bytes]]
    ) -> Flight:
        """Hand a chunk to the worker (started on first use); raises when it cannot take it."""
        if self.worker is None:
            self.worker = self.start()
        worker = self.worker
        future = worker.submit(score_traces, key, document, bodies, [(f.refs(), f.flushes) for f in chunk])
        return Flight(run_id, chunk, future, worker, self.clock() + self.timeout)

    def hold(self, flight: Flight) -> None:
        self.flights.append(flight)
        self.flying.update(f.key for f in flight.chunk)

    def landed(self, flight: Flight) -> None:
        self.flying.difference_update(f.key for f in flight.chunk)

    def drop_broken(self, exc: BaseException, worker: ScoringWorker | None) -> None:
        """A worker process that died (or was killed: its pool may refuse a batch before it
        knows it is broken): the next large batch starts a new one."""
        if worker is not None and self.worker is worker and (isinstance(exc, BrokenProcessPool) or worker.killed):
            self.worker.close()
            self.worker = None

    def stuck(self, flight: Flight) -> None:
        """A worker that took more than ``timeout`` for a chunk: stopped (its other chunks fail
        at once and take the in-process path too); the next large batch starts a new one."""
        log.error("the scoring worker took more than %d s for a batch: stopped; storing in-process", self.timeout)
        if self.worker is flight.worker:
            self.worker = None
        if flight.worker is not None:
            flight.worker.kill()

    def wait(self, timeout: float, sleep: Callable[[float], object]) -> bool:
        """Block until the oldest chunk can be stored: scored, and settled when it was taken
        early (or ``timeout``); False when the worker holds none."""
        try:
            head = self.flights[0]
        except IndexError:  # none, or another thread has just landed the last one
            return False
        if head.future is not None and not head.future.done():
            futures_wait([head.future], timeout=timeout)
        elif (wait := head.settles_at - self.clock()) > 0:
            sleep(min(wait, timeout))
        return True

    def warm_up(self) -> None:
        """Start the worker and load the decoders now, at the server's start, so that the first
        burst of spans does not also pay for a process start and imports (about half a second of CPU)."""
        load_decoders()
        if self.use and self.worker is None:
            try:
                self.worker = self.start()
            except Exception:  # e.g. a script without the ``__main__`` guard that spawning needs
                log.exception(
                    "the scoring worker could not start with the server; it starts with the first "
                    "large batch instead, or the spans are scored in-process"
                )

    @property
    def ready(self) -> bool | None:
        """Whether the worker is up and loaded; None when none is running (False for one
        killed, whose start may have been cancelled)."""
        worker = self.worker
        if worker is None:
            return None
        ready = worker.ready
        return not worker.killed and ready.done() and not ready.cancelled() and ready.exception() is None

    def give_back_memory(self) -> None:
        """Ask the worker, once it is idle, to give its free heap back to the system."""
        if self.worker is not None and not self.flights:
            with contextlib.suppress(RuntimeError, BrokenProcessPool):  # shut down or broken: replaced on next use
                self.worker.submit(give_back_memory)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def kill(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
