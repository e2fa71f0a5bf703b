"""The live OTLP receiver: spans sent by the real OpenTelemetry SDK exporter
(OTLP/HTTP protobuf) to the app served by uvicorn on a loopback port, and
OTLP/JSON bodies split over several requests; SQLite and PostgreSQL."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.otlp.receiver import OtlpReceiver
from app.settings import Settings
from app.web.app import create_app
from tests.servers import serve_in_thread

TOOLS = [
    {
        "name": "buscar_cliente",
        "description": "Busca un cliente por RUT.",
        "parameters": {
            "type": "object",
            "properties": {"rut": {"type": "string"}},
            "required": ["rut"],
            "additionalProperties": False,
        },
    },
    {
        "name": "ver_saldo",
        "description": "Saldo por id interno.",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
]
SUITE = {"name": "prod", "toolset": {"name": "banca", "tools": TOOLS}, "cases": []}

CONVERSATION = [
    {"role": "user", "content": "¿Cuál es el saldo del RUT 12345678-9?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "1",
                "type": "function",
                "function": {"name": "buscar_cliente", "arguments": '{"rut": "12345678-9"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "1", "content": '{"id": 8812}'},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "2", "type": "function", "function": {"name": "ver_saldo", "arguments": '{"id": "8812"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "2", "content": "Error: id must be an integer"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "3", "type": "function", "function": {"name": "ver_saldo", "arguments": '{"id": 8812}'}},
            {"id": "4", "type": "function", "function": {"name": "cancelar_pedido", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "3", "content": '{"saldo": 142900}'},
    {"role": "tool", "tool_call_id": "4", "content": "ok"},
    {"role": "assistant", "content": "Tu saldo es $142.900"},
]


@pytest.fixture()
def served(db_url: str) -> Iterator[tuple[str, Any]]:
    """The app under uvicorn in a thread, on a free loopback port."""
    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    with serve_in_thread(app) as url:
        yield url, app


def new_run(base: str, name: str) -> int:
    r = httpx.post(f"{base}/api/runs", json={"name": name, "suite": SUITE})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def wait_stored(base: str, spans: int, timeout: float = 20) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        status = httpx.get(f"{base}/v1/traces/status").json()
        if status["stored_spans"] >= spans or time.monotonic() > deadline:
            return dict(status)
        time.sleep(0.05)


def exported(base: str, run_id: int) -> list[dict[str, Any]]:
    text = httpx.get(f"{base}/api/runs/{run_id}/trajectories.jsonl").text
    return [json.loads(line) for line in text.splitlines()]


def sdk_provider(endpoint: str, **batch: Any) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10), **batch))
    return provider


def test_sdk_exporter_spans_arrive_as_a_trajectory(served: tuple[str, Any]) -> None:
    from app.importers.otel_replay import replay_openai_messages

    base, _app = served
    run_id = new_run(base, "prod")
    # small export batches: the trace's spans come in several requests, the root last
    provider = sdk_provider(f"{base}/v1/traces?run=prod", max_export_batch_size=2, schedule_delay_millis=50)
    n = replay_openai_messages(provider.get_tracer("test"), CONVERSATION, attributes={"toollens.case_id": "saldo-001"})
    assert n == 1 + 4 + 4  # root, four chat spans, four tool spans
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert wait_stored(base, n)["stored_spans"] == n
    (record,) = exported(base, run_id)
    assert record["case_id"] == "saldo-001" and record["trial"] == 0
    assert record["question"] == "¿Cuál es el saldo del RUT 12345678-9?"
    assert record["answer"] == "Tu saldo es $142.900"
    assert [(c["name"], c["arguments"]) for c in record["calls"]] == [
        ("buscar_cliente", '{"rut": "12345678-9"}'),
        ("ver_saldo", '{"id": "8812"}'),
        ("ver_saldo", '{"id": 8812}'),
        ("cancelar_pedido", "{}"),
    ]
    assert [c["error"] for c in record["calls"]] == [
        None,
        {"kind": "error", "message": "Error: id must be an integer", "injected": False},
        None,
        None,
    ]
    assert record["calls"][2]["observation"] == '{"saldo": 142900}'
    figures = httpx.get(f"{base}/api/runs/{run_id}/figures").json()
    assert figures["hallucinated_tools"] == {"num": 1, "den": 4}  # cancelar_pedido
    assert figures["schema_validity"] == {"num": 2, "den": 3}  # "8812" for an integer
    assert figures["reactions"][0]["reaction"] == "retry_corrected"


def attr(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}}


def span(
    trace: str, sid: str, parent: str, start: int, tool: str = "", error: str = "", attrs: dict[str, Any] | None = None
) -> Any:
    a = [attr(k, v) for k, v in (attrs or {}).items()]
    if tool:
        a += [attr("gen_ai.operation.name", "execute_tool"), attr("gen_ai.tool.name", tool)]
    s = {
        "traceId": trace,
        "spanId": sid,
        "parentSpanId": parent,
        "name": tool or "agent",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1),
        "attributes": a,
    }
    if error:
        s["status"] = {"code": "STATUS_CODE_ERROR", "message": error}
    return s


def body(*spans: Any) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}


TRACE = "5b8efff798038103d269b633813fc60c"
OTHER = "0af7651916cd43dd8448eb211c80319c"


def test_json_batches_of_one_trace_make_one_trajectory(db_url: str) -> None:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
        first = body(
            span(
                TRACE,
                "02",
                "01",
                30,
                tool="ver_saldo",
                error="timeout",
                attrs={"gen_ai.tool.call.arguments": '{"id": 8812}'},
            )
        )
        assert client.post("/v1/traces", json=first).json() == {}  # default run: "otlp"
        second = body(
            span(
                TRACE,
                "03",
                "01",
                20,
                tool="buscar_cliente",
                attrs={"gen_ai.tool.call.arguments": '{"rut": "1-9"}', "gen_ai.tool.call.result": '{"id": 8812}'},
            ),
            span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c-7"}),
        )
        r = client.post(
            "/v1/traces",
            content=gzip.compress(json.dumps(second).encode()),
            headers={"content-type": "application/json", "content-encoding": "gzip", "x-toollens-run": "otlp"},
        )
        assert r.status_code == 200, r.text
        client.app.state.otlp.store_ready(everything=True)  # type: ignore[attr-defined]
        # the exporter retries a request it did not see answered: the same spans again are not stored twice
        assert client.post("/v1/traces", json=first).status_code == 200
        client.app.state.otlp.store_ready(everything=True)  # type: ignore[attr-defined]
        status = client.get("/v1/traces/status").json()
        assert (status["stored_spans"], status["duplicate_spans"], status["stored_traces"]) == (3, 1, 1)
        records = [json.loads(x) for x in client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()]
        assert client.post(f"/api/runs/{run_id}/finish").status_code == 200
        r = client.post("/v1/traces", json=first)  # a finished run: refused, not silently dropped
        assert r.status_code == 409 and "is finished" in r.json()["error"]
    assert [
        (r["case_id"], [(c["name"], c["error"]["message"] if c["error"] else None) for c in r["calls"]])
        for r in records
    ] == [("c-7", [("buscar_cliente", None), ("ver_saldo", "timeout")])]


def test_unknown_run_bad_body_and_shutdown_flush(db_url: str) -> None:
    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    with TestClient(app) as client:
        r = client.post("/v1/traces?run=nope", json=body(span(TRACE, "01", "", 1)))
        assert r.status_code == 404 and "create it first" in r.json()["error"]
        r = client.post("/v1/traces", content=b"\x00garbage", headers={"content-type": "application/x-protobuf"})
        assert r.status_code == 400 and "not an OTLP trace export" in r.json()["error"]
        r = client.post("/v1/traces", json={"resourceSpans": {}})
        assert r.status_code == 400 and "resourceSpans: expected a list" in r.json()["error"]
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
        # a trace whose root never arrives waits for the idle timeout ...
        rootless = body(span(TRACE, "02", "01", 5, tool="buscar_cliente"), span("", "03", "", 6))
        assert client.post("/v1/traces", json=rootless).status_code == 200
        status = client.get("/v1/traces/status").json()
        assert (status["buffered_spans"], status["rejected_spans"]) == (1, 1)  # a span without a trace id
    # ... and is stored when the app shuts down
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        records = client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()
    assert [json.loads(x)["calls"][0]["name"] for x in records] == ["buscar_cliente"]


def test_a_refused_request_stages_nothing(db_url: str) -> None:
    """The run is checked in the transaction that stages the request: a request for a
    missing or finished run, or one that finds the buffer full, leaves no staged batch."""
    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    with TestClient(app) as client:
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
        engine = app.state.sessions.kw["bind"]
        assert client.post("/v1/traces?run=nope", json=body(span(TRACE, "01", "", 1))).status_code == 404
        receiver = app.state.otlp = OtlpReceiver(
            app.state.sessions, app.state.scorers, settle=3600, max_spans=2, background=False
        )
        assert (
            client.post("/v1/traces", json=body(span(TRACE, "02", "", 1), span(TRACE, "03", "02", 2))).status_code
            == 200
        )
        assert len(_staged(engine)[0]) == 1
        full = client.post("/v1/traces", json=body(span("ab" * 16, "04", "", 3)))
        assert full.status_code == 503 and full.headers["retry-after"] == "1"
        assert len(_staged(engine)[0]) == 1 and receiver.stats.refused_requests == 1
        assert client.post("/v1/traces?run=nope", json=body(span("ef" * 16, "06", "", 5))).status_code == 404
        receiver.store_ready(everything=True)
        assert client.post(f"/api/runs/{run_id}/finish").status_code == 200
        assert client.post("/v1/traces", json=body(span("cd" * 16, "05", "", 4))).status_code == 409
        assert _staged(engine) == ([], [])


def test_a_request_of_repeats_leaves_staging_once_the_database_lets_it(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose spans are all buffered already (the exporter's retry) holds nothing to
    store: its staged copy is deleted. When the database refuses that, the request is still
    answered (its spans are safe in the first copy) and a later storing round deletes it; a
    restart would otherwise read it back and store its spans again."""
    from sqlalchemy.exc import OperationalError

    from app.store import otlp_staging

    app = create_app(Settings(database_url=db_url, auto_migrate=False))
    with TestClient(app) as client:
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
        receiver = app.state.otlp = OtlpReceiver(app.state.sessions, app.state.scorers, settle=3600, background=False)
        engine = app.state.sessions.kw["bind"]
        first = body(
            span(TRACE, "02", "01", 20, tool="buscar_cliente"),
            span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c-1"}),
        )
        assert client.post("/v1/traces", json=first).status_code == 200
        finish = otlp_staging.finish

        def away(*args: object) -> None:
            raise OperationalError("DELETE FROM otlp_batches", {}, Exception("disk I/O error"))

        monkeypatch.setattr(otlp_staging, "finish", away)
        assert client.post("/v1/traces", json=first).status_code == 200  # all repeats
        assert len(_staged(engine)[0]) == 2 and receiver.stats.duplicate_spans == 2
        assert receiver.store_ready() == 0 and len(_staged(engine)[0]) == 2  # still refused: kept for later
        monkeypatch.setattr(otlp_staging, "finish", finish)
        assert receiver.store_ready() == 0 and len(_staged(engine)[0]) == 1  # the copy is gone, the trace waits
        assert receiver.store_ready(everything=True) == 1 and _staged(engine) == ([], [])
        assert len(client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()) == 1


