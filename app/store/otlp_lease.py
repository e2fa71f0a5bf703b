"""Which server stores a staged OTLP batch: the one whose lease it is staged under.

Every receiver holds a lease (an ``otlp_leases`` row) and stages its export requests
under it. A lease is alive while its server runs:

- PostgreSQL: the server holds a session advisory lock keyed by (this schema, lease id) on
  a connection of its own; the database drops it when that connection ends (the process
  died, however). Another server sees the lease expired when it can take that lock.
- SQLite: the server writes a heartbeat every ``BEAT`` seconds. A lease of a server on this
  host expired when its process is gone (at once; a heartbeat held up by a long write, such as
  an import's, does not count against it), one of another host when its heartbeat is older
  than ``TTL``.

A server takes over (moves under its own lease, in one statement) only the batches of
expired leases, and those staged before leases existed (NULL); a second server on the same
database, even one that then fails to bind its port, never takes a live server's batches.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import zlib
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, text, update
from sqlalchemy.orm import Session

from app.store.models import OtlpBatch, OtlpLease

BEAT = 2.0  # seconds between heartbeats (SQLite) and between looks for expired leases
TTL = 30.0  # SQLite: a heartbeat older than this is a dead server's (a server on another host)
STALE = 600.0  # SQLite, a server on this host: its process runs, but its heartbeat is this old (a reused pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it runs
        return True
    return True


class Lease:
    """This process's lease on one database (made on first use, given up by ``release``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.postgres = engine.dialect.name == "postgresql"
        self.id: int | None = None
        self._conn: Connection | None = None  # PostgreSQL: the connection holding the lock
        self._key = 0  # PostgreSQL: this schema's half of the lock key

    def ensure(self) -> int:
        """The lease's id, taken now if this process holds none (before any transaction of its
        own: on SQLite the insert needs the write lock)."""
        if self.id is None:
            with self._write() as conn:
                self._insert(conn)
            self._lock()
        assert self.id is not None
        return self.id

    def _write(self) -> Any:
        """A write transaction of its own (SQLite: the write lock taken at its start)."""
        return self.engine.execution_options(sqlite_immediate=True).begin()

    def _insert(self, conn: Connection) -> None:
        if self.postgres:
            schema = str(conn.scalar(text("SELECT current_schema()")))
            self._key = zlib.crc32(f"toollens-otlp-lease:{schema}".encode()) - (1 << 31)  # an int4
        self.id = int(
            conn.execute(
                insert(OtlpLease)
                .values(host=socket.gethostname(), pid=os.getpid(), beat=time.time())
                .returning(OtlpLease.id)
            ).scalar_one()
        )

    def _lock(self) -> None:
        """PostgreSQL: hold the lease's lock on a connection of its own, for as long as this process runs."""
        if self.postgres:
            self._drop_connection()
            self._conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self._conn.execute(text("SELECT pg_advisory_lock(:k, :i)"), {"k": self._key, "i": self.id})

    def _kept(self, conn: Connection) -> bool:
        """Keep the lease alive (SQLite: the heartbeat; PostgreSQL: the lock's connection
        checked); False when it is gone (taken over while this server was stalled or cut off)."""
        if self.postgres:
            try:
                assert self._conn is not None
                self._conn.execute(text("SELECT 1"))
                return True
            except Exception:
                self._drop_connection()
                return False
        return bool(conn.execute(update(OtlpLease).where(OtlpLease.id == self.id).values(beat=time.time())).rowcount)

    def _expired(self, conn: Connection, row: Any) -> bool:
        """Whether another server's lease has expired (PostgreSQL: its lock is taken now, until
        the caller's transaction ends)."""
        if self.postgres:
            return bool(conn.scalar(text("SELECT pg_try_advisory_xact_lock(:k, :i)"), {"k": self._key, "i": row.id}))
        age = time.time() - float(row.beat)
        if row.host == socket.gethostname() and row.pid != os.getpid():  # on this host, its process says
            return bool(row.pid <= 0 or not _alive(row.pid) or age > STALE)
        return age > TTL

    def take_over(self, session: Session) -> list[int]:
        """In the caller's write transaction: this lease kept alive, the batches of expired
        leases (and of none) moved under it, the expired leases deleted; returns the ids of
        the batches taken."""
        self.ensure()
        conn = session.connection()
        if not self._kept(conn):  # a new lease; what was staged under the old one is taken over below
            self._insert(conn)
            self._lock()
        mine = self.id
        dead = [
            row.id
            for row in conn.execute(
                select(OtlpLease.id, OtlpLease.host, OtlpLease.pid, OtlpLease.beat)
                .where(OtlpLease.id != mine)
                .order_by(OtlpLease.id)
            )
            if self._expired(conn, row)
        ]
        owner: Any = OtlpBatch.lease_id.is_(None)
        if dead:
            owner = owner | OtlpBatch.lease_id.in_(dead)
            conn.execute(delete(OtlpLease).where(OtlpLease.id.in_(dead)))
        taken = conn.execute(update(OtlpBatch).where(owner).values(lease_id=mine).returning(OtlpBatch.id))
        return sorted(int(i) for i in taken.scalars())

    def release(self) -> None:
        """Give the lease up: its row deleted, or left expired while batches are staged under
        it, for the next server to take them over at once."""
        if self.id is None:
            return
        lease_id, self.id = self.id, None
        try:
            with self._write() as conn:
                if conn.scalar(select(OtlpBatch.id).where(OtlpBatch.lease_id == lease_id).limit(1)) is not None:
                    conn.execute(update(OtlpLease).where(OtlpLease.id == lease_id).values(beat=0.0, pid=0))
                else:
                    conn.execute(delete(OtlpLease).where(OtlpLease.id == lease_id))
        finally:
            self._drop_connection()

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection: the lock went with it
                self._conn.invalidate()  # closed for good (a pooled one would keep holding the lock)
                self._conn.close()
            self._conn = None
