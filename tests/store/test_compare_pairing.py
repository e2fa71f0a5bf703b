"""Any two runs' pairing (the compare page's shared trajectories, McNemar's discordant pairs and
first flips), read by the database from the compare index, equals the one paired by hand from
every trajectory, on both databases; SQLite reads both runs from that index alone."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, text

from app.settings import Settings
from app.store import pairing
from app.store.db import session_scope
from app.store.models import RunPairing, TrajectoryRow
from app.web.app import create_app
from tests.store.test_compare_aggregates import B_WRONG
from tests.store.test_usage_store import FAILING, PASSING, store


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield c


def _run(trials: range, passes: Callable[[int], bool], faulted: Collection[int] = ()) -> list[dict[str, Any]]:
    """One trajectory per trial: passing or failing (a wrong tool) as ``passes`` says; ``faulted``
    trials carry an injected timeout instead (another fault key: paired only with the same fault)."""
    return [
        {**FAILING, "trial": t} if t in faulted else {**(PASSING if passes(t) else B_WRONG), "trial": t} for t in trials
    ]


def _three(client: TestClient) -> tuple[int, int, int]:
    """Runs a, b, c of one suite, finished in that order: the pairings (a, b) and (b, c) are kept."""
    a = store(client, "a", *_run(range(20), lambda t: t % 3 != 0, {7, 8}))
    b = store(client, "b", *_run(range(3, 25), lambda t: t % 2 == 0, {8, 9}))
    c = store(client, "c", *_run(range(15), lambda t: t % 5 != 0))
    for rid in (a, b, c):
        assert client.post(f"/api/runs/{rid}/finish").status_code == 200
    return a, b, c


def by_hand(s: Any, a: int, b: int, limit: int) -> pairing.Pairing:
    """Both runs' trajectories read whole and paired in Python."""

    def rows(rid: int) -> dict[tuple[str, int, str], tuple[int, bool]]:
        return {
            (c, t, f): (i, bool(p))
            for c, t, f, i, p in s.execute(
                select(
                    TrajectoryRow.case_id,
                    TrajectoryRow.trial,
                    TrajectoryRow.fault_key,
                    TrajectoryRow.id,
                    TrajectoryRow.passed,
                ).where(TrajectoryRow.run_id == rid)
            )
        }

    ra, rb = rows(a), rows(b)
    both = [(k, ra[k], rb[k]) for k in ra.keys() & rb.keys()]
    flips = sorted((k[0], k[1], k[2], ia, ib, pa, pb) for k, (ia, pa), (ib, pb) in both if pa != pb)
    flips.sort(key=lambda f: f[3])
    return pairing.Pairing(
        len(both),
        sum(pa and not pb for _, (_, pa), (_, pb) in both),
        sum(pb and not pa for _, (_, pa), (_, pb) in both),
        flips[:limit],
    )


def test_any_pair_equals_the_pairing_by_hand(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = _three(client)
    with session_scope(client.app.state.sessions) as s:  # type: ignore[attr-defined]
        # a and b share trials 3..19 but 7 and 9 (8 faulted in both: paired): 15 pairs; a passes
        # when t % 3, b when t is even: 5 passed only in a, 3 only in b
        got = pairing.joined(s, a, b, 200)
        assert (got.shared, got.only_a, got.only_b, len(got.flipped)) == (15, 5, 3, 8)
        assert [(f[1], f[5], f[6]) for f in got.flipped] == [
            (5, True, False),
            (6, False, True),
            (11, True, False),
            (12, False, True),
            (13, True, False),
            (17, True, False),
            (18, False, True),
            (19, True, False),
        ]
        for walk in (1, 10**9):  # the flips found walking A in id order, and among every pair
            monkeypatch.setattr(pairing, "WALK", walk)
            for x, y in ((a, b), (b, a), (a, c), (c, a), (b, c), (a, a)):
                for limit in (0, 1, 3, 200):
                    assert pairing.joined(s, x, y, limit) == by_hand(s, x, y, limit), (walk, x, y, limit)
        kept = {(p.a_id, p.b_id) for p in s.scalars(select(RunPairing))}
        assert kept == {(a, b), (b, a), (b, c), (c, b)}  # (a, c): no pairing kept, read from the index


def test_the_pages_read_the_same_with_and_without_the_kept_pairing(client: TestClient, db_url: str) -> None:
    a, b, c = _three(client)
    api = {(x, y): client.get("/api/compare", params={"a": x, "b": y}).json() for x, y in ((a, b), (b, c), (a, c))}
    html = client.get(f"/compare?a={a}&b={b}", headers={"accept": "text/html"}).text
    with session_scope(client.app.state.sessions) as s:  # type: ignore[attr-defined]
        s.execute(delete(RunPairing))
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as fresh:  # its caches empty
        assert {k: fresh.get("/api/compare", params={"a": k[0], "b": k[1]}).json() for k in api} == api
        assert fresh.get(f"/compare?a={a}&b={b}", headers={"accept": "text/html"}).text == html


def test_sqlite_reads_both_runs_from_the_compare_index(client: TestClient) -> None:
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with session_scope(sessions) as s:
        if s.get_bind().dialect.name != "sqlite":
            pytest.skip("SQLite's plan (PostgreSQL picks its join from its statistics)")

        def plan(sql: str, *, walk: bool) -> str:
            stmt = pairing._statement(sql, s, a_by_key=not walk)
            return "\n".join(
                str(r[-1]) for r in s.execute(text(f"EXPLAIN QUERY PLAN {stmt.text}"), {"a": 1, "b": 2, "n": 200})
            )

        counts = plan(pairing._COUNTS, walk=False)
        assert counts.count("COVERING INDEX ix_traj_run_key_passed") == 2 and "autoindex" not in counts, counts
        walk = plan(pairing._FLIPS, walk=True)  # A in id order, stopping at the limit; B from the index alone
        assert "ix_traj_run_order" in walk and "COVERING INDEX ix_traj_run_key_passed" in walk, walk
        assert "TEMP B-TREE" not in walk, walk
        every = plan(pairing._FLIPS, walk=False)
        assert every.count("COVERING INDEX ix_traj_run_key_passed") == 2, every
