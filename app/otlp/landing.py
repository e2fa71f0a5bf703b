"""Landing: taken traces turned into trajectories and stored, many per transaction; a chunk
that fails is stored trace by trace, a trace that keeps failing is rejected, and while the
database is away everything goes back to the buffer. ``TraceStore`` is the database side
(one transaction per call), ``Lander`` the decisions around it."""

from __future__ import annotations

import logging
import marshal
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.core.bounded import BoundedCache
from app.core.errors import InvalidTrajectory
from app.core.records import Trajectory, parse_record
from app.core.score.scoring import Scorer
from app.importers.otel import trajectory_record
from app.otlp.buffer import Key, Pending, SpanBuffer
from app.otlp.scoring import Flight, Fresh
from app.otlp.spans import SpanRef, spans_of
from app.otlp.staging import Release, Round, Staging
from app.otlp.worker import WorkerResult
from app.store import ingest, otlp_traces
from app.store.db import session_scope
from app.store.errors import Conflict, NotFound
from app.store.models import Run
from app.store.rows import ScoredBatch

log = logging.getLogger("toollens.otlp")

MAX_ATTEMPTS = 3  # a trace that fails to store this many times (database reachable) is rejected

Traces = list[tuple[str, list[str], int]]  # trace id, its fresh span ids, its trials stored before
Releaser = Callable[[Session], Callable[[], None]]  # marks staged spans done in a transaction; then, once committed


class Scorers(Protocol):
    """What scores a run's trajectories (``app.web.state.ScorerCache``)."""

    def for_run(self, session: Session, run: Run) -> Scorer: ...


class TraceStore:
    """The database side of the receiver: each call is one transaction."""

    def __init__(self, sessions: sessionmaker[Session], scorers: Scorers):
        self.sessions, self.scorers = sessions, scorers
        self.runs: BoundedCache[str, int] = BoundedCache(1024)  # run ids by name
        self.suites: BoundedCache[int, tuple[dict[str, Any], str]] = BoundedCache(64)  # document, digest by suite

    def open_run(self, session: Session, name: str) -> int:
        """The open run named ``name`` (NotFound / Conflict otherwise), checked
        on every request: spans for a finished run are refused, not dropped."""
        found = self.runs.get(name)
        if found is not None:
            status = session.scalar(select(Run.status).where(Run.id == found))
        else:
            row = session.execute(select(Run.id, Run.status).where(Run.name == name)).first()
            if row is not None:
                found, status = int(row[0]), row[1]
                self.runs.put(name, found)
        if found is None or status is None:
            self.runs.pop(name)
            raise NotFound(f"no run {name!r}: create it first (POST /api/runs with the agent's suite)")
        if status == "finished":
            raise Conflict(f"run {name!r} is finished: it takes no new trajectories")
        return found

    def add(self, run_id: int, trajectories: list[Trajectory], traces: Traces, release: Releaser) -> bool:
        """Store the trajectories, write down their traces (``Resent`` when the database holds
        other trials of them) and release their staged spans, in one transaction (False: the
        run was finished meanwhile, nothing stored)."""
        with session_scope(self.sessions, write=True) as session:
            committed = release(session)
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
            self.runs.pop(run.name)
        return added

    def add_scored(self, run_id: int, scored: ScoredBatch, traces: Traces, release: Releaser) -> None:
        """Store rows the worker scored, with their traces and staged spans as ``add`` does
        (``Conflict`` when the run was finished meanwhile: rolled back)."""
        with session_scope(self.sessions, write=True) as session:
            committed = release(session)
            run = ingest.get_run_row(session, run_id)
            if run.status == "finished":
                raise Conflict("finished meanwhile")
            otlp_traces.record(session, run_id, traces)
            scorer = self.scorers.for_run(session, run)
            ingest.add_trajectories(session, run=run, scorer=scorer, trajectories=[], scored=scored)
        committed()

    def stored_keys(self, run_id: int) -> set[tuple[str, int, str]]:
        with session_scope(self.sessions) as session:
            return ingest.stored_keys(session, run_id)

    def suite(self, run_id: int, digest: Callable[[dict[str, Any]], str]) -> tuple[dict[str, Any], str]:
        """The run's suite document and its digest (suites are never changed nor deleted: read and hashed once)."""
        with session_scope(self.sessions) as session:
            suite_id = ingest.get_run_row(session, run_id).suite_id
            suite = self.suites.get(suite_id)
            if suite is None:
                document = ingest.suite_document(session, suite_id)
                suite = (document, digest(document))
                self.suites.put(suite_id, suite)
        return suite

    def reachable(self) -> bool:
        try:
            with session_scope(self.sessions) as session:
                session.execute(select(1))
        except SQLAlchemyError:
            return False
        return True