def test_a_full_buffer_answers_503_and_the_sdk_retries_until_stored(served: tuple[str, Any]) -> None:
    from app.importers.otel_replay import replay_openai_messages

    base, app = served
    run_id = new_run(base, "prod")
    # a tiny buffer, slow to drain: the second export request finds it full
    app.state.otlp = OtlpReceiver(app.state.sessions, app.state.scorers, settle=2.0, max_spans=9)
    provider = sdk_provider(f"{base}/v1/traces?run=prod", max_export_batch_size=9, schedule_delay_millis=20)
    tracer = provider.get_tracer("test")
    for i in range(3):
        replay_openai_messages(tracer, CONVERSATION, attributes={"toollens.case_id": f"c{i}"})
    assert provider.force_flush(30_000)
    provider.shutdown()
    status = wait_stored(base, 27)
    assert status["refused_requests"] >= 1  # it did answer 503 ...
    assert status["stored_spans"] == status["accepted_spans"] == 27  # ... and lost nothing
    assert sorted(r["case_id"] for r in exported(base, run_id)) == ["c0", "c1", "c2"]


def protobuf_body(request: dict[str, Any]) -> bytes:
    """An OTLP/JSON request of ``body()`` as the protobuf request an exporter sends."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    out = ExportTraceServiceRequest()
    scope = out.resource_spans.add().scope_spans.add()
    for s in request["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        pb = scope.spans.add(
            trace_id=bytes.fromhex(s["traceId"]),
            span_id=bytes.fromhex(s["spanId"]),
            parent_span_id=bytes.fromhex(s["parentSpanId"]),
            name=s["name"],
            start_time_unix_nano=int(s["startTimeUnixNano"]),
            end_time_unix_nano=int(s["endTimeUnixNano"]),
        )
        for kv in s["attributes"]:
            a = pb.attributes.add(key=kv["key"])
            if "intValue" in kv["value"]:
                a.value.int_value = int(kv["value"]["intValue"])
            else:
                a.value.string_value = kv["value"]["stringValue"]
    return out.SerializeToString()


def _crashed_receiver(db_url: str, **timing: float) -> tuple[Any, OtlpReceiver]:
    """A receiver on its own engine, as in another process that is about to die."""
    from app.store.db import make_engine, make_sessionmaker
    from app.web.state import ScorerCache

    engine = make_engine(db_url)  # SQLite with its foreign keys and write locks, as the app has it
    receiver = OtlpReceiver(make_sessionmaker(engine), ScorerCache(), **timing, background=False)
    return engine, receiver


def _staged(engine: Any) -> tuple[list[tuple[str, bytes]], list[tuple[int, str]]]:
    from sqlalchemy import select

    from app.store.models import OtlpBatch, OtlpBatchDone

    with engine.connect() as conn:
        return (
            [tuple(r) for r in conn.execute(select(OtlpBatch.format, OtlpBatch.body))],
            [tuple(r) for r in conn.execute(select(OtlpBatchDone.batch_id, OtlpBatchDone.trace_id))],
        )


@pytest.mark.parametrize("form", ["json", "protobuf"])
def test_acknowledged_spans_survive_a_crash(db_url: str, form: str, caplog: pytest.LogCaptureFixture) -> None:
    from sqlalchemy import insert

    from app.otlp.spans import BATCH_LINES, BATCH_PROTOBUF, lines_batch, span_refs_from_protobuf, spans_from_json
    from app.store.models import OtlpBatch

    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
    # a receiver acknowledges spans (staged and buffered) and its process dies before storing them
    engine, crashed = _crashed_receiver(db_url, settle=60)
    request = body(
        span(TRACE, "02", "01", 20, tool="ver_saldo", attrs={"gen_ai.tool.call.arguments": '{"id": 8812}'}),
        span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c-9"}),
    )
    if form == "protobuf":
        staged, spans = protobuf_body(request), span_refs_from_protobuf(protobuf_body(request))
        kind = BATCH_PROTOBUF
    else:
        (staged, spans), kind = lines_batch(spans_from_json(request)), BATCH_LINES
    assert crashed.accept(run_id, kind, staged, spans)
    assert _staged(engine) == ([(kind, staged)], [])  # the request as it came, one row
    with engine.begin() as conn:
        # and a row that holds no span (written by hand, or damaged): dropped at recovery, the rest kept
        conn.execute(insert(OtlpBatch).values(run_id=run_id, format=BATCH_LINES, body=b"pb:not base64!"))
    crashed.die()  # its lease expires with it: the next server takes its batches over
    # the next start picks them up and stores them (here: at its shutdown)
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        status = client.get("/v1/traces/status").json()  # buffered, or stored already if the settle time passed
        assert status["buffered_spans"] + status["stored_spans"] == 2
    assert "staged batch" in caplog.text and "cannot be read, dropped" in caplog.text
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        records = [json.loads(x) for x in client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()]
    assert [(r["case_id"], [(c["name"], c["arguments"]) for c in r["calls"]]) for r in records] == [
        ("c-9", [("ver_saldo", '{"id": 8812}')])
    ]
    assert _staged(engine) == ([], [])  # stored and unstaged together
    engine.dispose()


def test_a_crash_between_two_traces_of_one_request_stores_each_once(db_url: str) -> None:
    """One request holds two traces; the first is stored (and marked done in the staged
    request, in the same transaction), then the process dies: the next start stores the
    second only, and the staged request goes with it."""
    from app.otlp.spans import BATCH_PROTOBUF, span_refs_from_protobuf

    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
    engine, crashed = _crashed_receiver(db_url, settle=0, idle=3600)
    staged = protobuf_body(
        body(
            span(TRACE, "01", "", 10, attrs={"toollens.case_id": "first"}),
            span(TRACE, "02", "01", 20, tool="ver_saldo"),
            span(OTHER, "02", "01", 20, tool="buscar_cliente"),
        )
    )  # its root comes later
    assert crashed.accept(run_id, BATCH_PROTOBUF, staged, span_refs_from_protobuf(staged))
    assert crashed.store_ready() == 1  # the first trace: complete; the other waits for its root
    batches, done = _staged(engine)
    assert batches == [(BATCH_PROTOBUF, staged)] and [trace for _, trace in done] == [TRACE]
    crashed.die()
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        pass  # recovers the other trace's span, stores it at shutdown
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        records = [json.loads(x) for x in client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()]
    assert sorted((r["case_id"], [c["name"] for c in r["calls"]]) for r in records) == sorted(
        [("first", ["ver_saldo"]), (OTHER, ["buscar_cliente"])]
    )
    assert _staged(engine) == ([], [])
    engine.dispose()


def test_spans_staged_by_an_older_version_are_carried_over_by_the_migration(db_url: str) -> None:
    """Schema 0003 staged one row per span (``otlp_spans``); upgrading makes each a batch of one
    line, which the receiver reads back and stores."""
    from alembic import command
    from sqlalchemy import text

    from app.otlp.spans import lines_batch, span_to_json, spans_from_json
    from app.store.db import _alembic_config, make_engine, upgrade

    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
    command.downgrade(_alembic_config(db_url), "0003")
    engine = make_engine(db_url)
    spans = spans_from_json(
        body(
            span(TRACE, "01", "", 10, attrs={"toollens.case_id": "old"}), span(TRACE, "02", "01", 20, tool="ver_saldo")
        )
    )
    with engine.begin() as conn:
        for s in spans:
            conn.execute(
                text("INSERT INTO otlp_spans (run_id, span) VALUES (:r, :s)"), {"r": run_id, "s": span_to_json(s)}
            )
    upgrade(db_url)
    assert sorted(_staged(engine)[0]) == sorted(("lines", span_to_json(s).encode()) for s in spans)
    # a request staged now takes an id after the carried ones (PostgreSQL: the sequence was moved on)
    _, receiver = _crashed_receiver(db_url, settle=60)
    late = span(OTHER, "01", "", 10, attrs={"toollens.case_id": "new"})
    assert receiver.accept(run_id, "lines", *lines_batch(spans_from_json(body(late))))
    with engine.connect() as conn:
        ids = list(conn.scalars(text("SELECT id FROM otlp_batches ORDER BY id")))
    assert len(ids) == 3 and ids[-1] > ids[1]
    receiver.die()
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        pass  # recovered, stored at shutdown
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        records = [json.loads(x) for x in client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()]
    assert sorted((r["case_id"], [c["name"] for c in r["calls"]]) for r in records) == [
        ("new", []),
        ("old", ["ver_saldo"]),
    ]
    assert _staged(engine) == ([], [])
    # nor is a staged request lost to a downgrade: it is refused until a server has stored it
    _, crashed = _crashed_receiver(db_url, settle=60)
    assert crashed.accept(run_id, "lines", *lines_batch(spans))
    crashed.die()
    with pytest.raises(RuntimeError, match="1 OTLP export requests are staged"):
        command.downgrade(_alembic_config(db_url), "0003")
    assert len(_staged(engine)[0]) == 1
    engine.dispose()
