"""The OTLP receiver's review fixes: resent requests, attributes a trace gets
wrong, malformed JSON shapes, and one trace that cannot be stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.otlp.landing import MAX_ATTEMPTS, TraceStore
from app.otlp.receiver import OtlpReceiver
from app.otlp.spans import BATCH_LINES, lines_batch, spans_from_json
from app.settings import Settings
from app.store.db import session_scope
from app.store.ingest import delete_run
from app.store.models import OtlpBatch
from app.web.app import create_app
from tests.otlp.test_otlp import SUITE, TRACE, body, span

OTHER = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture()
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as c:
        app: Any = c.app
        # a receiver that stores only when told to (no background timing in these tests)
        app.state.otlp = OtlpReceiver(app.state.sessions, app.state.scorers, settle=3600, idle=3600)
        yield c


def new_run(client: TestClient, name: str) -> int:
    r = client.post("/api/runs", json={"name": name, "suite": SUITE})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def app_state(client: TestClient) -> Any:
    app: Any = client.app
    return app.state


def receiver(client: TestClient) -> OtlpReceiver:
    app: Any = client.app
    return app.state.otlp  # type: ignore[no-any-return]


def records(client: TestClient, run_id: int) -> list[dict[str, Any]]:
    text = client.get(f"/api/runs/{run_id}/trajectories.jsonl").text
    return [json.loads(line) for line in text.splitlines()]


def staged(client: TestClient) -> int:
    """Export requests staged and not wholly stored."""
    with session_scope(receiver(client).sessions) as s:
        return int(s.scalar(select(func.count()).select_from(OtlpBatch)) or 0)


def attr(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


def test_a_resent_request_before_its_trace_is_stored_records_every_call_once(client: TestClient) -> None:
    run_id = new_run(client, "otlp")
    request = body(
        span(TRACE, "02", "01", 20, tool="buscar_cliente"),
        span(TRACE, "03", "01", 30, tool="ver_saldo"),
        span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c-1"}),
    )
    assert client.post("/v1/traces", json=request).status_code == 200
    assert client.post("/v1/traces", json=request).status_code == 200  # the exporter's retry, same spans
    status = client.get("/v1/traces/status").json()
    assert (status["buffered_spans"], status["duplicate_spans"]) == (3, 3)
    assert staged(client) == 1  # the resent request holds nothing new: unstaged at once
    assert receiver(client).store_ready(everything=True) == 1
    (record,) = records(client, run_id)
    assert [c["name"] for c in record["calls"]] == ["buscar_cliente", "ver_saldo"]
    status = client.get("/v1/traces/status").json()
    assert (status["stored_spans"], status["stored_traces"], status["buffered_spans"]) == (3, 1, 0)
    assert staged(client) == 0


def test_the_store_drops_repeats_inside_one_buffered_trace(client: TestClient) -> None:
    """Spans recovered from staging (or given back after a failure) may repeat one another."""
    run_id = new_run(client, "otlp")
    lines, spans = lines_batch(
        spans_from_json(body(span(TRACE, "02", "01", 20, tool="ver_saldo"), span(TRACE, "01", "", 10)))
    )
    r = receiver(client)
    r.accept(run_id, BATCH_LINES, lines, spans)
    (pending,) = r.buffer.pending.values()
    pending.spans.append(spans[0])  # as if merged from a batch given back
    r.buffer.buffered += 1
    assert r.store_ready(everything=True) == 1
    (record,) = records(client, run_id)
    assert [c["name"] for c in record["calls"]] == ["ver_saldo"]
    assert r.buffered_spans == 0


def test_attributes_a_trace_gets_wrong_are_ignored_and_the_trace_stored(client: TestClient) -> None:
    run_id = new_run(client, "otlp")
    bad = [
        ("x", {"stringValue": "x"}, {"stringValue": "lots"}),
        ("-3", {"intValue": "-3"}, {"boolValue": True}),
        ("1.5", {"doubleValue": 1.5}, {"stringValue": "0.5"}),
    ]
    for n, (_, trial, reward) in enumerate(bad):
        trace = f"{n + 1:032x}"
        root = span(trace, "01", "", 10)
        root["attributes"] = [
            attr("toollens.case_id", {"stringValue": f"case-{n}"}),
            attr("toollens.trial", trial),
            attr("toollens.reward", reward),
        ]
        assert (
            client.post("/v1/traces", json=body(root, span(trace, "02", "01", 20, tool="ver_saldo"))).status_code == 200
        )
    assert receiver(client).store_ready(everything=True) == 3
    got = sorted((r["case_id"], r["trial"], r.get("reward")) for r in records(client, run_id))
    assert got == [("case-0", 0, None), ("case-1", 0, None), ("case-2", 0, None)]
    status = client.get("/v1/traces/status").json()
    assert (status["repaired_traces"], status["rejected_traces"], status["stored_traces"]) == (3, 0, 3)


def test_a_trace_over_the_call_limit_is_refused_before_it_is_acknowledged(client: TestClient) -> None:
    """5,001 tool spans in one trace: refused whole (413), nothing staged; 5,000 are stored whole
    (the receiver cut the 5,001st after acknowledging it, before)."""
    run_id = new_run(client, "otlp")
    tools = [span(TRACE, f"{i + 2:x}", "01", 20 + i, tool="ver_saldo") for i in range(5001)]
    r = client.post("/v1/traces", json=body(span(TRACE, "01", "", 10), *tools))
    assert r.status_code == 413 and "5001 tool calls, more than the 5000 one trajectory holds" in r.json()["error"]
    assert staged(client) == 0 and receiver(client).buffered_spans == 0
    assert client.post("/v1/traces", json=body(span(TRACE, "01", "", 10), *tools[:5000])).status_code == 200
    assert receiver(client).store_ready(everything=True) == 1
    (record,) = records(client, run_id)
    assert (len(record["calls"]), record.get("stopped")) == (5000, None)
    assert staged(client) == 0


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"resourceSpans": ["x"]}, "resourceSpans[0]: expected an object"),
        ({"resourceSpans": [{"scopeSpans": ["y"]}]}, "resourceSpans[0].scopeSpans[0]: expected an object"),
        ({"resourceSpans": "x"}, "resourceSpans: expected a list"),
        (
            body({"traceId": TRACE, "spanId": "01", "status": "bad"}),
            "resourceSpans[0].scopeSpans[0].spans[0].status: expected an object",
        ),
        (
            body({"traceId": TRACE, "spanId": "01", "attributes": [{"key": "k", "value": {"arrayValue": [1]}}]}),
            "resourceSpans[0].scopeSpans[0].spans[0].attributes[0].value.arrayValue: expected an object",
        ),
        (
            body({"traceId": TRACE, "spanId": "01", "startTimeUnixNano": "soon"}),
            "spans[0].startTimeUnixNano: not an integer",
        ),
    ],
)
def test_malformed_json_shapes_answer_400_naming_the_place(client: TestClient, payload: Any, where: str) -> None:
    new_run(client, "otlp")
    r = client.post("/v1/traces", json=payload)
    assert r.status_code == 400, r.text
    assert "not an OTLP trace export" in r.json()["error"] and where in r.json()["error"]


def test_an_empty_export_is_accepted_and_stores_nothing(client: TestClient) -> None:
    run_id = new_run(client, "otlp")
    r = client.post("/v1/traces", json={})
    assert (r.status_code, r.json()) == (200, {})
    assert client.get("/v1/traces/status").json()["accepted_spans"] == 0
    assert records(client, run_id) == []


def test_a_deleted_run_does_not_block_the_other_runs(client: TestClient) -> None:
    gone, kept = new_run(client, "gone"), new_run(client, "kept")
    assert (
        client.post(
            "/v1/traces?run=gone", json=body(span(TRACE, "01", "", 10), span(TRACE, "02", "01", 20, tool="ver_saldo"))
        ).status_code
        == 200
    )
    assert (
        client.post(
            "/v1/traces?run=kept",
            json=body(span(OTHER, "01", "", 10), span(OTHER, "02", "01", 20, tool="buscar_cliente")),
        ).status_code
        == 200
    )
    r = receiver(client)
    with session_scope(r.sessions, write=True) as s:
        delete_run(s, gone)
    assert r.store_ready(everything=True) == 1
    assert [[c["name"] for c in x["calls"]] for x in records(client, kept)] == [["buscar_cliente"]]
    status = client.get("/v1/traces/status").json()
    assert (status["rejected_traces"], status["stored_traces"], status["buffered_spans"]) == (1, 1, 0)
    assert staged(client) == 0
    assert r.store_ready(everything=True) == 0  # nothing given back to retry forever


def test_a_trace_that_keeps_failing_is_rejected_after_n_attempts(client: TestClient) -> None:
    run_id = new_run(client, "otlp")
    r = receiver(client)

    class Poisoned(TraceStore):
        """A store that cannot store the trace of case ``poison`` (the database reachable)."""

        def add(self, run_id: int, trajectories: list[Any], traces: Any, release: Any) -> bool:
            if any(t.case_id == "poison" for t in trajectories):
                raise RuntimeError("cannot store this one")
            return super().add(run_id, trajectories, traces, release)

    r.lander.store = Poisoned(r.sessions, app_state(client).scorers)
    assert (
        client.post(
            "/v1/traces",
            json=body(
                span(TRACE, "01", "", 10, attrs={"toollens.case_id": "poison"}),
                span(OTHER, "01", "", 10, attrs={"toollens.case_id": "good"}),
                span(OTHER, "02", "01", 20, tool="ver_saldo"),
            ),
        ).status_code
        == 200
    )
    assert r.store_ready(everything=True) == 1  # the good trace is not held up by the poisoned one
    assert [x["case_id"] for x in records(client, run_id)] == ["good"]
    for _ in range(MAX_ATTEMPTS - 1):
        assert client.get("/v1/traces/status").json()["buffered_spans"] == 1
        assert r.store_ready(everything=True) == 0
    status = client.get("/v1/traces/status").json()
    assert (status["rejected_traces"], status["retried_traces"], status["buffered_spans"]) == (1, MAX_ATTEMPTS - 1, 0)
    assert staged(client) == 0


def test_while_the_database_is_away_nothing_counts_as_an_attempt(client: TestClient) -> None:
    from sqlalchemy.exc import OperationalError

    run_id = new_run(client, "otlp")
    r = receiver(client)
    real = r.lander.store

    class Away(TraceStore):
        """A store whose database is away."""

        def add(self, run_id: int, trajectories: list[Any], traces: Any, release: Any) -> bool:
            raise OperationalError("INSERT", {}, Exception("connection refused"))

        def reachable(self) -> bool:
            return False

    r.lander.store = Away(r.sessions, app_state(client).scorers)
    assert client.post("/v1/traces", json=body(span(TRACE, "01", "", 10), span(OTHER, "01", "", 10))).status_code == 200
    for _ in range(MAX_ATTEMPTS + 1):
        assert r.store_ready(everything=True) == 0
    status = client.get("/v1/traces/status").json()
    assert (status["buffered_spans"], status["rejected_traces"], status["retried_traces"]) == (2, 0, 0)
    assert all(p.attempts == 0 for p in r.buffer.pending.values())
    r.lander.store = real  # the database is back
    assert r.store_ready(everything=True) == 2
    assert len(records(client, run_id)) == 2 and staged(client) == 0


# -- staging by request (one row per export request, traces marked done in it) ------------------

LATE = "11111111111111111111111111111111"


def fresh_receiver(db_url: str, **timing: float) -> OtlpReceiver:
    """A receiver of its own (in-process scoring), storing only when told to: as in another process."""
    from app.store.db import make_engine, make_sessionmaker
    from app.web.state import ScorerCache

    r = OtlpReceiver(make_sessionmaker(make_engine(db_url)), ScorerCache(), worker=False, **timing, background=False)
    return r


def send(r: OtlpReceiver, run_id: int, *spans: dict[str, Any]) -> bool:
    lines, refs = lines_batch(spans_from_json(body(*spans)))
    return r.accept(run_id, BATCH_LINES, lines, refs)


def staged_rows(r: OtlpReceiver) -> tuple[list[int], list[tuple[int, str]]]:
    from app.store.models import OtlpBatchDone

    with session_scope(r.sessions) as s:
        return (
            list(s.scalars(select(OtlpBatch.id).order_by(OtlpBatch.id))),
            [(int(b), str(t)) for b, t in s.execute(select(OtlpBatchDone.batch_id, OtlpBatchDone.trace_id))],
        )


def test_a_span_resent_beside_another_trace_is_not_stored_again_after_a_crash(client: TestClient, db_url: str) -> None:
    """The second request repeats a span of T and brings a trace still waiting for its root:
    storing T must mark it done in that request too, or a restart would store T a second time."""
    run_id = new_run(client, "otlp")
    r = fresh_receiver(db_url, settle=0, idle=3600)
    assert send(r, run_id, span(TRACE, "02", "01", 20, tool="ver_saldo"))
    assert send(
        r, run_id, span(TRACE, "02", "01", 20, tool="ver_saldo"), span(LATE, "02", "01", 20, tool="buscar_cliente")
    )
    assert send(r, run_id, span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c"}))
    assert r.store_ready() == 1  # T; the other waits for its root
    batches, done = staged_rows(r)
    assert len(batches) == 1 and done == [(batches[0], TRACE)]  # the first and third requests are gone
    r.die()
    restarted = fresh_receiver(db_url)  # the process died; the next one recovers what is left
    assert restarted.recover() == 1 and restarted.store_ready(everything=True) == 1
    assert sorted((x["case_id"], x["trial"], [c["name"] for c in x["calls"]]) for x in records(client, run_id)) == [
        (LATE, 0, ["buscar_cliente"]),
        ("c", 0, ["ver_saldo"]),
    ]
    assert staged_rows(restarted) == ([], [])


def test_a_round_that_fails_midway_gives_back_only_what_it_did_not_store(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a's trace is stored, then the database fails on run b's chunk: only run b's trace
    goes back to the buffer, and the next round stores it (nothing marked twice, no count drift)."""
    from sqlalchemy.exc import OperationalError

    a, b = new_run(client, "a"), new_run(client, "b")
    r = fresh_receiver(db_url, settle=0, idle=3600)
    assert send(
        r,
        a,
        span(TRACE, "01", "", 10),
        span(TRACE, "02", "01", 20, tool="ver_saldo"),
        span(LATE, "02", "01", 20, tool="ver_saldo"),
    )  # with a trace that waits: the request stays staged
    assert send(r, b, span(OTHER, "01", "", 10), span(OTHER, "02", "01", 20, tool="ver_saldo"))
    real, calls = r.lander.items, []

    def items(chunk: Any) -> Any:
        calls.append(len(chunk))
        if len(calls) == 2:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        return real(chunk)

    monkeypatch.setattr(r.lander, "items", items)
    with pytest.raises(OperationalError):
        r.store_ready()
    monkeypatch.setattr(r.lander, "items", real)
    assert r.store_ready() == 1 and r.store_ready() == 0
    assert [len(records(client, run)) for run in (a, b)] == [1, 1]
    assert (r.stats.stored_traces, r.stats.duplicate_spans, r.buffered_spans) == (2, 0, 1)  # the waiting span


