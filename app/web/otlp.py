"""The live OTLP receiver: ``POST /v1/traces`` (OTLP/HTTP, protobuf or JSON).

Spans are grouped into trajectories by trace id and stored into a named run:
``?run=NAME`` or the ``X-ToolLens-Run`` header (default ``otlp``). The run
must exist (``POST /api/runs`` with the suite whose toolset the agent uses):
its toolset is what schema validity and hallucinated tools are judged by.

The spans of one trace may come in several export batches, so a trace is
buffered until its root span has arrived and nothing more came for
``settle`` seconds (or, without a root, for ``idle`` seconds); then it is
scored and stored, many traces per transaction, by a background thread. A
request is answered once its spans are staged (committed to the
``otlp_spans`` table) and buffered; a trajectory is stored in the
transaction that deletes its staged spans, and a restart picks up what was
staged, so an acknowledged span survives a crash. When the buffer is full
(or the database is away) the answer is 503 with ``Retry-After``, which the
OpenTelemetry exporters retry. Spans arriving for a trace already stored
(late, or a retried request) make another trial of it; exact repeats of
recently stored span ids are recognised and not stored twice. Shutting the
app down stores everything still buffered.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from app.core.errors import InvalidTrajectory, ToolLensError
from app.core.records import Trajectory, loads, parse_record
from app.importers.otel import (
    Span,
    span_from_json,
    span_to_json,
    spans_from_json,
    spans_from_protobuf,
    trajectory_record,
)
from app.store import ingest
from app.store import otlp_staging as staging
from app.store.db import session_scope
from app.store.errors import Conflict, NotFound
from app.store.models import Run
from app.web.api import require_token
from app.web.errors import error_response
from app.web.state import ScorerCache

log = logging.getLogger("toollens.otlp")

DEFAULT_RUN = "otlp"
PROTOBUF = "application/x-protobuf"


@dataclass
class _Pending:
    spans: list[Span] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # their rows in the staging table
    last_seen: float = 0.0
    root: bool = False


@dataclass
class ReceiverStats:
    accepted_spans: int = 0
    stored_spans: int = 0
    stored_traces: int = 0
    duplicate_spans: int = 0
    rejected_traces: int = 0
    rejected_spans: int = 0
    refused_requests: int = 0


class OtlpReceiver:
    """Buffers spans per trace and stores finished traces in the background."""

    def __init__(self, sessions: sessionmaker[Session], scorers: ScorerCache, *, settle: float = 0.25,
                 idle: float = 30.0, max_spans: int = 500_000, batch: int = 500, remember: int = 20_000):
        self.sessions = sessions
        self.scorers = scorers
        self.settle, self.idle, self.max_spans, self.batch, self.remember = settle, idle, max_spans, batch, remember
        self.stats = ReceiverStats()
        self._lock = threading.Lock()
        self._store_lock = threading.Lock()
        self._pending: dict[tuple[int, str], _Pending] = {}
        self._buffered = 0
        self._stored: OrderedDict[tuple[int, str], tuple[set[str], int]] = OrderedDict()  # span ids, flushes
        self._runs: dict[str, int] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the request side -------------------------------------------------------

    def run_id(self, name: str) -> int:
        """The open run named ``name`` (NotFound / Conflict otherwise), checked
        on every request: spans for a finished run are refused, not dropped."""
        with session_scope(self.sessions) as session:
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

    def accept(self, run_id: int, spans: list[Span]) -> bool:
        """Stage the spans (committed before the request is answered) and
        buffer them; False when the buffer is full (answer 503)."""
        valid = [s for s in spans if s.trace_id]  # a span without a trace id has no trace to go to
        with self._lock:
            self.stats.rejected_spans += len(spans) - len(valid)
            if self._buffered and self._buffered + len(valid) > self.max_spans:
                self.stats.refused_requests += 1
                return False
        if not valid:
            return True
        with session_scope(self.sessions, write=True) as session:
            ids = staging.stage(session, run_id, [span_to_json(s) for s in valid])
        self._buffer(run_id, valid, ids)
        with self._lock:
            self.stats.accepted_spans += len(valid)
        self._ensure_thread()
        return True

    def _buffer(self, run_id: int, spans: list[Span], ids: list[int]) -> None:
        now = time.monotonic()
        with self._lock:
            for s, i in zip(spans, ids, strict=True):
                key = (run_id, s.trace_id)
                p = self._pending.get(key)
                if p is None:
                    p = self._pending[key] = _Pending()
                p.spans.append(s)
                p.ids.append(i)
                p.last_seen = now
                p.root = p.root or s.is_root
            self._buffered += len(spans)

    def recover(self) -> int:
        """Buffer the spans a previous process staged and did not store
        (it stopped without storing them); returns how many."""
        by_run: dict[int, tuple[list[Span], list[int]]] = {}
        with session_scope(self.sessions) as session:
            for i, run_id, text in staging.staged(session):
                spans, ids = by_run.setdefault(run_id, ([], []))
                spans.append(span_from_json(text))
                ids.append(i)
        for run_id, (spans, ids) in by_run.items():
            self._buffer(run_id, spans, ids)
        n = sum(len(ids) for _, ids in by_run.values())
        if n:
            log.warning("recovered %d staged spans", n)
            self._ensure_thread()
        return n

    # -- the storing side --------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._loop, name="otlp-store", daemon=True)
                    self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(min(self.settle, 0.25) or 0.05)
            try:
                self.store_ready()
            except Exception:  # the database is away: keep the spans, try again
                log.exception("storing traces failed; retrying")
                self._stop.wait(1.0)

    def _take(self, everything: bool) -> list[tuple[tuple[int, str], _Pending]]:
        now = time.monotonic()
        with self._lock:
            ready = [k for k, p in self._pending.items()
                     if everything or (now - p.last_seen >= (self.settle if p.root else self.idle))]
            taken = [(k, self._pending.pop(k)) for k in ready]
        return taken

    def _give_back(self, taken: list[tuple[tuple[int, str], _Pending]]) -> None:
        with self._lock:
            for key, back in taken:
                p = self._pending.setdefault(key, _Pending())
                p.spans[:0] = back.spans
                p.ids[:0] = back.ids
                p.root = p.root or back.root
                p.last_seen = time.monotonic()

    def store_ready(self, everything: bool = False) -> int:
        """Store the traces that are complete (all of them with
        ``everything``); returns how many were stored."""
        with self._store_lock:
            taken = self._take(everything)
            if not taken:
                return 0
            try:
                return self._store(taken)
            except BaseException:
                self._give_back(taken)
                raise

    def _store(self, taken: list[tuple[tuple[int, str], _Pending]]) -> int:
        by_run: dict[int, list[tuple[tuple[int, str], list[Span], Trajectory, list[int]]]] = {}
        span_total = 0
        dropped: list[int] = []  # staged rows of spans that will not be stored (repeats, unreadable traces)
        for key, pending in taken:
            spans = pending.spans
            span_total += len(spans)
            seen, flushes = self._stored.get(key, (set(), 0))
            fresh = [s for s in spans if s.span_id not in seen]
            self.stats.duplicate_spans += len(spans) - len(fresh)
            if not fresh:
                dropped.extend(pending.ids)
                continue
            try:
                record = trajectory_record(fresh)
                if flushes:  # late spans of a stored trace: another trial of it
                    trial = record.get("trial")
                    record["trial"] = (trial if isinstance(trial, int) else 0) + flushes
                traj = parse_record(record, source=f"trace {key[1]}")
            except (InvalidTrajectory, ValueError) as exc:
                log.warning("trace %s cannot be stored: %s", key[1], exc)
                self.stats.rejected_traces += 1
                dropped.extend(pending.ids)
                continue
            by_run.setdefault(key[0], []).append((key, fresh, traj, pending.ids))
        if dropped:
            with session_scope(self.sessions, write=True) as session:
                staging.unstage(session, dropped)
        stored = 0
        for run_id, items in by_run.items():
            for start in range(0, len(items), self.batch):
                chunk = items[start:start + self.batch]
                self._store_chunk(run_id, [t for _, _, t, _ in chunk], [i for *_, ids in chunk for i in ids])
                for key, fresh, _, _ in chunk:
                    seen, flushes = self._stored.pop(key, (set(), 0))
                    seen.update(s.span_id for s in fresh)
                    self._stored[key] = (seen, flushes + 1)
                    self.stats.stored_spans += len(fresh)
                while len(self._stored) > self.remember:
                    self._stored.popitem(last=False)
                stored += len(chunk)
        self.stats.stored_traces += stored
        with self._lock:
            self._buffered -= span_total
        return stored

    def _store_chunk(self, run_id: int, trajectories: list[Trajectory], staged_ids: list[int]) -> None:
        try:
            self._add(run_id, trajectories, staged_ids)
        except Conflict:
            # a case id and trial stored already (a conversation id reused by
            # several traces): take the next free trial numbers
            with session_scope(self.sessions) as session:
                stored = ingest.stored_keys(session, run_id)
            for t in trajectories:
                while (t.case_id, t.trial, ingest.fault_key(t)) in stored:
                    t.trial += 1
                stored.add((t.case_id, t.trial, ingest.fault_key(t)))
            self._add(run_id, trajectories, staged_ids)

    def _add(self, run_id: int, trajectories: list[Trajectory], staged_ids: list[int]) -> None:
        """Store the trajectories and delete their staged spans, in one transaction."""
        with session_scope(self.sessions, write=True) as session:
            staging.unstage(session, staged_ids)
            run = ingest.get_run_row(session, run_id)
            if run.status == "finished":
                log.warning("run %s was finished meanwhile: %d traces not stored", run.name, len(trajectories))
                self.stats.rejected_traces += len(trajectories)
                self._runs.pop(run.name, None)
                return
            scorer = self.scorers.for_run(session, run)
            ingest.add_trajectories(session, run=run, scorer=scorer, trajectories=trajectories)

    def close(self) -> None:
        """Stop the thread and store everything still buffered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            self.store_ready(everything=True)
        except SQLAlchemyError:
            log.exception("spans still buffered at shutdown could not be stored")

    @property
    def buffered_spans(self) -> int:
        return self._buffered


