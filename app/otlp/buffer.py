"""Span assembly: the spans of staged export requests grouped into traces, the bounds a
request is refused by before it is acknowledged, and which traces are ready to store.

Pure bookkeeping: no threads, no I/O, and the time comes from an injected clock (monotonic
seconds), so that it is tested by feeding spans and advancing a fake clock. The receiver
holds its lock around every call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from app.core.records import MAX_CALLS
from app.otlp.bounds import Refused
from app.otlp.spans import SpanRef

Key = tuple[int, str]  # (run id, trace id)
Clock = Callable[[], float]


@dataclass
class Pending:
    """A trace's spans buffered so far."""

    spans: list[SpanRef] = field(default_factory=list)
    batches: set[int] = field(default_factory=set)  # the staged batches holding them
    span_ids: set[str] = field(default_factory=set)
    last_seen: float = 0.0
    first_seen: float = 0.0  # when its first span (or a repeat) came
    root: bool = False
    attempts: int = 0  # failed attempts to store it


@dataclass
class Reservation:
    """What an export request being staged will add to the buffer, counted against the bounds
    before it is acknowledged (concurrent requests see it): spans and tool spans per trace,
    spans, body bytes, traces not buffered yet."""

    traces: dict[Key, list[int]]
    spans: int
    size: int
    new: int


@dataclass
class Batch:
    """A staged export request, kept until its last trace is stored."""

    form: str
    body: bytes
    traces: set[str]  # its traces not stored yet


Taken = list[tuple[Key, Pending]]


