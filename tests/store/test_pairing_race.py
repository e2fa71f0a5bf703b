"""Two processes keeping one pairing of two runs at once both succeed, and leave the rows one alone
writes (``pairing.keep_with_previous``: one insert-or-replace per direction, ``app.store.upsert``; a
read then an insert failed the second on ``run_pairings``' key on PostgreSQL, its read not seeing the
first's uncommitted row). Two ``toollens db backfill`` of a run whose aggregates and page figures are
current but whose pairing is missing (its previous run deleted, the pairing cascaded away) take no
lock before it: they collided. Finishing (``aggregates.keep``) was already safe: the second waits on
the first's upsert of the run's aggregates, then reads the committed pairing (kept here to prove it).
Both databases, two real connections, interleaved as in ``test_kept_race``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from app.settings import Settings
from app.store import aggregates, pairing
from app.store.backfill import backfill_kept
from app.store.db import session_scope
from app.store.models import RunPairing
from app.web.app import create_app
from tests.store.races import write_twice_at_once
from tests.store.test_compare_aggregates import B_WRONG
from tests.store.test_usage_store import PASSING, store


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield c


def _pairings(sessions: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    with session_scope(sessions) as s:
        rows = s.execute(
            select(
                RunPairing.a_id,
                RunPairing.b_id,
                RunPairing.a_trajectories,
                RunPairing.b_trajectories,
                RunPairing.shared,
                RunPairing.only_a,
                RunPairing.only_b,
                RunPairing.flipped,
            ).order_by(RunPairing.a_id)
        )
        return [tuple(r) for r in rows]


def _backfill(s: Session, run_id: int) -> None:
    backfill_kept(s, run_id)  # aggregates current: nothing written (nor locked) before the pairing


def _keep_with_previous(s: Session, run_id: int) -> None:
    pairing.keep_with_previous(s, run_id)


@pytest.mark.parametrize(
    "keep", [_backfill, _keep_with_previous, aggregates.keep], ids=["backfill", "keep_with_previous", "keep"]
)
def test_two_writers_of_one_pairing_both_succeed_and_leave_what_one_writes(
    client: TestClient, keep: Callable[[Session, int], None]
) -> None:
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    a = store(client, "a", *({**(PASSING if t % 2 else B_WRONG), "trial": t} for t in range(6)))
    b = store(client, "b", *({**(PASSING if t % 3 else B_WRONG), "trial": t} for t in range(1, 8)))
    for rid in (a, b):
        assert client.post(f"/api/runs/{rid}/finish").status_code == 200
    alone = _pairings(sessions)
    # trials 1..5 pair; a passes the odd ones, b those not a multiple of 3: 1, 5 pass in both,
    # 3 only in a, 2 and 4 only in b (flips in a's id order)
    assert [r[:7] for r in alone] == [(a, b, 6, 7, 5, 1, 2), (b, a, 7, 6, 5, 2, 1)]
    assert [f[1] for f in alone[0][7]] == [2, 3, 4]
    with session_scope(sessions, write=True) as s:
        s.execute(delete(RunPairing))

    write_twice_at_once(sessions, lambda s: keep(s, b))
    assert _pairings(sessions) == alone
