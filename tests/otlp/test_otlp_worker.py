"""The OTLP receiver's second process: a large batch of traces scored by the
worker is stored exactly as the in-process path stores it."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.importers import convert
from app.importers.base import Options
from app.importers.otel_replay import replay_openai_messages
from app.otlp.receiver import OtlpReceiver
from app.otlp.spans import (
    BATCH_LINES,
    BATCH_PROTOBUF,
    batch_refs,
    lines_batch,
    span_from_staged,
    span_refs_from_protobuf,
    spans_from_protobuf,
    spans_of,
)
from app.otlp.worker import MIN_TRACES
from app.settings import Settings
from app.store.scoring_worker import ScoringWorker
from app.web.app import create_app
from tests.importers.test_import_converters import SCHEMAS, TAU
from tests.resources import require_data


def tau_request() -> Any:
    """The tau-bench sample's 100 conversations replayed as GenAI spans by the
    OpenTelemetry SDK: one OTLP ``ExportTraceServiceRequest`` (needs the sample: ``tests/resources.py``)."""
    require_data(TAU, SCHEMAS)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer, clock = provider.get_tracer("test"), [1_700_000_000_000_000_000]
    for r in json.loads(TAU.read_text()):
        replay_openai_messages(
            tracer,
            r["traj"],
            clock=clock,
            attributes={
                "toollens.case_id": f"task-{r['task_id']}",
                "toollens.trial": int(r["trial"]),
                "toollens.reward": r["reward"],
            },
        )
    return encode_spans(memory.get_finished_spans())


@pytest.fixture(scope="module")
def tau() -> tuple[dict[str, Any], bytes]:
    request = tau_request()
    suite = convert("tau-bench", TAU, Options(tools=SCHEMAS)).suite
    return suite, request.SerializeToString()


def only(body: bytes, traces: set[str]) -> bytes:
    """The export request with only the spans of these traces."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            kept = [s for s in ss.spans if s.trace_id.hex() in traces]
            del ss.spans[:]
            ss.spans.extend(kept)
    return request.SerializeToString()


def accept(receiver: OtlpReceiver, run: str, body: bytes) -> bool:
    return receiver.accept(receiver.run_id(run), BATCH_PROTOBUF, body, span_refs_from_protobuf(body))


