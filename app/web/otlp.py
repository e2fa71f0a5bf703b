"""The live OTLP receiver: ``POST /v1/traces`` (OTLP/HTTP, protobuf or JSON).

Spans are grouped into trajectories by trace id and stored into a named run:
``?run=NAME`` or the ``X-ToolLens-Run`` header (default ``otlp``). The run
must exist (``POST /api/runs`` with the suite whose toolset the agent uses):
its toolset is what schema validity and hallucinated tools are judged by.

The spans of one trace may come in several export batches, so a trace is
buffered until its root span has arrived and nothing more came for
``settle`` seconds (or, without a root, for ``idle`` seconds); then it is
stored, many traces per transaction, by a background thread. While the
scoring worker process runs, a trace is scored there as soon as its root came
and stored once it settled, so that a burst's last traces do not wait for
``settle`` and then for scoring; a trace with a span that comes before then
is stored with it, scored again. A
request is answered once it is staged (its body committed to the
``otlp_batches`` table, under this server's lease) and its spans buffered; a
trajectory is stored in the transaction that marks its trace done there, and
the staged requests of a server that died (its lease expired) are taken over
by the next server, so an acknowledged span survives a crash. The buffer is bounded
before a request is acknowledged: past a trace's own bound (its spans, its tool calls)
the request is refused with 413, past the whole buffer's (spans, traces, bytes) or with
the database away with 503 and ``Retry-After``, which the OpenTelemetry exporters retry.
Spans arriving for a trace already stored (late, or a retried request) make another trial of it; spans stored already
are recognised by the database (``otlp_traces``) and not stored twice.
Shutting the app down stores everything still buffered. docs/otlp-receiver.md
says what is guaranteed.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from app.core.errors import InvalidTrajectory, ToolLensError
from app.core.records import MAX_CALLS, Trajectory, parse_record
from app.importers.otel import (
    SpanRef,
    batch_refs,
    spans_of,
    trajectory_record,
)
from app.store import ingest, otlp_traces
from app.store import otlp_staging as staging
from app.store.db import session_scope
from app.store.errors import Conflict, NotFound
from app.store.gc_tuning import give_back_memory
from app.store.models import Run
from app.store.otlp_lease import BEAT, Lease
from app.web.api import require_token
from app.web.errors import error_response
from app.web.limits import Refused
from app.web.otlp_intake import decode_export
from app.web.otlp_worker import MIN_TRACES, ScoringWorker, WorkerResult, digest, load_decoders
from app.web.state import ScorerCache

log = logging.getLogger("toollens.otlp")

DEFAULT_RUN = "otlp"
PROTOBUF = "application/x-protobuf"


IN_FLIGHT_WAIT = 10.0  # seconds a ready trace waits at most for requests received meanwhile
MAX_ATTEMPTS = 3  # a trace that fails to store this many times (database reachable) is rejected
MAX_SCORING = 4  # chunks handed to the worker and not scored yet
WORKER_TIMEOUT = 120  # seconds a chunk may take in the worker before it counts as stuck
GIVE_BACK_AFTER = 10_000  # traces buffered at once after which an emptied buffer gives its memory back


@dataclass
class _Pending:
    spans: list[SpanRef] = field(default_factory=list)
    batches: set[int] = field(default_factory=set)  # the staged batches holding them
    span_ids: set[str] = field(default_factory=set)
    last_seen: float = 0.0
    first_seen: float = 0.0  # when its first span (or a repeat) came
    root: bool = False
    attempts: int = 0  # failed attempts to store it


@dataclass
class _Reservation:
    """What an export request being staged will add to the buffer, counted against the bounds
    before it is acknowledged (concurrent requests see it): spans and tool spans per trace,
    spans, body bytes, traces not buffered yet."""

    traces: dict[tuple[int, str], list[int]]
    spans: int
    size: int
    new: int


@dataclass
class _Batch:
    """A staged export request, kept until its last trace is stored."""

    form: str
    body: bytes
    traces: set[str]  # its traces not stored yet


Release = list[tuple[tuple[int, str], set[int]]]  # traces (run id, trace id) and the batches holding their spans


@dataclass
class ReceiverStats:
    accepted_spans: int = 0
    stored_spans: int = 0
    stored_traces: int = 0
    duplicate_spans: int = 0
    rejected_traces: int = 0
    rejected_spans: int = 0
    refused_requests: int = 0
    repaired_traces: int = 0  # stored with an attribute ignored or cut at the call limit
    retried_traces: int = 0
    worker_traces: int = 0  # stored after the worker process scored them
    split_traces: int = 0  # stored again as a further trial: spans came after it was stored (late, another server)


class OtlpReceiver:
    """Buffers spans per trace and stores finished traces in the background."""

    def __init__(self, sessions: sessionmaker[Session], scorers: ScorerCache, *, settle: float = 0.25,
                 idle: float = 30.0, max_spans: int = 500_000, batch: int = 500, remember: int = 20_000,
                 worker: bool = True, max_trace_spans: int = 10_000, max_traces: int = 100_000,
                 max_bytes: int = 256 * 1024 * 1024):
        self.sessions = sessions
        self.scorers = scorers
        self._use_worker = worker and ScoringWorker.pays()
        self._worker: ScoringWorker | None = None  # started with the first large batch
        self.settle, self.idle, self.max_spans, self.batch, self.remember = settle, idle, max_spans, batch, remember
        self.max_trace_spans, self.max_traces, self.max_bytes = max_trace_spans, max_traces, max_bytes
        self.stats = ReceiverStats()
        self._lock = threading.Lock()
        self._store_lock = threading.Lock()
        self._pending: dict[tuple[int, str], _Pending] = {}
        self._batches: dict[int, _Batch] = {}  # staged batches by id, while a trace of theirs is not stored
        self._in_flight: dict[object, float] = {}  # export requests being received, by start time
        self._buffered = 0
        self._bytes = 0  # staged bodies held in memory (``_batches``)
        self._reserved: dict[tuple[int, str], list[int]] = {}  # requests being staged: [spans, tool spans] by trace
        self._held = _Reservation({}, 0, 0, 0)  # the sum of the reservations of requests being staged
        self._peak = 0  # the most traces buffered since memory was last given back
        self._stored: OrderedDict[tuple[int, str], tuple[set[str], int]] = OrderedDict()  # span ids, flushes
        self._runs: dict[str, int] = {}
        self._suites: dict[int, tuple[dict[str, Any], str]] = {}  # suite id -> its document and digest
        self._scoring: deque[_Flight] = deque()  # chunks handed to the worker, in order
        self._flying: set[tuple[int, str]] = set()  # their traces: not taken again until stored
        self._undropped: set[int] = set()  # staged batches holding nothing to store, not deleted yet
        self._away = False  # the database failed during this storing round
        self._handled: set[tuple[int, str]] = set()  # traces stored, released or given back during this round
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lease = Lease(sessions.kw["bind"])  # the batches this server stages are its own to store
        self._lease_thread: threading.Thread | None = None

    # -- the request side -------------------------------------------------------

    def run_id(self, name: str) -> int:
        """The open run named ``name`` (NotFound / Conflict otherwise)."""
        with session_scope(self.sessions) as session:
            return self._open_run(session, name)

    def _open_run(self, session: Session, name: str) -> int:
        """The open run named ``name`` (NotFound / Conflict otherwise), checked
        on every request: spans for a finished run are refused, not dropped."""
        found = self._runs.get(name)
        if found is not None:
            status = session.scalar(select(Run.status).where(Run.id == found))
        else:
            row = session.execute(select(Run.id, Run.status).where(Run.name == name)).first()
            if row is not None:
                found, status = int(row[0]), row[1]
                if len(self._runs) >= 1024:
                    self._runs.clear()
                self._runs[name] = found
        if found is None or status is None:
            self._runs.pop(name, None)
            raise NotFound(f"no run {name!r}: create it first (POST /api/runs with the agent's suite)")
        if status == "finished":
            raise Conflict(f"run {name!r} is finished: it takes no new trajectories")
        return found

    def take_in(self, run_name: str, form: str, body: bytes, spans: list[SpanRef]) -> None:
        """An export request for the run named ``run_name``: the run checked and
        the request staged in one transaction, then its spans buffered. ``Refused``
        (nothing staged) past a bound of the buffer: 413 for a trace's, 503 for the whole's."""
        self._accept(form, body, spans, lambda session: self._open_run(session, run_name))

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
        lease_id = self._lease_id() if valid else 0
        with self._lock:
            full = self._full(len(valid), len(body), 0)
        # a full buffer refuses without SQLite's write lock: retrying exporters would take it from
        # the thread that empties the buffer (the run is checked all the same, and first)
        taken: _Reservation | None = None
        try:
            with session_scope(self.sessions, write=bool(valid) and full is None) as session:
                run_id = run_of(session)  # in the staging transaction: one transaction per request
                with self._lock:
                    self.stats.rejected_spans += len(spans) - len(valid)
                    try:
                        if full is not None:
                            raise full
                        taken = self._reserve(run_id, valid, len(body))
                    except Refused:
                        self.stats.refused_requests += 1
                        raise
                if not valid:
                    return
                batch = staging.stage(session, run_id, form, body, lease_id)
        except BaseException:
            if taken is not None:
                with self._lock:
                    self._unreserve(taken)
            raise
        if not self._buffer(run_id, batch, form, body, valid, taken):
            self._drop_batches([batch])
        with self._lock:
            self.stats.accepted_spans += len(valid)
        self._ensure_thread()

    def _full(self, spans: int, size: int, new: int) -> Refused | None:
        """The bound of the whole buffer that ``spans`` more spans, ``size`` more bytes and ``new``
        more traces would pass (503: it empties as traces are stored), else None; a request
        larger than a bound is still taken into an empty buffer (the caller holds ``_lock``)."""
        spans_held, size_held = self._buffered + self._held.spans, self._bytes + self._held.size
        traces_held = len(self._pending) + self._held.new
        if spans_held and spans_held + spans > self.max_spans:
            return Refused(503, f"the receiver's buffer is full: {spans_held} spans buffered, at most "
                           f"{self.max_spans} (TOOLLENS_OTLP_MAX_BUFFERED_SPANS): retry later")
        if new and traces_held and traces_held + new > self.max_traces:
            return Refused(503, f"the receiver's buffer is full: {traces_held} traces buffered, at most "
                           f"{self.max_traces} (TOOLLENS_OTLP_MAX_TRACES): retry later")
        if size_held and size_held + size > self.max_bytes:
            return Refused(503, f"the receiver's buffer is full: {size_held} bytes of requests held, at most "
                           f"{self.max_bytes} (TOOLLENS_OTLP_MAX_BUFFERED_BYTES): retry later")
        return None

    def _reserve(self, run_id: int, spans: list[SpanRef], size: int) -> _Reservation:
        """Count a request's spans against the bounds before it is staged (``Refused`` when one
        would be passed: nothing is taken), and hold them until they are buffered. A trace holds
        at most ``max_trace_spans`` spans and ``MAX_CALLS`` tool spans in the buffer, so that
        everything acknowledged fits the one trajectory it becomes (the caller holds ``_lock``)."""
        traces: dict[tuple[int, str], list[int]] = {}
        for s in spans:
            counts = traces.setdefault((run_id, s.trace_id), [0, 0])
            counts[0] += 1
            counts[1] += s.tool
        new = 0
        flying = {f.key: f.pending for flight in list(self._scoring) for f in flight.chunk
                  if f.key in traces} if self._flying else {}  # scored early: they come back if they grow
        for key, (n, tools) in traces.items():
            p = self._pending.get(key)
            held = self._reserved.get(key, [0, 0])
            new += p is None and key not in self._reserved
            had, had_tools = held
            for q in (p, flying.get(key)):
                if q is not None:
                    had += len(q.spans)
                    had_tools += sum(1 for x in q.spans if x.tool)
            if had + n > self.max_trace_spans:
                raise Refused(413, f"trace {key[1][:80]!r} would hold {had + n} spans, more than the "
                              f"{self.max_trace_spans} one trace may hold while it is open "
                              "(TOOLLENS_OTLP_MAX_TRACE_SPANS): nothing of this request was taken")
            if had_tools + tools > MAX_CALLS:
                raise Refused(413, f"trace {key[1][:80]!r} would hold {had_tools + tools} tool calls, more than "
                              f"the {MAX_CALLS} one trajectory holds: nothing of this request was taken")
        full = self._full(len(spans), size, new)
        if full is not None:
            raise full
        taken = _Reservation(traces, len(spans), size, new)
        for key, (n, tools) in traces.items():
            held = self._reserved.setdefault(key, [0, 0])
            held[0] += n
            held[1] += tools
        self._held.spans += taken.spans
        self._held.size += taken.size
        self._held.new += taken.new
        return taken

    def _unreserve(self, taken: _Reservation) -> None:
        """A request's reservation given up: buffered now, or not staged (the caller holds ``_lock``)."""
        for key, (n, tools) in taken.traces.items():
            held = self._reserved.get(key)
            if held is not None:
                held[0] -= n
                held[1] -= tools
                if held[0] <= 0:
                    del self._reserved[key]
        self._held.spans -= taken.spans
        self._held.size -= taken.size
        self._held.new -= taken.new

    def _buffer(self, run_id: int, batch: int, form: str, body: bytes, spans: list[SpanRef],
                taken: _Reservation | None = None) -> bool:
        """Buffer a staged batch's spans by trace. A span id already buffered
        for its trace (a resent request) is a repeat and left out, but the
        trace still counts as one of the batch's, so that storing it marks it
        done there too (else a restart would read it back and store it again).
        False when every span was a repeat: the batch holds nothing to store."""
        now = time.monotonic()
        repeated: list[_Pending] = []
        traces: set[str] = set()
        with self._lock:
            if taken is not None:
                self._unreserve(taken)
            for s in spans:
                s.batch = batch
                key = (run_id, s.trace_id)
                p = self._pending.get(key)
                if p is None:
                    p = self._pending[key] = _Pending(first_seen=now)
                p.last_seen = now
                if s.span_id and s.span_id in p.span_ids:
                    repeated.append(p)
                    continue
                p.span_ids.add(s.span_id)
                p.spans.append(s)
                p.batches.add(batch)
                p.root = p.root or s.is_root
                traces.add(s.trace_id)
            if traces:
                for p in repeated:
                    p.batches.add(batch)
                traces.update(s.trace_id for s in spans)
                self._batches[batch] = _Batch(form, body, traces)
                self._bytes += len(body)
            self._buffered += len(spans) - len(repeated)
            self._peak = max(self._peak, len(self._pending))
            self.stats.duplicate_spans += len(repeated)
        return bool(traces)

    def _drop_batches(self, ids: list[int]) -> None:
        """Delete staged batches that hold nothing to store; those the database does not
        delete now (it is away) are deleted by a later storing round (a restart would read
        them back and store their spans again)."""
        with self._lock:
            ids = sorted({*ids, *self._undropped})
            self._undropped.clear()
        if not ids:
            return
        try:
            with session_scope(self.sessions, write=True) as session:
                staging.finish(session, {}, ids)
        except SQLAlchemyError as exc:
            log.warning("%d staged batches that hold nothing to store could not be deleted, retried later: %s",
                        len(ids), exc)
            with self._lock:
                self._undropped.update(ids)

    def _lease_id(self) -> int:
        """This server's lease (taken on first use), kept alive by a thread of its own that
        also takes over the batches of servers whose lease expired."""
        if self._lease_thread is None and not self._stop.is_set():  # first: it retries a lease not taken now
            with self._lock:
                if self._lease_thread is None:
                    self._lease_thread = threading.Thread(target=self._keep_lease, args=(weakref.ref(self), self._stop),
                                                          name="otlp-lease", daemon=True)
                    self._lease_thread.start()
        return self._lease.ensure()

    @staticmethod
    def _keep_lease(ref: weakref.ref[OtlpReceiver], stop: threading.Event) -> None:
        """The lease thread (holding the receiver weakly: one never closed, dropped, ends it)."""
        while not stop.wait(BEAT):
            receiver = ref()
            if receiver is None:
                return
            try:
                receiver.recover()
            except Exception:  # the database is away: the next beat tries again
                log.exception("the OTLP staging lease could not be kept")
            del receiver

    def recover(self) -> int:
        """Buffer the spans staged by servers that stopped without storing them (their lease
        expired; a live server's are never taken) and those staged before leases; returns how
        many. At the start, and every few seconds (``BEAT``) from then on."""
        self._lease_id()
        with session_scope(self.sessions, write=True) as session:
            taken = self._lease.take_over(session)
        if not taken:
            return 0
        with self._lock:  # a batch this server holds already (under a lease it lost meanwhile) stays as it is
            taken = [b for b in taken if b not in self._batches]
        with session_scope(self.sessions) as session:
            batches = list(staging.staged(session, taken))
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
        self._drop_batches(empty)
        if n:
            log.warning("recovered %d staged spans", n)
            self._ensure_thread()
        return n

    def _release(self, session: Session, traces: Release) -> Callable[[], None]:
        """In the caller's transaction: mark traces done in the batches holding
        their spans, deleting the batches left with none; returns what to do
        in memory once that transaction is committed."""
        marks: dict[int, set[str]] = {}
        for (_, trace), batches in traces:
            for b in batches:
                marks.setdefault(b, set()).add(trace)
        with self._lock:  # what memory holds is the authority: a trace released already is not marked again
            held = {b: self._batches.get(b) for b in marks}
            emptied = {b for b, batch in held.items() if batch is None or batch.traces <= marks[b]}
            done = {b: batch.traces & marks[b] for b, batch in held.items() if batch is not None and b not in emptied}
        staging.finish(session, done, emptied)

        def committed() -> None:
            with self._lock:
                for b, batch in held.items():
                    if batch is not None and self._batches.get(b) is batch:
                        batch.traces -= marks[b]
                        if not batch.traces:
                            del self._batches[b]
                            self._bytes -= len(batch.body)
            self._handled.update(key for key, _ in traces)

        return committed

    def _release_now(self, traces: Release) -> None:
        """Mark traces done that will not be stored (repeats, unreadable, rejected), in their own transaction."""
        if traces:
            with session_scope(self.sessions, write=True) as session:
                committed = self._release(session, traces)
            committed()

    def _bodies(self, chunk: list[_Fresh]) -> dict[int, tuple[str, bytes]]:
        """The staged batches a chunk's spans are in: id -> (format, body)."""
        with self._lock:
            held = {b: self._batches.get(b) for b in {s.batch for f in chunk for s in f.fresh}}
        return {b: (batch.form, batch.body) for b, batch in held.items() if batch is not None}

    # -- the storing side --------------------------------------------------------

    def _ensure_thread(self) -> None:
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
            if self._away:
                self._stop.wait(1.0)

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Mark an export request as being received (until its spans are buffered)."""
        token = object()
        with self._lock:
            self._in_flight[token] = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                del self._in_flight[token]

    def _take(self, everything: bool) -> tuple[list[tuple[tuple[int, str], _Pending]],
                                                list[tuple[tuple[int, str], _Pending]]]:
        """The traces ready to store: quiet for ``settle`` since their root came
        (``idle`` without one), and no request that began before their last
        span still being received (concurrent exporters deliver out of order:
        a slow request may hold the rest of a trace). Then, while the worker
        runs, the traces to score early: their root came and nothing for a
        fifth of ``settle``; they are stored once settled (``_land``)."""
        now = time.monotonic()
        with self._lock:
            # a request slower than IN_FLIGHT_WAIT (a client trickling its body) holds nothing back
            oldest = min((t for t in self._in_flight.values() if now - t < IN_FLIGHT_WAIT), default=now)
            if not everything and sum(1 for f in self._scoring if not f.scored()) >= MAX_SCORING:
                return [], []  # the worker is behind: traces wait here, and make larger batches
            score_early = not everything and self._worker is not None
            ready: list[tuple[int, str]] = []
            soon: list[tuple[int, str]] = []
            for k, p in self._pending.items():  # one pass: request threads wait for this lock
                if k in self._flying:
                    continue
                quiet = now - p.last_seen
                if everything or (quiet >= (self.settle if p.root else self.idle) and oldest > p.last_seen):
                    ready.append(k)
                elif score_early and p.root and quiet >= self.settle / 5 and oldest > p.last_seen:
                    soon.append(k)
            taken = [(k, self._pending.pop(k)) for k in ready], [(k, self._pending.pop(k)) for k in soon]
            if not self._pending:  # a dict keeps the size it grew to: a new one gives that memory back
                self._pending = {}
            return taken

    def _give_back(self, taken: list[tuple[tuple[int, str], _Pending]], *, retry: bool = True) -> None:
        """Traces back to the buffer, ahead of spans buffered for them meanwhile; with
        ``retry`` (a failure) they wait ``settle`` again, else they keep their last span's time."""
        self._handled.update(key for key, _ in taken)
        now = time.monotonic()
        with self._lock:
            for key, back in taken:
                p = self._pending.get(key)
                if p is None:
                    p = self._pending[key] = _Pending(first_seen=back.first_seen, last_seen=back.last_seen)
                p.spans[:0] = back.spans
                p.batches |= back.batches
                p.span_ids |= back.span_ids
                p.root = p.root or back.root
                p.attempts = max(p.attempts, back.attempts)
                p.first_seen = min(p.first_seen, back.first_seen)
                p.last_seen = now if retry else max(p.last_seen, back.last_seen)

    def store_ready(self, everything: bool = False) -> int:
        """Store the traces that are complete (all of them with
        ``everything``); returns how many were stored by this call.

        Batches handed to the worker process are stored when it has scored
        them, by this call or a later one (``everything`` waits for all of
        them), so that the worker scores while this thread inserts and new
        traces are taken meanwhile."""
        with self._store_lock:
            self._away = False  # until the database fails during this round
            self._handled = set()
            if self._undropped:
                self._drop_batches([])
                self._away = bool(self._undropped)  # still there: the database is away, this round backs off
            stored = self._land(wait=True) if everything else 0  # its traces may have more spans buffered
            taken, early = self._take(everything)
            try:
                if taken:
                    stored += self._store(taken)
                if early:
                    self._store(early, early=True)
            except BaseException:
                # not the traces this round stored or released already, nor those given back
                self._give_back([t for t in taken + early if t[0] not in self._flying and t[0] not in self._handled])
                raise
            stored += self._land(wait=everything)
            self._give_back_memory()
            return stored

    def _give_back_memory(self) -> None:
        """Once a buffer that held many traces is empty: its containers made anew (a dict keeps
        the size it grew to) and the freed memory given back to the system."""
        with self._lock:
            if self._buffered or self._pending or self._peak < GIVE_BACK_AFTER:
                return
            self._peak = 0
            self._batches = dict(self._batches)
        give_back_memory()

    def _land(self, wait: bool) -> int:
        """Store the batches the worker has scored, in the order they were
        handed over (all of them, waiting for the worker, with ``wait``)."""
        stored = 0
        while self._scoring and (wait or self._scoring[0].landable()):
            flight = self._scoring.popleft()
            try:
                grown = self._grown(flight) if flight.settles_at else []
                if grown:
                    if flight.overdue() and not flight.scored():
                        self._stuck(flight)
                    self._back_to_buffer(grown)
                    again = {f.key for f in grown}
                    rest = [f for f in flight.chunk if f.key not in again]  # settled: stored now, scored here
                    stored += self._store_items(flight.run_id, self._items(rest)) if rest else 0
                    continue
                done = self._store_scored(flight)
                stored += done if done is not None else self._store_items(flight.run_id, self._items(flight.chunk))
            except BaseException:
                self._give_back([(f.key, f.pending) for f in flight.chunk if f.key not in self._handled])
                raise
            finally:
                self._flying.difference_update(f.key for f in flight.chunk)
        return stored

    def _grown(self, flight: _Flight) -> list[_Fresh]:
        """The traces of a chunk scored early for which anything came within ``settle`` of
        their last span (a request sent again too: as for a buffered trace, it keeps the trace
        open). They go back to the buffer and take the usual path from there; the others had
        settled, and what came for them since is another trial, as for a trace stored already."""
        with self._lock:
            return [f for f in flight.chunk
                    if (q := self._pending.get(f.key)) is not None
                    and q.first_seen < f.pending.last_seen + self.settle]

    def _back_to_buffer(self, grown: list[_Fresh]) -> None:
        """Traces scored early that grew: back to the buffer, to be stored with their new
        spans, without the repeats found when they were taken (counted then)."""
        repeats = sum(len(f.pending.spans) - len(f.fresh) for f in grown)
        with self._lock:
            self._buffered -= repeats
        self._give_back([(f.key, replace(f.pending, spans=list(f.fresh))) for f in grown], retry=False)

    def wait_for_worker(self, timeout: float) -> bool:
        """Block until the oldest batch the worker holds can be stored: scored,
        and settled when it was taken early (or ``timeout``); False when it holds none."""
        try:
            head = self._scoring[0]
        except IndexError:  # none, or another thread has just landed the last one
            return False
        if head.future is not None and not head.future.done():
            futures_wait([head.future], timeout=timeout)
        elif (wait := head.settles_at - time.monotonic()) > 0:
            self._stop.wait(min(wait, timeout))
        return True

    def _store(self, taken: list[tuple[tuple[int, str], _Pending]], early: bool = False) -> int:
        """Store the taken traces, run by run and batch by batch (a large batch
        scored by the worker process when there is one); a batch that fails is
        stored trace by trace, so one trace cannot hold up the others. Traces
        taken ``early`` are handed to the worker (or scored in-process when it
        cannot take them) and stored by ``_land`` once they have settled."""
        by_run: dict[int, list[_Fresh]] = {}
        dropped: Release = []  # traces that will not be stored (every span a repeat)
        done_spans = repeats = 0
        for key, pending in taken:
            seen, flushes = self._stored.get(key, (set(), 0))
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
            by_run.setdefault(key[0], []).append(_Fresh(key, pending, fresh, flushes))
        self._release_now(dropped)
        with self._lock:
            self._buffered -= done_spans
            self.stats.duplicate_spans += repeats
        in_process: list[tuple[int, list[_Fresh]]] = []
        for run_id, traces in by_run.items():
            for i in range(0, len(traces), self.batch):
                chunk = traces[i:i + self.batch]
                # to the worker (a small chunk only when it runs already, started by a large one); stored
                # when it is scored (``_land``), while this thread inserts and takes the next traces
                flight = self._submit(run_id, chunk) if len(chunk) >= MIN_TRACES or self._worker is not None else None
                if early:
                    flight = flight or _Flight(run_id, chunk, None, None, math.inf)
                    flight.settles_at = max(f.pending.last_seen for f in chunk) + self.settle
                if flight is None:
                    in_process.append((run_id, chunk))
                else:
                    self._scoring.append(flight)
                    self._flying.update(f.key for f in chunk)
        return sum(self._store_items(run_id, self._items(chunk)) for run_id, chunk in in_process)

    def _items(self, chunk: list[_Fresh]) -> list[_Item]:
        """The chunk's trajectories, built here; a trace whose record cannot be
        read is counted as rejected and marked done in staging."""
        items: list[_Item] = []
        dropped: Release = []
        done_spans = 0
        decoded = spans_of(self._bodies(chunk), [f.refs() for f in chunk])
        for f, spans in zip(chunk, decoded, strict=True):
            notes: list[str] = []
            try:
                if isinstance(spans, str):
                    raise ValueError(spans)
                record = trajectory_record(spans, notes)
                if f.flushes:  # late spans of a stored trace: another trial of it
                    record["trial"] = int(record.get("trial") or 0) + f.flushes
                traj = parse_record(record, source=f"trace {f.key[1]}")
            except (InvalidTrajectory, ValueError) as exc:
                log.warning("trace %s cannot be stored: %s", f.key[1], exc)
                self.stats.rejected_traces += 1
                dropped.append((f.key, f.pending.batches))
                done_spans += len(f.pending.spans)
                continue
            if notes:
                log.warning("trace %s stored with repairs: %s", f.key[1], "; ".join(notes))
            items.append(_Item(f.key, f.pending, f.fresh, traj, bool(notes), f.flushes))
        if dropped:
            self._release_now(dropped)
            with self._lock:
                self._buffered -= done_spans
        return items

    def _submit(self, run_id: int, chunk: list[_Fresh]) -> _Flight | None:
        """Hand a chunk to the worker process (started on first use); None when
        there is none, or the database is away."""
        if not self._use_worker or self._away:
            return None
        try:
            if self._worker is None:
                self._worker = ScoringWorker()
            with session_scope(self.sessions) as session:
                suite_id = ingest.get_run_row(session, run_id).suite_id
                suite = self._suites.get(suite_id)
                if suite is None:  # suites are never changed nor deleted: read and hashed once
                    document = ingest.suite_document(session, suite_id)
                    if len(self._suites) >= 64:
                        self._suites.clear()
                    suite = self._suites[suite_id] = (document, digest(document))
            worker = self._worker
            future = worker.submit(suite[0], self._bodies(chunk), [(f.refs(), f.flushes) for f in chunk],
                                   key=suite[1])
            return _Flight(run_id, chunk, future, worker, time.monotonic() + WORKER_TIMEOUT)
        except Exception as exc:
            log.exception("the scoring worker cannot take a batch; storing in-process")
            self._drop_broken(exc, self._worker)
            return None

    def _drop_broken(self, exc: BaseException, worker: ScoringWorker | None) -> None:
        """A worker process that died (or was killed: its pool may refuse a batch before it
        knows it is broken): the next large batch starts a new one."""
        if (worker is not None and self._worker is worker
                and (isinstance(exc, BrokenProcessPool) or worker.killed)):
            self._worker.close()
            self._worker = None

    def _stuck(self, flight: _Flight) -> None:
        """A worker that took more than ``WORKER_TIMEOUT`` for a chunk: stopped (its other
        chunks fail at once and take the in-process path too); the next large batch starts a new one."""
        log.error("the scoring worker took more than %d s for a batch: stopped; storing in-process", WORKER_TIMEOUT)
        if self._worker is flight.worker:
            self._worker = None
        if flight.worker is not None:
            flight.worker.kill()

    def _store_scored(self, flight: _Flight) -> int | None:
        """Store a chunk the worker scored, in one transaction; None when it
        could not do the chunk whole (the chunk then takes the in-process
        path, with its fallbacks)."""
        run_id, chunk = flight.run_id, flight.chunk
        if flight.future is None:  # the worker could not take it: scored in-process
            return None
        try:
            result = flight.future.result(timeout=max(0.0, flight.deadline - time.monotonic()))
        except FutureTimeout:
            self._stuck(flight)
            return None
        except Exception as exc:
            log.exception("the scoring worker failed; storing in-process")
            self._drop_broken(exc, flight.worker)
            return None
        if self._away or any(e is not None for e in result.errors):
            return None  # the in-process path counts and logs the unreadable traces
        try:
            with session_scope(self.sessions, write=True) as session:
                committed = self._release(session, [(f.key, f.pending.batches) for f in chunk])
                run = ingest.get_run_row(session, run_id)
                if run.status == "finished":
                    raise Conflict("finished meanwhile")
                otlp_traces.record(session, run_id, [(f.key[1], [s.span_id for s in f.fresh], f.flushes)
                                                     for f in chunk])
                scorer = self.scorers.for_run(session, run)
                ingest.add_trajectories(session, run=run, scorer=scorer, trajectories=[], scored=result.scored)
        except Exception:  # rolled back: the in-process path decides (conflicts, a finished run, the database)
            return None
        committed()
        for f, notes in zip(chunk, result.notes, strict=True):
            if notes:
                log.warning("trace %s stored with repairs: %s", f.key[1], "; ".join(notes))
        self.stats.worker_traces += len(chunk)
        self._mark_stored([(f.key, f.pending, f.fresh, bool(notes)) for f, notes in zip(chunk, result.notes,
                                                                                       strict=True)])
        return len(chunk)

    def _mark_stored(self, stored: list[tuple[tuple[int, str], _Pending, list[SpanRef], bool]]) -> None:
        """Account for traces now in the store: spans no longer buffered, their
        span ids remembered (a resent span is a repeat), the counts."""
        with self._lock:
            self._buffered -= sum(len(pending.spans) for _, pending, _, _ in stored)
        for key, _, fresh, repaired in stored:
            seen, flushes = self._stored.pop(key, (set(), 0))
            seen.update(s.span_id for s in fresh)
            self._stored[key] = (seen, flushes + 1)
            self.stats.split_traces += flushes > 0  # a further trial of a trace stored before
            self.stats.stored_spans += len(fresh)
            self.stats.repaired_traces += repaired
        while len(self._stored) > self.remember:
            self._stored.popitem(last=False)
        self.stats.stored_traces += len(stored)

    def _store_items(self, run_id: int, items: list[_Item]) -> int:
        """One transaction for the batch; if it fails, one per trace (unless
        the database is away: then everything goes back to the buffer)."""
        if not items:
            return 0
        if self._away:
            self._give_back([(x.key, x.pending) for x in items])
            return 0
        try:
            added = self._store_chunk(run_id, [x.trajectory for x in items],
                                      [(x.key, x.pending.batches) for x in items],
                                      [(x.key[1], [s.span_id for s in x.fresh], x.flushes) for x in items])
        except otlp_traces.Resent as exc:  # stored meanwhile (or before this server knew): decided again
            self._resent(run_id, exc.stored, [(x.key, x.pending, x.fresh) for x in items])
            return self._store_items(run_id, [x for x in items if x.key[1] not in exc.stored])
        except NotFound as exc:
            self._reject(items, f"the run is gone ({exc})")
            return 0
        except Exception:
            if _database_away(self.sessions):
                log.exception("storing traces failed: the database is away; %d traces kept for later", len(items))
                self._away = True
                self._give_back([(x.key, x.pending) for x in items])
                return 0
            if len(items) == 1:
                self._failed(items[0])
                return 0
            return sum(self._store_items(run_id, [x]) for x in items)
        if not added:
            with self._lock:
                self._buffered -= sum(len(x.pending.spans) for x in items)
            return 0
        self._mark_stored([(x.key, x.pending, x.fresh, x.repaired) for x in items])
        return len(items)

    def _reject(self, items: list[_Item], why: str) -> None:
        """Give up on traces: counted as rejected, marked done in staging
        (if the database lets us; else a restart finds them again)."""
        log.warning("%d traces not stored: %s", len(items), why)
        self.stats.rejected_traces += len(items)
        self._handled.update(x.key for x in items)
        self._runs.clear()
        try:
            self._release_now([(x.key, x.pending.batches) for x in items])
        except SQLAlchemyError:
            log.exception("the staged spans of rejected traces could not be released")
        with self._lock:
            self._buffered -= sum(len(x.pending.spans) for x in items)

    def _failed(self, item: _Item) -> None:
        """A trace that could not be stored (the database reachable) goes back
        to the buffer, until it failed ``MAX_ATTEMPTS`` times: then rejected."""
        log.exception("trace %s could not be stored", item.key[1])
        item.pending.attempts += 1
        if item.pending.attempts >= MAX_ATTEMPTS:
            self._reject([item], f"trace {item.key[1]} failed to store {MAX_ATTEMPTS} times")
            return
        self.stats.retried_traces += 1
        self._give_back([(item.key, item.pending)])

    def _resent(self, run_id: int, stored: dict[str, otlp_traces.Stored],
                 traces: list[tuple[tuple[int, str], _Pending, list[SpanRef]]]) -> None:
        """Traces the database holds other trials of than this server knew (a resend after a
        restart, another server): what is stored remembered, and those traces back to the
        buffer to be taken again (their repeats then left out, their new spans another trial)."""
        log.info("%d traces were stored already (or meanwhile): taken again", len(stored))
        for trace, known in stored.items():
            self._stored.pop((run_id, trace), None)
            self._stored[(run_id, trace)] = (set(known[0]), known[1])
        back = [(key, pending, fresh) for key, pending, fresh in traces if key[1] in stored]
        with self._lock:
            self._buffered -= sum(len(p.spans) - len(fresh) for _, p, fresh in back)
        self._give_back([(key, replace(p, spans=list(fresh))) for key, p, fresh in back], retry=False)

    def _store_chunk(self, run_id: int, trajectories: list[Trajectory], staged: Release,
                     traces: list[tuple[str, list[str], int]]) -> bool:
        try:
            return self._add(run_id, trajectories, staged, traces)
        except Conflict:
            # a case id and trial stored already (a conversation id reused by
            # several traces): take the next free trial numbers
            with session_scope(self.sessions) as session:
                stored = ingest.stored_keys(session, run_id)
            for t in trajectories:
                while (t.case_id, t.trial, ingest.fault_key(t)) in stored:
                    t.trial += 1
                stored.add((t.case_id, t.trial, ingest.fault_key(t)))
            return self._add(run_id, trajectories, staged, traces)

    def _add(self, run_id: int, trajectories: list[Trajectory], staged: Release,
             traces: list[tuple[str, list[str], int]]) -> bool:
        """Store the trajectories, write down their traces (``Resent`` when the database holds
        other trials of them) and release their staged spans, in one transaction (False: the
        run was finished meanwhile, nothing stored)."""
        with session_scope(self.sessions, write=True) as session:
            committed = self._release(session, staged)
            run = ingest.get_run_row(session, run_id)
            added = run.status != "finished"
            if added:
                otlp_traces.record(session, run_id, traces)
                scorer = self.scorers.for_run(session, run)
                ingest.add_trajectories(session, run=run, scorer=scorer, trajectories=trajectories)
            else:
                log.warning("run %s was finished meanwhile: %d traces not stored", run.name, len(trajectories))
        committed()
        if not added:
            self.stats.rejected_traces += len(trajectories)
            self._runs.pop(run.name, None)
        return added

    def close(self) -> None:
        """Stop the threads and store everything still buffered; then give the lease up (left
        expired if anything stays staged, for the next server to take over at once)."""
        self._stop.set()
        for thread in (self._thread, self._lease_thread):
            if thread is not None:
                thread.join(timeout=30)
        try:
            self.store_ready(everything=True)
        except SQLAlchemyError:
            log.exception("spans still buffered at shutdown could not be stored")
        finally:
            if self._worker is not None:
                self._worker.close()
                self._worker = None
            try:
                self._lease.release()
            except SQLAlchemyError:
                log.exception("the OTLP staging lease could not be given up; it expires by itself")

    def die(self) -> None:
        """Stop as a killed process would (tests): nothing more stored, the worker killed,
        the lease expired at once."""
        self._stop.set()
        for thread in (self._thread, self._lease_thread):
            if thread is not None:
                thread.join(timeout=30)
        if self._worker is not None:
            self._worker.kill()
            self._worker = None
        self._lease.release()

    def warm_up(self) -> None:
        """Start the scoring worker and load the decoders now, at the server's start, so that
        the first burst of spans does not also pay for a process start and imports (about
        half a second of CPU). ``toollens serve`` does it; an app made for a test does not."""
        load_decoders()
        if self._use_worker and self._worker is None:
            try:
                self._worker = ScoringWorker()
            except Exception:  # e.g. a script without the ``__main__`` guard that spawning needs
                log.exception("the scoring worker could not start with the server; it starts with the first "
                              "large batch instead, or the spans are scored in-process")

    @property
    def worker_ready(self) -> bool | None:
        """Whether the scoring worker is up and loaded; None when none is running (False for one
        killed, whose start may have been cancelled)."""
        worker = self._worker
        if worker is None:
            return None
        ready = worker.ready
        return not worker.killed and ready.done() and not ready.cancelled() and ready.exception() is None

    @property
    def buffered_spans(self) -> int:
        return self._buffered