def test_a_deleted_run_whose_request_also_held_a_waiting_trace_blocks_nothing(client: TestClient, db_url: str) -> None:
    """A stored trace resent with a trace that waits, then the run deleted (its staged requests go
    with it): releasing the resent trace marks nothing, and the other run's trace is stored."""
    gone, kept = new_run(client, "gone"), new_run(client, "kept")
    r = fresh_receiver(db_url, settle=0, idle=3600)
    assert send(r, gone, span(TRACE, "01", "", 10), span(TRACE, "02", "01", 20, tool="ver_saldo"))
    assert r.store_ready() == 1
    assert send(
        r,
        gone,
        span(TRACE, "01", "", 10),
        span(TRACE, "02", "01", 20, tool="ver_saldo"),
        span(LATE, "02", "01", 20, tool="ver_saldo"),
    )
    assert send(r, kept, span(OTHER, "01", "", 10), span(OTHER, "02", "01", 20, tool="buscar_cliente"))
    with session_scope(r.sessions, write=True) as s:
        delete_run(s, gone)
    assert r.store_ready() == 1 and r.store_ready() == 0
    assert [[c["name"] for c in x["calls"]] for x in records(client, kept)] == [["buscar_cliente"]]
    assert staged_rows(r) == ([], []) and r.stats.duplicate_spans == 2