def test_a_staged_batch_decodes_to_the_spans_the_request_held() -> None:
    """The receiver stages an export request as it came (or, for OTLP/JSON, its spans as lines)
    and decodes it in the worker: every attribute kind, events and status come back as the
    request's direct decoding gives them, at the positions asked for."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    root = spans.add(
        trace_id=bytes(range(16)),
        span_id=b"\x01" * 8,
        name="agent",
        start_time_unix_nano=10,
        end_time_unix_nano=2**63 + 5,
    )
    tool = spans.add(
        trace_id=bytes(range(16)),
        span_id=b"\x02" * 8,
        parent_span_id=b"\x01" * 8,
        name="execute_tool ver_saldo",
        start_time_unix_nano=11,
        end_time_unix_nano=12,
    )
    tool.status.code, tool.status.message = 2, "tool failed: ñandú"
    for key, field, value in [
        ("s", "string_value", "sí"),
        ("i", "int_value", -(2**62)),
        ("d", "double_value", 0.5),
        ("b", "bool_value", True),
        ("raw", "bytes_value", b"\x00\xff"),
    ]:
        setattr(tool.attributes.add(key=key).value, field, value)
    tool.attributes.add(key="list").value.array_value.values.add(string_value="a")
    kv = tool.attributes.add(key="kv").value.kvlist_value.values.add(key="inner")
    kv.value.int_value = 3
    event = tool.events.add(name="exception")
    event.attributes.add(key="exception.message").value.string_value = "boom"
    root.attributes.add(key="toollens.case_id").value.string_value = "c-1"
    body = request.SerializeToString()

    refs, direct = span_refs_from_protobuf(body), spans_from_protobuf(body)
    assert [(s.trace_id, s.span_id, s.is_root, s.index) for s in refs] == [
        (d.trace_id, d.span_id, d.is_root, i) for i, d in enumerate(direct)
    ]
    assert direct[1].attributes == {
        "s": "sí",
        "i": -(2**62),
        "d": 0.5,
        "b": True,
        "raw": "AP8=",
        "list": ["a"],
        "kv": {"inner": 3},
    }
    assert (direct[1].status_code, direct[1].events) == (2, [("exception", {"exception.message": "boom"})])
    lines, line_refs = lines_batch(direct)  # the form OTLP/JSON requests are staged in
    batches = {3: (BATCH_PROTOBUF, body), 9: (BATCH_LINES, lines)}
    assert spans_of(batches, [[(3, 1), (3, 0)], [(9, 0), (9, 1)], [(3, 1)]]) == [
        [direct[1], direct[0]],
        direct,
        [direct[1]],
    ]
    assert batch_refs(BATCH_LINES, lines) == line_refs and batch_refs(BATCH_PROTOBUF, body) == refs
    # what cannot be read is said per trace, and does not stop the others
    damaged = {**batches, 4: (BATCH_LINES, b"pb:not base64!"), 5: (BATCH_PROTOBUF, b"\xff\xff\xff"), 6: ("zip", b"")}
    got = spans_of(damaged, [[(3, 0)], [(4, 0)], [(5, 0)], [(6, 0)], [(3, 7)], [(8, 0)]])
    assert got[0] == [direct[0]] and all(isinstance(g, str) for g in got[1:])
    assert "staged batch 3 has no span 7" in got[4] and "staged batch 8 cannot be read" in got[5]
    for text in ("pb:not base64!", "pb:" + "AAAA" * 3, "[1, 2]", "{}"):
        with pytest.raises(ValueError):
            span_from_staged(text)


def _stored(db_url: str, suite: dict[str, Any], body: bytes, worker: bool) -> tuple[list[str], bool]:
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        app: Any = client.app
        receiver = app.state.otlp = OtlpReceiver(
            app.state.sessions, app.state.scorers, settle=3600, idle=3600, worker=worker, background=False
        )
        name = f"w{int(worker)}"
        run_id = client.post("/api/runs", json={"name": name, "suite": suite}).json()["id"]
        accept(receiver, name, body)
        assert receiver.store_ready(everything=True) == 100
        used = receiver.scoring.worker is not None
        exported = client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()
        figures = client.get(f"/api/runs/{run_id}/figures").json()
    return [*sorted(exported), json.dumps(figures, sort_keys=True)], used


def test_the_worker_stores_what_the_in_process_path_stores(
    db_url: str, tau: tuple[dict[str, Any], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    suite, body = tau
    monkeypatch.setattr("app.store.scoring_worker.ScoringWorker.pays", staticmethod(lambda: True))
    assert MIN_TRACES <= 100  # the sample's 100 traces make one batch large enough for the worker
    in_process, used_none = _stored(db_url, suite, body, worker=False)
    by_worker, used = _stored(db_url, suite, body, worker=True)
    assert used and not used_none
    assert by_worker == in_process
    assert len(in_process) == 101


def test_a_worker_that_dies_costs_nothing(
    db_url: str, tau: tuple[dict[str, Any], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch it held is stored in-process, and the next batch gets a new worker."""
    suite, body = tau
    monkeypatch.setattr("app.store.scoring_worker.ScoringWorker.pays", staticmethod(lambda: True))
    traces = sorted({s.trace_id for s in span_refs_from_protobuf(body)})
    first = set(traces[: len(traces) // 2])
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        app: Any = client.app
        receiver = app.state.otlp = OtlpReceiver(
            app.state.sessions, app.state.scorers, settle=3600, idle=3600, batch=50, background=False
        )
        run_id = client.post("/api/runs", json={"name": "dies", "suite": suite}).json()["id"]
        accept(receiver, "dies", only(body, first))
        receiver.scoring.worker = ScoringWorker()
        receiver.scoring.worker.kill()
        assert receiver.store_ready(everything=True) == 50 and receiver.scoring.worker is None
        accept(receiver, "dies", only(body, set(traces) - first))
        assert receiver.store_ready(everything=True) == 50
        assert receiver.stats.worker_traces == 50  # the second batch, by a new worker
        assert len(client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()) == 100


def test_a_killed_worker_whose_pool_refuses_before_it_knows_is_replaced(
    db_url: str, tau: tuple[dict[str, Any], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after a kill the pool may answer "cannot schedule new futures after shutdown"
    rather than BrokenProcessPool: the batch is stored in-process all the same, the worker dropped."""
    suite, body = tau
    monkeypatch.setattr("app.store.scoring_worker.ScoringWorker.pays", staticmethod(lambda: True))
    first = set(sorted({s.trace_id for s in span_refs_from_protobuf(body)})[:50])
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        app: Any = client.app
        receiver = app.state.otlp = OtlpReceiver(
            app.state.sessions, app.state.scorers, settle=3600, idle=3600, batch=50, background=False
        )
        client.post("/api/runs", json={"name": "refuses", "suite": suite}).raise_for_status()
        accept(receiver, "refuses", only(body, first))
        worker = receiver.scoring.worker = ScoringWorker()
        worker.kill()

        def refuse(*args: object, **kwargs: object) -> None:
            raise RuntimeError("cannot schedule new futures after shutdown")

        monkeypatch.setattr(worker, "submit", refuse)
        cancelled: Future[int] = Future()
        cancelled.cancel()
        worker.ready = cancelled  # a kill may cancel the start before it ran
        assert client.get("/v1/traces/status").json()["worker_ready"] is False  # killed: not ready, no error
        assert receiver.store_ready(everything=True) == 50 and receiver.scoring.worker is None
        assert receiver.stats.worker_traces == 0 and receiver.stats.stored_traces == 50


def test_a_stuck_worker_holds_nothing_back(
    db_url: str, tau: tuple[dict[str, Any], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch the worker does not finish within WORKER_TIMEOUT is stored in-process
    by the normal storing round (no shutdown needed), and that worker is stopped."""
    suite, body = tau
    monkeypatch.setattr("app.store.scoring_worker.ScoringWorker.pays", staticmethod(lambda: True))
    killed: list[bool] = []

    class StuckWorker:
        """A worker process that never finishes a chunk."""

        killed = False

        def submit(self, *args: object, key: str | None = None) -> Future[Any]:
            return Future()  # never done

        def kill(self) -> None:
            killed.append(True)

    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        app: Any = client.app
        receiver = app.state.otlp = OtlpReceiver(
            app.state.sessions, app.state.scorers, settle=0, idle=0, background=False, start_worker=StuckWorker
        )
        receiver.scoring.timeout = 0.3
        run_id = client.post("/api/runs", json={"name": "stuck", "suite": suite}).json()["id"]
        accept(receiver, "stuck", body)
        assert receiver.store_ready() == 0 and len(receiver.scoring.flights) == 1  # handed to the worker
        assert receiver.store_ready() == 0  # not done, not overdue: nothing stored, nothing taken twice
        time.sleep(0.4)
        assert receiver.store_ready() == 100
        assert killed == [True] and receiver.scoring.worker is None and receiver.stats.worker_traces == 0
        assert len(client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()) == 100


def test_a_warm_start_loads_the_worker_before_any_span(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``TOOLLENS_OTLP_WARM_START`` (on under ``toollens serve``): the worker process is up and
    has loaded the decoders when the app starts; without it none runs until a large batch comes."""
    monkeypatch.setattr("app.store.scoring_worker.ScoringWorker.pays", staticmethod(lambda: True))
    with TestClient(create_app(Settings(database_url=db_url))) as client:
        assert client.get("/v1/traces/status").json()["worker_ready"] is None
    with TestClient(create_app(Settings(database_url=db_url, otlp_warm_start=True))) as client:
        deadline = time.monotonic() + 60
        while (ready := client.get("/v1/traces/status").json()["worker_ready"]) is False:
            assert time.monotonic() < deadline, "the worker did not come up"
            time.sleep(0.05)
        assert ready is True
        worker = client.app.state.otlp.scoring.worker  # type: ignore[attr-defined]
        assert worker is not None and worker.ready.result() != os.getpid()  # loaded in its own process
        import gc

        # it collects cycles rarely (its rows are freed by reference counting), as the import's worker does
        assert worker._pool.submit(gc.get_threshold).result() == (100_000, 50, 50)


def test_serve_turns_the_warm_start_on_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from typer.testing import CliRunner

    import app.cli as cli
    import app.commands.serve as serve

    served: list[Settings] = []
    monkeypatch.setattr("uvicorn.run", lambda app, **kw: served.append(app.state.settings))
    tuned: list[bool] = []
    monkeypatch.setattr(serve, "collect_cycles_rarely", lambda: tuned.append(True))  # not in the test process
    db = f"sqlite:///{tmp_path}/w.db"
    assert CliRunner().invoke(cli.cli, ["serve", "--db", db]).exit_code == 0
    monkeypatch.setenv("TOOLLENS_OTLP_WARM_START", "false")
    assert CliRunner().invoke(cli.cli, ["serve", "--db", db]).exit_code == 0
    assert [s.otlp_warm_start for s in served] == [True, False] and tuned == [True, True]


def test_a_server_process_collects_cycles_rarely() -> None:
    """What ``toollens serve`` does to its own process before serving (in a child process here)."""
    import subprocess
    import sys

    probe = (
        "import gc\nfrom app.commands.serve import collect_cycles_rarely\nbefore = gc.get_freeze_count()\n"
        "collect_cycles_rarely()\nprint(gc.get_threshold(), before == 0 and gc.get_freeze_count() > 1000)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["(20000,", "20,", "20)", "True"]


def test_a_worker_that_cannot_start_with_the_server_does_not_stop_it(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spawning fails in a script without the ``__main__`` guard: the app still starts (the
    receiver falls back to the lazy start, or to scoring in-process)."""
    monkeypatch.setattr("app.store.scoring_worker.ScoringWorker.pays", staticmethod(lambda: True))

    def cannot(self: object) -> None:
        raise RuntimeError(
            "An attempt has been made to start a new process before the current process has "
            "finished its bootstrapping phase."
        )

    monkeypatch.setattr(ScoringWorker, "__init__", cannot)
    with TestClient(create_app(Settings(database_url=db_url, otlp_warm_start=True))) as client:
        assert client.get("/api/health").status_code == 200
        assert client.get("/v1/traces/status").json()["worker_ready"] is None


@contextmanager
def _early(
    db_url: str, monkeypatch: pytest.MonkeyPatch, settle: float
) -> Iterator[tuple[TestClient, int, OtlpReceiver]]:
    """An app with a run ``otlp`` and a receiver whose worker is up, storing only when told to."""
    from tests.otlp.test_otlp import SUITE

    monkeypatch.setattr("app.store.scoring_worker.ScoringWorker.pays", staticmethod(lambda: True))
    with TestClient(create_app(Settings(database_url=db_url, auto_migrate=False))) as client:
        run_id = client.post("/api/runs", json={"name": "otlp", "suite": SUITE}).json()["id"]
        app: Any = client.app
        receiver = app.state.otlp = OtlpReceiver(
            app.state.sessions, app.state.scorers, settle=settle, idle=3600, background=False
        )
        receiver.warm_up()  # its worker started now
        assert receiver.scoring.worker is not None
        receiver.scoring.worker.ready.result(timeout=60)
        yield client, run_id, receiver


def _first_request() -> dict[str, Any]:
    """A trace's root and its first tool call, in one export request."""
    from tests.otlp.test_otlp import TRACE, body, span

    return body(
        span(TRACE, "02", "01", 20, tool="buscar_cliente"), span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c-1"})
    )


def _records(client: TestClient, run_id: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()]


def _scored_early(receiver: OtlpReceiver) -> None:
    """One storing round that hands the trace to the worker before it settled, and its scoring."""
    time.sleep(receiver.settle / 5 + 0.05)
    assert receiver.store_ready() == 0
    assert len(receiver.scoring.flights) == 1 and receiver.scoring.flights[0].settles_at > time.monotonic()
    future = receiver.scoring.flights[0].future
    assert future is not None
    future.result(timeout=60)


def _until_stored(receiver: OtlpReceiver, traces: int) -> None:
    deadline = time.monotonic() + 30
    while receiver.stats.stored_traces < traces:
        assert time.monotonic() < deadline, receiver.stats
        receiver.store_ready()
        time.sleep(0.02)


def test_a_trace_scored_early_is_stored_once_settled_with_the_spans_that_came_meanwhile(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the worker runs, a trace is scored as soon as its root came (and a fifth of
    ``settle`` passed), and stored only once it settled. A span of it that comes before then
    (here a tool call that ended after the root, in the next export request) sends the scored
    rows back: the trace is scored again and stored whole, once."""
    from tests.otlp.test_otlp import TRACE, body, span

    with _early(db_url, monkeypatch, settle=1.5) as (client, run_id, receiver):
        first = _first_request()
        assert client.post("/v1/traces", json=first).status_code == 200
        _scored_early(receiver)
        assert receiver.store_ready() == 0 and receiver.stats.stored_traces == 0  # scored, not settled
        late = body(span(TRACE, "03", "01", 30, tool="ver_saldo", error="timeout"))
        assert client.post("/v1/traces", json=late).status_code == 200  # within settle of the root
        time.sleep(1.5)
        assert receiver.store_ready() == 0 and receiver.stats.stored_traces == 0  # the rows went back
        _until_stored(receiver, 1)
        records = _records(client, run_id)
        assert [(r["case_id"], r["trial"], [c["name"] for c in r["calls"]]) for r in records] == [
            ("c-1", 0, ["buscar_cliente", "ver_saldo"])
        ]
        assert (receiver.stats.stored_spans, receiver.stats.worker_traces, receiver.buffered_spans) == (3, 1, 0)
        assert client.get("/v1/traces/status").json()["stored_spans"] == 3


def test_spans_that_come_after_a_trace_settled_make_another_trial(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring early changes nothing for spans that come once a trace settled: stored as
    another trial of it, even when the first was not stored yet when they came."""
    from tests.otlp.test_otlp import TRACE, body, span

    with _early(db_url, monkeypatch, settle=0.5) as (client, run_id, receiver):
        first = _first_request()
        assert client.post("/v1/traces", json=first).status_code == 200
        _scored_early(receiver)
        time.sleep(0.6)  # settled, not stored yet
        late = body(span(TRACE, "03", "01", 30, tool="ver_saldo"))
        assert client.post("/v1/traces", json=late).status_code == 200
        assert receiver.store_ready() == 1  # the first trial, as scored
        assert receiver.store_ready(everything=True) == 1  # the late span (no root: stored at shutdown)
        records = _records(client, run_id)
        assert sorted((r["trial"], [c["name"] for c in r["calls"]]) for r in records) == [
            (0, ["buscar_cliente"]),
            (1, ["ver_saldo"]),
        ]


def test_a_trace_taken_early_that_the_worker_refuses_is_stored_in_process_once_settled(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _early(db_url, monkeypatch, settle=1.0) as (client, run_id, receiver):

        def refuse(*args: object, **kwargs: object) -> None:
            raise RuntimeError("cannot schedule new futures after shutdown")

        monkeypatch.setattr(receiver.scoring.worker, "submit", refuse)
        first = _first_request()
        assert client.post("/v1/traces", json=first).status_code == 200
        time.sleep(0.25)
        assert receiver.store_ready() == 0 and len(receiver.scoring.flights) == 1  # taken early, for in-process scoring
        assert receiver.scoring.flights[0].future is None
        assert receiver.store_ready() == 0  # not settled yet
        time.sleep(1.0)
        assert receiver.store_ready() == 1 and receiver.stats.worker_traces == 0
        assert len(client.get(f"/api/runs/{run_id}/trajectories.jsonl").text.splitlines()) == 1


def test_only_the_traces_that_grew_go_back(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two traces scored early in one chunk. One grows within its ``settle``: it alone goes back,
    and is stored whole. The other had settled: it is stored as it was, and its span that came
    after that is another trial."""
    from tests.otlp.test_otlp import OTHER, TRACE, body, span

    with _early(db_url, monkeypatch, settle=2.0) as (client, run_id, receiver):
        t0 = time.monotonic()
        assert (
            client.post(
                "/v1/traces",
                json=body(
                    span(OTHER, "12", "11", 20, tool="buscar_cliente"),
                    span(OTHER, "11", "", 10, attrs={"toollens.case_id": "t2"}),
                ),
            ).status_code
            == 200
        )
        time.sleep(max(0.0, t0 + 0.3 - time.monotonic()))
        assert (
            client.post(
                "/v1/traces",
                json=body(
                    span(TRACE, "02", "01", 20, tool="buscar_cliente"),
                    span(TRACE, "01", "", 10, attrs={"toollens.case_id": "t1"}),
                ),
            ).status_code
            == 200
        )
        time.sleep(max(0.0, t0 + 0.8 - time.monotonic()))
        _scored_early(receiver)
        chunk = receiver.scoring.flights[0].chunk
        assert len(chunk) == 2  # both traces in one chunk
        other_settled = next(f.pending.last_seen for f in chunk if f.key[1] == OTHER) + 2.0
        assert client.post("/v1/traces", json=body(span(TRACE, "03", "01", 30, tool="ver_saldo"))).status_code == 200
        time.sleep(max(0.0, other_settled - time.monotonic()) + 0.05)
        assert client.post("/v1/traces", json=body(span(OTHER, "13", "11", 30, tool="ver_saldo"))).status_code == 200
        time.sleep(max(0.0, receiver.scoring.flights[0].settles_at - time.monotonic()) + 0.05)
        assert receiver.store_ready() == 1  # t2 as it settled; t1 went back
        _until_stored(receiver, 2)
        assert receiver.store_ready(everything=True) == 1  # t2's late span (no root: at shutdown)
        records = _records(client, run_id)
        assert sorted((r["trial"], [c["name"] for c in r["calls"]]) for r in records) == [
            (0, ["buscar_cliente"]),
            (0, ["buscar_cliente", "ver_saldo"]),
            (1, ["ver_saldo"]),
        ]
        s = receiver.stats
        assert (s.accepted_spans, s.stored_spans, s.duplicate_spans, receiver.buffered_spans) == (6, 6, 0, 0)


def test_a_request_sent_again_while_its_trace_settles_keeps_it_open(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for a buffered trace, a request sent again keeps a trace scored early open: it goes
    back, is stored once, and the repeats are counted once."""
    with _early(db_url, monkeypatch, settle=1.0) as (client, run_id, receiver):
        first = _first_request()
        assert client.post("/v1/traces", json=first).status_code == 200
        _scored_early(receiver)
        assert client.post("/v1/traces", json=first).status_code == 200  # the exporter's retry
        time.sleep(max(0.0, receiver.scoring.flights[0].settles_at - time.monotonic()) + 0.05)
        assert receiver.store_ready() == 0 and receiver.stats.stored_traces == 0  # went back
        _until_stored(receiver, 1)
        records = _records(client, run_id)
        assert [(r["trial"], [c["name"] for c in r["calls"]]) for r in records] == [(0, ["buscar_cliente"])]
        s = receiver.stats
        assert (s.accepted_spans, s.stored_spans, s.duplicate_spans, receiver.buffered_spans) == (4, 2, 2, 0)


def test_repeats_are_counted_once_when_a_trace_goes_back(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored trace's spans sent again with a new one, then another new one within ``settle``:
    the trace goes back to the buffer without the repeats, which are counted once; every
    accepted span is stored, counted as a repeat, or still buffered."""
    from tests.otlp.test_otlp import TRACE, body, span

    with _early(db_url, monkeypatch, settle=1.5) as (client, run_id, receiver):
        first = [
            span(TRACE, "02", "01", 20, tool="buscar_cliente"),
            span(TRACE, "01", "", 10, attrs={"toollens.case_id": "c-1"}),
        ]
        assert client.post("/v1/traces", json=body(*first)).status_code == 200
        assert receiver.store_ready(everything=True) == 1
        assert (
            client.post("/v1/traces", json=body(*first, span(TRACE, "03", "01", 30, tool="ver_saldo"))).status_code
            == 200
        )
        _scored_early(receiver)  # the stored spans are found again when it is taken: 2 repeats
        assert receiver.stats.duplicate_spans == 2
        assert (
            client.post("/v1/traces", json=body(span(TRACE, "04", "01", 40, tool="buscar_cliente"))).status_code == 200
        )
        time.sleep(max(0.0, receiver.scoring.flights[0].settles_at - time.monotonic()) + 0.05)
        assert receiver.store_ready() == 0 and receiver.buffered_spans == 2  # went back, without the repeats
        _until_stored(receiver, 2)
        records = _records(client, run_id)
        assert sorted((r["trial"], [c["name"] for c in r["calls"]]) for r in records) == [
            (0, ["buscar_cliente"]),
            (1, ["ver_saldo", "buscar_cliente"]),
        ]
        s = receiver.stats
        assert (s.accepted_spans, s.stored_spans, s.duplicate_spans, receiver.buffered_spans) == (6, 4, 2, 0)