@dataclass
class _Fresh:
    """A taken trace: its buffered spans, the new ones, how often it was stored before."""

    key: tuple[int, str]
    pending: _Pending
    fresh: list[SpanRef]
    flushes: int

    def refs(self) -> list[tuple[int, int]]:
        """Where its fresh spans are staged: (batch, position)."""
        return [(s.batch, s.index) for s in self.fresh]


@dataclass
class _Flight:
    """A chunk the worker process is scoring."""

    run_id: int
    chunk: list[_Fresh]
    future: Future[WorkerResult] | None  # None: the worker could not take it (scored in-process)
    worker: ScoringWorker | None
    deadline: float  # monotonic time after which the worker counts as stuck
    settles_at: float = 0.0  # taken early: not stored before this monotonic time

    def scored(self) -> bool:
        return self.future is None or self.future.done()

    def overdue(self) -> bool:
        return time.monotonic() > self.deadline

    def landable(self) -> bool:
        """Scored (or stuck in the worker), and settled."""
        return (self.scored() or self.overdue()) and time.monotonic() >= self.settles_at


@dataclass
class _Item:
    """A trace ready to store: its buffered spans, the new ones, its trajectory."""

    key: tuple[int, str]
    pending: _Pending
    fresh: list[SpanRef]
    trajectory: Trajectory
    repaired: bool
    flushes: int  # trials of it stored before, as this server knows