def test_a_request_staged_while_its_batch_id_is_freed_is_not_lost(client: TestClient, db_url: str) -> None:
    """A request comes in between the commit that deletes a staged request and the bookkeeping
    after it, with a late span of the same trace: it gets a new id (ids are never reused), and
    the bookkeeping of the old one does not touch it."""
    run_id = new_run(client, "otlp")
    r = fresh_receiver(db_url, settle=0, idle=3600)
    assert send(r, run_id, span(TRACE, "01", "", 10), span(TRACE, "02", "01", 20, tool="ver_saldo"))
    (first,), _ = staged_rows(r)
    real = r.lander.store

    class LateRequest(TraceStore):
        """A store after whose commit, before the bookkeeping, a late request of the trace comes."""

        def add(self, run_id: int, trajectories: list[Any], traces: Any, release: Any) -> bool:
            def then_a_late_request(session: Any) -> Any:
                committed = release(session)

                def late_request_then_committed() -> None:
                    import threading

                    t = threading.Thread(
                        target=send, args=(r, run_id, span(TRACE, "03", "01", 30, tool="buscar_cliente"))
                    )
                    t.start()
                    t.join()
                    committed()

                return late_request_then_committed

            return super().add(run_id, trajectories, traces, then_a_late_request)

    r.lander.store = LateRequest(r.sessions, real.scorers)
    assert r.store_ready() == 1
    r.lander.store = real
    (second,), _ = staged_rows(r)
    assert second > first and list(r.buffer.batches) == [second]
    assert r.store_ready(everything=True) == 1 and r.stats.rejected_traces == 0
    assert sorted([c["name"] for c in x["calls"]] for x in records(client, run_id)) == [
        ["buscar_cliente"],
        ["ver_saldo"],
    ]
