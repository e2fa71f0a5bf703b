"""The OTLP receiver: export requests staged and buffered, finished traces stored by a
background thread (``app.otlp`` says how). It puts the parts together: the span buffer
(``buffer``), the staged requests and the lease (``staging``), storing and retrying
(``landing``), and the scoring worker (``scoring``)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.otlp.bounds import Refused
from app.otlp.buffer import Clock, Key, Pending, Reservation, SpanBuffer, Taken
from app.otlp.landing import Lander, ReceiverStats, Scorers, TraceStore
from app.otlp.scoring import Flight, Fresh, Scoring
from app.otlp.spans import SpanRef, batch_refs
from app.otlp.staging import Release, Round, Staging
from app.otlp.worker import MIN_TRACES, digest, start_worker
from app.store import otlp_staging
from app.store.db import close_idle_connections, read_only_error, session_scope
from app.store.gc_tuning import give_back_memory
from app.store.otlp_lease import BEAT
from app.store.scoring_worker import ScoringWorker

log = logging.getLogger("toollens.otlp")

IN_FLIGHT_WAIT = 10.0  # seconds a ready trace waits at most for requests received meanwhile
GIVE_BACK_AFTER = 200  # traces buffered since memory was last given back, for a burst's end to give it back
GIVE_BACK_QUIET = 1.0  # seconds the buffer stays empty before a burst counts as ended


class OtlpReceiver:
    """Buffers spans per trace and stores finished traces in the background (with
    ``background=False``, only when ``store_ready`` is called: tests)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        scorers: Scorers,
        *,
        settle: float = 0.25,
        idle: float = 30.0,
        max_spans: int = 500_000,
        batch: int = 500,
        remember: int = 20_000,
        worker: bool = True,
        max_trace_spans: int = 10_000,
        max_traces: int = 100_000,
        max_bytes: int = 256 * 1024 * 1024,
        background: bool = True,
        store: TraceStore | None = None,
        clock: Clock = time.monotonic,
        start_worker: Callable[[], ScoringWorker] = start_worker,
    ):
        self.sessions, self.batch, self.background = sessions, batch, background
        self.stats = ReceiverStats()
        self.buffer = SpanBuffer(
            settle=settle,
            idle=idle,
            max_spans=max_spans,
            max_trace_spans=max_trace_spans,
            max_traces=max_traces,
            max_bytes=max_bytes,
            in_flight_wait=IN_FLIGHT_WAIT,
            clock=clock,
        )
        self.clock = clock
        self._lock = threading.Lock()  # guards the buffer: request threads and the storing thread
        self._store_lock = threading.Lock()  # one storing round at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.round = Round()
        self.staging = Staging(sessions, self.buffer, self._lock, self._stop, self.round)
        self.lander = Lander(
            store or TraceStore(sessions, scorers),
            self.buffer,
            self._lock,
            self.staging,
            self.round,
            self.stats,
            remember,
        )
        self.scoring = Scoring(worker and ScoringWorker.pays(), clock=clock, start=start_worker)

    @property
    def settle(self) -> float:
        return self.buffer.settle

    # -- the request side -------------------------------------------------------

    def run_id(self, name: str) -> int:
        """The open run named ``name`` (NotFound / Conflict otherwise)."""
        with session_scope(self.sessions) as session:
            return self.lander.store.open_run(session, name)

    def take_in(self, run_name: str, form: str, body: bytes, spans: list[SpanRef]) -> None:
        """An export request for the run named ``run_name``: the run checked and
        the request staged in one transaction, then its spans buffered. ``Refused``
        (nothing staged) past a bound of the buffer: 413 for a trace's, 503 for the whole's."""
        self._accept(form, body, spans, lambda session: self.lander.store.open_run(session, run_name))

    def accept(self, run_id: int, form: str, body: bytes, spans: list[SpanRef]) -> bool:
        """Stage the export request (committed before it is answered) and
        buffer its spans; False when the buffer is full (answer 503)."""
        try:
            self._accept(form, body, spans, lambda _: run_id)
        except Refused as exc:
            if exc.status != 503:
                raise
            return False
        return True

    def _accept(self, form: str, body: bytes, spans: list[SpanRef], run_of: Callable[[Session], int]) -> None:
        valid = [s for s in spans if s.trace_id]  # a span without a trace id has no trace to go to
        lease_id = self.staging.lease_id(self.recover) if valid else 0
        with self._lock:
            full = self.buffer.full(len(valid), len(body), 0)
        # a full buffer refuses without SQLite's write lock: retrying exporters would take it from
        # the thread that empties the buffer (the run is checked all the same, and first)
        taken: Reservation | None = None
        try:
            with session_scope(self.sessions, write=bool(valid) and full is None) as session:
                run_id = run_of(session)  # in the staging transaction: one transaction per request
                with self._lock:
                    self.stats.rejected_spans += len(spans) - len(valid)
                    try:
                        if full is not None:
                            raise full
                        taken = self.buffer.reserve(run_id, valid, len(body), self.scoring.flying_pending)
                    except Refused:
                        self.stats.refused_requests += 1
                        raise
                if not valid:
                    return
                batch = otlp_staging.stage(session, run_id, form, body, lease_id)
        except BaseException:
            if taken is not None:
                with self._lock:
                    self.buffer.unreserve(taken)
            raise
        if not self._buffer(run_id, batch, form, body, valid, taken):
            self.staging.drop([batch])
        with self._lock:
            self.stats.accepted_spans += len(valid)
        self._ensure_thread()

    def _buffer(
        self, run_id: int, batch: int, form: str, body: bytes, spans: list[SpanRef], taken: Reservation | None = None
    ) -> bool:
        with self._lock:
            holds, repeats = self.buffer.add(run_id, batch, form, body, spans, taken)
            self.stats.duplicate_spans += repeats
        return holds

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Mark an export request as being received (until its spans are buffered)."""
        with self._lock:
            token = self.buffer.request_began()
        try:
            yield
        finally:
            with self._lock:
                self.buffer.request_ended(token)

    def recover(self) -> int:
        """Buffer the spans staged by servers that stopped without storing them (their lease
        expired; a live server's are never taken) and those staged before leases; returns how
        many. At the start, and every few seconds (``BEAT``) from then on."""
        self.staging.lease_id(self.recover)
        batches = self.staging.take_over()
        empty: list[int] = []
        n = 0
        for batch, run_id, form, body, done in batches:
            try:
                spans = [s for s in batch_refs(form, body) if s.trace_id and s.trace_id not in done]
            except ValueError as exc:
                log.warning("staged batch %d cannot be read, dropped: %s", batch, exc)
                empty.append(batch)
                continue
            if self._buffer(run_id, batch, form, body, spans):
                n += len(spans)
            else:
                empty.append(batch)
        self.staging.drop(empty)
        if n:
            log.warning("recovered %d staged spans", n)
            self._ensure_thread()
        return n

    # -- the storing side --------------------------------------------------------

    def _ensure_thread(self) -> None:
        if not self.background:
            return
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._loop, name="otlp-store", daemon=True)
                    self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            pause = min(self.settle / 5, 0.05) or 0.01  # a trace is stored soon after it settles
            try:
                if not self.wait_for_worker(pause):  # a scored batch is stored as soon as the worker is done
                    self._stop.wait(pause)
                self.store_ready()
            except Exception:  # the database is away: keep the spans, try again
                log.exception("storing traces failed; retrying")
                self._stop.wait(1.0)
                continue
            if self.round.away:
                self._stop.wait(1.0)

    def wait_for_worker(self, timeout: float) -> bool:
        """Block until the oldest batch the worker holds can be stored: scored,
        and settled when it was taken early (or ``timeout``); False when it holds none."""
        return self.scoring.wait(timeout, self._stop.wait)

    def _take(self, everything: bool) -> tuple[Taken, Taken]:
        """The traces ready to store, and while the worker runs those to score early
        (``SpanBuffer.take``); none while the worker is behind."""
        with self._lock:
            if not everything and self.scoring.behind():
                return [], []  # the worker is behind: traces wait here, and make larger batches
            score_early = not everything and self.scoring.worker is not None
            return self.buffer.take(everything, score_early, self.scoring.flying)

    def store_ready(self, everything: bool = False) -> int:
        """Store the traces that are complete (all of them with
        ``everything``); returns how many were stored by this call.

        Batches handed to the worker process are stored when it has scored
        them, by this call or a later one (``everything`` waits for all of
        them), so that the worker scores while this thread inserts and new
        traces are taken meanwhile."""
        with self._store_lock:
            self.round.away = False  # until the database fails during this round
            self.round.handled = set()
            if self.staging.undropped:
                self.staging.drop([])
                # still there: the database is away, this round backs off
                self.round.away = bool(self.staging.undropped)
            stored = self._land(wait=True) if everything else 0  # its traces may have more spans buffered
            taken, early = self._take(everything)
            try:
                if taken:
                    stored += self._store(taken)
                if early:
                    self._store(early, early=True)
            except BaseException:
                # not the traces this round stored or released already, nor those given back
                self.lander.give_back(
                    [t for t in taken + early if t[0] not in self.scoring.flying and t[0] not in self.round.handled]
                )
                raise
            stored += self._land(wait=everything)
            with self._lock:
                emptied = not self.scoring.flights and self.buffer.emptied_after(GIVE_BACK_AFTER, GIVE_BACK_QUIET)
            if emptied:
                self.give_back_memory()
            return stored

    def give_back_memory(self) -> None:
        """After a burst (the buffer emptied): the memory it took given back to the system, in
        this process (the span ids remembered dropped, SQLite's idle connections and their page
        caches closed, the cycles collected, the heap trimmed) and in the worker's (collected,
        trimmed). docs/otlp-receiver.md says what is measured."""
        self.lander.stored.clear()  # the database tells a resent span after that (what a restart does)
        try:
            close_idle_connections(self.sessions)
        except SQLAlchemyError:  # closing a connection failed: it is dropped all the same
            log.exception("idle database connections could not be closed")
        give_back_memory()
        self.scoring.give_back_memory()
        self.stats.memory_given_back += 1
        log.info("the buffer emptied after a burst: memory given back")

    def _land(self, wait: bool) -> int:
        """Store the batches the worker has scored, in the order they were
        handed over (all of them, waiting for the worker, with ``wait``)."""
        stored = 0
        flights = self.scoring.flights
        while flights and (wait or flights[0].landable(self.clock())):
            flight = flights.popleft()
            try:
                grown = self._grown(flight) if flight.settles_at else []
                if grown:
                    if flight.overdue(self.clock()) and not flight.scored():
                        self.scoring.stuck(flight)
                    self._back_to_buffer(grown)
                    again = {f.key for f in grown}
                    rest = [f for f in flight.chunk if f.key not in again]  # settled: stored now, scored here
                    stored += self.lander.store_items(flight.run_id, self.lander.items(rest)) if rest else 0
                    continue
                done = self._store_scored(flight)
                stored += (
                    done
                    if done is not None
                    else self.lander.store_items(flight.run_id, self.lander.items(flight.chunk))
                )
            except BaseException:
                self.lander.give_back([(f.key, f.pending) for f in flight.chunk if f.key not in self.round.handled])
                raise
            finally:
                self.scoring.landed(flight)
        return stored

    def _grown(self, flight: Flight) -> list[Fresh]:
        """The traces of a chunk scored early for which anything came within ``settle`` of
        their last span (a request sent again too: as for a buffered trace, it keeps the trace
        open). They go back to the buffer and take the usual path from there; the others had
        settled, and what came for them since is another trial, as for a trace stored already."""
        with self._lock:
            return [f for f in flight.chunk if self.buffer.grew(f.key, f.pending.last_seen)]

    def _back_to_buffer(self, grown: list[Fresh]) -> None:
        """Traces scored early that grew: back to the buffer, to be stored with their new
        spans, without the repeats found when they were taken (counted then)."""
        self.lander.unbuffer(sum(len(f.pending.spans) - len(f.fresh) for f in grown))
        self.lander.give_back([(f.key, replace(f.pending, spans=list(f.fresh))) for f in grown], retry=False)

    def _store_scored(self, flight: Flight) -> int | None:
        """Store a chunk the worker scored; None when it could not do the chunk whole (the
        chunk then takes the in-process path, with its fallbacks)."""
        if flight.future is None:  # the worker could not take it: scored in-process
            return None
        try:
            result = flight.future.result(timeout=max(0.0, flight.deadline - self.clock()))
        except FutureTimeout:
            self.scoring.stuck(flight)
            return None
        except Exception as exc:
            log.exception("the scoring worker failed; storing in-process")
            self.scoring.drop_broken(exc, flight.worker)
            return None
        return self.lander.store_scored(flight, result)

    def _store(self, taken: list[tuple[Key, Pending]], early: bool = False) -> int:
        """Store the taken traces, run by run and batch by batch (a large batch
        scored by the worker process when there is one); a batch that fails is
        stored trace by trace, so one trace cannot hold up the others. Traces
        taken ``early`` are handed to the worker (or scored in-process when it
        cannot take them) and stored by ``_land`` once they have settled."""
        by_run: dict[int, list[Fresh]] = {}
        dropped: Release = []  # traces that will not be stored (every span a repeat)
        done_spans = repeats = 0
        for key, pending in taken:
            seen, flushes = self.lander.remembered(key)
            fresh: list[SpanRef] = []
            here: set[str] = set()
            for s in pending.spans:  # not the spans stored already, nor a span twice
                if s.span_id in seen or s.span_id in here:
                    continue
                if s.span_id:
                    here.add(s.span_id)
                fresh.append(s)
            repeats += len(pending.spans) - len(fresh)
            if not fresh:
                dropped.append((key, pending.batches))
                done_spans += len(pending.spans)
                continue
            by_run.setdefault(key[0], []).append(Fresh(key, pending, fresh, flushes))
        self.staging.release_now(dropped)
        with self._lock:
            self.buffer.buffered -= done_spans
            self.stats.duplicate_spans += repeats
        in_process: list[tuple[int, list[Fresh]]] = []
        for run_id, traces in by_run.items():
            for i in range(0, len(traces), self.batch):
                chunk = traces[i : i + self.batch]
                # to the worker (a small chunk only when it runs already, started by a large one); stored
                # when it is scored (``_land``), while this thread inserts and takes the next traces
                flight = (
                    self._submit(run_id, chunk) if len(chunk) >= MIN_TRACES or self.scoring.worker is not None else None
                )
                if early:
                    flight = flight or Flight(run_id, chunk, None, None, math.inf)
                    flight.settles_at = max(f.pending.last_seen for f in chunk) + self.settle
                if flight is None:
                    in_process.append((run_id, chunk))
                else:
                    self.scoring.hold(flight)
        return sum(self.lander.store_items(run_id, self.lander.items(chunk)) for run_id, chunk in in_process)

    def _submit(self, run_id: int, chunk: list[Fresh]) -> Flight | None:
        """Hand a chunk to the worker process (started on first use); None when
        there is none, or the database is away."""
        if not self.scoring.use or self.round.away:
            return None
        try:
            document, key = self.lander.store.suite(run_id, digest)
            return self.scoring.submit(run_id, chunk, document, key, self.lander.bodies(chunk))
        except Exception as exc:
            log.exception("the scoring worker cannot take a batch; storing in-process")
            self.scoring.drop_broken(exc, self.scoring.worker)
            return None

    def close(self) -> None:
        """Stop the threads and store everything still buffered; then give the lease up (left
        expired if anything stays staged, for the next server to take over at once)."""
        self._stop.set()
        for thread in (self._thread, self.staging.thread):
            if thread is not None:
                thread.join(timeout=30)
        try:
            self.store_ready(everything=True)
        except SQLAlchemyError:
            log.exception("spans still buffered at shutdown could not be stored")
        finally:
            self.scoring.close()
            try:
                self.staging.give_up()
            except SQLAlchemyError:
                log.exception("the OTLP staging lease could not be given up; it expires by itself")

    def die(self) -> None:
        """Stop as a killed process would (tests): nothing more stored, the worker killed,
        the lease expired at once."""
        self._stop.set()
        for thread in (self._thread, self.staging.thread):
            if thread is not None:
                thread.join(timeout=30)
        self.scoring.kill()
        self.staging.give_up()

    def warm_up(self) -> None:
        """Start the scoring worker and load the decoders now, at the server's start, so that
        the first burst of spans does not also pay for a process start and imports (about
        half a second of CPU). ``toollens serve`` does it; an app made for a test does not."""
        self.scoring.warm_up()

    @property
    def worker_ready(self) -> bool | None:
        """Whether the scoring worker is up and loaded; None when none is running (False for one
        killed, whose start may have been cancelled)."""
        return self.scoring.ready

    @property
    def buffered_spans(self) -> int:
        return self.buffer.buffered


def made(state: Any) -> OtlpReceiver:
    """A receiver with the app's bounds (``TOOLLENS_OTLP_MAX_*``)."""
    settings = getattr(state, "settings", None)
    if settings is None:
        return OtlpReceiver(state.sessions, state.scorers)
    return OtlpReceiver(
        state.sessions,
        state.scorers,
        max_spans=settings.otlp_max_buffered_spans,
        max_trace_spans=settings.otlp_max_trace_spans,
        max_traces=settings.otlp_max_traces,
        max_bytes=settings.otlp_max_buffered_bytes,
    )


def open_receiver(app_state: Any, *, warm: bool = False) -> OtlpReceiver:
    """For the app's startup: the receiver, holding again the spans a previous
    process acknowledged and did not store; with ``warm``, its worker started."""
    receiver = made(app_state)
    if warm:
        receiver.warm_up()
    try:
        receiver.recover()
    except SQLAlchemyError as exc:  # e.g. SQLite's write lock held by an import for longer than the busy timeout
        if read_only_error(exc):  # pages and the API's reads are served; spans cannot be stored
            log.warning(
                "the database is read-only: the OTLP receiver stores no spans (a request gets 503) "
                "until the server is started on a writable one"
            )
        else:
            log.exception("staged spans could not be taken over at the start; tried again every %s s", BEAT)
    app_state.otlp = receiver
    return receiver


def close_receiver(app_state: Any) -> None:
    """For the app's shutdown: store what is buffered."""
    receiver: OtlpReceiver | None = getattr(app_state, "otlp", None)
    if receiver is not None:
        receiver.close()