def _database_away(sessions: sessionmaker[Session]) -> bool:
    try:
        with session_scope(sessions) as session:
            session.execute(select(1))
    except SQLAlchemyError:
        return True
    return False


def receiver_for(request: Request) -> OtlpReceiver:
    """The app's receiver, made on first use."""
    state = request.app.state
    receiver: OtlpReceiver | None = getattr(state, "otlp", None)
    if receiver is None:
        with _MAKE_LOCK:
            receiver = getattr(state, "otlp", None)
            if receiver is None:
                receiver = state.otlp = _made(state)
    return receiver


_MAKE_LOCK = threading.Lock()


def _made(state: Any) -> OtlpReceiver:
    """A receiver with the app's bounds (``TOOLLENS_OTLP_MAX_*``)."""
    settings = getattr(state, "settings", None)
    if settings is None:
        return OtlpReceiver(state.sessions, state.scorers)
    return OtlpReceiver(state.sessions, state.scorers, max_spans=settings.otlp_max_buffered_spans,
                        max_trace_spans=settings.otlp_max_trace_spans, max_traces=settings.otlp_max_traces,
                        max_bytes=settings.otlp_max_buffered_bytes)


def open_receiver(app_state: Any, *, warm: bool = False) -> OtlpReceiver:
    """For the app's startup: the receiver, holding again the spans a previous
    process acknowledged and did not store; with ``warm``, its worker started."""
    receiver = _made(app_state)
    if warm:
        receiver.warm_up()
    try:
        receiver.recover()
    except SQLAlchemyError:  # e.g. SQLite's write lock held by an import for longer than the busy timeout
        log.exception("staged spans could not be taken over at the start; tried again every %s s", BEAT)
    app_state.otlp = receiver
    return receiver


