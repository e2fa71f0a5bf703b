"""A finished run keeps what comparing it needs beyond its counters (``run_aggregates``), and a
comparison served from it equals the one read from every trajectory, on both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from app.settings import Settings
from app.store import backfill, ingest
from app.store import compare as comparing
from app.store.db import session_scope
from app.store.models import RunAggregate, RunPairing
from app.web.app import create_app
from tests.store.test_usage_store import CLIENTE, FAILING, NO_USAGE, PASSING, store

# B: the passing trajectory again with other usage, and the failing one passing now
B_PASSING = {
    **PASSING,
    "model_calls": [
        {"model": "gpt-4o", "input_tokens": 3000, "output_tokens": 40, "cached_tokens": 1000, "latency_ms": 450.0}
    ],
    "calls": [{**PASSING["calls"][0], "latency_ms": 60.0}, {**PASSING["calls"][1], "latency_ms": 20.0}],
}
B_FIXED = {**PASSING, "trial": 1, "model_calls": [{"model": "my-llama", "input_tokens": 2000, "latency_ms": 700.0}]}
# trial 2 passed in A, fails in B: it calls a tool the toolset does not have
B_WRONG = {
    **NO_USAGE,
    "calls": [CLIENTE, {"name": "cancelar_pedido", "arguments": {}, "observation": "ok", "error": None}],
}


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        yield c


def _runs(client: TestClient) -> tuple[int, int]:
    a = store(client, "a", PASSING, FAILING, NO_USAGE)
    b = store(client, "b", B_PASSING, B_FIXED, FAILING, B_WRONG)
    for rid in (a, b):
        assert client.post(f"/api/runs/{rid}/finish").status_code == 200
    return a, b


def test_finishing_keeps_the_usage_before_prices(client: TestClient) -> None:
    a, _ = _runs(client)
    with session_scope(client.app.state.sessions) as s:  # type: ignore[attr-defined]
        row = s.get(RunAggregate, a)
        assert row is not None and row.trajectories == 3
        kept = dict(row.usage)
    # tokens: 1000+500 + 1500+20 (PASSING) + 4000+100 (FAILING); two trajectories reported them
    assert kept["total_tokens"] == 7120 and kept["trajectories_with_usage"] == 2
    assert kept["model_latency_ms"] == {"p50": 900.0, "p95": 1500.0}
    assert kept["tool_latency_ms"] == {"p50": 80.0, "p95": 251.0}
    # per model, requests that split their tokens: fresh input (cached ones apart), cached input, output
    assert sorted(kept["spent"]) == [
        ["gpt-4o", 1500, 0, 20],
        ["gpt-4o-2024-08-06", 800, 200, 500],
        ["my-llama", 4000, 0, 100],
    ]


def test_kept_comparison_equals_the_one_read_from_every_trajectory(client: TestClient) -> None:
    a, b = _runs(client)
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with session_scope(sessions) as s:
        # finishing B paired it with A (finished before it, same suite), both ways
        kept = {
            (p.a_id, p.b_id): (p.a_trajectories, p.b_trajectories, p.shared, p.only_a, p.only_b, len(p.flipped))
            for p in s.scalars(select(RunPairing))
        }
        fast = comparing.compare_runs(s, a, b)
        back = comparing.compare_runs(s, b, a)
    # shared: trials 0 and 2 without a fault, trial 1 with the timeout; trial 2 passed only in A
    assert kept == {(a, b): (3, 4, 3, 1, 0, 1), (b, a): (4, 3, 3, 0, 1, 1)}
    assert (fast.shared_cases, fast.mcnemar.passed_only_a, fast.mcnemar.passed_only_b) == (3, 1, 0)
    assert [(f.case_id, f.trial, f.a_passed, f.b_passed) for f in fast.flipped] == [("saldo-001", 2, True, False)]
    assert [(f.trial, f.a_passed, f.b_passed) for f in back.flipped] == [(2, False, True)]
    with session_scope(sessions) as s:
        s.execute(delete(RunAggregate))
        s.execute(delete(RunPairing))
    with session_scope(sessions) as s:
        slow, slow_back = comparing.compare_runs(s, a, b), comparing.compare_runs(s, b, a)
    assert fast.model_dump() == slow.model_dump() and back.model_dump() == slow_back.model_dump()
    usage = {d.key: (d.a, d.b) for d in fast.usage}
    # A: 0.0112 USD over 3 trajectories; B: (2000 * 2.50 + 1000 * 1.25 + 40 * 10) / 10^6 = 0.00665 over 4
    assert usage["cost_per_trajectory"] == pytest.approx((0.0112 / 3, 0.00665 / 4))
    assert usage["tokens_per_trajectory"] == pytest.approx((3560.0, 9140 / 3))  # 7120 / 2; (3040 + 2000 + 4100) / 3
    assert usage["model_latency_p50"] == (900.0, 700.0)  # B: 450, 700, 1500: rank 2
    # B: 20, 40.5 (B_FIXED keeps PASSING's calls), 60, 80, 120, 251: ranks 3 and 6
    assert (usage["tool_latency_p50"], usage["tool_latency_p95"]) == ((80.0, 60.0), (251.0, 251.0))


def test_stale_aggregates_are_not_used(client: TestClient) -> None:
    a, b = _runs(client)
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with session_scope(sessions) as s:  # as if computed when A held 2 trajectories, with other tokens
        s.execute(update(RunAggregate).where(RunAggregate.run_id == a).values(trajectories=2))
    with session_scope(sessions) as s:
        usage = {d.key: (d.a, d.b) for d in comparing.compare_runs(s, a, b).usage}
        assert s.scalar(select(RunAggregate.trajectories).where(RunAggregate.run_id == a)) == 2
    assert usage["tokens_per_trajectory"] == pytest.approx((3560.0, 9140 / 3))


def test_a_deleted_run_takes_its_aggregates(client: TestClient) -> None:
    a, b = _runs(client)
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    with session_scope(sessions) as s:
        ingest.delete_run(s, a)
    with session_scope(sessions) as s:
        assert s.scalars(select(RunAggregate.run_id)).all() == [b]
        assert s.scalars(select(RunPairing.a_id)).all() == []


def test_a_run_finished_before_aggregates_were_kept_gets_them_from_the_backfill(client: TestClient) -> None:
    """Pages never write them (a comparison without them reads the trajectories, and stores nothing);
    ``toollens db backfill`` keeps the same rows finishing the runs kept, and only once."""
    a, b = _runs(client)
    sessions = client.app.state.sessions  # type: ignore[attr-defined]

    def rows() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
        with session_scope(sessions) as s:
            return (
                [
                    (r.run_id, r.trajectories, r.usage)
                    for r in s.scalars(select(RunAggregate).order_by(RunAggregate.run_id))
                ],
                [
                    (p.a_id, p.b_id, p.a_trajectories, p.b_trajectories, p.shared, p.only_a, p.only_b, p.flipped)
                    for p in s.scalars(select(RunPairing).order_by(RunPairing.a_id, RunPairing.b_id))
                ],
            )

    at_finish = rows()
    with session_scope(sessions) as s:
        s.execute(delete(RunAggregate))
        s.execute(delete(RunPairing))
    assert client.get("/api/compare", params={"a": a, "b": b}).status_code == 200
    assert client.get(f"/compare?a={a}&b={b}", headers={"accept": "text/html"}).status_code == 200
    assert rows() == ([], [])  # read: nothing kept
    done = backfill.backfill(sessions)
    assert [(d.run_id, d.causes, d.aggregates, d.paired_with) for d in done] == [(a, 0, True, None), (b, 0, True, a)]
    assert rows() == at_finish
    assert [(d.aggregates, d.paired_with) for d in backfill.backfill(sessions)] == [(False, None), (False, None)]


def test_runs_without_profiles_read_none_of_their_trajectories_for_the_cooperation_gap(client: TestClient) -> None:
    """The cooperation gap pairs the conversations of each simulated-user profile; a run without any
    (no profile counters) has none to pair, and its trajectories are not read for it (they were: every
    trajectory of both runs, 2.4 s a run of 384,000 on SQLite, on every first view of a comparison)."""
    from sqlalchemy import event

    from app.store.profiles import run_gap

    a, b = _runs(client)
    engine = client.app.state.engine  # type: ignore[attr-defined]
    seen: list[str] = []

    def note(conn: object, cursor: object, statement: str, *rest: object) -> None:
        seen.append(" ".join(statement.split()))

    with session_scope(client.app.state.sessions) as s:  # type: ignore[attr-defined]
        event.listen(engine, "before_cursor_execute", note)
        try:
            assert run_gap(s, a) is None and run_gap(s, b) is None
        finally:
            event.remove(engine, "before_cursor_execute", note)
    assert seen and not [q for q in seen if "FROM trajectories" in q], seen


def _request(model: str | None, n_in: int | None, n_out: int | None, **more: object) -> dict[str, object]:
    return {
        k: v for k, v in {"model": model, "input_tokens": n_in, "output_tokens": n_out, **more}.items() if v is not None
    }


# every branch of the usage figures: four priced models first met in another order in each run (the cost is
# summed in that order), a request without a model, cached tokens past the input, counts without the split,
# requests without a latency, a trajectory without requests, tied tool latencies
A_RECORDS = [
    {
        **PASSING,
        "model_calls": [
            _request("o3", 1200, 30, cached_tokens=1500, latency_ms=310.5),
            _request("gpt-4o", 999, 7, latency_ms=120.25),
            _request(None, 50, None, latency_ms=15.0),
            _request(None, None, None, total_tokens=777, latency_ms=80.0),
        ],
    },
    {
        **FAILING,
        "model_calls": [
            _request("claude-3-5-haiku", 3333, 111, cached_tokens=1000),
            _request("gpt-4.1-nano", 123456, 654, latency_ms=2000.0),
            _request("gpt-4o", None, None),
        ],
    },
    NO_USAGE,
]
B_RECORDS = [
    {**PASSING, "model_calls": [_request("gpt-4.1-nano", 10, 1, latency_ms=1.5), _request("o3", 7, 7)]},
    {**FAILING, "model_calls": [_request("claude-3-5-haiku", 400, 40, latency_ms=310.5)]},
    {**B_FIXED, "model_calls": [_request("gpt-4o", 5, None, cached_tokens=2, latency_ms=9.0)]},
    {**NO_USAGE, "calls": [{**CLIENTE, "latency_ms": 120.0}, {**CLIENTE, "latency_ms": 120.0}]},
]


def test_a_comparison_without_kept_rows_shows_what_the_kept_rows_show(client: TestClient) -> None:
    """Runs finished before aggregates were kept (and not backfilled) are read without a tally
    (``aggregates.read_unpriced``, nothing written): the compare page and ``/api/compare`` are the same
    bytes as with the kept rows, both ways, and so are the figures read against the tally's."""
    from app.core.prices import current_prices
    from app.core.usage import unpriced
    from app.store.aggregates import read_unpriced
    from app.store.queries import usage_so_far

    a, b = store(client, "a", *A_RECORDS), store(client, "b", *B_RECORDS)
    for rid in (a, b):
        assert client.post(f"/api/runs/{rid}/finish").status_code == 200
    sessions = client.app.state.sessions  # type: ignore[attr-defined]
    paths = [f"/compare?a={a}&b={b}", f"/compare?a={b}&b={a}", f"/api/compare?a={a}&b={b}", f"/api/compare?a={b}&b={a}"]

    def bodies() -> list[bytes]:
        client.app.state.comparisons = type(client.app.state.comparisons)()  # type: ignore[attr-defined]
        got = [client.get(p, headers={"accept": "text/html"}) for p in paths]
        assert [r.status_code for r in got] == [200] * 4
        return [r.content for r in got]

    kept = bodies()
    with session_scope(sessions) as s:
        held = {rid: dict(row.usage) for rid, row in ((r, s.get(RunAggregate, r)) for r in (a, b)) if row}
        read = {rid: read_unpriced(s, rid) for rid in (a, b)}
        assert "yield_per" not in s.connection().get_execution_options()  # its batches are its statement's only
        tallied = {rid: unpriced(usage_so_far(s, rid).tally) for rid in (a, b)}
    assert held == read == tallied
    assert [m for m, *_ in read[a]["spent"]] == ["o3", "gpt-4o", None, "claude-3-5-haiku", "gpt-4.1-nano"]
    assert read[a]["total_tokens"] == 1230 + 1006 + 50 + 777 + 3444 + 124110
    assert read[a]["model_latency_ms"] == {"p50": 120.25, "p95": 2000.0}
    assert read[b]["tool_latency_ms"] == {"p50": 120.0, "p95": 251.0}  # 40.5 40.5 80 120 120 120 120 251: ranks 4, 8
    with session_scope(sessions) as s:
        s.execute(delete(RunAggregate))
        s.execute(delete(RunPairing))
    unkept = bodies()
    assert unkept == kept
    usage = json.loads(kept[2])["usage"]
    assert {d["key"] for d in usage} >= {"cost_per_trajectory", "model_latency_p95", "tool_latency_p50"}
    with session_scope(sessions) as s:  # read: nothing written
        assert s.scalars(select(RunAggregate.run_id)).all() == []
    assert current_prices() is not None
