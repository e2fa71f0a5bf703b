"""Two processes keeping one run's aggregates and page figures at once (two ``toollens db backfill``
after an upgrade, two replicas finishing one run) both succeed, and the rows they leave equal what
one alone writes: the second one's reads happen before the first commits, so it too finds no row
(``app.store.upsert.upsert_row``: one insert-or-replace, not a read then an insert, which failed the
second on the primary key on PostgreSQL). Both databases, two real connections."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from app.store import aggregates
from app.store.db import session_scope
from app.store.models import RunAggregate, RunPageKept
from tests.factories import examples_client
from tests.store.races import write_twice_at_once


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with examples_client(db_url, "v1") as c:
        yield c


def _rows(sessions: sessionmaker[Session]) -> tuple[Any, ...]:
    with session_scope(sessions) as s:
        usage = s.execute(select(RunAggregate.trajectories, RunAggregate.usage).where(RunAggregate.run_id == 1)).all()
        page = s.execute(
            select(RunPageKept.trajectories, RunPageKept.version, RunPageKept.pass_hat_k, RunPageKept.pair_edits)
        ).all()
        return [tuple(r) for r in usage], [tuple(r) for r in page]


def _forget(sessions: sessionmaker[Session]) -> None:
    """The run as an older ToolLens finished it: nothing kept."""
    with session_scope(sessions, write=True) as s:
        s.execute(delete(RunAggregate))
        s.execute(delete(RunPageKept))


def _backfill(s: Session, run_id: int) -> None:
    aggregates.backfill(s, run_id)  # the second: True on PostgreSQL (it read before the first committed)


@pytest.mark.parametrize(
    "keep",
    [_backfill, aggregates.keep, aggregates.keep_page, aggregates.keep_usage],
    ids=["backfill", "keep", "keep_page", "keep_usage"],
)
def test_two_writers_at_once_both_succeed_and_leave_what_one_writes(
    client: TestClient, keep: Callable[[Session, int], None]
) -> None:
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    assert client.post("/api/runs/1/finish").status_code == 200
    alone = _rows(sessions)
    assert alone[0] and alone[1] and alone[1][0][0] == 36  # the example run's 36 trajectories, both kept
    if keep is aggregates.keep_page:
        alone = ([], alone[1])
    elif keep is aggregates.keep_usage:
        alone = (alone[0], [])
    _forget(sessions)

    write_twice_at_once(sessions, lambda s: keep(s, 1))
    assert _rows(sessions) == alone