def receiver_for(request: Request) -> OtlpReceiver:
    """The app's receiver, made on first use."""
    state = request.app.state
    receiver: OtlpReceiver | None = getattr(state, "otlp", None)
    if receiver is None:
        with _MAKE_LOCK:
            receiver = getattr(state, "otlp", None)
            if receiver is None:
                receiver = state.otlp = OtlpReceiver(state.sessions, state.scorers)
    return receiver


_MAKE_LOCK = threading.Lock()


def open_receiver(app_state: Any) -> OtlpReceiver:
    """For the app's startup: the receiver, holding again the spans a previous
    process acknowledged and did not store."""
    receiver = OtlpReceiver(app_state.sessions, app_state.scorers)
    receiver.recover()
    app_state.otlp = receiver
    return receiver


def close_receiver(app_state: Any) -> None:
    """For the app's shutdown: store what is buffered."""
    receiver: OtlpReceiver | None = getattr(app_state, "otlp", None)
    if receiver is not None:
        receiver.close()


# -- the route -----------------------------------------------------------------------

router = APIRouter()


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise ValueError(f"unsupported Content-Encoding {encoding!r} (gzip, deflate)")
    d = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = d.decompress(body, limit + 1)
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"cannot decompress the body ({exc})") from None
    if len(out) > limit:
        raise ValueError(f"decompressed body larger than {limit} bytes")
    return out


