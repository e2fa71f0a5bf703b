"""The OTLP receiver's second process (``app.otlp.scoring`` hands it the chunks): traces to scored rows.

Accepting spans (decoding, staging them durably) and turning traces into
scored trajectories both cost CPU; in one process they share one core. On a
machine with two cores or more the receiver hands each batch of ready traces
to this worker, which builds the trajectory records (docs/formats.md), scores them and builds
their rows (``rows.score_batch``); the receiver only inserts. What ends up
in the store is what the in-process path stores: a batch the worker cannot
do whole goes back to that path.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from app.core.bounded import BoundedCache
from app.core.errors import InvalidTrajectory
from app.core.records import parse_record
from app.core.scoring import Scorer
from app.core.suite import parse_suite
from app.gc_tuning import collect_cycles_rarely
from app.importers.otel import spans_of, trajectory_record
from app.store.rows import ScoredBatch, score_batch

MIN_TRACES = 50  # smaller batches are cheaper to score here than to ship to the worker


@dataclass
class WorkerResult:
    """Per trace: its notes (repairs) or why it cannot be stored; the scored
    rows of those that can, in order."""

    notes: list[list[str]]
    errors: list[str | None]
    scored: ScoredBatch


_SCORERS: BoundedCache[str, Scorer] = BoundedCache(16)  # in the worker, by suite digest


def digest(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()[:16]


def score_traces(key: str, document: dict[str, Any], batches: Mapping[int, tuple[str, bytes]],
                 traces: list[tuple[list[tuple[int, int]], int]]) -> WorkerResult:
    """In the worker: per trace, its spans as (batch, position) in the staged
    ``batches`` and its earlier flushes -> spans -> records -> scored rows."""
    scorer = _SCORERS.get(key)
    if scorer is None:
        scorer = Scorer(parse_suite(document, path="suite"))
        _SCORERS.put(key, scorer)
    notes: list[list[str]] = []
    errors: list[str | None] = []
    trajectories = []
    decoded = spans_of(batches, [refs for refs, _ in traces])
    for (_, flushes), spans in zip(traces, decoded, strict=True):
        these: list[str] = []
        try:
            if isinstance(spans, str):
                raise ValueError(spans)
            record = trajectory_record(spans, these)
            if flushes:  # late spans of a stored trace: another trial of it
                record["trial"] = int(record.get("trial") or 0) + flushes
            trajectories.append(parse_record(record, source="trace"))
            errors.append(None)
        except (InvalidTrajectory, ValueError) as exc:
            errors.append(str(exc))
        notes.append(these)
    return WorkerResult(notes, errors, score_batch(scorer, trajectories))


def load_decoders() -> None:
    """Import what turning spans into scored rows needs beyond this module's own imports
    (the OTLP protobuf classes, jsonschema for a suite's schemas): about 0.1 s, paid once."""
    import jsonschema  # noqa: F401
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: F401


def _exit_with_parent() -> None:
    """In the worker: exit when the server process dies, however it dies (SIGKILL runs no
    shutdown). The pool's queues never report a dead parent (the worker holds their write ends
    too), so a killed server would leave the worker, and the resource tracker it keeps open,
    running for good; the parent's sentinel (a pipe only the parent holds) reports it at once."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def warm_up() -> int:
    """In the worker: everything loaded before the first batch comes; returns its pid."""
    load_decoders()
    collect_cycles_rarely(100_000, 50)  # as the import's worker does
    return os.getpid()


class ScoringWorker:
    """One worker process, started with the receiver (spawned: the web
    process has threads, so it is not forked)."""

    def __init__(self) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"),
                                         initializer=_exit_with_parent)
        self.ready: Future[int] = self._pool.submit(warm_up)  # start and load it now, not with the first batch
        self.killed = False

    @staticmethod
    def pays() -> bool:
        return (os.cpu_count() or 1) >= 2

    def submit(self, document: dict[str, Any], batches: dict[int, tuple[str, bytes]],
               traces: list[tuple[list[tuple[int, int]], int]], key: str | None = None) -> Future[WorkerResult]:
        """Score traces (spans as positions in staged batches) against a suite; ``key`` is
        ``digest(document)``, when the caller has it."""
        return self._pool.submit(score_traces, key or digest(document), document, batches, traces)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def kill(self) -> None:
        """End the worker process as a crash would (a stuck worker; tests): the
        batches it holds fail at once."""
        self.killed = True
        for process in list(getattr(self._pool, "_processes", {}).values()):
            process.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
