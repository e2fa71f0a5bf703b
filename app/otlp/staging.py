"""The receiver's staged export requests: staged under its lease (kept alive by a thread of
its own, which also takes over the requests of servers whose lease expired), marked done as
their traces are stored, and deleted once nothing of them is left to store. The SQL is in
``app.store.otlp_staging`` and ``app.store.otlp_lease``."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.otlp.buffer import Key, SpanBuffer
from app.store import otlp_staging
from app.store.db import missing_schema_error, read_only_error, session_scope
from app.store.otlp_lease import BEAT, Lease

log = logging.getLogger("toollens.otlp")

Release = list[tuple[Key, set[int]]]  # traces and the batches holding their spans


@dataclass
class Round:
    """One storing round's state: whether the database failed during it, and the traces it
    stored, released or gave back (not to be given back again when it fails midway)."""

    away: bool = False
    handled: set[Key] = field(default_factory=set)


class Staging:
    """Staged requests, between the database and the buffer's copy of them (``lock`` guards the buffer)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        buffer: SpanBuffer,
        lock: threading.Lock,
        stop: threading.Event,
        round_: Round,
    ):
        self.sessions, self.buffer, self.lock, self.stop, self.round = sessions, buffer, lock, stop, round_
        self.lease = Lease(sessions.kw["bind"])  # the batches this server stages are its own to store
        self.thread: threading.Thread | None = None
        self.undropped: set[int] = set()  # staged batches holding nothing to store, not deleted yet

    def lease_id(self, recover: Callable[[], int]) -> int:
        """This server's lease (taken on first use), kept alive by a thread of its own that
        also calls ``recover`` (held weakly: a receiver never closed, dropped, ends it)."""
        if self.thread is None and not self.stop.is_set():  # first: it retries a lease not taken now
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(
                        target=_keep_lease,
                        args=(weakref.WeakMethod(recover), self.stop),
                        name="otlp-lease",
                        daemon=True,
                    )
                    self.thread.start()
        return self.lease.ensure()

    def take_over(self) -> list[tuple[int, int, str, bytes, set[str]]]:
        """The staged requests of servers whose lease expired (and those staged before leases),
        moved under this server's lease, but for those it holds already: (batch, run, form,
        body, traces done)."""
        with session_scope(self.sessions, write=True) as session:
            taken = self.lease.take_over(session)
        if not taken:
            return []
        with self.lock:  # a batch this server holds already (under a lease it lost meanwhile) stays as it is
            taken = [b for b in taken if b not in self.buffer.batches]
        with session_scope(self.sessions) as session:
            return list(otlp_staging.staged(session, taken))

    def drop(self, ids: list[int]) -> None:
        """Delete staged batches that hold nothing to store; those the database does not
        delete now (it is away) are deleted by a later storing round (a restart would read
        them back and store their spans again)."""
        with self.lock:
            ids = sorted({*ids, *self.undropped})
            self.undropped.clear()
        if not ids:
            return
        try:
            with session_scope(self.sessions, write=True) as session:
                otlp_staging.finish(session, {}, ids)
        except SQLAlchemyError as exc:
            log.warning(
                "%d staged batches that hold nothing to store could not be deleted, retried later: %s", len(ids), exc
            )
            with self.lock:
                self.undropped.update(ids)

    def release(self, session: Session, traces: Release) -> Callable[[], None]:
        """In the caller's transaction: mark traces done in the batches holding
        their spans, deleting the batches left with none; returns what to do
        in memory once that transaction is committed."""
        marks: dict[int, set[str]] = {}
        for (_, trace), batches in traces:
            for b in batches:
                marks.setdefault(b, set()).add(trace)
        with self.lock:
            held, emptied, done = self.buffer.releasing(marks)
        otlp_staging.finish(session, done, emptied)

        def committed() -> None:
            with self.lock:
                self.buffer.released(held, marks)
            self.round.handled.update(key for key, _ in traces)

        return committed

    def release_now(self, traces: Release) -> None:
        """Mark traces done that will not be stored (repeats, unreadable, rejected), in their own transaction."""
        if traces:
            with session_scope(self.sessions, write=True) as session:
                committed = self.release(session, traces)
            committed()

    def give_up(self) -> None:
        """Give the lease up (left expired if anything stays staged, for the next server to take over at once)."""
        self.lease.release()


def _keep_lease(recover: weakref.WeakMethod[Callable[[], int]], stop: threading.Event) -> None:
    """The lease thread: ``recover`` every ``BEAT`` seconds, until stopped or its receiver is gone."""
    while not stop.wait(BEAT):
        method = recover()
        if method is None:
            return
        try:
            method()
        except Exception as exc:  # the database is away: the next beat tries again
            if read_only_error(exc):  # it never will take a lease: said once, at the start
                return
            if missing_schema_error(exc):  # the tables were dropped under it: no lease will ever be kept again
                log.warning(
                    "the OTLP staging lease stops: the database no longer holds its tables (%s)", exc.__class__.__name__
                )
                return
            log.exception("the OTLP staging lease could not be kept")
        del method