class SpanBuffer:
    """Traces being assembled, the staged requests holding their spans, and the bounds.

    A trace is ready once it was quiet for ``settle`` seconds after its root came (``idle``
    without a root) and no request that began before its last span is still being received.
    A request is refused (``Refused``) past a trace's own bound (413: its spans, its tool
    calls) or past the whole buffer's (503: spans, traces, bytes held)."""

    def __init__(
        self,
        *,
        settle: float = 0.25,
        idle: float = 30.0,
        max_spans: int = 500_000,
        max_trace_spans: int = 10_000,
        max_traces: int = 100_000,
        max_bytes: int = 256 * 1024 * 1024,
        in_flight_wait: float = 10.0,
        clock: Clock = time.monotonic,
    ):
        self.settle, self.idle, self.clock, self.in_flight_wait = settle, idle, clock, in_flight_wait
        self.max_spans, self.max_trace_spans, self.max_traces, self.max_bytes = (
            max_spans,
            max_trace_spans,
            max_traces,
            max_bytes,
        )
        self.pending: dict[Key, Pending] = {}
        self.batches: dict[int, Batch] = {}  # staged batches by id, while a trace of theirs is not stored
        self.in_flight: dict[object, float] = {}  # export requests being received, by start time
        self.buffered = 0  # spans buffered
        self.bytes = 0  # staged bodies held in memory (``batches``)
        self.reserved: dict[Key, list[int]] = {}  # requests being staged: [spans, tool spans] by trace
        self.held = Reservation({}, 0, 0, 0)  # the sum of the reservations of requests being staged
        self.since = 0  # traces buffered since memory was last given back
        self.last_added = 0.0  # when spans were last buffered

    # -- requests ---------------------------------------------------------------------

    def request_began(self) -> object:
        """An export request being received (until its spans are buffered): its token."""
        token = object()
        self.in_flight[token] = self.clock()
        return token

    def request_ended(self, token: object) -> None:
        del self.in_flight[token]

    def full(self, spans: int, size: int, new: int) -> Refused | None:
        """The bound of the whole buffer that ``spans`` more spans, ``size`` more bytes and ``new``
        more traces would pass (503: it empties as traces are stored), else None; a request
        larger than a bound is still taken into an empty buffer."""
        spans_held, size_held = self.buffered + self.held.spans, self.bytes + self.held.size
        traces_held = len(self.pending) + self.held.new
        if spans_held and spans_held + spans > self.max_spans:
            return Refused(
                503,
                f"the receiver's buffer is full: {spans_held} spans buffered, at most "
                f"{self.max_spans} (TOOLLENS_OTLP_MAX_BUFFERED_SPANS): retry later",
            )
        if new and traces_held and traces_held + new > self.max_traces:
            return Refused(
                503,
                f"the receiver's buffer is full: {traces_held} traces buffered, at most "
                f"{self.max_traces} (TOOLLENS_OTLP_MAX_TRACES): retry later",
            )
        if size_held and size_held + size > self.max_bytes:
            return Refused(
                503,
                f"the receiver's buffer is full: {size_held} bytes of requests held, at most "
                f"{self.max_bytes} (TOOLLENS_OTLP_MAX_BUFFERED_BYTES): retry later",
            )
        return None

    def reserve(
        self,
        run_id: int,
        spans: list[SpanRef],
        size: int,
        flying: Callable[[Mapping[Key, object]], Mapping[Key, Pending]] | None = None,
    ) -> Reservation:
        """Count a request's spans against the bounds before it is staged (``Refused`` when one
        would be passed: nothing is taken), and hold them until they are buffered. A trace holds
        at most ``max_trace_spans`` spans and ``MAX_CALLS`` tool spans in the buffer, so that
        everything acknowledged fits the one trajectory it becomes; ``flying`` gives the traces
        of these taken to be scored early (they come back if they grow)."""
        traces: dict[Key, list[int]] = {}
        for s in spans:
            counts = traces.setdefault((run_id, s.trace_id), [0, 0])
            counts[0] += 1
            counts[1] += s.tool
        new = 0
        scored = flying(traces) if flying is not None else {}
        for key, (n, tools) in traces.items():
            p = self.pending.get(key)
            held = self.reserved.get(key, [0, 0])
            new += p is None and key not in self.reserved
            had, had_tools = held
            for q in (p, scored.get(key)):
                if q is not None:
                    had += len(q.spans)
                    had_tools += sum(1 for x in q.spans if x.tool)
            if had + n > self.max_trace_spans:
                raise Refused(
                    413,
                    f"trace {key[1][:80]!r} would hold {had + n} spans, more than the "
                    f"{self.max_trace_spans} one trace may hold while it is open "
                    "(TOOLLENS_OTLP_MAX_TRACE_SPANS): nothing of this request was taken",
                )
            if had_tools + tools > MAX_CALLS:
                raise Refused(
                    413,
                    f"trace {key[1][:80]!r} would hold {had_tools + tools} tool calls, more than "
                    f"the {MAX_CALLS} one trajectory holds: nothing of this request was taken",
                )
        full = self.full(len(spans), size, new)
        if full is not None:
            raise full
        taken = Reservation(traces, len(spans), size, new)
        for key, (n, tools) in traces.items():
            held = self.reserved.setdefault(key, [0, 0])
            held[0] += n
            held[1] += tools
        self.held.spans += taken.spans
        self.held.size += taken.size
        self.held.new += taken.new
        return taken

    def unreserve(self, taken: Reservation) -> None:
        """A request's reservation given up: buffered now, or not staged."""
        for key, (n, tools) in taken.traces.items():
            held = self.reserved.get(key)
            if held is not None:
                held[0] -= n
                held[1] -= tools
                if held[0] <= 0:
                    del self.reserved[key]
        self.held.spans -= taken.spans
        self.held.size -= taken.size
        self.held.new -= taken.new

    def add(
        self, run_id: int, batch: int, form: str, body: bytes, spans: list[SpanRef], taken: Reservation | None = None
    ) -> tuple[bool, int]:
        """Buffer a staged batch's spans by trace (its reservation ``taken`` given up). A span id
        already buffered for its trace (a resent request) is a repeat and left out, but the trace
        still counts as one of the batch's, so that storing it marks it done there too (else a
        restart would read it back and store it again). Returns whether the batch holds anything
        to store (False: every span was a repeat) and how many repeats it held."""
        now = self.last_added = self.clock()
        repeated: list[Pending] = []
        traces: set[str] = set()
        if taken is not None:
            self.unreserve(taken)
        for s in spans:
            s.batch = batch
            key = (run_id, s.trace_id)
            p = self.pending.get(key)
            if p is None:
                p = self.pending[key] = Pending(first_seen=now)
                self.since += 1
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
            self.batches[batch] = Batch(form, body, traces)
            self.bytes += len(body)
        self.buffered += len(spans) - len(repeated)
        return bool(traces), len(repeated)

    # -- traces out -------------------------------------------------------------------

    def take(self, everything: bool, score_early: bool, skip: set[Key]) -> tuple[Taken, Taken]:
        """The traces ready to store (all of them with ``everything``), taken out of the buffer;
        then, with ``score_early``, those to score early: their root came and nothing for a
        fifth of ``settle`` (stored once settled). Traces in ``skip`` (being scored) stay."""
        now = self.clock()
        # a request slower than in_flight_wait (a client trickling its body) holds nothing back
        oldest = min((t for t in self.in_flight.values() if now - t < self.in_flight_wait), default=now)
        ready: list[Key] = []
        soon: list[Key] = []
        for k, p in self.pending.items():  # one pass: request threads wait for the receiver's lock
            if k in skip:
                continue
            quiet = now - p.last_seen
            if everything or (quiet >= (self.settle if p.root else self.idle) and oldest > p.last_seen):
                ready.append(k)
            elif score_early and p.root and quiet >= self.settle / 5 and oldest > p.last_seen:
                soon.append(k)
        taken = [(k, self.pending.pop(k)) for k in ready], [(k, self.pending.pop(k)) for k in soon]
        if not self.pending:  # a dict keeps the size it grew to: a new one gives that memory back
            self.pending = {}
        return taken

    def give_back(self, taken: Iterable[tuple[Key, Pending]], *, retry: bool = True) -> None:
        """Traces back to the buffer, ahead of spans buffered for them meanwhile; with ``retry``
        (a failure) they wait ``settle`` again, else they keep their last span's time."""
        now = self.clock()
        for key, back in taken:
            p = self.pending.get(key)
            if p is None:
                p = self.pending[key] = Pending(first_seen=back.first_seen, last_seen=back.last_seen)
            p.spans[:0] = back.spans
            p.batches |= back.batches
            p.span_ids |= back.span_ids
            p.root = p.root or back.root
            p.attempts = max(p.attempts, back.attempts)
            p.first_seen = min(p.first_seen, back.first_seen)
            p.last_seen = now if retry else max(p.last_seen, back.last_seen)

    def grew(self, key: Key, since: float) -> bool:
        """Whether anything came for a trace taken out (a span or a repeat) within ``settle`` of ``since``."""
        q = self.pending.get(key)
        return q is not None and q.first_seen < since + self.settle

    def bodies(self, ids: Iterable[int]) -> dict[int, tuple[str, bytes]]:
        """The staged batches held: id -> (format, body)."""
        held = {b: self.batches.get(b) for b in set(ids)}
        return {b: (batch.form, batch.body) for b, batch in held.items() if batch is not None}

    def releasing(self, marks: dict[int, set[str]]) -> tuple[dict[int, Batch | None], set[int], dict[int, set[str]]]:
        """For traces marked done in the batches holding their spans (``marks``: batch -> traces):
        the batches as held now, those left with no trace (to delete), and the traces to mark in
        the others. What memory holds is the authority: a trace released already is not marked again."""
        held = {b: self.batches.get(b) for b in marks}
        emptied = {b for b, batch in held.items() if batch is None or batch.traces <= marks[b]}
        done = {b: batch.traces & marks[b] for b, batch in held.items() if batch is not None and b not in emptied}
        return held, emptied, done

    def released(self, held: dict[int, Batch | None], marks: dict[int, set[str]]) -> None:
        """Once that is committed: the batches forget those traces (a batch staged anew under a
        freed id is another object, left alone), and the emptied ones are dropped."""
        for b, batch in held.items():
            if batch is not None and self.batches.get(b) is batch:
                batch.traces -= marks[b]
                if not batch.traces:
                    del self.batches[b]
                    self.bytes -= len(batch.body)

    def emptied_after(self, traces: int, quiet: float) -> bool:
        """Whether the buffer is empty and was for ``quiet`` seconds, after at least ``traces``
        traces came since this last said so (a burst ended); if so its containers are made anew
        (a dict keeps the size it grew to) and the count starts again."""
        if self.buffered or self.pending or self.since < traces or self.clock() - self.last_added < quiet:
            return False
        self.since = 0
        self.batches = dict(self.batches)
        return True
