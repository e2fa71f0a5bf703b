"""Errors of the store, mapped to HTTP statuses and exit codes at the edge."""

from __future__ import annotations

from app.core.errors import ToolLensError


class StoreError(ToolLensError):
    """Base class of the store's errors."""


class NotFound(StoreError):
    """An unknown run, trajectory, suite or toolset (404)."""


class Conflict(StoreError):
    """The request contradicts what is stored: a finished run, a duplicate (409)."""


class SchemaMismatch(StoreError):
    """The database schema is not the one this code expects."""


class Unreachable(StoreError):
    """The database cannot be opened (a missing folder, a server down); the message names it."""


class Unstorable(StoreError):
    """A value the database cannot hold (a NUL character in PostgreSQL text,
    a number out of range) (422)."""


class Busy(StoreError):
    """A lock another writer held longer than the wait (SQLite's busy timeout,
    PostgreSQL's ``lock_timeout``): 503 with ``Retry-After``."""

    def __init__(self, message: str, *, retry_after: int = 30) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NeedsBackfill(Conflict):
    """A run stored by an older ToolLens lacks what the request reads (its failed trajectories'
    causes): ``toollens db backfill`` computes and keeps it (409). Reads never compute it."""

    def __init__(self, run: str, missing: int) -> None:
        super().__init__(
            f"run {run!r} was stored before ToolLens kept causes ({missing} failed trajectories have "
            f"none): run `toollens db backfill --run {run}` first"
        )
        self.run, self.missing = run, missing