# OTLP/HTTP is a protocol of its own (protobuf bodies), documented in the
# README rather than in the JSON API's OpenAPI schema.
@router.post("/v1/traces", include_in_schema=False)
async def receive_traces(
    request: Request,
    run: Annotated[str | None, Query(max_length=200, description="Run name (or the X-ToolLens-Run header).")] = None,
    x_toollens_run: Annotated[str | None, Header(max_length=200)] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> Response:
    """OTLP/HTTP trace export (protobuf or JSON) into a named run."""
    require_token(request, authorization)
    protobuf = request.headers.get("content-type", "").split(";")[0].strip().lower() == PROTOBUF
    body = await request.body()
    try:
        body = _decompress(body, request.headers.get("content-encoding", "").strip().lower(),
                           request.app.state.settings.max_body_bytes)
        spans = spans_from_protobuf(body) if protobuf else spans_from_json(loads(body) if body else {})
    except (ValueError, TypeError) as exc:
        return error_response(400, f"not an OTLP trace export: {exc}")
    receiver = receiver_for(request)
    try:
        accepted = await run_in_threadpool(_take_in, receiver, run or x_toollens_run or DEFAULT_RUN, spans)
    except ToolLensError:
        raise
    except Exception:  # the database is away: the exporter retries, nothing is lost
        log.exception("spans could not be staged")
        return error_response(503, "the spans could not be staged: retry later", headers={"Retry-After": "2"})
    if not accepted:
        return error_response(503, "the receiver's buffer is full: retry later", headers={"Retry-After": "1"})
    if protobuf:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)
    return Response(b"{}", media_type="application/json")


def _take_in(receiver: OtlpReceiver, run_name: str, spans: list[Span]) -> bool:
    run_id = receiver.run_id(run_name)
    return not spans or receiver.accept(run_id, spans)


@router.get("/v1/traces/status", include_in_schema=False)
def receiver_status(request: Request) -> dict[str, int]:
    """What the receiver took, stored and still buffers (spans and traces)."""
    receiver = receiver_for(request)
    stats = receiver.stats
    return {"accepted_spans": stats.accepted_spans, "stored_spans": stats.stored_spans,
            "buffered_spans": receiver.buffered_spans, "stored_traces": stats.stored_traces,
            "duplicate_spans": stats.duplicate_spans, "rejected_traces": stats.rejected_traces,
            "rejected_spans": stats.rejected_spans,
            "refused_requests": stats.refused_requests}