def close_receiver(app_state: Any) -> None:
    """For the app's shutdown: store what is buffered."""
    receiver: OtlpReceiver | None = getattr(app_state, "otlp", None)
    if receiver is not None:
        receiver.close()


# -- the route -----------------------------------------------------------------------

router = APIRouter()


# OTLP/HTTP is a protocol of its own (protobuf bodies), documented in the
# README rather than in the JSON API's OpenAPI schema.
@router.post("/v1/traces", include_in_schema=False)
async def receive_traces(
    request: Request,
    run: Annotated[str | None, Query(max_length=200, description="Run name (or the X-ToolLens-Run header).")] = None,
    x_toollens_run: Annotated[str | None, Header(max_length=200)] = None,
    group_by: Annotated[str | None, Query(max_length=200, description="One trajectory per value of this span or "
                                          "resource attribute (a conversation), not one per trace.")] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> Response:
    """OTLP/HTTP trace export (protobuf or JSON) into a named run."""
    require_token(request, authorization)
    protobuf = request.headers.get("content-type", "").split(";")[0].strip().lower() == PROTOBUF
    receiver = receiver_for(request)
    with receiver.in_flight():  # traces wait for requests that began before their last span: they may hold more
        body = await request.body()  # bounded by the app's intake, as are its type and the token
        try:  # inflated, bounded and read in a worker thread: the event loop goes on answering
            form, body, spans = await run_in_threadpool(
                decode_export, body, request.headers.get("content-encoding", "").strip().lower(), protobuf,
                request.app.state.settings.max_body_bytes, group_by)
        except Refused as exc:
            return error_response(exc.status, exc.error)
        try:
            await run_in_threadpool(_take_in, receiver, run or x_toollens_run or DEFAULT_RUN, form, body, spans)
        except Refused as exc:  # a bound of the buffer: nothing of the request was taken
            return error_response(exc.status, exc.error, headers={"Retry-After": "1"} if exc.status == 503 else None)
        except ToolLensError:
            raise
        except Exception:  # the database is away: the exporter retries, nothing is lost
            log.exception("spans could not be staged")
            return error_response(503, "the spans could not be staged: retry later", headers={"Retry-After": "2"})
    if protobuf:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)
    return Response(b"{}", media_type="application/json")


def _take_in(receiver: OtlpReceiver, run_name: str, form: str, body: bytes, spans: list[SpanRef]) -> None:
    if not spans:
        receiver.run_id(run_name)  # a request with no spans still learns whether its run takes spans
        return
    receiver.take_in(run_name, form, body, spans)


@router.get("/v1/traces/status", include_in_schema=False)
def receiver_status(request: Request) -> dict[str, int | bool | None]:
    """What the receiver took, stored and still buffers (spans and traces), and
    whether its scoring worker is loaded (null: none running)."""
    receiver = receiver_for(request)
    stats = receiver.stats
    return {"accepted_spans": stats.accepted_spans, "stored_spans": stats.stored_spans,
            "buffered_spans": receiver.buffered_spans, "stored_traces": stats.stored_traces,
            "duplicate_spans": stats.duplicate_spans, "rejected_traces": stats.rejected_traces,
            "rejected_spans": stats.rejected_spans,
            "refused_requests": stats.refused_requests, "repaired_traces": stats.repaired_traces,
            "retried_traces": stats.retried_traces, "worker_traces": stats.worker_traces,
            "split_traces": stats.split_traces,
            "worker_ready": receiver.worker_ready}
