"""The comparison cache (``app.web.state.ComparisonCache``), on both databases: a cached view reads one
statement (the runs' stamps: no figure, no pass^k computed), and is never stale: a batch stored into
either run, or a run deleted and its id used again, makes a new key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from app.settings import Settings
from app.store import ingest
from app.store.db import session_scope
from app.web.app import create_app
from tests.store.test_usage_store import FAILING, NO_USAGE, PASSING, store


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield c


def _statements(client: TestClient, path: str) -> list[str]:
    engine = client.app.state.engine  # type: ignore[attr-defined]
    seen: list[str] = []

    def note(conn: object, cursor: object, statement: str, *rest: object) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", note)
    try:
        assert client.get(path).status_code == 200
    finally:
        event.remove(engine, "before_cursor_execute", note)
    return seen


def test_a_cached_comparison_reads_the_runs_stamps_alone(client: TestClient) -> None:
    a, b = store(client, "a", PASSING, FAILING), store(client, "b", PASSING, NO_USAGE)
    first = _statements(client, f"/api/compare?a={a}&b={b}")
    again = _statements(client, f"/api/compare?a={a}&b={b}")
    # the first view reads the runs, their counters and the rest; a cached one one statement (it read the
    # runs and suites, then the counters of both runs three times each: families, usage, pass^k tallies)
    reads = [q for q in again if q.startswith("SELECT")]
    assert len([q for q in first if q.startswith("SELECT")]) > 10
    assert len(reads) == 1 and "FROM runs" in reads[0] and "run_counters.kind" in reads[0], again


def test_a_batch_stored_into_either_run_makes_a_new_key(client: TestClient) -> None:
    a, b = store(client, "a", PASSING, FAILING), store(client, "b", PASSING, NO_USAGE)
    path = f"/api/compare?a={a}&b={b}"
    before = client.get(path).json()
    assert (before["a"]["trajectories"], before["b"]["trajectories"], before["shared_cases"]) == (2, 2, 1)
    assert client.get(path).json() == before  # cached
    added = client.post(f"/api/runs/{b}/trajectories", json={"trajectories": [{**FAILING, "trial": 1}]})
    assert added.status_code == 200, added.text
    after_b = client.get(path).json()
    assert (after_b["b"]["trajectories"], after_b["shared_cases"]) == (3, 2)
    added = client.post(f"/api/runs/{a}/trajectories", json={"trajectories": [{**NO_USAGE}]})
    assert added.status_code == 200, added.text
    after_a = client.get(path).json()
    assert (after_a["a"]["trajectories"], after_a["shared_cases"]) == (3, 3)


def test_a_run_deleted_and_its_id_used_again_is_another_run(client: TestClient) -> None:
    a, b = store(client, "a", PASSING, FAILING), store(client, "b", PASSING, NO_USAGE)
    path = f"/api/compare?a={a}&b={b}"
    assert client.get(path).json()["b"]["name"] == "b"
    with session_scope(client.app.state.sessions, write=True) as s:  # type: ignore[attr-defined]
        ingest.delete_run(s, b)
    again = store(client, "b2", PASSING, {**FAILING, "trial": 2})  # as many trajectories as the deleted one
    r = client.get(path)
    if again == b:  # SQLite gives the last id again
        assert (r.json()["b"]["name"], r.json()["shared_cases"]) == ("b2", 1)
    else:
        assert r.status_code == 404


def test_an_unknown_run_is_a_404(client: TestClient) -> None:
    a = store(client, "a", PASSING)
    r = client.get(f"/api/compare?a={a}&b=99")
    assert r.status_code == 404 and "no run 99" in r.text