@dataclass
class Item:
    """A trace ready to store: its buffered spans, the new ones, its trajectory."""

    key: Key
    pending: Pending
    fresh: list[SpanRef]
    trajectory: Trajectory
    repaired: bool
    flushes: int  # trials of it stored before, as this server knows


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
    memory_given_back: int = 0  # bursts after which the buffer emptied and memory was given back


class Lander:
    """Stores taken traces through ``store``, and keeps the buffer's accounts of them."""

    def __init__(
        self,
        store: TraceStore,
        buffer: SpanBuffer,
        lock: threading.Lock,
        staging: Staging,
        round_: Round,
        stats: ReceiverStats,
        remember: int,
    ):
        self.store, self.buffer, self.lock, self.staging, self.round, self.stats = (
            store,
            buffer,
            lock,
            staging,
            round_,
            stats,
        )
        # span ids and trials stored, by trace: a resent span is a repeat, a late one another trial;
        # the ids packed in one bytes object (``remembered``), not a set of strings: 20,000 traces
        # of 20 spans take about 10 MB instead of 70, and no small objects outlive a burst
        self.stored: BoundedCache[Key, tuple[bytes, int]] = BoundedCache(remember)

    def remembered(self, key: Key) -> tuple[set[str], int]:
        """The span ids of a trace stored already and how often it was stored (empty, 0: none)."""
        held = self.stored.get(key)
        return (set(marshal.loads(held[0])), held[1]) if held is not None else (set(), 0)

    def remember(self, key: Key, ids: set[str], flushes: int) -> None:
        self.stored.put(key, (marshal.dumps(tuple(ids)), flushes))

    def give_back(self, taken: list[tuple[Key, Pending]], *, retry: bool = True) -> None:
        """Traces back to the buffer (``SpanBuffer.give_back``), handled in this round."""
        self.round.handled.update(key for key, _ in taken)
        with self.lock:
            self.buffer.give_back(taken, retry=retry)

    def unbuffer(self, spans: int) -> None:
        with self.lock:
            self.buffer.buffered -= spans

    def bodies(self, chunk: list[Fresh]) -> dict[int, tuple[str, bytes]]:
        """The staged batches a chunk's spans are in: id -> (format, body)."""
        with self.lock:
            return self.buffer.bodies(s.batch for f in chunk for s in f.fresh)

    def items(self, chunk: list[Fresh]) -> list[Item]:
        """The chunk's trajectories, built here; a trace whose record cannot be
        read is counted as rejected and marked done in staging."""
        items: list[Item] = []
        dropped: Release = []
        done_spans = 0
        decoded = spans_of(self.bodies(chunk), [f.refs() for f in chunk])
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
            items.append(Item(f.key, f.pending, f.fresh, traj, bool(notes), f.flushes))
        if dropped:
            self.staging.release_now(dropped)
            self.unbuffer(done_spans)
        return items

    def store_items(self, run_id: int, items: list[Item]) -> int:
        """One transaction for the batch; if it fails, one per trace (unless
        the database is away: then everything goes back to the buffer)."""
        if not items:
            return 0
        if self.round.away:
            self.give_back([(x.key, x.pending) for x in items])
            return 0
        try:
            added = self._store_chunk(
                run_id,
                [x.trajectory for x in items],
                [(x.key, x.pending.batches) for x in items],
                [(x.key[1], [s.span_id for s in x.fresh], x.flushes) for x in items],
            )
        except otlp_traces.Resent as exc:  # stored meanwhile (or before this server knew): decided again
            self._resent(run_id, exc.stored, [(x.key, x.pending, x.fresh) for x in items])
            return self.store_items(run_id, [x for x in items if x.key[1] not in exc.stored])
        except NotFound as exc:
            self.reject(items, f"the run is gone ({exc})")
            return 0
        except Exception:
            if not self.store.reachable():
                log.exception("storing traces failed: the database is away; %d traces kept for later", len(items))
                self.round.away = True
                self.give_back([(x.key, x.pending) for x in items])
                return 0
            if len(items) == 1:
                self._failed(items[0])
                return 0
            return sum(self.store_items(run_id, [x]) for x in items)
        if not added:
            self.stats.rejected_traces += len(items)
            self.unbuffer(sum(len(x.pending.spans) for x in items))
            return 0
        self.mark_stored([(x.key, x.pending, x.fresh, x.repaired) for x in items])
        return len(items)

    def _store_chunk(self, run_id: int, trajectories: list[Trajectory], staged: Release, traces: Traces) -> bool:
        try:
            return self.store.add(run_id, trajectories, traces, lambda s: self.staging.release(s, staged))
        except Conflict:
            # a case id and trial stored already (a conversation id reused by
            # several traces): take the next free trial numbers
            stored = self.store.stored_keys(run_id)
            for t in trajectories:
                while (t.case_id, t.trial, ingest.fault_key(t)) in stored:
                    t.trial += 1
                stored.add((t.case_id, t.trial, ingest.fault_key(t)))
            return self.store.add(run_id, trajectories, traces, lambda s: self.staging.release(s, staged))

    def reject(self, items: list[Item], why: str) -> None:
        """Give up on traces: counted as rejected, marked done in staging
        (if the database lets us; else a restart finds them again)."""
        log.warning("%d traces not stored: %s", len(items), why)
        self.stats.rejected_traces += len(items)
        self.round.handled.update(x.key for x in items)
        self.store.runs.clear()
        try:
            self.staging.release_now([(x.key, x.pending.batches) for x in items])
        except SQLAlchemyError:
            log.exception("the staged spans of rejected traces could not be released")
        self.unbuffer(sum(len(x.pending.spans) for x in items))

    def _failed(self, item: Item) -> None:
        """A trace that could not be stored (the database reachable) goes back
        to the buffer, until it failed ``MAX_ATTEMPTS`` times: then rejected."""
        log.exception("trace %s could not be stored", item.key[1])
        item.pending.attempts += 1
        if item.pending.attempts >= MAX_ATTEMPTS:
            self.reject([item], f"trace {item.key[1]} failed to store {MAX_ATTEMPTS} times")
            return
        self.stats.retried_traces += 1
        self.give_back([(item.key, item.pending)])

    def _resent(
        self, run_id: int, stored: dict[str, otlp_traces.Stored], traces: list[tuple[Key, Pending, list[SpanRef]]]
    ) -> None:
        """Traces the database holds other trials of than this server knew (a resend after a
        restart, another server): what is stored remembered, and those traces back to the
        buffer to be taken again (their repeats then left out, their new spans another trial)."""
        log.info("%d traces were stored already (or meanwhile): taken again", len(stored))
        for trace, known in stored.items():
            self.stored.pop((run_id, trace))
            self.remember((run_id, trace), set(known[0]), known[1])
        back = [(key, pending, fresh) for key, pending, fresh in traces if key[1] in stored]
        self.unbuffer(sum(len(p.spans) - len(fresh) for _, p, fresh in back))
        self.give_back([(key, replace(p, spans=list(fresh))) for key, p, fresh in back], retry=False)

    def store_scored(self, flight: Flight, result: WorkerResult) -> int | None:
        """Store a chunk the worker scored, in one transaction; None when it could not do the
        chunk whole (the chunk then takes the in-process path, with its fallbacks)."""
        run_id, chunk = flight.run_id, flight.chunk
        if self.round.away or any(e is not None for e in result.errors):
            return None  # the in-process path counts and logs the unreadable traces
        try:
            self.store.add_scored(
                run_id,
                result.scored,
                [(f.key[1], [s.span_id for s in f.fresh], f.flushes) for f in chunk],
                lambda s: self.staging.release(s, [(f.key, f.pending.batches) for f in chunk]),
            )
        except Exception:  # rolled back: the in-process path decides (conflicts, a finished run, the database)
            return None
        for f, notes in zip(chunk, result.notes, strict=True):
            if notes:
                log.warning("trace %s stored with repairs: %s", f.key[1], "; ".join(notes))
        self.stats.worker_traces += len(chunk)
        self.mark_stored(
            [(f.key, f.pending, f.fresh, bool(notes)) for f, notes in zip(chunk, result.notes, strict=True)]
        )
        return len(chunk)

    def mark_stored(self, stored: list[tuple[Key, Pending, list[SpanRef], bool]]) -> None:
        """Account for traces now in the store: spans no longer buffered, their
        span ids remembered (a resent span is a repeat), the counts."""
        self.unbuffer(sum(len(pending.spans) for _, pending, _, _ in stored))
        for key, _, fresh, repaired in stored:
            seen, flushes = self.remembered(key)
            seen.update(s.span_id for s in fresh)
            self.remember(key, seen, flushes + 1)
            self.stats.split_traces += flushes > 0  # a further trial of a trace stored before
            self.stats.stored_spans += len(fresh)
            self.stats.repaired_traces += repaired
        self.stats.stored_traces += len(stored)
