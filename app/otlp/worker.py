"""The OTLP receiver's job for the scoring worker (``app.store.scoring_worker``): traces to scored rows.

Accepting spans (decoding, staging them durably) and turning traces into
scored trajectories both cost CPU; in one process they share one core. On a
machine with two cores or more the receiver hands each batch of ready traces
(``app.otlp.scoring``) to the worker, which builds the trajectory records (docs/formats.md),
scores them and builds their rows (``rows.score_batch``); the receiver only inserts. What
ends up in the store is what the in-process path stores: a batch the worker cannot
do whole goes back to that path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.bounded import BoundedCache
from app.core.errors import InvalidTrajectory
from app.core.records import parse_record
from app.core.score.scoring import Scorer
from app.core.suites.suite import parse_suite
from app.importers.otel import trajectory_record
from app.otlp.spans import spans_of
from app.store import scoring_worker
from app.store.gc_tuning import cap_malloc_arenas
from app.store.rows import ScoredBatch, score_batch
from app.store.scoring_worker import ScoringWorker

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


def score_traces(
    key: str,
    document: dict[str, Any],
    batches: Mapping[int, tuple[str, bytes]],
    traces: list[tuple[list[tuple[int, int]], int]],
) -> WorkerResult:
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


def warm_up() -> int:
    """In the worker: everything loaded before the first chunk comes, glibc's malloc tuned as the
    server's (``cap_malloc_arenas``); returns its pid."""
    cap_malloc_arenas()
    load_decoders()
    return scoring_worker.warm_up()


def start_worker() -> ScoringWorker:
    """The receiver's worker process, spawned (the web process has threads, so it is not forked)."""
    return ScoringWorker(start="spawn", warm=warm_up)
