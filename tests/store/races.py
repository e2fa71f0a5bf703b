"""Two writers at once, on two real connections: the second one's session opens while the first holds its
uncommitted rows (on PostgreSQL its reads then find none of them, and its write waits on the first's lock,
checked in ``pg_locks``; SQLite lets one writer in at a time). Used by the kept-rows race tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.store.db import session_scope


def _waiting(sessions: sessionmaker[Session], pid: int | None) -> bool:
    """Whether PostgreSQL backend ``pid`` waits for a lock (SQLite: whether the other writer had time to)."""
    if pid is None:
        time.sleep(0.5)
        return True
    with session_scope(sessions) as s:
        return bool(s.scalar(text("SELECT count(*) FROM pg_locks WHERE pid = :p AND NOT granted"), {"p": pid}))


def write_twice_at_once(sessions: sessionmaker[Session], write: Callable[[Session], None]) -> None:
    """``write`` in two sessions at once, the second begun before the first commits: both must succeed."""
    postgres = sessions.kw["bind"].dialect.name == "postgresql"
    pid: list[int] = []
    failed: list[BaseException] = []
    started = threading.Event()

    def second() -> None:
        try:
            with session_scope(sessions, write=True) as s:  # SQLite: waits here for the first's write lock
                if postgres:
                    pid.append(int(s.scalar(text("SELECT pg_backend_pid()")) or 0))
                started.set()
                write(s)  # PostgreSQL: its reads find no row, the first has not committed
        except BaseException as e:  # reported below
            failed.append(e)
        finally:
            started.set()

    with session_scope(sessions, write=True) as first:
        write(first)
        first.flush()
        other = threading.Thread(target=second)
        other.start()
        assert not postgres or started.wait(30)
        deadline = time.monotonic() + 30
        while not _waiting(sessions, pid[0] if pid else None):  # its write waits for the first to commit
            assert other.is_alive() and time.monotonic() < deadline, failed
            time.sleep(0.05)
        assert other.is_alive()
    other.join(60)
    assert not other.is_alive()
    assert failed == []
